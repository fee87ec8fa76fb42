"""The package's calls under an injected fault at every position of every kind of call the
engine makes for them (open, read, write, fsync, rename), with every fault that applies there
(EIO, ENOSPC, EINTR, EAGAIN, a short count). Whatever is injected: EINTR, EAGAIN and short
counts are retried and the result is byte-exact against numpy, hashlib, tarfile and the
safetensors package; any other fault is an OSError whose errno is the fault's and whose message
names the path and the operation; the sources are untouched; nothing but the expected bytes
is left under a final name (the old file, where a call replaces one), and no temporary at all;
every buffer is back in the call's memory budget; no call hangs.

These need the extension built with the `fault-injection` feature (its private `_fault`
submodule), which scripts/test builds on the side (target/python-fault) and runs this file
against; with the shipped build they skip, saying so. The fault plan is process-wide, so the
cases run one at a time (as pytest runs them) and nothing else runs beside them.
"""

import errno
import faulthandler
import hashlib
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stn

import cacheless
from cacheless import _native
from cacheless import safetensors as cst
from conftest import require

F = getattr(_native, "_fault", None)
require("faults", F is not None, "the extension was built without fault injection (scripts/test builds one with it into target/python-fault)")

# Requests of 64 KiB: the files below take several, the last one partial and unaligned.
BLOCK = 64 << 10
SIZE = 4 * BLOCK + 12_345
# A run that takes longer than this has hung: its stacks are dumped and the process exits.
HANG = 120


