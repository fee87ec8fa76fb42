"""cacheless.pack: archives that Python's tarfile and cacheless.extract read back exactly, the
CLI's report, reproducible bytes, progress, errors, and nothing left behind when it fails."""

import datetime
import errno
import json
import os
import signal
import subprocess
import tarfile

import numpy as np
import pytest

import cacheless
from conftest import REPO, ctrl_c_once, fraction_cached, require_direct, run_python

SIZES = [0, 1, 511, 4096, 4097, (1 << 20) + 3, (3 << 20) + 17]


def make_tree(root):
    """A tree with odd sizes, a subdirectory, an empty directory, a symlink, a unicode name and
    distinct modes and times; returns {relative name: bytes} of its files."""
    rng = np.random.default_rng(7)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    files = {}
    for i, n in enumerate(SIZES):
        name = f"f{i}.bin" if i % 2 == 0 else f"sub/f{i}.bin"
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        (root / name).write_bytes(data)
        os.chmod(root / name, 0o600 + i)
        os.utime(root / name, (1_600_000_000 + i, 1_600_000_000 + i))
        files[name] = data
    uni = "sub/deeper/ünïcödé ☃.txt"
    (root / uni).write_bytes(b"snow")
    files[uni] = b"snow"
    os.symlink("../f0.bin", root / "sub" / "link")
    return files


