"""cacheless.checkpoint against torch.distributed.checkpoint's own storage (bench/checkpoint.sh).

A state dict of --size bytes (default 4 GiB) sharded over --ranks gloo ranks (default 2) on
this machine, as DTensors (Shard(0)) of 64 MiB fp32/bf16 shards per rank, is saved and loaded:

  save: cacheless (cacheless.checkpoint.Writer), dcp-t1 / dcp-t4 (FileSystemWriter,
        thread_count 1 / 4, sync_files on), dcp-safetensors (FileSystemWriter with
        SerializationFormat.SAFETENSORS), and with --s3: cacheless-s3 and fsspec-s3
        (FsspecWriter through s3fs) to the same SeaweedFS prefix
  load: cacheless (our Reader of our checkpoint), dcp (FileSystemReader of dcp-t1's), and with
        --s3: cacheless-s3, fsspec-s3 (FsspecReader)

Each trial starts cold (sync, drop_caches, the files to be read checked not resident) after the
machine settles (bench/lib.sh), the methods taking turns in bench/lib.sh's rotated order, --runs
rounds. Per trial: the job's seconds (from a barrier before the call to one after it), each
rank's user+system CPU seconds over the call (all its threads), each rank's peak RSS above what
it held before the call (VmHWM, reset through /proc/self/clear_refs), the page cache's growth
over the call and what of the checkpoint is resident after it (mincore).
The page cache's growth is Cached in /proc/meminfo as rank 0 sees it between the barriers around
the call (so the interpreters' start-up, reading torch's libraries after drop_caches, is out). fio's best
direct write and read of the same bytes in as many files as ranks, on the same filesystem and in
the same run, is the device's limit; with --s3, the aws CLI's upload and download of those files
(as many at once as ranks) is the store's. Prints a Markdown table; --json keeps every trial.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
MiB = 1 << 20
SHARD = 64 * MiB


def size_arg(s: str) -> int:
    units = {"K": 1 << 10, "M": MiB, "G": GiB}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


# -- one rank -----------------------------------------------------------------------------------


def rank_main(method: str, op: str, path: str, size: int, memory: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    import cacheless.checkpoint as cc

    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,))
    per_rank = size // world
    n = max(1, per_rank // SHARD)
    sd = {}
    g = torch.Generator().manual_seed(rank + 1)
    for i in range(n):
        dtype = torch.bfloat16 if i % 4 == 3 else torch.float32
        rows = SHARD // (1024 * (2 if dtype == torch.bfloat16 else 4))
        local = torch.empty(rows, 1024, dtype=dtype)
        if op == "save":
            local.copy_(torch.rand(rows, 1024, generator=g))
        else:
            local.zero_()
        sd[f"layer{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
    sd["step"] = 100
    remote = {}
    if method.endswith("-s3"):
        remote = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}
    if op == "save":
        if method in ("cacheless", "cacheless-s3"):
            storage = cc.Writer(path, memory=memory, **remote)
        elif method == "dcp-t1":
            storage = dcp.FileSystemWriter(path, thread_count=1, sync_files=True)
        elif method == "dcp-t4":
            storage = dcp.FileSystemWriter(path, thread_count=4, sync_files=True)
        elif method == "dcp-safetensors":
            from torch.distributed.checkpoint.filesystem import SerializationFormat

            storage = dcp.FileSystemWriter(path, sync_files=True, serialization_format=SerializationFormat.SAFETENSORS)
        elif method == "fsspec-s3":
            from torch.distributed.checkpoint import FsspecWriter

            storage = FsspecWriter(path, sync_files=True)
        else:
            raise SystemExit(f"unknown method {method}")
    else:
        if method in ("cacheless", "cacheless-s3"):
            storage = cc.Reader(path, memory=memory, **remote)
        elif method == "dcp":
            storage = dcp.FileSystemReader(path)
        elif method == "fsspec-s3":
            from torch.distributed.checkpoint import FsspecReader

            storage = FsspecReader(path)
        else:
            raise SystemExit(f"unknown method {method}")
    state_bytes = sum(v.to_local().nbytes for v in sd.values() if isinstance(v, DTensor))
    rss_before = status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    dist.barrier()
    cached0 = meminfo_kib("Cached")
    t0 = time.monotonic()
    c0 = os.times()
    if op == "save":
        dcp.save(sd, storage_writer=storage)
    else:
        dcp.load(sd, storage_reader=storage)
    c1 = os.times()
    dist.barrier()
    wall = time.monotonic() - t0
    growth = meminfo_kib("Cached") - cached0
    added = status_kib("VmHWM") - rss_before
    if op == "load":
        # The values came back: shard 0 of rank r is what the saving rank r drew first.
        g = torch.Generator().manual_seed(rank + 1)
        first = sd["layer0.weight"].to_local()
        if not torch.equal(first, torch.rand(first.shape, generator=g).to(first.dtype)):
            raise SystemExit(f"{method}: rank {rank} loaded wrong values")
    report = getattr(storage, "report", None)
    print(json.dumps({"rank": rank, "wall": wall, "cpu": (c1.user - c0.user) + (c1.system - c0.system), "added_kib": added,
                      "state_bytes": state_bytes, "growth_kib": growth, "decision": (report or {}).get("decision")}), flush=True)
    dist.destroy_process_group()


def meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


# -- the driver ---------------------------------------------------------------------------------


def lib_sh(command: str, *args: str, capture: bool = False) -> str:
    done = subprocess.run(["bash", "-c", f'source "$0"; {command} "$@"', str(ROOT / "bench" / "lib.sh"), *args], stdout=subprocess.PIPE if capture else None, text=True, check=True)
    return done.stdout or ""


def rotated(items: list, run: int) -> list:
    return list(items) if len(items) < 2 else lib_sh("rotate", str(run + 1), *items, capture=True).split()


def resident(folder: Path) -> tuple:
    """(resident bytes, file bytes) of the files in folder, by mincore (cacheless.residency)."""
    import cacheless

    res = tot = 0
    for p in folder.iterdir() if folder.is_dir() else []:
        if p.is_file():
            r = cacheless.residency(str(p))
            res += r["cached_pages"] * 4096
            tot += p.stat().st_size
    return res, tot


# The saves the loads read.
LOADED_FROM = ("cacheless", "dcp-t1", "cacheless-s3", "fsspec-s3")


def aws() -> str:
    """The aws CLI beside this interpreter (the test virtualenv has it), else on PATH."""
    beside = Path(sys.executable).with_name("aws")
    return str(beside) if beside.exists() else "aws"


def drop(where: str) -> None:
    """Removes a saved checkpoint (a folder, or a prefix through the aws CLI beside the interpreter)."""
    if "://" not in where:
        shutil.rmtree(where, ignore_errors=True)
        return
    subprocess.run([aws(), "s3", "rm", "--recursive", "--quiet", where + "/"], check=False, capture_output=True)


def cold() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3")
    lib_sh("settle")


def trial(args, method: str, op: str, path: str, env: dict) -> dict:
    port = 29500 + (os.getpid() + int(time.time() * 1000)) % 20000
    procs = []
    for r in range(args.ranks):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank-child", method, op, path, str(args.size), args.memory], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"{method} {op}: a rank exited {p.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}")
        outs.append(json.loads([l for l in out.splitlines() if l.startswith("{")][-1]))
    # Rank 0's view, between the barriers around the call: the page cache's growth over the job's
    # save or load (the interpreters' start-up, which reads torch's libraries, is outside).
    growth = outs[0]["growth_kib"]
    res, tot = (0, 0) if "://" in path else resident(Path(path))
    state = sum(o["state_bytes"] for o in outs)
    return {"method": method, "op": op, "wall": max(o["wall"] for o in outs), "cpu": sum(o["cpu"] for o in outs), "cpu_per_gib": sum(o["cpu"] for o in outs) / (state / GiB),
            "added_mib": max(o["added_kib"] for o in outs) / 1024, "state_bytes": state, "growth_mib": growth / 1024, "resident_mib": res / MiB,
            "files_mib": tot / MiB, "gib_s": state / GiB / max(o["wall"] for o in outs), "decision": outs[0].get("decision")}


def fio_best(folder: Path, args, rw: str) -> dict:
    """fio's best direct write (with an fsync at the end) or read of --size bytes in --ranks files."""
    if shutil.which("fio") is None:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    best = None
    for bs, depth in (("4M", 8), ("16M", 4), ("1M", 32)):
        cold()
        cmd = ["fio", "--name=limit", f"--directory={folder}", f"--rw={rw}", "--direct=1", "--ioengine=io_uring", f"--bs={bs}", f"--iodepth={depth}",
               f"--numjobs={args.ranks}", f"--size={args.size // args.ranks}", "--group_reporting", "--output-format=json"]
        if rw == "write":
            cmd.append("--end_fsync=1")
        out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        job = out["jobs"][0][rw]
        gib_s = job["io_bytes"] / GiB / (job["runtime"] / 1000)
        if best is None or gib_s > best["gib_s"]:
            best = {"bs": bs, "depth": depth, "gib_s": gib_s}
    return best


