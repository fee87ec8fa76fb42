"""One copy for every door: each of cp's options, given to `cacheless cp` with a local source,
an s3:// source (SeaweedFS and moto), an http:// source (nginx), and to Python's
`cacheless.copy` with the same sources, gives GNU cp's result, or, where a URL operand cannot
honour it, a refusal that names the option before anything moves.

The oracle is GNU cp itself, run in the same test on a local file that stands in for the
object (its bytes, and the object's time), into a destination set up the same way. A result is
the destination's entries: names, types, bytes, link targets, permission bits, and modification
times where the option keeps them."""

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

import cacheless
from conftest import REPO, require, s3_servers, s3_store

CLI = REPO / "target" / "release" / "cacheless"
NEW = b"the object's bytes, new\n" * 1000
OLD = b"the old destination\n"


class Case:
    def __init__(self, name, flags, kw, setup, refused=None, gnu=None, stdin=None, times=False, layout="file", python=True):
        self.name, self.flags, self.kw, self.setup = name, flags, kw, setup
        self.refused = refused  # the option a URL operand cannot honour
        self.gnu = flags if gnu is None else gnu  # GNU's flags, where cacheless's own has none there
        self.stdin, self.times, self.layout, self.python = stdin, times, layout, python

    def python_refusal(self):
        """The refused option as a Python caller passed it: its keyword argument, never a
        command-line switch."""
        return PYTHON_SPELLING[self.refused]


# Each refused option's command-line spelling, and Python's.
PYTHON_SPELLING = {
    "--symbolic-link": "symbolic_link=True",
    "--link": "link=True",
    "--sparse=always": 'sparse="always"',
    "--inplace": "inplace=True",
    "--backup": "backup=",
    "--attributes-only": "attributes_only=True",
    "--preserve": 'preserve="mode" (or archive=True)',
}


def assert_python_refusal(case, e):
    """A refusal through the Python door names the keyword argument, once, at its start, and no
    command-line switch."""
    text = str(e.value)
    assert text.startswith(case.python_refusal() + " cannot be honoured with a URL operand: "), text
    assert text.count(" cannot be honoured") == 1 and " --" not in text, text


CASES = [
    Case("plain", [], {}, "old"),
    Case("no-clobber", ["-n"], {"no_clobber": True}, "old"),
    Case("update-older", ["-u"], {"update": True}, "older"),
    Case("update-newer", ["-u"], {"update": True}, "newer"),
    Case("interactive-no", ["-i"], {"interactive": lambda dst: False}, "old", stdin="n\n"),
    Case("interactive-yes", ["-i"], {"interactive": lambda dst: True}, "old", stdin="y\n"),
    Case("backup-numbered", ["--backup=numbered"], {"backup": "numbered"}, "old"),
    Case("backup", ["-b"], {"backup": "existing"}, "old"),
    Case("suffix", ["-b", "-S", ".bak"], {"backup": "existing", "suffix": ".bak"}, "old"),
    Case("attributes-only", ["--attributes-only"], {"attributes_only": True}, "old"),
    Case("attributes-only-new", ["--attributes-only"], {"attributes_only": True}, "none"),
    Case("symbolic-link", ["-s"], {"symbolic_link": True}, "none", refused="--symbolic-link"),
    Case("link", ["-l"], {"link": True}, "none", refused="--link"),
    Case("remove-destination", ["--remove-destination"], {"remove_destination": True}, "old"),
    Case("force", ["-f"], {"force": True}, "old"),
    Case("preserve", ["-p"], {"preserve": "mode,ownership,timestamps"}, "none", times=True),
    Case("archive", ["-a"], {"archive": True}, "none", times=True),
    Case("no-preserve-mode", ["--no-preserve=mode"], {"no_preserve": "mode"}, "none"),
    Case("dereference", ["-L"], {"dereference": "always"}, "none"),
    Case("no-dereference", ["-P"], {"dereference": "never"}, "none"),
    Case("command-line-dereference", ["-H"], {"dereference": "command-line"}, "none"),
    Case("sparse-never", ["--sparse=never"], {"sparse": "never"}, "none"),
    Case("sparse-always", ["--sparse=always"], {"sparse": "always"}, "none", refused="--sparse=always"),
    Case("reflink-never", ["--reflink=never"], {"reflink": "never"}, "none"),
    Case("one-file-system", ["-x"], {"one_file_system": True}, "none"),
    Case("recursive", ["-r"], {"recursive": True}, "none"),
    Case("copy-contents", ["--copy-contents"], {"copy_contents": True}, "none"),
    Case("no-target-directory", ["-T"], {"no_target_directory": True}, "old"),
    Case("target-directory", ["-t"], {}, "none", layout="into"),
    Case("parents", ["--parents"], {"parents": True}, "none", layout="parents"),
    Case("verbose", ["-v"], {}, "old", python=False),
    Case("strip-trailing-slashes", ["--strip-trailing-slashes"], {}, "old", python=False),
    Case("context", ["-Z"], {}, "none", python=False),
    Case("inplace", ["--inplace"], {"inplace": True}, "old", refused="--inplace", gnu=[]),
    Case("verify", ["--verify"], {"verify": "xxh3"}, "none", gnu=[]),
    Case("no-sync", ["--no-sync"], {"sync": False}, "none", gnu=[]),
]