def tree_of(root):
    """{relative name: (kind, content or target, permission bits, mtime)} under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p), None, None)
            elif os.path.isdir(p):
                out[rel] = ("dir", None, st.st_mode & 0o7777, None)
            else:
                out[rel] = ("file", open(p, "rb").read(), st.st_mode & 0o7777, int(st.st_mtime))
    return out


@pytest.mark.parametrize("compression,tarmode", [("gzip", "r:gz"), ("xz", "r:xz"), ("bzip2", "r:bz2"), ("none", "r:")])
def test_python_tarfile_reads_back_the_tree_exactly(disk, compression, tarmode):
    src = disk / "src"
    src.mkdir()
    make_tree(src)
    arc = disk / "a.tar"
    rep = cacheless.pack(arc, ".", directory=src, compression=compression)
    assert rep["compression"] == compression and rep["failure_count"] == 0
    assert rep["output_bytes"] == arc.stat().st_size and rep["files"] == len(SIZES) + 1
    out = disk / "out"
    with tarfile.open(arc, tarmode) as t:
        if hasattr(tarfile, "fully_trusted_filter"):
            t.extractall(out, filter="fully_trusted")
        else:
            t.extractall(out)
    assert tree_of(out) == tree_of(src)


def test_extract_reads_back_every_compression_and_many_frames(disk):
    src = disk / "src"
    src.mkdir()
    files = make_tree(src)
    for compression in ("zstd", "lz4", "gzip", "xz", "bzip2", "none"):
        arc = disk / f"a-{compression}.tar"
        rep = cacheless.pack(arc, ["f0.bin", "sub", "empty"], directory=src, compression=compression, frame_size="64k", threads=3)
        if compression != "none":
            # Independent frames of 64 KiB of tar each: the tree's bytes need several.
            assert rep["frames"] >= rep["tar_bytes"] // (64 << 10), rep
        out = disk / f"out-{compression}"
        cacheless.extract(arc, out)
        got = tree_of(out)
        assert {k for k, v in got.items() if v[0] == "file"} == set(files) - {"f2.bin", "f4.bin", "f6.bin"}
        for name, data in files.items():
            if name.startswith("sub/") or name == "f0.bin":
                assert got[name][1] == data, (compression, name)
        assert got["empty"][0] == "dir" and got["sub/link"] == ("link", "../f0.bin", None, None)


def test_decompress_threads_decode_the_frames_in_parallel_or_on_one_thread(disk):
    src = disk / "src"
    src.mkdir()
    files = make_tree(src)
    arc = disk / "a.tar.zst"
    packed = cacheless.pack(arc, ".", directory=src, frame_size="64k")
    assert packed["frames"] >= 4, packed
    for threads, want in ((3, (packed["frames"], 3)), (1, (None, 1))):
        out = disk / f"out-{threads}"
        rep = cacheless.extract(arc, out, decompress_threads=threads)
        assert (rep["source"]["frames"], rep["source"]["decompress_threads"]) == want, rep["source"]
        got = tree_of(out)
        for name, data in files.items():
            assert got[name] == ("file", data, got[name][2], got[name][3]), (threads, name)
    with pytest.raises(ValueError, match="decompress_threads"):
        cacheless.extract(arc, disk / "bad", decompress_threads=0)


def test_the_report_has_the_cli_json_fields(disk):
    src = disk / "src"
    src.mkdir()
    make_tree(src)
    rep = cacheless.pack(disk / "p.tar.zst", ".", directory=src)
    assert rep["compression"] == "zstd" and rep["level"] == 3 and rep["output"] == str(disk / "p.tar.zst")
    cli = REPO / "target" / "release" / "cacheless"
    if cli.exists():
        done = subprocess.run([str(cli), "--json", "pack", "-o", str(disk / "c.tar.zst"), "-C", str(src), "."], capture_output=True, text=True, check=True)
        assert set(json.loads(done.stdout)) == set(rep)


def test_sort_and_mtime_give_identical_bytes_and_progress_counts_every_byte(disk):
    src = disk / "src"
    src.mkdir()
    files = make_tree(src)
    when = datetime.datetime(2024, 1, 31, 12, 0, tzinfo=datetime.timezone.utc)
    seen = []
    a = cacheless.pack(disk / "1.tar.zst", ".", directory=src, sort="name", mtime=when, owner=0, group="root", numeric_owner=True, threads=1, progress=lambda d, t: seen.append((d, t)))
    cacheless.pack(disk / "2.tar.zst", ".", directory=src, sort="name", mtime="2024-01-31T12:00:00", owner="+0", group=0, numeric_owner=True, threads=4)
    assert (disk / "1.tar.zst").read_bytes() == (disk / "2.tar.zst").read_bytes()
    total = sum(len(d) for d in files.values())
    assert seen[-1] == (total, total) and a["input_bytes"] == total
    with _plain(disk, src, when) as t:
        members = t.getmembers()
    assert members and all(m.mtime == int(when.timestamp()) and m.uid == 0 and m.gid == 0 and m.uname == "" for m in members)
    assert [m.name for m in members] == sorted(m.name for m in members)


def _plain(disk, src, when):
    """The same tree packed uncompressed with the same settings, opened with tarfile."""
    arc = disk / "plain.tar"
    cacheless.pack(arc, ".", directory=src, compression="none", sort="name", mtime=when, owner=0, group=0, numeric_owner=True)
    return tarfile.open(arc)


def test_exclude_and_bad_options(disk):
    src = disk / "src"
    src.mkdir()
    make_tree(src)
    arc = disk / "x.tar"
    cacheless.pack(arc, ".", directory=src, exclude=["*.txt", "sub/deeper"])
    with tarfile.open(arc) as t:
        names = t.getnames()
    assert not any(n.endswith(".txt") or "deeper" in n for n in names) and "./sub/f1.bin" in names
    bad = disk / "bad.tar.zst"
    for kwargs, message in [
        (dict(compression="rar"), "unknown compression"),
        (dict(level=99), "out of range"),
        (dict(compression="lz4", level=3), "no compression levels"),
        (dict(sort="size"), "sort="),
        (dict(frame_size="1k"), "frame_size="),
        # Refused before anything is allocated, as the command line refuses them (never an
        # abort of the interpreter).
        (dict(frame_size="100G"), "frame_size="),
        (dict(read_threads=40000), "read_threads="),
        (dict(threads=0), "threads="),
        (dict(mtime="yesterday"), "mtime="),
        (dict(exclude="[unclosed"), "invalid pattern"),
    ]:
        with pytest.raises(ValueError, match=message):
            cacheless.pack(bad, ".", directory=src, **kwargs)
        assert not bad.exists(), kwargs
    with pytest.raises(TypeError, match="unexpected keyword"):
        cacheless.pack(bad, ".", directory=src, strip_components=1)
    with pytest.raises(IsADirectoryError):
        cacheless.pack(disk, ".", directory=src)


def test_an_unreadable_member_is_an_os_error_with_the_report_and_the_rest_is_archived(disk):
    src = disk / "src"
    src.mkdir()
    (src / "here.bin").write_bytes(b"here")
    arc = disk / "m.tar"
    with pytest.raises(OSError, match="could not be stored") as e:
        cacheless.pack(arc, ["here.bin", "missing.bin"], directory=src)
    rep = e.value.report
    assert rep["failure_count"] == 1 and "missing.bin: cannot stat" in rep["failures"][0] and rep["files"] == 1
    # The first failure's errno, as an OSError of its own would carry it.
    assert isinstance(e.value, FileNotFoundError) and e.value.errno == errno.ENOENT, repr(e.value)
    with tarfile.open(arc) as t:
        assert t.getnames() == ["here.bin"] and t.extractfile("here.bin").read() == b"here"


def no_temporaries(folder):
    return [n for n in os.listdir(folder) if ".cacheless-" in n]


def slow_input(disk, seed):
    """A source folder whose pack through xz on one thread is still compressing when the
    progress callback first runs (8 MiB of random data), and an empty output folder."""
    src = disk / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(np.random.default_rng(seed).integers(0, 256, 8 << 20, dtype=np.uint8).tobytes())
    out = disk / "out"
    out.mkdir()
    return src, out


def test_a_failed_pack_leaves_no_archive_and_keeps_the_old_one(disk):
    src, out = slow_input(disk, 3)
    arc = out / "a.tar.xz"

    def boom(done, total):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        cacheless.pack(arc, ".", directory=src, threads=1, progress=boom)
    assert os.listdir(out) == [], "a failed pack left something behind"
    arc.write_bytes(b"the old archive")
    with pytest.raises(RuntimeError, match="stop here"):
        cacheless.pack(arc, ".", directory=src, threads=1, progress=boom)
    assert arc.read_bytes() == b"the old archive" and no_temporaries(out) == []
    # A forced mode the filesystem cannot honour: refused, the old archive untouched.
    code = f"""