def aws_cli(folder: Path, url: str) -> dict:
    """The store's limit as the aws CLI sees it: fio's files (one per rank) uploaded, then
    downloaded to /dev/null, all at once, each from a cold start; GiB/s of the slowest."""
    aws_cmd = aws()
    files = sorted(p for p in folder.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    out = {}
    for op in ("put", "get"):
        cold()
        t0 = time.monotonic()
        procs = []
        for p in files:
            if op == "put":
                cmd = [aws_cmd, "s3", "cp", "--quiet", str(p), f"{url}/{p.name}"]
            else:
                cmd = [aws_cmd, "s3", "cp", "--quiet", f"{url}/{p.name}", "-"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
        for q in procs:
            q.wait()
        out[f"aws-{op}"] = {"gib_s": total / GiB / (time.monotonic() - t0), "bs": "aws s3 cp", "depth": len(files)}
    drop(url)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=size_arg, default=4 * GiB)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", default="256M", help="cacheless's memory= for each file")
    ap.add_argument("--dir", default=str(ROOT / "target" / "bench-checkpoint"))
    ap.add_argument("--s3", action="store_true", help="also SeaweedFS (AWS_ENDPOINT_URL and credentials in the environment, CACHELESS_BENCH_BUCKET)")
    ap.add_argument("--json", help="write every trial here")
    a = ap.parse_args()
    base = Path(a.dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    env = dict(os.environ)
    saves = ["cacheless", "dcp-t1", "dcp-t4", "dcp-safetensors"] + (["cacheless-s3", "fsspec-s3"] if a.s3 else [])
    loads = ["cacheless", "dcp"] + (["cacheless-s3", "fsspec-s3"] if a.s3 else [])
    stamp = int(time.time())

    def where(method: str, run: int) -> str:
        if method.endswith("-s3"):
            return f"s3://{os.environ['CACHELESS_BENCH_BUCKET']}/ckpt-{stamp}-{method}-{run}"
        return str(base / f"{method}-{run}")

    rows = []

    def keep() -> None:
        """Writes every trial so far to --json (after each trial: a run cut short keeps them)."""
        if a.json:
            Path(a.json).write_text(json.dumps({"limits": limits, "rows": rows, "args": vars(a), "when": datetime.datetime.now().isoformat()}, indent=1))

    limits = {"write": fio_best(base / "fio", a, "write"), "read": fio_best(base / "fio", a, "read")}
    if a.s3:
        limits.update(aws_cli(base / "fio", f"s3://{os.environ['CACHELESS_BENCH_BUCKET']}/limit-{stamp}"))
    shutil.rmtree(base / "fio", ignore_errors=True)
    print(f"fio: {limits}", file=sys.stderr)
    for run in range(a.runs):
        for m in rotated(saves, run):
            cold()
            r = trial(a, m, "save", where(m, run), env)
            r["run"] = run
            rows.append(r)
            keep()
            if m not in LOADED_FROM:
                drop(where(m, run))
            print(f"run {run} save {m}: {r['wall']:.2f} s, {r['gib_s']:.2f} GiB/s, cpu {r['cpu_per_gib']:.2f} s/GiB, +{r['added_mib']:.0f} MiB, cache +{r['growth_mib']:.0f} MiB, resident {r['resident_mib']:.0f} MiB", file=sys.stderr)
        for m in rotated(loads, run):
            src = {"cacheless": "cacheless", "dcp": "dcp-t1", "cacheless-s3": "cacheless-s3", "fsspec-s3": "fsspec-s3"}[m]
            cold()
            path = where(src, run)
            if "://" not in path:
                res, tot = resident(Path(path))
                assert res == 0, f"{path}: {res} bytes resident before a cold load"
            r = trial(a, m, "load", path, env)
            r["run"] = run
            rows.append(r)
            keep()
            print(f"run {run} load {m}: {r['wall']:.2f} s, {r['gib_s']:.2f} GiB/s, cpu {r['cpu_per_gib']:.2f} s/GiB, +{r['added_mib']:.0f} MiB, cache +{r['growth_mib']:.0f} MiB, resident {r['resident_mib']:.0f} MiB", file=sys.stderr)
        for m in saves:
            drop(where(m, run))
    keep()
    print(f"State dict: {a.size / GiB:.1f} GiB over {a.ranks} ranks; cacheless memory={a.memory} per file; medians of {a.runs} rotated cold runs.\n")
    for op, methods, ref in (("save", saves, "dcp-t1"), ("load", loads, "dcp")):
        lim = limits.get("write" if op == "save" else "read") or {}
        store = limits.get("aws-put" if op == "save" else "aws-get") or {}
        print(f"| {op} | s | GiB/s | x {ref} | x fio | CPU s/GiB | peak RSS over the call, MiB | page cache +MiB | resident after, MiB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        refw = statistics.median(r["wall"] for r in rows if r["method"] == ref and r["op"] == op)
        for m in methods:
            rs = [r for r in rows if r["method"] == m and r["op"] == op]
            if not rs:
                continue
            w = statistics.median(r["wall"] for r in rs)
            g = statistics.median(r["gib_s"] for r in rs)
            if "://" in where(m, 0):
                xf = f"{g / store['gib_s']:.2f} (aws CLI)" if store else "-"
            else:
                xf = f"{g / lim['gib_s']:.2f}" if lim else "-"
            print(f"| {m} | {w:.2f} | {g:.2f} | {refw / w:.2f} | {xf} | {statistics.median(r['cpu_per_gib'] for r in rs):.2f} | "
                  f"{statistics.median(r['added_mib'] for r in rs):.0f} | {statistics.median(r['growth_mib'] for r in rs):.0f} | {statistics.median(r['resident_mib'] for r in rs):.0f} |")
        if lim:
            print(f"| fio {'write+fsync' if op == 'save' else 'read'} {lim['bs']} x {lim['depth']} x {a.ranks} jobs | | {lim['gib_s']:.2f} | | 1.00 | | | | |")
        if store:
            print(f"| aws CLI {'upload' if op == 'save' else 'download'} of the same bytes, {store['depth']} at once (the store's limit) | | {store['gib_s']:.2f} | | 1.00 (aws CLI) | | | | |")
        print()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-child":
        rank_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    else:
        main()