def snapshot(root, times):
    """Every entry under `root`: (path, type, bytes or link target, permission bits, mtime)."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                what = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                what = ("dir", None)
            else:
                what = ("file", p.read_bytes())
            out.append((rel, what, stat.S_IMODE(st.st_mode) if not stat.S_ISLNK(st.st_mode) else None, int(st.st_mtime) if times and not stat.S_ISDIR(st.st_mode) else None))
    return sorted(out)


def set_up(root, case, when):
    """The destination folder as the case starts it: an old `f` (older or newer than the
    source, whose time is `when`), or nothing."""
    root.mkdir(parents=True)
    if case.setup == "none":
        return
    f = root / "f"
    f.write_bytes(OLD)
    os.chmod(f, 0o640)
    t = when + (1000 if case.setup == "newer" else -1000)
    os.utime(f, (t, t))


def gnu_cp(case, standin, dest, cwd):
    args = ["cp", *case.gnu]
    if case.layout == "into":
        args += [str(dest), str(standin)] if case.flags == ["-t"] else [str(standin), str(dest)]
    elif case.layout == "parents":
        args += [os.path.relpath(standin, cwd), str(dest)]
    else:
        args += [str(standin), str(dest / "f")]
    env = {k: v for k, v in os.environ.items() if k not in ("VERSION_CONTROL", "SIMPLE_BACKUP_SUFFIX", "POSIXLY_CORRECT")}
    return subprocess.run(args, input=case.stdin or "", capture_output=True, text=True, cwd=cwd, env=env)


def door_source(door, disk, body):
    """The source of a door: a local file, or an object of the door's store (and its URL, its
    store's settings, its environment), with the stand-in GNU cp copies: its bytes and time.
    Returns (operand, stand-in path, keywords for Python, environment, time)."""
    kind = door.split("-", 1)[1]
    root = disk / "standin"
    if kind == "local":
        p = root / "src" / "p" / "f"
        p.parent.mkdir(parents=True)
        p.write_bytes(body)
        os.chmod(p, 0o644)
        t = int(os.stat(p).st_mtime)
        return str(p), p, {}, {}, t
    if kind == "http":
        require("http", "CACHELESS_TEST_HTTP" in os.environ, "CACHELESS_TEST_HTTP is not set (scripts/test starts the servers)")
        rel = f"ranges/doors-{os.getpid()}-{disk.name}/p/f"
        served = Path(os.environ["CACHELESS_TEST_HTTP_ROOT"]) / rel
        served.parent.mkdir(parents=True, exist_ok=True)
        served.write_bytes(body)
        os.chmod(served, 0o644)
        os.chmod(served.parent, 0o755)
        os.chmod(served.parent.parent, 0o755)
        t = int(os.stat(served).st_mtime)
        p = root / rel
        p.parent.mkdir(parents=True)
        p.write_bytes(body)
        os.chmod(p, 0o644)
        os.utime(p, (t, t))
        return f"{os.environ['CACHELESS_TEST_HTTP']}/{rel}", p, {}, {}, t
    found = {name: (endpoint, env) for name, endpoint, env in s3_servers()}
    require(kind, kind in found, f"CACHELESS_TEST_{kind.upper()} is not set (scripts/test starts the servers)")
    endpoint, env = found[kind]
    bucket = os.environ["CACHELESS_TEST_S3_BUCKET"]
    key = f"doors-{os.getpid()}-{disk.name}/p/f"
    up = disk / "up"
    up.write_bytes(body)
    run_env = {**os.environ, **env}
    run_env.pop("AWS_CA_BUNDLE", None)
    url = f"s3://{bucket}/{key}"
    subprocess.run([str(CLI), "cp", "--endpoint-url", endpoint, str(up), url], check=True, env=run_env, capture_output=True)
    info = subprocess.run([str(CLI), "info", "--json", "--endpoint-url", endpoint, url], check=True, env=run_env, capture_output=True, text=True)
    t = int(json.loads(info.stdout)["objects"][0]["last_modified"])
    p = root / bucket / key
    p.parent.mkdir(parents=True)
    p.write_bytes(body)
    os.chmod(p, 0o644)
    os.utime(p, (t, t))
    return url, p, {"endpoint_url": endpoint}, env, t


DOORS = ["cli-local", "cli-s3", "cli-moto", "cli-http", "py-local", "py-s3", "py-moto", "py-http"]
# Python has no keyword for a flag whose work is the command line's own (-v lines, operands' slashes, -Z).
CELLS = [(door, case) for door in DOORS for case in CASES if case.python or door.startswith("cli")]


@pytest.mark.parametrize("door, case", CELLS, ids=[f"{d}-{c.name}" for d, c in CELLS])
def test_every_option_through_every_door_gives_gnu_cp_s_result_or_a_refusal(disk, door, case, monkeypatch):
    require("python", CLI.exists(), f"{CLI} is not built (cargo build --release)")
    url_door = not door.endswith("local")
    operand, standin, kw, env, when = door_source(door, disk, NEW)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("VERSION_CONTROL", raising=False)
    monkeypatch.delenv("SIMPLE_BACKUP_SUFFIX", raising=False)
    gnu_dest, ours = disk / "gnu", disk / "ours"
    set_up(gnu_dest, case, when)
    set_up(ours, case, when)
    before = snapshot(ours, True)
    # Where the stand-in's name as given starts: the URL's key below its bucket (s3) or its path
    # below the origin (http) is the source's name.
    if door.endswith("local"):
        names_root = standin.parents[2]
    elif door.endswith("http"):
        names_root = disk / "standin"
    else:
        names_root = disk / "standin" / os.environ["CACHELESS_TEST_S3_BUCKET"]
    cwd = names_root if case.layout == "parents" else disk
    # --parents names the source as given: the stand-in relative to where GNU runs, the URL's
    # key below its bucket (or path below the origin).
    g = gnu_cp(case, standin, gnu_dest, cwd)
    refused = url_door and case.refused is not None
    if door.startswith("cli"):
        args = [str(CLI), "cp"]
        if url_door and "endpoint_url" in kw:
            args += ["--endpoint-url", kw["endpoint_url"]]
        args += case.flags
        src = operand if url_door else (os.path.relpath(operand, cwd) if case.layout == "parents" else operand)
        if case.layout == "into":
            args += [str(ours), src] if case.flags == ["-t"] else [src, str(ours)]
        elif case.layout == "parents":
            args += [src, str(ours)]
        else:
            args += [src, str(ours / "f")]
        o = subprocess.run(args, input=case.stdin or "", capture_output=True, text=True, cwd=cwd, env=dict(os.environ))
        if refused:
            assert o.returncode == 1, (o.returncode, o.stderr)
            assert case.refused in o.stderr and "URL" in o.stderr, o.stderr
            assert snapshot(ours, True) == before, "a refused copy changed the destination"
            return
        assert o.returncode == g.returncode, f"exit {o.returncode}, GNU {g.returncode}: {o.stderr} / {g.stderr}"
        if case.name == "verbose":
            mine = o.stdout.replace(str(ours), "DST").replace(src, "SRC")
            theirs = g.stdout.replace(str(gnu_dest), "DST").replace(str(standin), "SRC")
            assert mine == theirs, (o.stdout, g.stdout)
    else:
        monkeypatch.chdir(cwd)
        src = operand if url_door or case.layout != "parents" else os.path.relpath(operand, cwd)
        dst = str(ours) if case.layout in ("into", "parents") else str(ours / "f")
        # A transfer is verified against its ETag: verify="etag" with a URL, an algorithm without.
        keywords = {**case.kw, **({"verify": "etag"} if url_door and "verify" in case.kw else {})}
        call = lambda: cacheless.copy(src, dst, **keywords, **kw)
        if refused:
            with pytest.raises(ValueError) as e:
                call()
            assert_python_refusal(case, e)
            assert snapshot(ours, True) == before, "a refused copy changed the destination"
            return
        if g.returncode == 0:
            rep = call()
            assert rep["errors"] == 0, rep
        else:
            with pytest.raises(OSError):
                call()
    assert snapshot(ours, case.times) == snapshot(gnu_dest, case.times), f"{door} {case.name}: GNU cp gave {g.stderr}"


def test_python_copy_keeps_what_cacheless_cp_keeps_and_what_shutil_copy_gives_a_new_file(disk):
    """A 0751 file: `cacheless.copy`, `cacheless cp`, GNU cp and shutil.copy all give 0751 under
    umask 022; with preserve="mode,timestamps" Python gives shutil.copy2's mode and time."""
    import shutil

    src = disk / "s"
    src.write_bytes(b"x" * 5000)
    os.chmod(src, 0o751)
    os.utime(src, (1_000_000_000, 1_000_000_000))
    old = os.umask(0o022)
    try:
        cacheless.copy(src, disk / "py")
        subprocess.run([str(CLI), "cp", str(src), str(disk / "cli")], check=True)
        subprocess.run(["cp", str(src), str(disk / "gnu")], check=True)
        shutil.copy(src, disk / "shutil")
        cacheless.copy(src, disk / "py2", preserve="mode,timestamps")
        shutil.copy2(src, disk / "shutil2")
    finally:
        os.umask(old)
    modes = {n: stat.S_IMODE(os.stat(disk / n).st_mode) for n in ["py", "cli", "gnu", "shutil", "py2", "shutil2"]}
    assert set(modes.values()) == {0o751}, modes
    assert os.stat(disk / "py2").st_mtime == os.stat(disk / "shutil2").st_mtime == 1_000_000_000
    assert os.stat(disk / "py").st_mtime != 1_000_000_000, "no time kept without preserve="