import cacheless
try:
    cacheless.pack({str(arc)!r}, ".", directory={str(src)!r}, mode="direct")
except cacheless.UnsupportedError as e:
    print("unsupported", e.errno, e)
"""
    done = run_python(code, env={"CACHELESS_DISABLE": "direct"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("unsupported 95 ") and 'use mode="auto"' in done.stdout, done.stdout
    assert arc.read_bytes() == b"the old archive" and no_temporaries(out) == []


def test_keyboard_interrupt_leaves_no_archive_and_no_temporary(disk, sigint):
    src, out = slow_input(disk, 4)
    with pytest.raises(KeyboardInterrupt):
        cacheless.pack(out / "a.tar.xz", ".", directory=src, threads=1, progress=ctrl_c_once())
    assert os.listdir(out) == [], "an interrupted pack left something behind"


def test_inputs_and_archive_are_left_out_of_the_page_cache(disk):
    require_direct(disk)
    src = disk / "src"
    src.mkdir()
    rng = np.random.default_rng(5)
    for i in range(4):
        (src / f"{i}.bin").write_bytes(rng.integers(0, 256, 16 << 20, dtype=np.uint8).tobytes())
        cacheless.evict(src / f"{i}.bin")
    arc = disk / "r.tar"
    rep = cacheless.pack(arc, ".", directory=src, compression="none")
    assert rep["read_modes"]["direct"] == 4, rep["read_modes"]
    for p in [arc] + sorted(src.iterdir()):
        assert fraction_cached(p) < 0.02, f"{p} left in the page cache"
