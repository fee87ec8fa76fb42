"""cacheless.open, read_file, copy, extract, hash, info, residency, evict: byte-exact against
the built-in open and the standard library; errors; the GIL; interrupts."""

import errno
import hashlib
import io
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import warnings

import numpy as np
import pytest

import cacheless
from conftest import REPO, LastCall, ctrl_c_once, fraction_cached, raises_on_last_call, require_direct, run_python

SIZES = [0, 1, 511, 4095, 4096, 4097, 1 << 20, (3 << 20) + 17]


def random_file(path, size, seed=0):
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("size", SIZES)
def test_reads_match_the_builtin_open_at_odd_sizes_and_offsets(disk, size):
    p = disk / "f.bin"
    data = random_file(p, size, size)
    rng = np.random.default_rng(size)
    with cacheless.open(p, "rb") as f, open(p, "rb") as ref:
        assert f.readable() and f.seekable() and not f.writable()
        assert f.read() == ref.read() == data
        for _ in range(40):
            pos = int(rng.integers(0, size + 2))
            n = int(rng.integers(0, 3 << 20))
            assert f.seek(pos) == ref.seek(pos)
            kind = rng.integers(0, 4)
            if kind == 0:
                assert f.read(n) == ref.read(n)
            elif kind == 1:
                buf = bytearray(n + 7)
                view = memoryview(buf)[3 : 3 + n]  # deliberately misaligned
                k = f.readinto(view)
                assert bytes(view[:k]) == ref.read(n)
            elif kind == 2:
                arr = np.zeros(n // 4 + 1, dtype=np.float32)  # a numpy array, any dtype
                k = f.readinto(arr)
                assert arr.view(np.uint8)[:k].tobytes() == ref.read(arr.nbytes)
            else:
                assert f.seek(-min(pos, 10), io.SEEK_CUR) == ref.seek(-min(pos, 10), io.SEEK_CUR)
                assert f.read(100) == ref.read(100)
            assert f.tell() == ref.tell()
        assert f.seek(0, io.SEEK_END) == size
        with pytest.raises(OSError):
            f.seek(-1)


def test_large_aligned_reads_go_straight_into_the_buffer(disk):
    p = disk / "big.bin"
    data = random_file(p, (8 << 20) + 3, 1)
    cacheless.evict(p)
    buf = memoryview(cacheless.read_file(disk / "big.bin"))  # page-aligned, writable
    buf[:] = b"\0" * len(buf)
    with cacheless.open(p, "rb") as f:
        assert f.readinto(buf[: 4 << 20]) == 4 << 20
        assert f.readinto(buf[4 << 20 :]) == len(data) - (4 << 20)
        assert f.readinto(buf) == 0
    assert bytes(buf) == data


def test_buffered_reader_hashlib_and_copyfileobj_work(disk):
    p = disk / "s.bin"
    data = random_file(p, (5 << 20) + 123, 2)
    with io.BufferedReader(cacheless.open(p, "rb")) as f:
        assert f.readline() == data[: data.index(b"\n") + 1]
        f.seek(1000)
        assert f.read(10) == data[1000:1010]
    with cacheless.open(p, "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == hashlib.sha256(data).hexdigest()
    out = disk / "copy.bin"
    with cacheless.open(p, "rb") as src, cacheless.open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert out.read_bytes() == data


@pytest.mark.parametrize("size", SIZES)
def test_writes_match_and_appear_only_on_close(disk, size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    p = disk / "w.bin"
    rng = np.random.default_rng(size + 1)
    with cacheless.open(p, "wb", size_hint=size if size % 2 else None) as f:
        assert f.writable() and not f.readable() and not f.seekable()
        k = 0
        while k < size:
            n = int(rng.integers(1, 700_000))
            chunk = data[k : k + n]
            assert f.write(chunk if n % 3 else np.frombuffer(chunk, np.uint8)) == len(chunk)
            k += n
        assert f.tell() == size and f.seek(0, io.SEEK_CUR) == size
        with pytest.raises(io.UnsupportedOperation):
            f.seek(size + 1)
        assert not p.exists(), "the final name must not exist before close"
    assert p.read_bytes() == data
    assert f.report["bytes"] == size and f.report["synced"] is True
    assert os.listdir(disk) == ["w.bin"]


def test_an_exception_or_an_unclosed_writer_leaves_nothing(disk):
    p = disk / "x.bin"
    p.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with cacheless.open(p, "wb") as f:
            f.write(b"new data")
            raise RuntimeError("boom")
    assert p.read_bytes() == b"old" and os.listdir(disk) == ["x.bin"]
    f = cacheless.open(p, "wb")
    f.write(b"never closed")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del f
    assert any(issubclass(x.category, ResourceWarning) for x in w)
    assert p.read_bytes() == b"old" and os.listdir(disk) == ["x.bin"]
    f = cacheless.open(p, "wb")
    f.discard()
    assert f.closed and p.read_bytes() == b"old" and os.listdir(disk) == ["x.bin"]


def test_the_gil_is_released_while_reading(disk):
    p = disk / "gil.bin"
    random_file(p, 64 << 20, 3)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=spin)
    t.start()
    try:
        for call in (lambda: cacheless.read_file(p), lambda: cacheless.open(p).readinto(bytearray(64 << 20)), lambda: cacheless.hash(p)):
            cacheless.evict(p)
            start = time.perf_counter()
            call()
            end = time.perf_counter()
            assert any(start < x < end for x in ticks), "another Python thread never ran during the call: the GIL was held"
    finally:
        stop.set()
        t.join()


def test_keyboard_interrupt_leaves_no_temporary_file(disk, sigint):
    src = disk / "src.bin"
    random_file(src, 96 << 20, 4)
    out = disk / "out"
    out.mkdir()
    dst = out / "dst.bin"
    with pytest.raises(KeyboardInterrupt):
        cacheless.copy(src, dst, progress=ctrl_c_once())
    assert os.listdir(out) in ([], ["dst.bin"]), "a temporary file was left behind"
    if dst.exists():
        assert dst.read_bytes() == src.read_bytes(), "a copy that finished before the signal is whole"


def test_a_signal_while_the_gil_is_released_cancels_the_call(disk):
    src = disk / "src.bin"
    random_file(src, 256 << 20, 10)
    out = disk / "out"
    out.mkdir()
    code = f"""
import os, signal, threading, time, cacheless
signal.signal(signal.SIGINT, signal.default_int_handler)  # even where started with SIGINT ignored
out = {str(out)!r}
def watch():
    # Ctrl-C as soon as the copy's temporary file exists, i.e. while the copy runs.
    while not os.listdir(out):
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=watch, daemon=True).start()
try:
    cacheless.copy({str(src)!r}, os.path.join(out, "dst.bin"))
    print("finished")
except KeyboardInterrupt:
    print("interrupted", sorted(os.listdir(out)))
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] in ("interrupted", "finished"), done.stdout
    leftovers = os.listdir(out)
    assert leftovers in ([], ["dst.bin"]), f"a temporary file was left behind: {leftovers}"
    if leftovers:
        assert (out / "dst.bin").read_bytes() == src.read_bytes(), "a copy that finished before the signal is whole"


def test_copy_keeps_holes_verifies_and_refuses_bad_keywords(disk):
    p = disk / "holes.bin"
    with open(p, "wb") as f:
        f.write(b"x" * 4096)
        f.seek(8 << 20)
        f.write(b"y" * 4096)
    data = p.read_bytes()
    # The job's report (as `cacheless cp --json`), each file's copy in "files".
    rep = cacheless.copy(p, disk / "h2.bin", verify="sha256", bwlimit="1G")
    assert (disk / "h2.bin").read_bytes() == data
    assert rep["copied"] == 1 and rep["errors"] == 0 and len(rep["files"]) == 1, rep
    one = rep["files"][0]
    assert one["verify"]["digest"] == hashlib.sha256(data).hexdigest()
    assert one["method"] in ("sparse", "reflink"), rep
    if one["method"] == "sparse":
        assert os.stat(disk / "h2.bin").st_blocks * 512 < 1 << 20, "the hole was filled"
        assert "FICLONE" in one["reflink_fallback"]
        with pytest.raises(OSError, match="reflink=always"):
            cacheless.copy(p, disk / "h3.bin", reflink="always")
        assert not (disk / "h3.bin").exists()
    dense = cacheless.copy(p, disk / "h4.bin", sparse="never", reflink="never")
    assert dense["files"][0]["method"] == "copy" and os.stat(disk / "h4.bin").st_blocks * 512 >= len(data)
    with pytest.raises(ValueError, match="reflink="):
        cacheless.copy(p, disk / "x", reflink="sometimes")
    with pytest.raises(ValueError, match="verify="):
        cacheless.copy(p, disk / "x", verify="md4")


def test_read_file_copy_and_hash(disk):
    p = disk / "r.bin"
    data = random_file(p, (2 << 20) + 5, 5)
    mv = cacheless.read_file(p)
    assert isinstance(mv, memoryview) and bytes(mv) == data and not mv.readonly
    assert np.asarray(mv).__array_interface__["data"][0] % 4096 == 0
    assert bytes(cacheless.read_file(disk / "r.bin", mode="buffered")) == data
    seen = []
    rep = cacheless.copy(p, disk / "c.bin", progress=lambda d, t: seen.append((d, t)))
    assert (disk / "c.bin").read_bytes() == data and rep["files"][0]["write"]["bytes"] == len(data)
    assert seen[-1] == (len(data), len(data))
    sub = disk / "sub"
    sub.mkdir()
    cacheless.copy(p, sub)
    assert (sub / "r.bin").read_bytes() == data
    with pytest.raises(shutil.SameFileError):
        cacheless.copy(p, p)
    assert cacheless.hash(p) == hashlib.sha256(data).hexdigest()
    empty = disk / "empty"
    empty.write_bytes(b"")
    # Reference digests of the empty input (BLAKE3 and XXH3-64 specifications).
    assert cacheless.hash(empty, "blake3") == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert cacheless.hash(empty, "xxh3") == "2d06800538d394c2"
    with pytest.raises(ValueError, match="unknown hash algorithm"):
        cacheless.hash(p, "md4")


@pytest.mark.parametrize("mode", ["auto", "direct", "dontcache", "writebehind", "buffered"])
def test_write_file_replaces_whole_files_in_every_mode_and_leaves_no_cache(disk, mode):
    if mode == "direct":
        require_direct(disk)
    rng = np.random.default_rng(11)
    target = disk / "w.bin"
    target.write_bytes(b"old contents")
    for size in (0, 1, 4095, 4096 + 3, (3 << 20) + 5):
        data = rng.integers(0, 256, size, dtype=np.uint8)
        rep = cacheless.write_file(target, data if size % 2 else data.tobytes(), mode=mode)
        assert rep["bytes"] == size and rep["synced"] is True
        if mode != "buffered":
            assert fraction_cached(target) < 0.02, (mode, size, cacheless.residency(target))
        assert target.read_bytes() == data.tobytes(), size
        if mode != "auto":
            assert rep["decision"]["mode"] == mode
    assert sorted(p.name for p in disk.iterdir()) == ["w.bin"]


def test_write_file_errors_name_the_file_and_leave_the_old_one(disk):
    with pytest.raises(FileNotFoundError) as e:
        cacheless.write_file(disk / "missing" / "x.bin", b"abc")
    assert e.value.filename == str(disk / "missing")
    with pytest.raises(TypeError, match="bytes-like"):
        cacheless.write_file(disk / "x.bin", "text, not bytes")
    with pytest.raises(ValueError, match="mode"):
        cacheless.write_file(disk / "x.bin", b"abc", mode="fast")
    assert list(disk.iterdir()) == []


def test_extract_matches_the_archive(disk):
    tree = disk / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    files = {"a/one.bin": random_file(tree / "a" / "one.bin", 3 << 20, 6), "a/b/two.txt": random_file(tree / "a" / "b" / "two.txt", 1234, 7)}
    arc = disk / "t.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(tree, arcname="tree")
    seen = []
    rep = cacheless.extract(arc, disk / "out", progress=lambda d, t: seen.append((d, t)))
    assert rep["files"] == 2 and rep["failure_count"] == 0
    for name, data in files.items():
        assert (disk / "out" / "tree" / name).read_bytes() == data
    assert seen[-1][1] == arc.stat().st_size
    bad = disk / "bad.tar.gz"
    bad.write_bytes(arc.read_bytes()[: arc.stat().st_size // 2])
    with pytest.raises(ValueError, match="bad.tar.gz"):
        cacheless.extract(bad, disk / "out2")


def test_os_errors_carry_errno_and_filename(disk):
    missing = disk / "missing.bin"
    for call in (lambda: cacheless.open(missing), lambda: cacheless.read_file(missing), lambda: cacheless.hash(missing), lambda: cacheless.residency(missing)):
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert e.value.errno == 2 and e.value.filename == str(missing)
    with pytest.raises(IsADirectoryError):
        cacheless.open(disk)
    with pytest.raises(FileNotFoundError):
        cacheless.open(disk / "no" / "such" / "dir.bin", "wb")
    with pytest.raises(ValueError, match="mode=.*second argument"):
        cacheless.open(disk / "x", mode="rb")
    with pytest.raises(ValueError, match="access must be"):
        cacheless.open(disk / "x", "r+")
    with pytest.raises(ValueError, match="unknown mode"):
        cacheless.read_file(disk, mode="fast")


def test_a_forced_mode_the_filesystem_cannot_honour_is_unsupported_error(disk):
    p = disk / "u.bin"
    random_file(p, 8192, 8)
    code = f"""
import cacheless
try:
    cacheless.read_file({str(p)!r}, mode="direct")
except cacheless.UnsupportedError as e:
    assert isinstance(e, OSError) and e.filename == {str(p)!r}, e
    print("unsupported", e.errno, e)
"""
    done = run_python(code, env={"CACHELESS_DISABLE": "direct"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("unsupported 95 "), done.stdout
    # The hint is worded in the Python API's keywords, never as command-line flags.
    assert 'use mode="auto" or mode=' in done.stdout and "--mode" not in done.stdout, done.stdout


def test_info_residency_and_evict_have_the_cli_fields(disk):
    require_direct(disk)
    p = disk / "i.bin"
    random_file(p, 1 << 20, 9)
    i = cacheless.info(p)
    assert i["kind"] == "file" and i["size"] == 1 << 20 and i["read"]["mode"] == "buffered"
    cli = REPO / "target" / "release" / "cacheless"
    if cli.exists():
        report = json.loads(subprocess.run([str(cli), "--json", "info", str(p)], capture_output=True, text=True, check=True).stdout)
        assert set(report["paths"][0]) == set(i) - {"system"}
        assert set(report["system"]) == set(i["system"])
    ev = cacheless.evict(p)
    assert ev["before"]["cached_pages"] == ev["before"]["total_pages"] and ev["after"]["cached_pages"] == 0
    r = cacheless.residency(p)
    assert r["cached_pages"] == 0 and r["size"] == 1 << 20 and r["source"] in ("cachestat", "mincore")
    cacheless.read_file(p)
    assert fraction_cached(p) < 0.02, "read_file of a cold file left it cached"
    assert cacheless.info(disk)["kind"] == "directory"
    # How new files are made there: without a name where the folder's filesystem can, as an
    # O_TMPFILE open asked here says.
    try:
        os.close(os.open(disk, os.O_TMPFILE | os.O_RDWR, 0o600))
        here = True
    except OSError:
        here = False
    for where in (disk, p):
        assert ("Ok" in cacheless.info(where)["tmpfile"]) == here


def test_info_of_a_refused_mode_carries_the_structured_hint_as_the_cli_json_does(disk):
    p = disk / "r.bin"
    random_file(p, 8192, 10)
    code = f"""
import json, cacheless
print(json.dumps(cacheless.info({str(p)!r}, mode="direct")))
"""
    done = run_python(code, env={"CACHELESS_DISABLE": "direct"})
    assert done.returncode == 0, done.stderr
    i = json.loads(done.stdout)
    for side in ("read", "write"):
        plan = i[side]
        assert plan["mode"] == "direct" and plan["reason"].startswith("refused: "), plan
        modes = plan["hint"]["modes"]
        assert modes[0] == "auto" and len(modes) == 2 and modes[1] in ("dontcache", "writebehind"), plan
        assert "--mode" not in plan["reason"], plan
    cli = REPO / "target" / "release" / "cacheless"
    if cli.exists():
        env = dict(os.environ, CACHELESS_DISABLE="direct")
        report = json.loads(subprocess.run([str(cli), "--mode", "direct", "--json", "info", str(p)], capture_output=True, text=True, check=True, env=env).stdout)
        assert report["paths"][0]["read"] == i["read"] and report["paths"][0]["write"] == i["write"]


def test_extract_in_a_forced_mode_the_filesystem_cannot_honour_is_unsupported_error(disk):
    tree = disk / "tree"
    tree.mkdir()
    random_file(tree / "f.bin", 5000, 11)
    arc = disk / "t.tar"
    with tarfile.open(arc, "w") as t:
        t.add(tree, arcname="tree")
    code = f"""
import cacheless
try:
    cacheless.extract({str(arc)!r}, {str(disk / "out")!r}, mode="direct")
except cacheless.UnsupportedError as e:
    print("unsupported", e.errno, e)
"""
    done = run_python(code, env={"CACHELESS_DISABLE": "direct"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("unsupported 95 ") and 'use mode="auto"' in done.stdout, done.stdout
    assert not (disk / "out" / "tree").exists(), "nothing is extracted in a refused mode"


def test_a_forced_backend_that_is_unavailable_says_which_to_use_in_keywords(disk):
    p = disk / "b.bin"
    random_file(p, 9 << 20, 12)
    code = f"""
import cacheless
try:
    cacheless.read_file({str(p)!r}, backend="uring", block_size=1 << 20)
except cacheless.UnsupportedError as e:
    print("unsupported", e.errno, e)
"""
    done = run_python(code, env={"CACHELESS_DISABLE": "uring"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("unsupported "), done.stdout
    assert 'use backend="auto" or backend="threads"' in done.stdout and "--backend" not in done.stdout, done.stdout


def _commit_call(name, disk, dst, progress=None):
    """The call `name` writing about 128 MiB to `dst` (its source made in `disk` first)."""
    data = np.random.default_rng(11).integers(0, 256, 128 << 20, dtype=np.uint8)
    if name == "write_file":
        return lambda: cacheless.write_file(dst, data)
    if name == "save_file":
        import cacheless.safetensors as cst

        return lambda: cst.save_file({"t": data}, dst, progress=progress)
    src = disk / "src.bin"
    src.write_bytes(data.tobytes())
    if name == "pack":
        return lambda: cacheless.pack(dst, [src], compression="none", progress=progress)
    return lambda: cacheless.copy(src, dst, progress=progress)


@pytest.mark.parametrize("name", ["write_file", "save_file", "copy", "pack"])
def test_a_ctrl_c_while_it_writes_leaves_the_destination_as_it_was(disk, sigint, name):
    """Ctrl-C at any point before the call returns raises KeyboardInterrupt and names nothing:
    the old file stays, no temporary is left. Here it comes as soon as the temporary exists
    (while the data is written, or before the rename when the write is quicker)."""
    out = disk / "out"
    out.mkdir()
    dst = out / "dst.bin"
    dst.write_bytes(b"the old file")
    call = _commit_call(name, disk, dst)

    def watch():
        while len(os.listdir(out)) < 2:
            time.sleep(0.0002)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        call()
        time.sleep(1)  # a signal that came after the call would be raised here: the test then fails below
    t.join()
    assert dst.read_bytes() == b"the old file", f"{name} named its file after a Ctrl-C"
    assert os.listdir(out) == ["dst.bin"], "a temporary was left behind"


@pytest.mark.parametrize("name", ["save_file", "copy", "pack"])
def test_a_progress_callback_that_raises_on_its_last_call_commits_nothing(disk, sigint, name):
    """The callback's last call (done == total) comes before the file is named: an exception
    from it propagates and the destination is as it was."""
    out = disk / "out"
    out.mkdir()
    dst = out / "dst.bin"
    dst.write_bytes(b"the old file")
    progress, calls = raises_on_last_call()
    with pytest.raises(LastCall):
        _commit_call(name, disk, dst, progress)()
    assert calls and calls[-1][0] == calls[-1][1]
    assert dst.read_bytes() == b"the old file"
    assert os.listdir(out) == ["dst.bin"]


def test_limits_are_the_command_lines(disk):
    """What the command line refuses as a usage error, Python refuses with ValueError, before
    anything is allocated; a budget past the machine's memory is clamped, as there; a
    bandwidth limit of 0 is no limit in both (rsync's meaning)."""
    src = disk / "src.bin"
    data = random_file(src, 1 << 20, 12)
    for kw, word in [
        (dict(queue_depth=1_000_000), "queue_depth="),
        (dict(block_size="100G"), "block_size="),
        (dict(memory=0), "memory="),
        (dict(threads=40000, recursive=True), "threads="),
        (dict(bwlimit="0.5"), "bwlimit="),
        (dict(bwlimit=0.5), "bwlimit="),
    ]:
        with pytest.raises(ValueError, match=word):
            cacheless.copy(src, disk / "never", **kw)
        assert not (disk / "never").exists()
    cacheless.copy(src, disk / "a", queue_depth=4096, memory="100T")
    cacheless.copy(src, disk / "b", bwlimit=0)
    assert (disk / "a").read_bytes() == data and (disk / "b").read_bytes() == data
    with pytest.raises(ValueError, match="queue_depth="):
        cacheless.read_file(src, queue_depth=5000)


def test_copy_onto_a_symlink_writes_through_it_as_shutil_copy_does(disk):
    src = disk / "src.bin"
    data = random_file(src, 100_000, 13)
    for name, call in [("ours", cacheless.copy), ("shutil", shutil.copy)]:
        target = disk / f"target-{name}"
        target.write_bytes(b"old")
        link = disk / f"link-{name}"
        link.symlink_to(target.name)
        call(src, link)
        assert link.is_symlink(), f"{name} replaced the link"
        assert target.read_bytes() == data, name
    dangling = disk / "dangling"
    dangling.symlink_to("nowhere")
    with pytest.raises(FileNotFoundError, match="dangling"):
        cacheless.copy(src, dangling)
    assert dangling.is_symlink() and not (disk / "nowhere").exists()


@pytest.mark.parametrize("call", ["read_file", "hash", "copy", "open"])
def test_ctrl_c_ends_a_call_waiting_on_a_fifo(tmp_path, call):
    """A call waiting for a FIFO's writer that never comes raises KeyboardInterrupt within a
    second of Ctrl-C, as Python's own open().read() does, and leaves nothing."""


    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    body = {
        "read_file": "cacheless.read_file(p)",
        "hash": "cacheless.hash(p)",
        "copy": "cacheless.copy(p, os.path.join(os.path.dirname(p), 'out'))",
        "open": "cacheless.open(p).read()",
    }[call]
    # Python's own Ctrl-C handler, whatever the test runner's shell left (a background job starts
    # with SIGINT ignored, and an interpreter started so installs none).
    code = f"import os, signal, sys, cacheless\nsignal.signal(signal.SIGINT, signal.default_int_handler)\np = sys.argv[1]\nprint('ready', flush=True)\n{body}\n"
    child = subprocess.Popen([sys.executable, "-c", code, str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(0.7)
    t0 = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=5)
    finally:
        child.kill()
    took = time.monotonic() - t0
    assert took < 1.0, f"{call}: {took:.2f} s"
    assert b"KeyboardInterrupt" in err, err.decode(errors="replace")
    assert sorted(os.listdir(tmp_path)) == ["fifo"]


def test_every_call_takes_a_path_as_open_takes_it(tmp_path):
    """str (a name that is not UTF-8 surrogate-escaped), bytes and os.PathLike of either, as the
    built-in open() takes them: the same file, the same bytes."""
    raw = os.fsencode(str(tmp_path)) + b"/bad\xffname"
    as_str = os.fsdecode(raw)
    data = b"payload " * 1000

    class Bytesish(os.PathLike):
        def __fspath__(self):
            return raw

    for p in (raw, as_str, Bytesish(), pathlib.Path(as_str)):
        if os.path.exists(raw):
            os.unlink(raw)
        cacheless.write_file(p, data)
        with open(p, "rb") as f:
            assert f.read() == data
        assert bytes(cacheless.read_file(p)) == data
        with cacheless.open(p) as f:
            assert f.read() == data
        assert cacheless.hash(p) == hashlib.sha256(data).hexdigest()
        dst = raw + b".copy"
        cacheless.copy(p, dst)
        with open(dst, "rb") as f:
            assert f.read() == data
        os.unlink(dst)
        with cacheless.open(p, "wb") as w:
            w.write(b"new")
        with open(p, "rb") as f:
            assert f.read() == b"new"
        assert cacheless.info(p)["size"] == 3


def test_extract_ignore_zeros_reads_archives_one_after_another(tmp_path):
    """``ignore_zeros=True`` is GNU tar's -i: two archives written one after another extract
    whole, as ``tar -xif`` extracts them; without it, the first archive's end is the end, as GNU's is."""
    parts = []
    for name in ("a", "b"):
        src = tmp_path / f"src-{name}"
        src.mkdir()
        (src / name).write_bytes(name.encode() * 1000)
        arc = tmp_path / f"{name}.tar"
        subprocess.run(["tar", "-cf", str(arc), "-C", str(src), name], check=True)
        parts.append(arc.read_bytes())
    cat = tmp_path / "cat.tar"
    cat.write_bytes(b"".join(parts))
    for ignore, flags in ((False, "-xf"), (True, "-xif")):
        gnu, ours = tmp_path / f"gnu-{ignore}", tmp_path / f"ours-{ignore}"
        gnu.mkdir()
        subprocess.run(["tar", flags, str(cat), "-C", str(gnu)], check=True)
        cacheless.extract(cat, ours, ignore_zeros=ignore)
        assert sorted(os.listdir(ours)) == sorted(os.listdir(gnu)) == (["a", "b"] if ignore else ["a"])


def test_a_save_killed_at_any_moment_leaves_the_old_or_the_new_file_and_clean_the_leftovers(tmp_path):
    """save_file over an existing checkpoint, SIGKILLed at moments spread over its run: the
    checkpoint is afterwards byte for byte the old one or the new one, never a mix or a piece;
    what the save leaves besides are temporaries, which `cacheless clean` removes, all of them
    and nothing else."""
    from conftest import require

    cli = REPO / "target" / "release" / "cacheless"
    require("python", cli.exists(), f"{cli} is not built (cargo build --release)")
    code = (
        "import sys, numpy as np\nfrom cacheless.safetensors import save_file\n"
        "seed, path = int(sys.argv[1]), sys.argv[2]\n"
        "t = {f't{i}': np.random.default_rng(seed + i).random((1024, 1024 * 4), dtype=np.float32) for i in range(6)}\n"
        "print('ready', flush=True)\nsys.stdin.readline()\nsave_file(t, path, metadata={'seed': str(seed)})\n"
    )

    def save(seed, path):
        return subprocess.Popen([sys.executable, "-c", code, str(seed), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def saved(seed, path):
        p = save(seed, path)
        assert p.stdout.readline().strip() == b"ready"
        p.communicate(b"go\n", timeout=120)
        assert p.returncode == 0
        return path.read_bytes()

    old, new = saved(1, tmp_path / "old.safetensors"), saved(2, tmp_path / "new.safetensors")
    assert old != new
    outcomes = []
    for r in range(10):
        d = tmp_path / f"round{r}"
        d.mkdir()
        (d / "model.safetensors").write_bytes(old)
        p = save(2, d / "model.safetensors")
        assert p.stdout.readline().strip() == b"ready"
        p.stdin.write(b"go\n")
        p.stdin.flush()
        time.sleep(0.002 + r * 0.012)
        p.kill()
        p.wait()
        got = (d / "model.safetensors").read_bytes()
        assert got in (old, new), f"round {r}: the checkpoint is neither version ({len(got)} bytes)"
        outcomes.append("new" if got == new else "old")
        temps = [n for n in os.listdir(d) if n != "model.safetensors"]
        assert all(".cacheless-" in n and n.endswith(".tmp") for n in temps), temps
        done = subprocess.run([str(cli), "clean", str(d)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert len([l for l in done.stdout.splitlines() if l.startswith("removed ")]) == len(temps), done.stdout
        assert os.listdir(d) == ["model.safetensors"] and (d / "model.safetensors").read_bytes() == got
    print("killed saves ended:", outcomes)


def test_open_reads_a_fifo_as_pythons_open_reads_it(tmp_path):
    """cacheless.open() of a FIFO waits for its writer and reads everything it writes, in
    pieces or whole, and is not seekable, as the built-in unbuffered open() of it (FileIO, the
    raw file cacheless.open's is) is."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data = os.urandom(3_000_001)

    def write_later():
        time.sleep(0.3)
        with open(fifo, "wb") as w:
            w.write(data)

    results = {}
    for name, opener in (("ours", cacheless.open), ("python", lambda p: open(p, "rb", buffering=0))):
        t = threading.Thread(target=write_later)
        t.start()
        with opener(fifo) as f:
            head = f.read(10)
            rest = f.read()
            seekable = f.seekable()
            try:
                f.seek(0)
                seek_err = None
            except OSError as e:
                seek_err = e.errno
        t.join()
        results[name] = (head + rest == data, len(head), seekable, seek_err)
    assert results["ours"] == results["python"] == (True, 10, False, errno.ESPIPE), results
