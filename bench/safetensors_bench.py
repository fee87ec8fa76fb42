#!/usr/bin/env python3
"""bench/safetensors_bench.py (run it through bench/safetensors.sh): cacheless.safetensors against the safetensors package, fastsafetensors
(CPU mode, when it installs without a GPU stack) and fio's best direct read of the same file.

What it measures, each in a fresh process so that memory and caches start clean:
  cold loads   the file evicted from the page cache before every run (fadvise DONTNEED: no root
               needed, and nothing else on the machine loses its cache): cacheless load_file,
               safetensors.numpy.load_file (mmap), safetensors with backend="pread",
               fastsafetensors, and fio's best direct sequential read (the device limit)
  warm loads   the file fully resident: cacheless and safetensors
  save         cacheless save_file vs safetensors.numpy.save_file + fsync, same tensors
  sharded      8 shards + model.safetensors.index.json: cacheless load_model vs
               safetensors.numpy.load_file of each shard in turn
For each: wall seconds, GiB/s, CPU seconds per GiB (user + system of the process, all its
threads), the file's own pages left in the page cache afterwards (cachestat), and the growth of
Cached in /proc/meminfo. Methods run in rotated order (bench/lib.sh's balanced Latin square:
every method in every position, and right after every other method, equally often), RUNS
rounds, the position recorded in raw.csv; cold trials start once writeback and kswapd are quiet.
Tables show medians.

    bench/safetensors.sh                      # 4 GiB, 5 runs, scratch in /var/tmp
    bench/safetensors.sh --size 256M --runs 2 # a quick check that everything runs

Needs: the cacheless package (scripts/test builds it into target/python-venv; or
`pip install ./bindings/python`), numpy, safetensors; fio (apt install fio) for the device
limit. Raw rows go to OUT/raw.csv, the tables to OUT/table.md (OUT: --out, default
bench/runs/DATE-HOST/safetensors).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
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
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- child side: one timed call


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(method: str, path: str) -> None:
    """Runs one method once and prints {"wall", "cpu", "bytes"} as JSON (imports not timed)."""
    import safetensors.numpy as stn

    import cacheless.safetensors as cst

    if method == "fastsafetensors":
        from fastsafetensors import fastsafe_open
    tensors = None
    if method.startswith("save"):
        tensors = make_tensors(json.loads(os.environ["BENCH_LAYOUT"]))
    out = path + ".out"
    t0, c0 = time.perf_counter(), cpu_s()
    if method in ("cacheless", "warm-cacheless"):
        got = cst.load_file(path)
    elif method in ("st-mmap", "warm-st-mmap"):
        got = stn.load_file(path)
    elif method in ("st-pread", "warm-st-pread"):
        got = stn.load_file(path, backend="pread")
    elif method == "fastsafetensors":
        with fastsafe_open(filenames=[path], device="cpu", nogds=True, framework="pt") as f:
            got = {k: f.get_tensor(k) for k in f.keys()}
            n = sum(t.numel() * t.element_size() for t in got.values())
    elif method == "sharded-cacheless":
        got = cst.load_model(path)
    elif method == "sharded-st":
        index = json.loads(Path(path).read_text())
        got = {}
        for shard in sorted(set(index["weight_map"].values())):
            got.update(stn.load_file(str(Path(path).parent / shard)))
    elif method == "save-cacheless":
        cst.save_file(tensors, out)
    elif method == "save-st":
        stn.save_file(tensors, out)
        fd = os.open(out, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    else:
        raise SystemExit(f"unknown method {method}")
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    if method == "fastsafetensors":
        nbytes = n
    elif method.startswith("save"):
        nbytes = os.path.getsize(out)
    else:
        nbytes = sum(a.nbytes for a in got.values())
    print(json.dumps({"wall": wall, "cpu": cpu, "bytes": nbytes}))


def make_tensors(layout: list) -> dict:
    """The tensors of the layout, with a cheap non-zero pattern (content does not matter)."""
    import numpy as np

    out = {}
    for name, dtype, n in layout:
        a = np.empty(n, dtype=dtype)
        a.view(np.uint8)[:] = 7
        out[name] = a
    return out


# ---------------------------------------------------------------- parent side


def size_arg(s: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("ib")
    return int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)


def layout(size: int) -> list:
    """64 equal float32 tensors filling `size`, and 50 small float16 ones (as the issue asks)."""
    big = size // 64 // 4
    return [(f"layers.{i}.weight", "float32", big) for i in range(64)] + [(f"norms.{i}", "float16", 4096) for i in range(50)]


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


def evict(paths: list) -> None:
    import cacheless

    for p in paths:
        cacheless.evict(p)


def warm(paths: list) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def run_child(method: str, path: str, env: dict) -> dict:
    e = dict(os.environ)
    e.update(env)
    done = subprocess.run([sys.executable, __file__, "--child", method, path], capture_output=True, text=True, env=e)
    if done.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


FIO_CONFIGS = [("1M", 8), ("1M", 32), ("4M", 8), ("4M", 32)]


def run_fio(path: str, bs: str, depth: int) -> dict:
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = ["fio", "--name=read", f"--filename={path}", "--rw=read", f"--bs={bs}", f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1", "--readonly", "--numjobs=1", "--output-format=json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        cmd[cmd.index("--ioengine=io_uring")] = "--ioengine=libaio"
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    job = json.loads(done.stdout)["jobs"][0]["read"]
    return {"wall": job["runtime"] / 1000 if job.get("runtime") else time.perf_counter() - t0, "cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), "bytes": job["io_bytes"]}


def fastsafetensors_status() -> str | None:
    """None when fastsafetensors can run here (installed by pip if missing); else why not,
    for the output."""
    if importlib.util.find_spec("fastsafetensors") is None:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "fastsafetensors"], capture_output=True, text=True)
        if done.returncode != 0:
            return f"pip install fastsafetensors failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    if importlib.util.find_spec("torch") is None:
        return "fastsafetensors installs, but hands out only torch (or paddle) tensors and torch is not installed here (its PyPI wheels bring the CUDA stack); install a CPU build of torch to include it"
    return None


def lib_sh(command: str, *args: str, capture: bool = False) -> str:
    """Runs a helper of bench/lib.sh, where every benchmark script takes its trial order and its
    wait before a cold trial from."""
    done = subprocess.run(["bash", "-c", f'source "$0"; {command} "$@"', str(ROOT / "bench" / "lib.sh"), *args], stdout=subprocess.PIPE if capture else None, text=True, check=True)
    return done.stdout or ""


def rotated(methods: list, run: int) -> list:
    """The methods in the order of round `run` (from 0) of bench/lib.sh's balanced Latin square."""
    return lib_sh("rotate", str(run + 1), *methods, capture=True).split()


