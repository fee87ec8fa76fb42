#!/usr/bin/env python3
"""bench/safetensors_bench.py (run it through bench/safetensors.sh): cacheless.safetensors against the
safetensors package, fastsafetensors, the Run:ai model streamer, transformers' from_pretrained and fio's
best direct read of the same files.

Sections (--only picks some; `numpy` and `torch` name the two groups):

  numpy group, on one file of 64 float32 tensors + 50 small float16 ones (--size):
    cold          cacheless load_file, safetensors.numpy.load_file (mmap), backend="pread",
                  fastsafetensors (CPU, no GDS), fio
    warm          the file fully resident: cacheless, safetensors mmap and pread
    save          cacheless save_file vs safetensors.numpy.save_file + fsync
    sharded       8 shards of size/8 + model.safetensors.index.json: cacheless load_model vs
                  safetensors.numpy.load_file of each shard in turn
  torch group, torch CPU tensors as the target:
    pt            one file (--size) of 228 tensors, float32 and bfloat16:
                  cacheless.safetensors.torch.load_file, safetensors.torch.load_file (mmap) and
                  its backend="pread", fastsafetensors (CPU, no GDS), runai-model-streamer
                  (SafetensorsStreamer to CPU), fio
    pt-warm       the same file fully resident, a re-load: cacheless, safetensors mmap and pread
    pt-sharded    8 shards of --shard-size + model.safetensors.index.json: cacheless
                  load_model(framework="pt") against each peer over the same 8 files
    transformers  a Llama of about --model-size bf16 bytes (random init, save_pretrained with
                  --model-shard-size shards): AutoModelForCausalLM.from_pretrained(dir) plainly and
                  inside `with cacheless.patch_safetensors():`, fio over the shards

Every trial runs in a fresh process, imports untimed. Cold trials evict the files first
(fadvise DONTNEED through cacheless.evict: no root needed, nothing else loses its cache), check
with cachestat that they are gone, and wait for writeback and kswapd to go quiet (bench/lib.sh).
Methods run in rotated order (bench/lib.sh's balanced Latin square), --runs rounds, the position
recorded in raw.csv. Per trial: wall seconds (the call, then a read of one byte of every page
of every tensor returned, as a user of the weights would, so that a loader handing out lazily
mapped tensors pays for them too; the touch alone is touch_s in raw.csv), CPU seconds (user +
system of the process, all its threads), the files' own pages left cached (cachestat), the
growth of Cached in /proc/meminfo, and the process's peak RSS (VmHWM) with its
RSS when the timed call started.
Tables show medians. A method that cannot run here (not installed, an error) is tried once,
and its row shows the error instead of figures.

    bench/safetensors.sh                                   # everything, 4 GiB, 5 runs
    bench/safetensors.sh --only torch                      # the torch CPU comparison only
    bench/safetensors.sh --size 256M --runs 2 --shard-size 32M --model-size 256M \\
        --model-shard-size 100MB                           # a quick check that everything runs

Raw rows go to OUT/raw.csv, the tables to OUT/table.md (OUT: --out, default
bench/runs/DATE-HOST/safetensors).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import fnmatch
import importlib
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]
NOT_AVAILABLE = 3  # a child's exit status for "this method cannot run in this installation"

NUMPY_SECTIONS = ["cold", "warm", "save", "sharded"]
TORCH_SECTIONS = ["pt", "pt-warm", "pt-sharded", "transformers"]
GROUPS = {"numpy": NUMPY_SECTIONS, "torch": TORCH_SECTIONS}

# Methods of each section, in table order; "fio" is the device limit and the reference.
SECTION_METHODS = {
    "cold": ["cacheless", "st-mmap", "st-pread", "fastsafetensors", "fio"],
    "warm": ["warm-cacheless", "warm-st-mmap", "warm-st-pread"],
    "save": ["save-cacheless", "save-st"],
    "sharded": ["sharded-cacheless", "sharded-st"],
    "pt": ["pt-cacheless", "pt-st-mmap", "pt-st-pread", "pt-fastsafetensors", "pt-runai", "fio"],
    "pt-warm": ["warm-pt-cacheless", "warm-pt-st-mmap", "warm-pt-st-pread"],
    "pt-sharded": ["sharded-pt-cacheless", "sharded-pt-st-mmap", "sharded-pt-st-pread", "sharded-pt-fastsafetensors", "sharded-pt-runai", "fio"],
    "transformers": ["tf-plain", "tf-cacheless", "fio"],
}

LABELS = {
    "cacheless": "`cacheless.safetensors.load_file`",
    "st-mmap": "`safetensors.numpy.load_file` (mmap)",
    "st-pread": 'safetensors `backend="pread"`',
    "fastsafetensors": "fastsafetensors, CPU, no GDS",
    "fio": "fio, best direct read",
    "warm-cacheless": "cacheless",
    "warm-st-mmap": "safetensors mmap",
    "warm-st-pread": "safetensors pread",
    "save-cacheless": "`cacheless.safetensors.save_file`",
    "save-st": "`safetensors.numpy.save_file` + fsync",
    "sharded-cacheless": "`cacheless.safetensors.load_model`",
    "sharded-st": "safetensors, each shard in turn",
    "pt-cacheless": "`cacheless.safetensors.torch.load_file`",
    "pt-st-mmap": "`safetensors.torch.load_file` (mmap)",
    "pt-st-pread": 'safetensors.torch `backend="pread"`',
    "pt-fastsafetensors": "fastsafetensors 0.5, CPU, no GDS",
    "pt-runai": "runai-model-streamer 0.17, CPU",
    "warm-pt-cacheless": "`cacheless.safetensors.torch.load_file`",
    "warm-pt-st-mmap": "`safetensors.torch.load_file` (mmap)",
    "warm-pt-st-pread": 'safetensors.torch `backend="pread"`',
    "sharded-pt-cacheless": '`cacheless.safetensors.load_model(framework="pt")`',
    "sharded-pt-st-mmap": "`safetensors.torch.load_file` (mmap), each shard in turn",
    "sharded-pt-st-pread": 'safetensors.torch `backend="pread"`, each shard in turn',
    "sharded-pt-fastsafetensors": "fastsafetensors 0.5, all 8 files at once",
    "sharded-pt-runai": "runai-model-streamer 0.17, all 8 files at once",
    "tf-plain": "`from_pretrained(dir)`",
    "tf-cacheless": "`from_pretrained(dir)` inside `cacheless.patch_safetensors()`",
}


# ---------------------------------------------------------------- child side: one timed call


class NotAvailable(Exception):
    """The method cannot run in this installation (reported as such, not as a failure)."""


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_kib(key: str = "VmRSS") -> int:
    """A /proc/self/status figure in KiB: VmRSS now, or VmHWM, the peak of this process image
    (getrusage's ru_maxrss would carry the parent's peak over across fork and exec)."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def shard_files(index_path: str) -> list:
    """The shard files an index names, in name order."""
    index = json.loads(Path(index_path).read_text())
    return [str(Path(index_path).parent / s) for s in sorted(set(index["weight_map"].values()))]


