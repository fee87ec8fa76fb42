"""URLs in the package's calls, against the real servers the test command starts (SeaweedFS for
S3, nginx for HTTP; scripts/test-servers): read_file, copy both ways, hash, extract and pack,
byte-exact against the local bytes, hashlib and GNU tar; landed files not resident; errors that
name the URL and leave nothing."""

import hashlib
import os
import subprocess
import tarfile
import time

import numpy as np
import pytest

import cacheless
from conftest import REPO, LastCall, fincore_fraction, raises_on_last_call, require

MIB = 1 << 20


def s3():
    require("s3", "CACHELESS_TEST_S3" in os.environ, "CACHELESS_TEST_S3 is not set (scripts/test starts the servers)")
    env = {
        "AWS_ENDPOINT_URL": os.environ["CACHELESS_TEST_S3"],
        "AWS_ACCESS_KEY_ID": os.environ["CACHELESS_TEST_S3_KEY"],
        "AWS_SECRET_ACCESS_KEY": os.environ["CACHELESS_TEST_S3_SECRET"],
        "AWS_REGION": "us-east-1",
    }
    return env, os.environ["CACHELESS_TEST_S3_BUCKET"]


@pytest.fixture
def aws(monkeypatch):
    """The AWS environment pointing at the test server; the bucket."""
    env, bucket = s3()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return bucket