def settle() -> None:
    """Waits for writeback and kswapd to go quiet (bench/lib.sh), so a cold trial does not pay
    for the one before it."""
    lib_sh("settle")


def med(rows: list, method: str, key: str) -> float:
    return statistics.median(r[key] for r in rows if r["method"] == method)


def table(title: str, rows: list, methods: list, ref: str | None, extra_note: str = "") -> str:
    out = [f"\n### {title}\n"]
    if extra_note:
        out.append(extra_note + "\n")
    head = "| method | wall s (median, min-max) | GiB/s | CPU s/GiB | file pages cached after | Cached growth |"
    if ref:
        head += f" time vs {ref} |"
    out.append(head)
    out.append("|" + "---|" * (head.count("|") - 1))
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        if not mine:
            continue
        w = med(rows, m, "wall_s")
        gib = med(rows, m, "bytes") / GiB
        line = (
            f"| {m} | {w:.3f} ({min(r['wall_s'] for r in mine):.3f}-{max(r['wall_s'] for r in mine):.3f}) | {gib / w:.2f} | "
            f"{med(rows, m, 'cpu_s') / gib:.3f} | {100 * med(rows, m, 'cached_frac'):.1f} % | {med(rows, m, 'cached_growth_kib') / 1024:.0f} MiB |"
        )
        if ref:
            line += f" {w / med(rows, ref, 'wall_s'):.2f}x |" if any(r["method"] == ref for r in rows) else " - |"
        out.append(line)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--size", default="4G", help="checkpoint size (default 4G)")
    ap.add_argument("--runs", type=int, default=5, help="interleaved runs of each method (default 5)")
    ap.add_argument("--dir", default="/var/tmp/cacheless-bench-safetensors", help="scratch folder on the filesystem under test")
    ap.add_argument("--out", help="where raw.csv and table.md go (default bench/runs/DATE-HOST/safetensors)")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: cold,warm,save,sharded")
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    import cacheless

    size = size_arg(a.size)
    skip = set(filter(None, a.skip.split(",")))
    scratch = Path(a.dir)
    scratch.mkdir(parents=True, exist_ok=True)
    out = Path(a.out) if a.out else ROOT / "bench" / "runs" / f"{datetime.date.today()}-{socket.gethostname()}" / "safetensors"
    out.mkdir(parents=True, exist_ok=True)
    lay = layout(size)
    env = {"BENCH_LAYOUT": json.dumps(lay)}
    path = scratch / f"model-{a.size}.safetensors"
    if not path.exists():
        from cacheless.safetensors import save_file

        print(f"making {path} ...", file=sys.stderr)
        save_file(make_tensors(lay), path)
    fsize = path.stat().st_size
    rows: list = []
    notes: list = []

    def record(section: str, method: str, run: int, pos: int, r: dict, files: list, before_kib: int) -> None:
        cached, total = file_pages(files)
        row = {"section": section, "method": method, "run": run, "position": pos, "wall_s": r["wall"], "cpu_s": r["cpu"], "bytes": r["bytes"], "cached_frac": cached / max(total, 1), "cached_growth_kib": cached_kib() - before_kib}
        rows.append(row)
        print(f"{section:8} run {run} {method:18} {r['wall']:.3f} s  {r['bytes'] / GiB / r['wall']:.2f} GiB/s  cpu {r['cpu']:.2f} s  cached {100 * row['cached_frac']:.1f} %", file=sys.stderr)

    have_fio = shutil.which("fio") is not None
    if not have_fio:
        notes.append("fio not installed (apt install fio): no device-limit figure")
    fst = fastsafetensors_status()
    if fst:
        notes.append(f"fastsafetensors skipped: {fst}")

    if "cold" not in skip:
        fio_best = None
        if have_fio:
            best = None
            for bs, depth in FIO_CONFIGS:
                r = run_fio(str(path), bs, depth)
                print(f"fio sweep {bs} x {depth}: {r['bytes'] / GiB / r['wall']:.2f} GiB/s", file=sys.stderr)
                if best is None or r["wall"] < best[2]:
                    best = (bs, depth, r["wall"])
            fio_best = best[:2]
            notes.append(f"fio's best direct read: --bs={fio_best[0]} --iodepth={fio_best[1]} (io_uring), best of {len(FIO_CONFIGS)} configurations")
        methods = ["cacheless", "st-mmap", "st-pread"] + ([] if fst else ["fastsafetensors"]) + (["fio"] if fio_best else [])
        for run in range(a.runs):
            for pos, m in enumerate(rotated(methods, run)):
                evict([str(path)])
                settle()
                before = cached_kib()
                r = run_fio(str(path), *fio_best) if m == "fio" else run_child(m, str(path), env)
                record("cold", m, run, pos, r, [str(path)], before)

    if "warm" not in skip:
        methods = ["warm-cacheless", "warm-st-mmap", "warm-st-pread"]
        for run in range(a.runs):
            for pos, m in enumerate(rotated(methods, run)):
                warm([str(path)])
                before = cached_kib()
                record("warm", m, run, pos, run_child(m, str(path), env), [str(path)], before)

    if "save" not in skip:
        methods = ["save-cacheless", "save-st"]
        for run in range(a.runs):
            for pos, m in enumerate(rotated(methods, run)):
                target = str(path) + ".out"
                settle()
                before = cached_kib()
                r = run_child(m, str(path), env)
                record("save", m, run, pos, r, [target], before)
                os.unlink(target)

    if "sharded" not in skip:
        sdir = scratch / f"sharded-{a.size}"
        index = sdir / "model.safetensors.index.json"
        if not index.exists():
            from cacheless.safetensors import save_file

            sdir.mkdir(exist_ok=True)
            weight_map = {}
            per = size // 8 // 4
            for s in range(8):
                name = f"model-{s + 1:05d}-of-00008.safetensors"
                t = make_tensors([(f"layers.{s}.{j}", "float32", per // 4) for j in range(4)])
                save_file(t, sdir / name)
                weight_map.update({k: name for k in t})
            index.write_text(json.dumps({"metadata": {"total_size": size}, "weight_map": weight_map}))
        shards = [str(p) for p in sorted(sdir.glob("*.safetensors"))]
        methods = ["sharded-cacheless", "sharded-st"]
        for run in range(a.runs):
            for pos, m in enumerate(rotated(methods, run)):
                evict(shards)
                settle()
                before = cached_kib()
                record("sharded", m, run, pos, run_child(m, str(index), env), shards, before)

    with open(out / "raw.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["section"])
        w.writeheader()
        w.writerows(rows)
    evict([str(path)])
    sysinfo = cacheless.info(str(path))
    head = [
        f"## safetensors: {fsize / GiB:.2f} GiB file ({len(lay)} tensors), {a.runs} runs per method, rotated order; medians",
        "",
        f"command: `bench/safetensors.sh --size {a.size} --runs {a.runs} --dir {a.dir}`; "
        f"kernel {platform.release()}, {sysinfo['fs']['fs_type']}, {os.cpu_count()} CPUs; cacheless {cacheless.__version__}; "
        f"cacheless reads the cold file with {sysinfo['read']['mode']} ({sysinfo['read']['reason']}); CPU is user + system of the loading process",
    ]
    if notes:
        head += [""] + [f"- {n}" for n in notes]
    by = lambda s: [r for r in rows if r["section"] == s]
    parts = ["\n".join(head)]
    parts.append(table("Cold load", by("cold"), ["cacheless", "st-mmap", "st-pread", "fastsafetensors", "fio"], "fio" if any(r["method"] == "fio" for r in rows) else None))
    parts.append(table("Warm load (file resident)", by("warm"), ["warm-cacheless", "warm-st-mmap", "warm-st-pread"], "warm-st-mmap"))
    parts.append(table("Save (durable: safetensors followed by fsync)", by("save"), ["save-cacheless", "save-st"], "save-st"))
    parts.append(table("Sharded checkpoint, 8 shards, cold", by("sharded"), ["sharded-cacheless", "sharded-st"], "sharded-st"))
    md = "\n".join(parts) + "\n"
    (out / "table.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