def test_the_store_s_keywords_are_refused_where_no_operand_is_a_url(disk):
    f = disk / "f"
    f.write_bytes(b"x")
    for kw in [{"endpoint_url": "http://127.0.0.1:1"}, {"part_size": "8M"}, {"concurrency": 4}, {"no_sign_request": True}]:
        with pytest.raises(ValueError, match=f"{next(iter(kw))}= applies to s3://"):
            cacheless.copy(f, disk / "g", **kw)
        with pytest.raises(ValueError, match="applies to s3://"):
            cacheless.hash(f, **kw)
    assert not (disk / "g").exists()
    o = subprocess.run([str(CLI), "cp", "--part-size", "8M", str(f), str(disk / "g")], capture_output=True, text=True)
    assert o.returncode == 1 and "--part-size applies to s3://" in o.stderr, o.stderr
    o = subprocess.run([str(CLI), "--endpoint-url", "http://x", "hash", str(f)], capture_output=True, text=True)
    assert o.returncode == 2 and "--endpoint-url applies to s3://" in o.stderr, o.stderr


UPLOADS = [
    Case("plain", [], {}, "old"),
    Case("no-clobber", ["-n"], {"no_clobber": True}, "old"),
    Case("update-older", ["-u"], {"update": True}, "older"),
    Case("update-newer", ["-u"], {"update": True}, "newer"),
    Case("interactive-no", ["-i"], {"interactive": lambda dst: False}, "old", stdin="n\n"),
    Case("interactive-yes", ["-i"], {"interactive": lambda dst: True}, "old", stdin="y\n"),
    Case("backup", ["-b"], {"backup": "existing"}, "old", refused="--backup"),
    Case("attributes-only", ["--attributes-only"], {"attributes_only": True}, "old", refused="--attributes-only"),
    Case("symbolic-link", ["-s"], {"symbolic_link": True}, "none", refused="--symbolic-link"),
    Case("link", ["-l"], {"link": True}, "none", refused="--link"),
    Case("preserve", ["-p"], {"preserve": "mode,ownership,timestamps"}, "none", refused="--preserve"),
    Case("archive", ["-a"], {"archive": True}, "none", refused="--preserve"),
    Case("inplace", ["--inplace"], {"inplace": True}, "old", refused="--inplace", gnu=[]),
    Case("remove-destination", ["--remove-destination"], {"remove_destination": True}, "old"),
    Case("parents", ["--parents"], {"parents": True}, "none", layout="parents"),
    Case("target-directory", ["-t"], {}, "none", layout="into"),
    Case("verify", ["--verify"], {"verify": "etag"}, "none", gnu=[]),
]