def rnd(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def names(d):
    """Every path under `d`, relative, sorted (folders end in '/')."""
    out = []
    for root, dirs, files in os.walk(d):
        rel = os.path.relpath(root, d)
        out += [os.path.normpath(os.path.join(rel, x)) + "/" for x in dirs]
        out += [os.path.normpath(os.path.join(rel, x)) for x in files]
    return sorted(out)


class Sweep:
    """What one sweep did, for its report and its assertions."""

    def __init__(self, what):
        self.what = what
        self.clean = {}
        self.runs = self.fired = self.retried = 0

    def __str__(self):
        return f"{self.what}: clean calls {self.clean}; {self.runs} runs with a fault, {self.fired} injected ({self.retried} retried)"


def run_one(call, plan):
    """Runs `call()` with `plan` ((site, nth, fault) or None) armed, under a watchdog: (value,
    exception, fired, counts)."""
    faulthandler.dump_traceback_later(HANG, exit=True)
    try:
        if plan is None:
            F.start()
        else:
            F.start(plan[0], plan[1], plan[2])
        value, exc = None, None
        try:
            value = call()
        except Exception as e:  # noqa: BLE001 - judged by the caller
            exc = e
        finally:
            out = F.stop()
    finally:
        faulthandler.cancel_dump_traceback_later()
    return value, exc, out["fired"], out["counts"]


def check_error(what, exc, site, fault_errno, paths, members=()):
    """A fault that is not retried: an OSError with its errno, naming an operation of its kind
    and one of `paths`. An archive call whose members failed names the archive, and the first
    failed member (one of `members`) in its message."""
    assert isinstance(exc, OSError), f"{what}: {type(exc).__name__}: {exc}"
    assert exc.errno == fault_errno, f"{what}: errno {exc.errno}, expected {errno.errorcode[fault_errno]}: {exc}"
    assert exc.filename in [str(p) for p in paths], f"{what}: the error names {exc.filename!r}: {exc}"
    text = str(exc)
    ops = F.ops(site)
    if getattr(exc, "report", None) is None:
        assert any(str(exc.strerror).startswith(op + ":") for op in ops), f"{what}: the error names none of the operations {ops}: {exc}"
    else:
        # As tar words a member's failure ("d/small: cannot open: ...") or as the engine does.
        assert any(f" {op} " in text or f" {op}:" in text for op in ops), f"{what}: the error names none of the operations {ops}: {exc}"
        # The tree's final syncfs belongs to no member: it names the destination instead. A call
        # with no members (a copy's report) names its file, checked above.
        whole_tree = " syncfs " in text and any(f"'{p}'" in text for p in paths)
        assert not members or whole_tree or any(m in text for m in members), f"{what}: the error names none of the members: {exc}"
    assert exc.filename in text, f"{what}: the message does not name the path: {text}"


def sweep(what, call, paths, setup=lambda: None, check=lambda plan, value, exc: None, members=()):
    """Runs `call()` once clean (it must succeed), then once for every call it made, of every
    kind, with every fault that applies there. Before each run `setup()` prepares the files;
    after it `check(plan, value, exc)` checks what it left, the outcome is
    checked (success where the fault was retried or never injected, else an error naming the
    fault, the operation and one of `paths`, or one of `members` of an archive), and every
    buffer must be back in the budget."""
    s = Sweep(what)
    setup()
    value, exc, _, counts = run_one(call, None)
    assert exc is None, f"{what}: the clean run failed: {exc!r}"
    check(None, value, None)
    for site in F.sites():
        s.clean[site] = counts[site]
        for nth in range(counts[site]):
            for fault, fault_errno, retried in F.faults(site):
                plan = (site, nth, fault)
                label = f"{what}: {fault} at {site} #{nth}"
                setup()
                value, exc, fired, _ = run_one(call, plan)
                s.runs += 1
                if fired:
                    s.fired += 1
                    s.retried += retried
                if exc is None:
                    assert not fired or retried, f"{label} was injected and the call succeeded"
                elif not fired or retried:
                    raise AssertionError(f"{label} (injected: {fired}) failed: {exc!r}") from exc
                else:
                    check_error(label, exc, site, fault_errno, paths, members)
                used, budgets = F.budget_used()
                assert budgets > 0 and used == 0, f"{label}: {used} bytes of {budgets} budgets never came back"
                check(plan, value, exc)
    print(s)
    assert s.fired > 0, f"{what}: no fault was ever injected"
    assert s.retried > 0 and s.retried < s.fired, f"{what}: {s}"
    return s


def left(d, expect, label):
    """The folder `d` holds exactly the files of `expect` ({relative name: bytes, or a set of
    the bytes it may hold, or None where it may be absent too}) and nothing else."""
    have = {n for n in names(d) if not n.endswith("/")}
    for n in have:
        assert n in expect, f"{label}: {n} left behind"
    for n, want in expect.items():
        p = Path(d) / n
        if not isinstance(want, (set, frozenset, list, tuple)):
            want = {want}
        if n not in have:
            assert None in want, f"{label}: {n} is missing"
            continue
        assert p.read_bytes() in want, f"{label}: {n} holds other bytes than it may"


@pytest.fixture
def src(disk):
    """A scratch folder with a source file: (folder, path, bytes)."""
    data = rnd(7, SIZE)
    p = disk / "src"
    p.write_bytes(data)
    return disk, p, data


def test_read_file(src):
    d, p, data = src

    def check(plan, value, exc):
        if exc is None:
            assert bytes(value) == data, f"read_file: {plan}: the bytes differ"
        left(d, {"src": data}, f"read_file: {plan}")

    sweep("read_file", lambda: cacheless.read_file(p, block_size=BLOCK), [p], check=check)


def test_hash(src):
    d, p, data = src
    want = hashlib.sha256(data).hexdigest()

    def check(plan, value, exc):
        if exc is None:
            assert value == want, f"hash: {plan}: wrong digest"
        left(d, {"src": data}, f"hash: {plan}")

    sweep("hash", lambda: cacheless.hash(p, block_size=BLOCK, queue_depth=3), [p], check=check)


def test_reader(src):
    d, p, data = src

    def read():
        with cacheless.open(p, "rb", block_size=BLOCK, queue_depth=3) as f:
            return f.read(1000) + f.read()

    def check(plan, value, exc):
        if exc is None:
            assert value == data, f"open(rb): {plan}: the bytes differ"
        left(d, {"src": data}, f"open(rb): {plan}")

    sweep("open(rb)", read, [p], check=check)


OLD = b"the destination as it was"


def replace_sweep(what, d, p, data, call, paths, extra=None):
    """Sweeps a call that writes `data` over an existing `dst`: it holds the old bytes or
    the new ones (the new ones once the call succeeded), and nothing else is left."""
    dst = d / "dst"

    def setup():
        dst.write_bytes(OLD)

    def check(plan, value, exc):
        if exc is None:
            assert dst.read_bytes() == data, f"{what}: {plan}: done, yet the destination differs"
        left(d, {"src": p.read_bytes() if extra is None else extra, "dst": {OLD, data}}, f"{what}: {plan}")

    return sweep(what, lambda: call(dst), paths + [dst, d], setup=setup, check=check)


def test_write_file(src):
    d, p, data = src
    replace_sweep("write_file", d, p, data, lambda dst: cacheless.write_file(dst, data), [], extra=data)


def test_writer(src):
    d, p, data = src

    def write(dst):
        with cacheless.open(dst, "wb", block_size=BLOCK, queue_depth=3) as f:
            for i in range(0, len(data), 50_000):
                f.write(data[i : i + 50_000])

    replace_sweep("open(wb)", d, p, data, write, [], extra=data)


def test_copy(src):
    d, p, data = src
    replace_sweep("copy", d, p, data, lambda dst: cacheless.copy(p, dst, block_size=BLOCK, queue_depth=3), [p], extra=data)


def tensors():
    """Tensors of a few dtypes and shapes, about 300 KB in all."""
    g = np.random.default_rng(3)
    return {
        "a.f32": g.standard_normal((128, 300)).astype(np.float32),
        "b.i64": g.integers(-(1 << 40), 1 << 40, (1000,), dtype=np.int64),
        "c.u8": g.integers(0, 256, (7, 11, 13), dtype=np.uint8),
        "d.f16.0d": np.array(1.5, dtype=np.float16),
    }


def test_save_file(disk):
    t = tensors()
    meta = {"format": "np"}
    want = stn.save(t, metadata=meta)
    data = rnd(7, SIZE)
    (disk / "src").write_bytes(data)
    replace_sweep("save_file", disk, disk / "src", want, lambda dst: cst.save_file(t, dst, metadata=meta, block_size=BLOCK, queue_depth=3), [], extra=data)


def test_load_file(disk):
    t = tensors()
    p = disk / "model.safetensors"
    stn.save_file(t, str(p))
    raw = p.read_bytes()

    def check(plan, value, exc):
        if exc is None:
            assert set(value) == set(t), f"load_file: {plan}: names differ"
            for k, v in t.items():
                got = value[k]
                assert got.dtype == v.dtype and got.shape == np.shape(v) and got.tobytes() == np.asarray(v).tobytes(), f"load_file: {plan}: {k} differs"
        left(disk, {"model.safetensors": raw}, f"load_file: {plan}")

    sweep("load_file", lambda: cst.load_file(p, block_size=BLOCK, queue_depth=3), [p], check=check)


def tree(root):
    """The files of the tree to pack: small ones and one that takes several requests."""
    files = {"d/small": rnd(1, 3000), "d/mid": rnd(2, 70_000), "big": rnd(3, 300_000 + 77)}
    for rel, b in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b)
    return files


