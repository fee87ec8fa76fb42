"""One rank of a torch.distributed job (gloo, CPU) for test_checkpoint.py: `python dcp_worker.py
SCENARIO JSON`, with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by the test. Every
comparison is made here, against the state dict built from the seed and against DCP's own
FileSystemWriter/FileSystemReader round trip; a mismatch raises, and the exit status says so."""

import datetime
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import cacheless.checkpoint as cc

WORLD = int(os.environ.get("WORLD_SIZE", "1"))
RANK = int(os.environ.get("RANK", "0"))


def full(seed):
    """The whole state, the same on every rank: every dtype the issue names, uneven shards,
    empty and 0-d tensors, an optimizer's state with non-tensor items."""
    g = torch.Generator().manual_seed(seed)
    return {
        "embed": torch.randn(1000, 96, generator=g),  # 384 KB, rows split unevenly by 4
        "proj": torch.randn(64, 300, generator=g).to(torch.bfloat16),  # sharded on dim 1
        "norm": torch.randn(4096, generator=g).to(torch.float16),
        "qweight": torch.randint(-128, 127, (257, 130), generator=g, dtype=torch.int8),
        "mask": torch.rand(50, 7, generator=g) > 0.5,
        "empty": torch.empty(0, 16),
        "scale": torch.tensor(seed + 0.5),
        "tiny": torch.arange(5, dtype=torch.int64) + seed,
        "optim": {
            "state": {"embed": {"step": torch.tensor(float(seed)), "exp_avg": torch.randn(1000, 96, generator=g), "exp_avg_sq": torch.rand(1000, 96, generator=g)}},
            "param_groups": [{"lr": 0.001 * seed, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False, "params": ["embed"], "name": f"group-{seed}"}],
        },
        "epoch": seed,
        "tag": f"run-{seed}",
    }


PLACE = {"embed": [Shard(0)], "proj": [Shard(1)], "norm": [Replicate()], "qweight": [Shard(0)], "mask": [Shard(1)], "exp_avg": [Shard(0)], "exp_avg_sq": [Replicate()]}


def distributed(state, mesh, fill=None):
    """The state as a job of `mesh` holds it: DTensors sharded and replicated as PLACE says,
    plain tensors for the rest. `fill` replaces every tensor's values (a load target)."""

    def conv(k, v):
        if isinstance(v, dict):
            return {kk: conv(kk, vv) for kk, vv in v.items()}
        if isinstance(v, list):
            return [conv(k, x) for x in v]
        if not isinstance(v, torch.Tensor):
            return v if fill is None else type(v)() if isinstance(v, (int, str, float)) else v
        if fill is not None:
            v = torch.full_like(v, fill) if v.dtype != torch.bool else torch.zeros_like(v)
        if mesh is not None and k in PLACE:
            return distribute_tensor(v, mesh, PLACE[k])
        return v.clone()

    return {k: conv(k, v) for k, v in state.items()}


def whole(v):
    return v.full_tensor() if isinstance(v, DTensor) else v


def same(a, b, where=""):
    """Equal values, dtypes and shapes, all the way down; raises naming the first difference."""
    if isinstance(a, dict):
        if set(a) != set(b):
            raise AssertionError(f"{where}: keys {sorted(a)} vs {sorted(b)}")
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError(f"{where}: {len(a)} items vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        x, y = whole(a), whole(b)
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            raise AssertionError(f"{where}: {x.dtype}{tuple(x.shape)} differs from {y.dtype}{tuple(y.shape)}")
    elif a != b:
        raise AssertionError(f"{where}: {a!r} vs {b!r}")


def mesh():
    return init_device_mesh("cpu", (WORLD,)) if WORLD > 1 else None


def load(reader, seed, m):
    """The state of `seed`'s shape as this job holds it, loaded through `reader`."""
    target = distributed(full(seed), m, fill=0)
    dcp.load(target, storage_reader=reader)
    return target


def scenario_save(args):
    """Saves the seed's state with our Writer, with DCP's FileSystemWriter, and with dcp.async_save
    through our Writer; each rank prints its report."""
    m = mesh()
    sd = distributed(full(args["seed"]), m)
    w = cc.Writer(args["ours"])
    dcp.save(sd, storage_writer=w)
    if args.get("dcp"):
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(args["dcp"]))
    if args.get("async"):
        aw = cc.Writer(args["async"])
        dcp.async_save(sd, storage_writer=aw).result()
    print(json.dumps({"rank": RANK, "report": {k: w.report[k] for k in ("rank", "bytes", "items", "files", "decision")}}))


def scenario_load(args):
    """Loads every checkpoint named with our Reader (and DCP's, for the local ones) into this
    job's layout; each must equal the seed's state and DCP's own round trip of it."""
    m = mesh()
    expect = full(args["seed"])
    ref = load(dcp.FileSystemReader(args["reference"]), args["seed"], m)
    same(ref, distributed(expect, m), "DCP's own round trip")
    for path in args["paths"]:
        readers = [cc.Reader(path)]
        if "://" not in path:
            readers.append(dcp.FileSystemReader(path))
        for r in readers:
            got = load(r, args["seed"], m)
            same(got, ref, f"{path} through {type(r).__name__}")
            if isinstance(r, cc.Reader) and r.report["bytes"] <= 0:
                raise AssertionError(f"{path}: the reader's report says nothing was read: {r.report}")
    print(json.dumps({"rank": RANK, "loaded": len(args["paths"])}))


def scenario_fail(args):
    """A save of a new state in which one rank fails part-way: every rank sees the error, and
    the checkpoint there before still loads, equal to what it was."""
    m = mesh()
    sd = distributed(full(args["seed"] + 1), m)
    written = [0]

    def boom(done, total):
        written[0] = done
        if RANK == args["failing_rank"] and done > 0:
            if args.get("kill"):
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(5, f"rank {RANK} fails mid-save")

    try:
        dcp.save(sd, storage_writer=cc.Writer(args["path"], progress=boom))
    except CheckpointException as e:  # what every rank gets
        print(json.dumps({"rank": RANK, "failed": type(e).__name__, "message": str(e)[-400:]}))
    else:
        raise AssertionError("the save with a failing rank did not fail")
    got = load(cc.Reader(args["path"]), args["seed"], m)
    same(got, distributed(full(args["seed"]), m), "the previous checkpoint after a failed save")


def main():
    scenario, args = sys.argv[1], json.loads(sys.argv[2])
    if WORLD > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.get("timeout", 60)))
    globals()[f"scenario_{scenario}"](args)
    if WORLD > 1:
        # Every rank done with its collectives before any tears its process group down: a peer
        # gone while gloo still talks to it ends the process in std::terminate.
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