@pytest.mark.parametrize("case", UPLOADS, ids=[c.name for c in UPLOADS])
@pytest.mark.parametrize("door", ["cli-s3", "cli-moto", "py-s3", "py-moto"])
def test_every_option_of_an_upload_gives_gnu_cp_s_result_on_the_key_or_a_refusal(disk, door, case, monkeypatch):
    """An upload's destination is a key as a file is GNU cp's: the object is replaced, kept
    (-n, -u, a "no" to -i) or named under the source's whole name (--parents) as GNU cp's
    destination file would be; what an object cannot be (a link, a backup, attributes) is
    refused before anything is sent."""
    require("python", CLI.exists(), f"{CLI} is not built (cargo build --release)")
    endpoint = s3_store(door.split("-", 1)[1], monkeypatch)
    bucket = os.environ["CACHELESS_TEST_S3_BUCKET"]
    pre = f"up-{os.getpid()}-{disk.name}/"
    cat = lambda key: subprocess.run([str(CLI), "cat", "--endpoint-url", endpoint, f"s3://{bucket}/{pre}{key}"], capture_output=True)
    # The object there before (OLD), and its time; a local folder standing in for the prefix.
    gnu_dest = disk / "gnu"
    gnu_dest.mkdir()
    if case.setup != "none":
        (disk / "old").write_bytes(OLD)
        subprocess.run([str(CLI), "cp", "--endpoint-url", endpoint, str(disk / "old"), f"s3://{bucket}/{pre}f"], check=True, capture_output=True)
        info = subprocess.run([str(CLI), "info", "--json", "--endpoint-url", endpoint, f"s3://{bucket}/{pre}f"], check=True, capture_output=True, text=True)
        when = int(json.loads(info.stdout)["objects"][0]["last_modified"])
        (gnu_dest / "f").write_bytes(OLD)
        os.utime(gnu_dest / "f", (when, when))
    else:
        when = int(__import__("time").time())
    src_root = disk / "src"
    src = src_root / "p" / "f"
    src.parent.mkdir(parents=True)
    src.write_bytes(NEW)
    t = when + (1000 if case.setup == "older" else -1000)
    os.utime(src, (t, t))
    g = gnu_cp(case, src, gnu_dest, src_root)
    target = f"s3://{bucket}/{pre}"
    refused = case.refused is not None
    if door.startswith("cli"):
        args = [str(CLI), "cp", "--endpoint-url", endpoint, *case.flags]
        operand = os.path.relpath(src, src_root) if case.layout == "parents" else str(src)
        if case.layout == "into":
            args += [target, operand] if case.flags == ["-t"] else [operand, target]
        elif case.layout == "parents":
            args += [operand, target]
        else:
            args += [operand, target + "f"]
        o = subprocess.run(args, input=case.stdin or "", capture_output=True, text=True, cwd=src_root)
        if refused:
            assert o.returncode == 1 and case.refused in o.stderr and "URL" in o.stderr, (o.returncode, o.stderr)
        else:
            assert o.returncode == g.returncode, f"exit {o.returncode}, GNU {g.returncode}: {o.stderr} / {g.stderr}"
    else:
        monkeypatch.chdir(src_root)
        operand = os.path.relpath(src, src_root) if case.layout == "parents" else str(src)
        dst = target if case.layout in ("into", "parents") else target + "f"
        call = lambda: cacheless.copy(operand, dst, endpoint_url=endpoint, **case.kw)
        if refused:
            with pytest.raises(ValueError) as e:
                call()
            assert_python_refusal(case, e)
        else:
            assert call()["errors"] == 0
    # The keys hold what GNU's files hold; a refused upload sent nothing.
    want = {str(p.relative_to(gnu_dest)): p.read_bytes() for p in gnu_dest.rglob("*") if p.is_file()}
    if refused:
        want = {"f": OLD} if case.setup != "none" else {}
    for key, body in want.items():
        got = cat(key)
        assert got.returncode == 0 and got.stdout == body, f"{door} {case.name}: {key}"
    if not want:
        assert cat("f").returncode == 1, "an object was made"