def torch_bytes(tensors: dict) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def prepare(method: str, path: str):
    """Imports what `method` needs (untimed) and returns (call, nbytes(result), note): call() does
    the timed work."""
    note = ""
    base = method.removeprefix("warm-")
    np_bytes = lambda got: sum(a.nbytes for a in got.values())

    # numpy group
    if base == "cacheless":
        import cacheless.safetensors as cst

        return (lambda: cst.load_file(path)), np_bytes, note
    if base.removeprefix("pt-") in ("st-mmap", "st-pread"):
        torch_target = base.startswith("pt-")
        st = importlib.import_module("safetensors.torch" if torch_target else "safetensors.numpy")
        kw = {"backend": "pread"} if base.endswith("pread") else {}
        return (lambda: st.load_file(path, **kw)), (torch_bytes if torch_target else np_bytes), note
    if base == "fastsafetensors":
        return fst_call([path]) + (note,)
    if base == "sharded-cacheless":
        import cacheless.safetensors as cst

        return (lambda: cst.load_model(path)), np_bytes, note
    if base == "sharded-st":
        import safetensors.numpy as stn

        def each() -> dict:
            got = {}
            for f in shard_files(path):
                got.update(stn.load_file(f))
            return got

        return each, np_bytes, note
    if base.startswith("save"):
        import cacheless.safetensors as cst
        import safetensors.numpy as stn

        tensors = make_numpy_tensors(json.loads(os.environ["BENCH_LAYOUT"]))
        out = path + ".out"

        def save() -> None:
            if base == "save-cacheless":
                cst.save_file(tensors, out)
            else:
                stn.save_file(tensors, out)
                fd = os.open(out, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)

        return save, (lambda _: os.path.getsize(out)), note

    # torch group
    if base == "pt-cacheless":
        from cacheless.safetensors.torch import load_file

        return (lambda: load_file(path)), torch_bytes, note
    if base == "pt-fastsafetensors":
        return fst_call([path]) + (note,)
    if base == "pt-runai":
        return runai_call([path]) + (note,)
    if base == "sharded-pt-cacheless":
        import torch  # noqa: F401  (imported untimed, as the peers' torch is)

        import cacheless.safetensors as cst

        return (lambda: cst.load_model(path, framework="pt")), torch_bytes, note
    if base in ("sharded-pt-st-mmap", "sharded-pt-st-pread"):
        import safetensors.torch as stt

        kw = {"backend": "pread"} if base == "sharded-pt-st-pread" else {}
        files = shard_files(path)

        def each_pt() -> dict:
            got = {}
            for f in files:
                got.update(stt.load_file(f, **kw))
            return got

        return each_pt, torch_bytes, note
    if base == "sharded-pt-fastsafetensors":
        return fst_call(shard_files(path)) + (note,)
    if base == "sharded-pt-runai":
        return runai_call(shard_files(path)) + (note,)
    if base in ("tf-plain", "tf-cacheless"):
        import transformers
        from transformers import AutoModelForCausalLM

        transformers.logging.set_verbosity_error()
        files_bytes = sum(p.stat().st_size for p in Path(path).glob("*.safetensors"))
        if base == "tf-plain":
            return (lambda: AutoModelForCausalLM.from_pretrained(path)), (lambda _: files_bytes), note
        import cacheless

        if not hasattr(cacheless, "patch_safetensors"):
            raise NotAvailable(f"not available: cacheless {cacheless.__version__} has no patch_safetensors")
        calls = {}

        def patched():
            with cacheless.patch_safetensors() as p:
                model = AutoModelForCausalLM.from_pretrained(path)
            calls.update(p.calls)
            return model

        def nbytes(_) -> int:
            if not calls:
                raise RuntimeError("from_pretrained made no call through cacheless.patch_safetensors(): nothing was read by cacheless")
            return files_bytes

        return patched, nbytes, note
    raise SystemExit(f"unknown method {method}")