def data(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def prefix(name):
    return f"py-{name}-{os.getpid()}/"


def test_copy_read_file_and_hash_round_trip_byte_exact(aws, disk):
    pre = prefix("files")
    for i, n in enumerate([0, 1, 8 * MIB + 1, 20 * MIB]):
        body = data(n, i)
        src = disk / f"src{i}"
        src.write_bytes(body)
        url = f"s3://{aws}/{pre}obj{i}"
        up = cacheless.copy(src, url, verify="etag")
        assert up["transfers"][0]["bytes"] == n and up["transfers"][0]["verified"] is True
        if i == 0:
            # An algorithm of a local copy's read-back cannot check a transfer: refused, naming it.
            with pytest.raises(ValueError, match='verify="sha256" cannot be honoured with a URL operand'):
                cacheless.copy(src, url, verify="sha256")
        got = disk / f"got{i}"
        down = cacheless.copy(url, got)
        assert down["transfers"][0]["bytes"] == n
        assert fincore_fraction(got) in (None, 0.0)
        assert got.read_bytes() == body
        assert bytes(cacheless.read_file(url)) == body
        assert cacheless.hash(url) == hashlib.sha256(body).hexdigest()
    # A prefix, both ways.
    tree = disk / "tree"
    (tree / "sub").mkdir(parents=True)
    for i in range(50):
        (tree / "sub" / f"f{i}").write_bytes(data(i * 100, i))
    cacheless.copy(tree, f"s3://{aws}/{pre}tree/", recursive=True)
    back = disk / "back"
    rep = cacheless.copy(f"s3://{aws}/{pre}tree/", back, recursive=True)
    assert len(rep["transfers"]) == 50
    assert subprocess.run(["diff", "-r", str(tree), str(back)]).returncode == 0


def test_http_read_file_and_copy_with_and_without_ranges(disk):
    require("http", "CACHELESS_TEST_HTTP" in os.environ, "CACHELESS_TEST_HTTP is not set (scripts/test starts the servers)")
    origin, root = os.environ["CACHELESS_TEST_HTTP"], os.environ["CACHELESS_TEST_HTTP_ROOT"]
    body = data(9 * MIB + 5, 7)
    name = f"py-{os.getpid()}.bin"
    for folder in ["ranges", "noranges"]:
        served = os.path.join(root, folder, name)
        with open(served, "wb") as f:
            f.write(body)
        try:
            url = f"{origin}/{folder}/{name}"
            assert bytes(cacheless.read_file(url)) == body
            got = disk / folder
            rep = cacheless.copy(url, got)
            assert rep["transfers"][0]["ranged"] == (folder == "ranges")
            assert got.read_bytes() == body
        finally:
            os.unlink(served)


def test_a_forked_child_reads_urls_after_its_parent_did():
    """Every client of a process shares one network runtime; a child forked after it started (a
    data loader's worker) has none of its threads and must start its own rather than wait on
    the parent's forever."""
    require("http", "CACHELESS_TEST_HTTP" in os.environ, "CACHELESS_TEST_HTTP is not set (scripts/test starts the servers)")
    origin, root = os.environ["CACHELESS_TEST_HTTP"], os.environ["CACHELESS_TEST_HTTP_ROOT"]
    body = data(3 * MIB + 1, 11)
    name = f"py-fork-{os.getpid()}.bin"
    served = os.path.join(root, "ranges", name)
    with open(served, "wb") as f:
        f.write(body)
    try:
        url = f"{origin}/ranges/{name}"
        assert bytes(cacheless.read_file(url)) == body
        # Twice in the parent: the second client takes the runtime the first started.
        assert bytes(cacheless.read_file(url)) == body
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                ok = bytes(cacheless.read_file(url)) == body
            finally:
                os._exit(0 if ok else 1)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child's read never ended")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(status) == 0
        assert bytes(cacheless.read_file(url)) == body, "the parent's runtime still serves it"
    finally:
        os.unlink(served)


def test_pack_to_s3_and_extract_from_s3_as_tarfile_reads_it(aws, disk):
    pre = prefix("archive")
    src = disk / "src"
    (src / "d").mkdir(parents=True)
    (src / "big.bin").write_bytes(data(12 * MIB, 1))
    for i in range(100):
        (src / "d" / f"f{i}").write_bytes(data(i * 31, i))
    url = f"s3://{aws}/{pre}t.tar"
    cacheless.pack(url, ["src"], directory=disk, frame_size="1M")
    local = disk / "t.tar"
    cacheless.copy(url, local)
    with tarfile.open(local) as t:
        names = sorted(m.name for m in t.getmembers())
    assert "src/big.bin" in names and "src/d/f99" in names
    out = disk / "out"
    out.mkdir()
    cacheless.extract(url, out)
    assert subprocess.run(["diff", "-r", str(src), str(out / "src")]).returncode == 0


def aws_cli():
    """The AWS CLI scripts/test-servers names (moto's virtualenv), else the one on PATH."""
    cli = os.environ.get("CACHELESS_TEST_AWS", "aws")
    if os.sep in cli and not os.path.isabs(cli):
        cli = str(REPO / cli)
    return cli


@pytest.mark.parametrize("what", ["upload", "download", "pack"])
def test_a_callback_that_raises_on_its_last_call_leaves_no_object_and_no_file(aws, disk, what):
    """As for a local copy, the progress callback's last call (done == total) comes before an
    object is completed or a download named, on the calling thread: its exception propagates
    and nothing appears. The aws CLI lists no object under the prefix (a multipart upload,
    aborted), and a download leaves no file and no temporary."""
    pre = prefix(f"lastcall-{what}")
    body = data(20 * MIB, 3)  # past the 8 MiB part: a multipart upload
    src = disk / "src.bin"
    src.write_bytes(body)
    url = f"s3://{aws}/{pre}obj"
    if what == "download":
        cacheless.copy(src, url)
    out = disk / "out"
    out.mkdir()
    progress, calls = raises_on_last_call()
    with pytest.raises(LastCall):
        if what == "upload":
            cacheless.copy(src, url, progress=progress)
        elif what == "download":
            cacheless.copy(url, out / "got", progress=progress)
        else:
            cacheless.pack(url, ["src.bin"], directory=disk, compression="none", progress=progress)
    assert calls and calls[-1][0] == calls[-1][1]
    listed = subprocess.run([aws_cli(), "s3", "ls", f"s3://{aws}/{pre}"], capture_output=True, text=True)
    names = [line.split()[-1] for line in listed.stdout.splitlines()]
    assert names == (["obj"] if what == "download" else []), (listed.returncode, listed.stdout, listed.stderr)
    assert os.listdir(out) == []
    # The same call without the exception completes: what the CLI lists is the bytes sent.
    if what != "download":
        if what == "upload":
            cacheless.copy(src, url)
        else:
            cacheless.pack(url, ["src.bin"], directory=disk, compression="none")
        got = disk / "got"
        subprocess.run([aws_cli(), "s3", "cp", url, str(got)], capture_output=True, check=True)
        if what == "upload":
            assert got.read_bytes() == body
        else:
            with tarfile.open(got) as t:
                assert t.extractfile("src.bin").read() == body


def test_errors_name_the_url_and_leave_nothing(aws, disk, monkeypatch):
    pre = prefix("errors")
    missing = f"s3://{aws}/{pre}nothing"
    with pytest.raises(FileNotFoundError, match=missing):
        cacheless.copy(missing, disk / "x")
    with pytest.raises(FileNotFoundError, match=missing):
        cacheless.read_file(missing)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(PermissionError, match="AWS_SECRET_ACCESS_KEY"):
        cacheless.hash(missing)
    assert list(disk.iterdir()) == []


def bad_http():
    require("http", "CACHELESS_TEST_BAD_HTTP" in os.environ, "CACHELESS_TEST_BAD_HTTP is not set (scripts/test starts the servers)")
    return os.environ["CACHELESS_TEST_BAD_HTTP"], os.path.join(os.environ["CACHELESS_TEST_HTTP_ROOT"], "ranges")


def test_a_transfer_that_did_not_get_every_byte_raises_and_leaves_nothing(disk):
    """A server that fails every GET, cuts every body, or answers a range with other bytes: copy
    and hash raise OSError (as curl -f fails), nothing is left under the name; the same file from
    a server that behaves arrives whole."""
    origin, root = bad_http()
    body = data(2 * MIB + 3, 91)
    name = f"py-bad-{os.getpid()}.bin"
    with open(os.path.join(root, name), "wb") as f:
        f.write(body)
    quick = dict(part_size="1M", retries=1, read_timeout=1)
    for mode in ["503", "cut", "badrange", "longhead", "stall"]:
        url = f"{origin}/{mode}/{name}"
        with pytest.raises(OSError) as e:
            cacheless.copy(url, disk / "out", **quick)
        assert url in str(e.value), str(e.value)
        assert not (disk / "out").exists(), mode
        assert not [n for n in os.listdir(disk) if ".cacheless-" in n], mode
        with pytest.raises(OSError):
            cacheless.hash(url, **quick)
    cacheless.copy(f"{origin}/ok/{name}", disk / "out", **quick)
    assert (disk / "out").read_bytes() == body
    assert cacheless.hash(f"{origin}/noranges/{name}", **quick) == hashlib.sha256(body).hexdigest()


def test_errors_are_the_service_s_code_and_message_and_a_403_is_a_permission_error(disk, aws):
    """An endpoint that echoes each request into its 403 answer: the exception says the code and
    message, never the echo, a signature or the keys; a 403 on a listing is PermissionError, a
    missing object FileNotFoundError."""
    origin, _ = bad_http()
    for call in [lambda: cacheless.copy("s3://echo/p/", disk / "o", recursive=True, endpoint_url=origin),
                 lambda: cacheless.copy(disk / "f", "s3://echo/k", endpoint_url=origin)]:
        (disk / "f").write_bytes(b"x")
        with pytest.raises(PermissionError) as e:
            call()
        text = str(e.value) + repr(e.value)
        assert "AccessDenied" in text and "access denied" in text, text
        for secret in [os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"], "Signature", "Authorization", "Echo"]:
            assert secret not in text, f"{secret} shown: {text}"
    with pytest.raises(FileNotFoundError):
        cacheless.copy(f"s3://{aws}/{prefix('none')}missing", disk / "o2")