def members(archive):
    """{name: bytes} of the archive's regular files, read by tarfile."""
    with tarfile.open(archive) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def test_pack(disk):
    root = disk / "in"
    files = tree(root)
    out = disk / "out"
    out.mkdir()
    archive = out / "a.tar.gz"

    def call():
        return cacheless.pack(archive, ["d", "big"], directory=root, compression="gzip", block_size=BLOCK, threads=1)

    def check(plan, value, exc):
        for rel, b in files.items():
            assert (root / rel).read_bytes() == b, f"pack: {plan}: the input {rel} changed"
        if exc is None:
            assert archive.exists(), f"pack: {plan}: done, yet no archive"
        if archive.exists():
            # Complete (also after a failure past the rename, as a failed fsync of the folder);
            # or without the members that failed, except that one whose read failed part way
            # is there with the bytes read and zeros after them (as tar does: its header, with
            # the size, was already written).
            failed = [rel for rel in files if any(f.startswith(rel + ":") for f in getattr(exc, "report", {}).get("failures", []))]
            got = members(archive)
            for rel, b in files.items():
                if rel not in failed:
                    assert got.get(rel) == b, f"pack: {plan}: {rel} is not in the archive as it is on disk"
                elif rel in got:
                    k = next((i for i, (x, y) in enumerate(zip(got[rel], b)) if x != y), len(b))
                    assert len(got[rel]) == len(b) and got[rel][k:] == bytes(len(b) - k), f"pack: {plan}: {rel} holds other bytes than it read"
            assert set(got) <= set(files), f"pack: {plan}: members {set(got) - set(files)}"
            assert getattr(exc, "report", None) is None or failed, f"pack: {plan}: the failure names no member: {exc}"
            archive.unlink()
        assert names(out) == [], f"pack: {plan}: left behind {names(out)}"

    paths = [archive, out] + [root / rel for rel in files] + [root / "d"]
    sweep("pack", call, paths, check=check, members=list(files))


def test_extract(disk):
    root = disk / "in"
    files = tree(root)
    archive = disk / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for rel in sorted(files):
            t.add(root / rel, arcname=rel)
    raw = archive.read_bytes()
    dest = disk / "dest"

    def setup():
        if dest.exists():
            for n in reversed(names(dest)):
                (dest / n).rmdir() if n.endswith("/") else (dest / n).unlink()
        else:
            dest.mkdir()

    def check(plan, value, exc):
        assert archive.read_bytes() == raw, f"extract: {plan}: the archive changed"
        left(dest, {rel: {b, None} if exc is not None else b for rel, b in files.items()}, f"extract: {plan}")

    paths = [archive, dest] + [dest / rel for rel in files] + [dest / "d"]
    sweep("extract", lambda: cacheless.extract(archive, dest, threads=1), paths, setup=setup, check=check, members=list(files))