def fst_call(files: list):
    """fastsafetensors on the CPU without GDS, as its README loads a checkpoint: fastsafe_open over
    the files and get_tensor of every key. Its 0.5 tensors own a reference to their buffer
    (they stay valid after the `with` block), so nothing is copied out."""
    from fastsafetensors import fastsafe_open

    def load() -> dict:
        with fastsafe_open(filenames=files, device="cpu", nogds=True, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}

    return load, torch_bytes


def runai_call(files: list):
    """runai-model-streamer's SafetensorsStreamer to the CPU: stream_files then get_tensors. With
    its default owned=True each tensor belongs to the caller (no buffer reused), so nothing is
    cloned."""
    from runai_model_streamer import SafetensorsStreamer

    def load() -> dict:
        with SafetensorsStreamer() as s:
            s.stream_files(files, device="cpu")
            return dict(s.get_tensors())

    return load, torch_bytes


def child(method: str, path: str) -> None:
    """Runs one method once and prints {"wall", "cpu", "bytes", "rss0_kib", "maxrss_kib", "note"}.
    A method ending in "@before" is the same method with the earlier build given by --before."""
    if method.endswith("@before"):
        sys.path.insert(0, os.environ["CACHELESS_BEFORE_PY"])
        method = method.removesuffix("@before")
    try:
        call, nbytes, note = prepare(method, path)
    except (ImportError, NotAvailable) as e:
        print(f"{type(e).__name__}: {e}" if isinstance(e, ImportError) else str(e), file=sys.stderr)
        sys.exit(NOT_AVAILABLE)
    rss0 = rss_kib()
    t0, c0 = time.perf_counter(), cpu_s()
    got = call()
    t1 = time.perf_counter()
    if got is not None:
        touch(got)
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    maxrss = rss_kib("VmHWM")
    print(json.dumps({"wall": wall, "cpu": cpu, "touch": wall - (t1 - t0), "bytes": nbytes(got), "rss0_kib": rss0, "maxrss_kib": maxrss, "note": note}))


def touch(got) -> None:
    """Reads one byte of every page of every tensor (of a model: of its state_dict), inside the
    timed region. A loader may hand out tensors backed by a file mapping that is read only when
    first touched (safetensors' mmap load of a resident file returns in milliseconds); touching
    makes every method pay for having the bytes in memory, as a user of the weights does. For a
    loader that has already copied the bytes it costs a few milliseconds per GiB."""
    if hasattr(got, "state_dict"):
        got = got.state_dict()
    s = 0
    for t in got.values():
        if hasattr(t, "untyped_storage"):  # torch
            import torch

            if t.numel():
                s += int(t.detach().contiguous().reshape(-1).view(torch.uint8)[::4096].sum())
        elif t.size:  # numpy
            s += int(t.reshape(-1).view("uint8")[::4096].sum())


