"""cacheless.copy of directories (the engine's tree copy, as `cacheless cp -r` / `cp -a`):
byte-exact against GNU cp, where sources land (`SRC/.`, `SRC/`), per-item errors, and the
keywords of the CLI."""

import os
import shutil
import subprocess

import numpy as np
import pytest

import cacheless

pytestmark = pytest.mark.skipif(shutil.which("cp") is None, reason="no GNU cp to compare with")


def make_tree(root):
    """A small tree: files of odd sizes and modes, a nested directory, a hidden file, symlinks
    (one dangling), a hard link, and distinct nanosecond mtimes everywhere."""
    rng = np.random.default_rng(7)
    (root / "sub" / "deeper").mkdir(parents=True)
    files = [("a", 0, 0o644), ("b", 4097, 0o600), ("sub/c", (1 << 20) + 3, 0o755), ("sub/deeper/d", 5, 0o640), (".hidden", 100, 0o644)]
    for name, size, mode in files:
        p = root / name
        p.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        p.chmod(mode)
    os.symlink("sub/c", root / "link")
    os.symlink("nowhere", root / "dangle")
    os.link(root / "b", root / "sub" / "b-again")
    paths = sorted(root.rglob("*"), key=lambda p: -len(p.parts)) + [root]
    for i, p in enumerate(paths):
        ns = (1_600_000_000 + i) * 10**9 + 123_456_789 - i
        os.utime(p, ns=(ns - 10**9, ns), follow_symlinks=False)
    (root / "sub").chmod(0o750)


def state(root, times):
    """(relative name, kind, contents or target, mode, mtime if `times`) of every entry under
    `root`, and the hard-link groups."""
    out, inodes = [], {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                kind, body = "symlink", os.readlink(p)
            elif os.path.isdir(p):
                kind, body = "dir", None
            else:
                with open(p, "rb") as f:
                    kind, body = "file", f.read()
                if st.st_nlink > 1:
                    inodes.setdefault(st.st_ino, set()).add(rel)
            out.append((rel, kind, body, st.st_mode, st.st_mtime_ns if times else None))
    return sorted(out, key=lambda e: e[0]), sorted(sorted(g) for g in inodes.values())


@pytest.mark.parametrize("archive", [True, False], ids=["archive", "recursive"])
@pytest.mark.parametrize("suffix", ["/.", "/", ""], ids=["dot", "slash", "plain"])
@pytest.mark.parametrize("existing", [True, False], ids=["existing", "missing"])
def test_copy_of_a_directory_equals_gnu_cp(disk, archive, suffix, existing):
    src = disk / "src"
    src.mkdir()
    make_tree(src)
    gnu, ours = disk / "gnu", disk / "ours"
    if existing:
        gnu.mkdir()
        ours.mkdir()
    # GNU cp without -p gives new files the source's mode less the umask.
    old = os.umask(0o022)
    try:
        subprocess.run(["cp", "-a" if archive else "-r", f"{src}{suffix}", str(gnu)], check=True)
        rep = cacheless.copy(f"{src}{suffix}", ours, **({"archive": True} if archive else {"recursive": True}))
    finally:
        os.umask(old)
    assert state(ours, archive) == state(gnu, archive)
    assert rep["errors"] == 0 and rep["copied"] >= 5, rep
    if archive:
        assert rep["hardlinks"] == 1, rep
    assert not [p for p in ours.rglob("*") if ".cacheless-" in p.name], "a temporary file was left"


def test_a_directory_without_recursive_is_a_directory_error_with_the_report(disk):
    src = disk / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    with pytest.raises(IsADirectoryError) as e:
        cacheless.copy(src, disk / "dst")
    # GNU cp's words for it.
    assert e.value.filename == str(src) and "-r not specified; omitting directory" in str(e.value)
    assert e.value.report["errors"] == 1 and e.value.report["copied"] == 0
    assert not (disk / "dst").exists()


def test_tree_keywords_update_no_clobber_verify_and_progress(disk):
    src = disk / "src"
    src.mkdir()
    make_tree(src)
    dst = disk / "dst"
    dst.mkdir()
    seen = []
    rep = cacheless.copy(src, dst, archive=True, verify="blake3", threads=2, sync=False, progress=lambda d, t: seen.append((d, t)))
    assert rep["errors"] == 0 and rep["files"] and all(f["verify"]["algo"] == "blake3" for f in rep["files"]), rep
    assert state(dst / "src", True) == state(src, True)
    assert seen and seen[-1][0] == seen[-1][1] > 0, seen
    # update: nothing changed, nothing copied; no_clobber: an existing file is kept as it is.
    again = cacheless.copy(src, dst, archive=True, update=True)
    assert again["copied"] == 0 and again["skipped"] >= 5, again
    (dst / "src" / "b").write_bytes(b"mine")
    kept = cacheless.copy(src, dst, recursive=True, no_clobber=True)
    assert kept["copied"] == 0 and (dst / "src" / "b").read_bytes() == b"mine", kept
    with pytest.raises(ValueError, match="threads="):
        cacheless.copy(src, dst, recursive=True, threads=0)