# ---------------------------------------------------------------- test files


def make_numpy_tensors(layout: list) -> dict:
    """The tensors of the layout, with a cheap non-zero pattern (content does not matter)."""
    import numpy as np

    out = {}
    for name, dtype, n in layout:
        a = np.empty(n, dtype=dtype)
        a.view(np.uint8)[:] = 7
        out[name] = a
    return out


def numpy_layout(size: int) -> list:
    """64 equal float32 tensors filling `size`, and 50 small float16 ones."""
    big = size // 64 // 4
    return [(f"layers.{i}.weight", "float32", big) for i in range(64)] + [(f"norms.{i}", "float16", 4096) for i in range(50)]


def torch_layout(size: int, big: int, small: int, prefix: str = "") -> list:
    """`big` tensors of equal bytes filling `size` (float32 and bfloat16 in turn, 2-D, rows of
    1024), then `small` 4096-element ones (float32 and bfloat16 in turn)."""
    each = size // big
    out = []
    for i in range(big):
        dt, es = ("float32", 4) if i % 2 == 0 else ("bfloat16", 2)
        out.append((f"{prefix}layers.{i // 2}.{'w' if i % 2 == 0 else 'v'}", dt, [max(1, each // es // 1024), 1024]))
    for i in range(small):
        out.append((f"{prefix}norms.{i}", "float32" if i % 2 == 0 else "bfloat16", [4096]))
    return out


def make(kind: str, path: str, size: int, extra: str) -> None:
    """Builds a torch test file (kind "pt"), a sharded torch checkpoint ("pt-shards", shards of
    `size`) or a transformers model directory ("llama", about `size` bytes of bf16 weights,
    `extra` is the max_shard_size), in this (child) process."""
    import torch

    from cacheless.safetensors.torch import save_file

    def tensors(layout: list) -> dict:
        return {n: torch.full(shape, 0.5, dtype=getattr(torch, dt)) for n, dt, shape in layout}

    if kind == "pt":
        save_file(tensors(torch_layout(size, 128, 100)), path)
    elif kind == "pt-shards":
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        weight_map, total = {}, 0
        for s in range(8):
            name = f"model-{s + 1:05d}-of-00008.safetensors"
            t = tensors(torch_layout(size, 16, 4, prefix=f"shard{s}."))
            save_file(t, d / name)
            weight_map.update({k: name for k in t})
            total += torch_bytes(t)
            del t
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    elif kind == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        # Sizes like the common small Llamas; layers chosen to reach `size` bytes of bf16.
        h, inter, heads, kv = (2048, 5632, 32, 4) if size >= GiB else (512, 1408, 8, 2)
        vocab = 32000
        per_layer = 2 * h * h + 2 * h * (h * kv // heads) + 3 * h * inter + 2 * h
        layers = max(1, round((size / 2 - 2 * vocab * h) / per_layer))
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=False, dtype="bfloat16")
        torch.set_default_dtype(torch.bfloat16)
        torch.manual_seed(0)
        with torch.no_grad():
            model = LlamaForCausalLM(cfg)
        model.save_pretrained(path, max_shard_size=extra)
    else:
        raise SystemExit(f"unknown kind {kind}")


# ---------------------------------------------------------------- parent side


def size_arg(s: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("ib")
    return int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)


def cached_kib() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("Cached:"):
            return int(line.split()[1])
    return 0


def file_pages(paths: list) -> tuple:
    import cacheless

    cached = total = 0
    for p in paths:
        r = cacheless.residency(p)
        cached += r["cached_pages"]
        total += r["total_pages"]
    return cached, total


def evict(paths: list) -> float:
    """Evicts the files and returns the fraction of their pages still cached (checked, with one
    more try when some remain)."""
    import cacheless

    for _ in range(3):
        for p in paths:
            cacheless.evict(p)
        cached, total = file_pages(paths)
        if cached <= total // 1000:
            break
        time.sleep(0.2)
    return cached / max(total, 1)


def warm(paths: list) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


class Unavailable(Exception):
    def __init__(self, why: str, failed: bool) -> None:
        super().__init__(why)
        self.why, self.failed = why, failed


def run_child(method: str, path: str, env: dict) -> dict:
    e = dict(os.environ)
    e.update(env)
    done = subprocess.run([sys.executable, __file__, "--child", method, path], capture_output=True, text=True, env=e)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit status {done.returncode}"
        if done.returncode != NOT_AVAILABLE:
            print(f"{method} failed:\n{done.stderr}", file=sys.stderr)
        raise Unavailable(why, done.returncode != NOT_AVAILABLE)
    return json.loads(done.stdout.strip().splitlines()[-1])


FIO_CONFIGS = [("1M", 8), ("1M", 32), ("4M", 8), ("4M", 32)]


def run_fio(paths: list, bs: str, depth: int) -> dict:
    """One direct sequential read of the files, one after the other, by one fio job."""
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = ["fio", "--name=read", f"--filename={':'.join(paths)}", "--file_service_type=sequential", "--rw=read", f"--bs={bs}", f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1", "--readonly", "--numjobs=1", "--output-format=json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        cmd[cmd.index("--ioengine=io_uring")] = "--ioengine=libaio"
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    job = json.loads(done.stdout)["jobs"][0]["read"]
    return {"wall": job["runtime"] / 1000 if job.get("runtime") else time.perf_counter() - t0, "cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), "bytes": job["io_bytes"]}


def fio_best(paths: list, notes: list, what: str) -> tuple | None:
    """The best of FIO_CONFIGS on these files (each run cold), or None without fio."""
    if shutil.which("fio") is None:
        return None
    best = None
    for bs, depth in FIO_CONFIGS:
        evict(paths)
        r = run_fio(paths, bs, depth)
        print(f"fio sweep ({what}) {bs} x {depth}: {r['bytes'] / GiB / r['wall']:.2f} GiB/s", file=sys.stderr)
        if best is None or r["wall"] < best[2]:
            best = (bs, depth, r["wall"])
    notes.append(f"{what}: fio's best direct read was --bs={best[0]} --iodepth={best[1]} (io_uring), best of {len(FIO_CONFIGS)} configurations")
    return best[:2]


def lib_sh(command: str, *args: str, capture: bool = False) -> str:
    """Runs a helper of bench/lib.sh, where every benchmark script takes its trial order and its
    wait before a cold trial from."""
    done = subprocess.run(["bash", "-c", f'source "$0"; {command} "$@"', str(ROOT / "bench" / "lib.sh"), *args], stdout=subprocess.PIPE if capture else None, text=True, check=True)
    return done.stdout or ""


def rotated(methods: list, run: int) -> list:
    """The methods in the order of round `run` (from 0) of bench/lib.sh's balanced Latin square."""
    if len(methods) < 2:
        return list(methods)
    return lib_sh("rotate", str(run + 1), *methods, capture=True).split()


def settle() -> None:
    """Waits for writeback and kswapd to go quiet (bench/lib.sh), so a cold trial does not pay
    for the one before it."""
    lib_sh("settle")


def med(rows: list, method: str, key: str) -> float:
    return statistics.median(r[key] for r in rows if r["method"] == method and r.get(key) is not None)


def table(title: str, rows: list, methods: list, ref: str | None, errors: dict, note: str = "") -> str:
    mine_all = [m for m in methods if any(r["method"] == m for r in rows) or m in errors]
    if not mine_all:
        return ""
    out = [f"\n### {title}\n"]
    if note:
        out.append(note + "\n")
    have_ref = ref is not None and any(r["method"] == ref for r in rows)
    head = "| method | wall s (median, min-max) | GiB/s | CPU s/GiB | file left cached | Cached growth | peak RSS (during load) |"
    if have_ref:
        head += f" time vs {'fio' if ref == 'fio' else LABELS.get(ref, ref)} |"
    ncols = head.count("|") - 1
    out.append(head)
    out.append("|---|" + "---:|" * (ncols - 1))
    for m in mine_all:
        label = LABELS.get(m, m)
        if m in errors:
            out.append(f"| {label} | cannot run here: {errors[m]} |" + " - |" * (ncols - 2))
            continue
        mine = [r for r in rows if r["method"] == m]
        w = med(rows, m, "wall_s")
        gib = med(rows, m, "bytes") / GiB
        rss = [r for r in mine if r.get("maxrss_kib") is not None]
        rss_cell = f"{med(rows, m, 'maxrss_kib') / 1024:.0f} MiB (+{statistics.median(r['maxrss_kib'] - r['rss0_kib'] for r in rss) / 1024:.0f})" if rss else "-"
        line = (
            f"| {label} | {w:.3f} ({min(r['wall_s'] for r in mine):.3f}-{max(r['wall_s'] for r in mine):.3f}) | {gib / w:.2f} | "
            f"{med(rows, m, 'cpu_s') / gib:.3f} | {100 * med(rows, m, 'cached_frac'):.1f} % | {med(rows, m, 'cached_growth_kib') / 1024:.0f} MiB | {rss_cell} |"
        )
        if have_ref:
            line += f" {w / med(rows, ref, 'wall_s'):.2f}x |"
        out.append(line)
    return "\n".join(out)


def why(err: str) -> str:
    """The error, with what it means where that is known."""
    if "No module named" in err:
        return f"{err} (not installed in {sys.executable}; bench/safetensors.sh installs the peers into target/bench-venv)"
    return err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--make", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--size", default="4G", help="size of the single-file checkpoints, numpy and torch (default 4G)")
    ap.add_argument("--shard-size", default="1G", help="size of each of the 8 shards of the pt-sharded section (default 1G)")
    ap.add_argument("--model-size", default="4G", help="bf16 weight bytes of the transformers section's Llama (default 4G)")
    ap.add_argument("--model-shard-size", default="1GB", help="save_pretrained's max_shard_size for that model (default 1GB)")
    ap.add_argument("--runs", type=int, default=5, help="interleaved runs of each method (default 5)")
    ap.add_argument("--dir", default="/var/tmp/cacheless-bench-safetensors", help="scratch folder on the filesystem under test")
    ap.add_argument("--out", help="where raw.csv and table.md go (default bench/runs/DATE-HOST/safetensors)")
    ap.add_argument("--only", default="", help="comma-separated sections to run (default all): " + ",".join(NUMPY_SECTIONS + TORCH_SECTIONS) + "; 'numpy' and 'torch' name the groups")
    ap.add_argument("--skip", default="", help="comma-separated sections (or groups) to skip")
    ap.add_argument(
        "--before",
        default="",
        help="a folder holding an earlier build of the cacheless package (its wheel unpacked): every cacheless method is also run with it, interleaved, as METHOD@before",
    )
    ap.add_argument("--methods", default="", help="comma-separated method names or shell patterns to keep (default all; fio is kept), e.g. '*cacheless*,*st-mmap*'")
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    if a.make:
        kind, path, size, extra = a.make
        return make(kind, path, int(size), extra)
    import cacheless

    def expand(spec: str) -> set:
        got = set()
        for s in filter(None, spec.split(",")):
            if s in GROUPS:
                got |= set(GROUPS[s])
            elif s in SECTION_METHODS:
                got.add(s)
            else:
                ap.error(f"unknown section {s!r}: choose from {', '.join(list(SECTION_METHODS) + list(GROUPS))}")
        return got

    sections = [s for s in SECTION_METHODS if (not a.only or s in expand(a.only)) and s not in expand(a.skip)]
    patterns = list(filter(None, a.methods.split(",")))
    keep = lambda m: m == "fio" or not patterns or any(fnmatch.fnmatchcase(m, p) for p in patterns)

    size = size_arg(a.size)
    scratch = Path(a.dir)
    scratch.mkdir(parents=True, exist_ok=True)
    out = Path(a.out) if a.out else ROOT / "bench" / "runs" / f"{datetime.date.today()}-{socket.gethostname()}" / "safetensors"
    out.mkdir(parents=True, exist_ok=True)
    lay = numpy_layout(size)
    env = {"BENCH_LAYOUT": json.dumps(lay)}
    if a.before:
        # Each cacheless method with the earlier build beside it, in the same rotation.
        env["CACHELESS_BEFORE_PY"] = os.path.abspath(a.before)
        for name, ms in SECTION_METHODS.items():
            SECTION_METHODS[name] = [v for m in ms for v in ([m, m + "@before"] if "cacheless" in m else [m])]
        for m in [m for ms in SECTION_METHODS.values() for m in ms if m.endswith("@before")]:
            LABELS[m] = LABELS.get(m.removesuffix("@before"), m.removesuffix("@before")) + " (build before)"
    rows: list = []
    notes: list = []
    errors: dict = {}  # (section, method) -> why it cannot run here
    apis: dict = {}  # method -> note from the child (e.g. which API it fell back to)

    def build(kind: str, path: Path, nbytes: int, extra: str = "") -> None:
        if kind == "llama" and (path / "config.json").exists() or kind == "pt-shards" and (path / "model.safetensors.index.json").exists() or kind == "pt" and path.exists():
            return
        print(f"making {path} ({kind}) ...", file=sys.stderr)
        subprocess.run([sys.executable, __file__, "--make", kind, str(path), str(nbytes), extra], check=True)

    np_path = scratch / f"model-{a.size}.safetensors"
    pt_path = scratch / f"model-pt-{a.size}.safetensors"
    if any(s in sections for s in ("cold", "warm", "save")) and not np_path.exists():
        from cacheless.safetensors import save_file

        print(f"making {np_path} ...", file=sys.stderr)
        save_file(make_numpy_tensors(lay), np_path)

    def record(section: str, method: str, run: int, pos: int, r: dict, files: list, before_kib: int, resident_before: float) -> None:
        cached, total = file_pages(files)
        row = {
            "section": section, "method": method, "run": run, "position": pos, "wall_s": r["wall"], "cpu_s": r["cpu"], "bytes": r["bytes"],
            "touch_s": r.get("touch"), "resident_before": resident_before, "cached_frac": cached / max(total, 1), "cached_growth_kib": cached_kib() - before_kib,
            "rss0_kib": r.get("rss0_kib"), "maxrss_kib": r.get("maxrss_kib"),
        }
        rows.append(row)
        if r.get("note"):
            apis[method] = r["note"]
        rss = f"  peak RSS {r['maxrss_kib'] / 1024:.0f} MiB" if r.get("maxrss_kib") else ""
        print(f"{section:12} run {run} {method:26} {r['wall']:.3f} s  {r['bytes'] / GiB / r['wall']:.2f} GiB/s  cpu {r['cpu']:.2f} s  cached {100 * row['cached_frac']:.1f} %{rss}", file=sys.stderr)

    def section(name: str, target: str, files: list, cold: bool, fio_cfg: tuple | None = None, after=None, written: list | None = None) -> None:
        """Runs the section's methods, a.runs rotated rounds; a method that cannot run is tried once."""
        methods = [m for m in SECTION_METHODS[name] if keep(m) and (m != "fio" or fio_cfg)]
        for run in range(a.runs):
            for pos, m in enumerate(rotated(methods, run)):
                if (name, m) in errors:
                    continue
                if cold:
                    resident = evict(files)
                    settle()
                else:
                    warm(files)
                    cached, total = file_pages(files)
                    resident = cached / max(total, 1)
                before = cached_kib()
                try:
                    r = run_fio(files, *fio_cfg) if m == "fio" else run_child(m, target, env)
                except Unavailable as e:
                    errors[(name, m)] = why(e.why)
                    print(f"{name:12} {m}: cannot run here: {e.why}", file=sys.stderr)
                    continue
                record(name, m, run, pos, r, written if written is not None else files, before, resident)
                if after:
                    after()

    if "cold" in sections:
        section("cold", str(np_path), [str(np_path)], True, fio_best([str(np_path)], notes, "numpy file"))
    if "warm" in sections:
        section("warm", str(np_path), [str(np_path)], False)
    if "save" in sections:
        target = str(np_path) + ".out"
        section("save", str(np_path), [], True, after=lambda: os.unlink(target), written=[target])
    if "sharded" in sections:
        sdir = scratch / f"sharded-{a.size}"
        index = sdir / "model.safetensors.index.json"
        if not index.exists():
            from cacheless.safetensors import save_file

            sdir.mkdir(exist_ok=True)
            weight_map = {}
            per = size // 8 // 4
            for s in range(8):
                name = f"model-{s + 1:05d}-of-00008.safetensors"
                t = make_numpy_tensors([(f"layers.{s}.{j}", "float32", per // 4) for j in range(4)])
                save_file(t, sdir / name)
                weight_map.update({k: name for k in t})
            index.write_text(json.dumps({"metadata": {"total_size": size}, "weight_map": weight_map}))
        section("sharded", str(index), shard_files(str(index)), True)

    if "pt" in sections or "pt-warm" in sections:
        build("pt", pt_path, size)
    if "pt" in sections:
        section("pt", str(pt_path), [str(pt_path)], True, fio_best([str(pt_path)], notes, "torch file"))
    if "pt-warm" in sections:
        section("pt-warm", str(pt_path), [str(pt_path)], False)
    if "pt-sharded" in sections:
        pdir = scratch / f"sharded-pt-8x{a.shard_size}"
        build("pt-shards", pdir, size_arg(a.shard_size))
        index = str(pdir / "model.safetensors.index.json")
        section("pt-sharded", index, shard_files(index), True, fio_best(shard_files(index), notes, "8 torch shards"))
    if "transformers" in sections:
        mdir = scratch / f"llama-{a.model_size}-{a.model_shard_size}"
        build("llama", mdir, size_arg(a.model_size), a.model_shard_size)
        files = [str(p) for p in sorted(mdir.glob("*.safetensors"))]
        cfg = json.loads((mdir / "config.json").read_text())
        notes.append(
            f"transformers model: Llama, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}, "
            f"bf16, {len(files)} safetensors file(s), {sum(os.path.getsize(f) for f in files) / GiB:.2f} GiB, saved with max_shard_size={a.model_shard_size}"
        )
        section("transformers", str(mdir), files, True, fio_best(files, notes, "transformers shards"))

    fields = ["section", "method", "run", "position", "wall_s", "cpu_s", "touch_s", "bytes", "resident_before", "cached_frac", "cached_growth_kib", "rss0_kib", "maxrss_kib"]
    with open(out / "raw.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    (out / "errors.txt").write_text("".join(f"{s}\t{m}\t{e}\n" for (s, m), e in errors.items()))
    info_path = pt_path if pt_path.exists() else np_path
    if info_path.exists():
        evict([str(info_path)])  # what a cold load decides, not a warm one
    sysinfo = cacheless.info(str(info_path)) if info_path.exists() else None
    versions = []
    for dist in ("numpy", "safetensors", "torch", "transformers", "fastsafetensors", "runai-model-streamer"):
        try:
            import importlib.metadata as md

            versions.append(f"{dist} {md.version(dist)}")
        except Exception:
            versions.append(f"{dist} not installed")
    cmd = "bench/safetensors.sh " + " ".join(sys.argv[1:])
    head = [
        f"## safetensors loads: {a.runs} runs per method, rotated order; medians",
        "",
        f"command: `{cmd}`; kernel {platform.release()}, "
        + (f"{sysinfo['fs']['fs_type']}, " if sysinfo else "")
        + f"{os.cpu_count()} CPUs, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB:.0f} GiB; cacheless {cacheless.__version__}; {', '.join(versions)}"
        + (f"; cacheless reads a cold file with {sysinfo['read']['mode']} ({sysinfo['read']['reason']})" if sysinfo else ""),
        "",
        "Wall and CPU cover the call and a read of one byte of every page of what it returned (so a lazily mapped tensor is paid for; "
        "`touch_s` in raw.csv). CPU is user + system of the loading process (all its threads); peak RSS is the process's VmHWM, with in brackets its growth from the RSS "
        "when the timed call started (imports are before it); file pages mapped by an mmap load count in RSS.",
    ]
    notes += [f"{m}: {n}" for m, n in apis.items()]
    if notes:
        head += [""] + [f"- {n}" for n in notes]
    by = lambda s: [r for r in rows if r["section"] == s]
    err = lambda s: {m: e for (sec, m), e in errors.items() if sec == s}
    fio_ref = lambda s: "fio" if any(r["method"] == "fio" for r in by(s)) else None
    parts = ["\n".join(head)]
    parts.append(table(f"Cold load, numpy arrays ({size / GiB:.2f} GiB, {len(lay)} tensors)", by("cold"), SECTION_METHODS["cold"], fio_ref("cold"), err("cold")))
    parts.append(table("Warm load, numpy arrays (file resident)", by("warm"), SECTION_METHODS["warm"], "warm-st-mmap", err("warm")))
    parts.append(table("Save (durable: safetensors followed by fsync)", by("save"), SECTION_METHODS["save"], "save-st", err("save")))
    parts.append(table("Sharded checkpoint, numpy arrays, 8 shards, cold", by("sharded"), SECTION_METHODS["sharded"], "sharded-st", err("sharded")))
    parts.append(table(f"(a) Cold load, torch CPU tensors: one {size / GiB:.2f} GiB file, 228 tensors, float32 + bfloat16", by("pt"), SECTION_METHODS["pt"], fio_ref("pt"), err("pt")))
    parts.append(table("Warm load, torch CPU tensors (file resident, a re-load)", by("pt-warm"), SECTION_METHODS["pt-warm"], "warm-pt-st-mmap", err("pt-warm")))
    parts.append(table(f"(b) Cold load, torch CPU tensors: 8 shards of {a.shard_size} + index", by("pt-sharded"), SECTION_METHODS["pt-sharded"], fio_ref("pt-sharded"), err("pt-sharded")))
    parts.append(table("(c) Cold `AutoModelForCausalLM.from_pretrained(dir)`", by("transformers"), SECTION_METHODS["transformers"], fio_ref("transformers"), err("transformers")))
    md_text = "\n".join(p for p in parts if p) + "\n"
    (out / "table.md").write_text(md_text)
    print(md_text)


if __name__ == "__main__":
    main()
