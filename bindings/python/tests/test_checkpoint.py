"""cacheless.checkpoint under torch.distributed.checkpoint, with real ranks (gloo on CPU, 2 and 4
processes, dcp_worker.py): saved by N ranks and loaded by M (1, 2, 4) with our reader and DCP's
own, checkpoints written by DCP's FileSystemWriter read by ours, every tensor equal to DCP's own
round trip; dcp.async_save; a rank that fails or is SIGKILLed mid-save and a full disk leave the
previous checkpoint loadable and equal; s3:// prefixes on SeaweedFS and moto, with the aws CLI as
the oracle; nothing left in the page cache."""

import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, disk_folder, fraction_cached, require, require_module, s3_servers, s3_store

torch = require_module("torch", "cacheless.checkpoint plugs into torch.distributed.checkpoint")
dcp = pytest.importorskip("torch.distributed.checkpoint")
import cacheless  # noqa: E402
import cacheless.checkpoint as cc  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

WORKER = Path(__file__).with_name("dcp_worker.py")
sys.path.insert(0, str(WORKER.parent))
import dcp_worker  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(world, scenario, args):
    port = free_port()
    procs = []
    for rank in range(world):
        e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), scenario, json.dumps(args)], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def ranks(world, scenario, args, timeout=300):
    """Runs `world` ranks of a scenario (in this process's environment); returns each rank's
    printed JSON lines. Any rank's failure fails the test with its stderr."""
    procs = start_ranks(world, scenario, args)
    outs = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        if p.returncode != 0:
            for q in procs:
                q.kill()
            pytest.fail(f"rank {rank} of {world} ({scenario}) exited {p.returncode}:\n{err[-4000:]}")
        outs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    return outs


def files(folder):
    return sorted(os.listdir(folder))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Checkpoints of seed 7 saved by 2 and by 4 ranks: ours, DCP's, and ours through async_save."""
    root = disk_folder()
    out = {}
    for n in (2, 4):
        paths = {"ours": str(root / f"ours{n}"), "dcp": str(root / f"dcp{n}"), "async": str(root / f"async{n}")}
        reps = ranks(n, "save", dict(seed=7, **paths))
        out[n] = dict(paths, reports=reps)
    yield root, out
    shutil.rmtree(root, ignore_errors=True)


def test_each_rank_writes_one_file_direct_and_durable_with_metadata_last(saved):
    root, out = saved
    for n in (2, 4):
        names = files(out[n]["ours"])
        data = [x for x in names if x.endswith(".distcp")]
        assert ".metadata" in names and len(data) == n, names
        assert not [x for x in names if x.endswith(".tmp")], names
        for rank, rep in enumerate(out[n]["reports"]):
            r = rep[0]["report"]
            assert r["rank"] == rank and r["files"] and r["bytes"] > 0 and r["decision"]["mode"] in ("direct", "dontcache"), r
        md = pickle.loads(Path(out[n]["ours"], ".metadata").read_bytes())
        # Every large tensor's data starts on a 4 KiB boundary of its file.
        aligned = [si for si in md.storage_data.values() if getattr(si, cc.LAYOUT, None)]
        assert aligned and all((si.offset + getattr(si, cc.LAYOUT)[0]) % 4096 == 0 for si in aligned)
        for x in data:
            assert fraction_cached(Path(out[n]["ours"], x)) == 0.0


@pytest.mark.parametrize("m", [1, 2, 4])
def test_saved_by_n_ranks_loaded_by_m_equals_dcp_s_own_round_trip(saved, m):
    """Ours (sync and async) and DCP's, saved by 2 and by 4, loaded by m ranks with our reader and
    DCP's; the worker compares every tensor and object with DCP's round trip and the seed's state."""
    root, out = saved
    paths = [out[n][k] for n in (2, 4) for k in ("ours", "dcp", "async")]
    got = ranks(m, "load", dict(seed=7, reference=out[2]["dcp"], paths=paths))
    assert [g[0]["loaded"] for g in got] == [len(paths)] * m


def test_single_process_round_trip_reads_only_the_bytes_needed_and_caches_nothing(disk):
    sd = dcp_worker.full(3)
    seen = []
    w = cc.Writer(disk / "ck", progress=lambda done, total: seen.append((done, total)))
    dcp.save(sd, storage_writer=w)
    assert seen and seen[-1][0] == seen[-1][1] and all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))
    # A load of one tensor reads that tensor's bytes, not the file.
    r = cc.Reader(disk / "ck")
    part = {"embed": torch.zeros(1000, 96)}
    dcp.load(part, storage_reader=r)
    assert torch.equal(part["embed"], sd["embed"])
    assert r.report["bytes"] == sd["embed"].nbytes, r.report
    for x in files(disk / "ck"):
        assert fraction_cached(disk / "ck" / x) == 0.0


def test_a_save_over_a_checkpoint_replaces_it_whole_and_removes_only_its_files(tmp_path):
    d = tmp_path / "ck"
    dcp.save(dcp_worker.full(1), storage_writer=dcp.FileSystemWriter(d))
    (d / "notes.txt").write_text("the user's own file")
    before = set(files(d))
    w = cc.Writer(d)
    dcp.save(dcp_worker.full(2), storage_writer=w)
    after = set(files(d))
    # DCP's data file is gone (the old metadata named it, the new does not); the user's file stays.
    assert "notes.txt" in after and not (before - {"notes.txt", ".metadata"}) & after
    assert w.finish_report["removed"] == sorted(before - {"notes.txt", ".metadata"})
    target = dcp_worker.distributed(dcp_worker.full(2), None, fill=0)
    dcp.load(target, storage_reader=dcp.FileSystemReader(d))
    dcp_worker.same(target, dcp_worker.full(2))
    with pytest.raises(CheckpointException, match="overwrite=False"):
        dcp.save(dcp_worker.full(3), storage_writer=cc.Writer(d, overwrite=False))


@pytest.mark.parametrize("kill", [False, True], ids=["raises", "sigkill"])
def test_a_rank_that_fails_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path, kill):
    d = tmp_path / "ck"
    ranks(2, "save", dict(seed=11, ours=str(d)))
    meta = (d / ".metadata").read_bytes()
    args = dict(seed=11, path=str(d), failing_rank=1, kill=kill, timeout=20)
    if not kill:
        out = ranks(2, "fail", args)
        assert all(o[0]["failed"] == "CheckpointException" and "fails mid-save" in o[0]["message"] for o in out), out
    else:
        procs = start_ranks(2, "fail", args)
        procs[1].wait(timeout=120)
        assert procs[1].returncode == -9
        # The survivor waits in a collective for its lost peer until gloo's timeout.
        procs[0].communicate(timeout=120)
    assert (d / ".metadata").read_bytes() == meta
    target = dcp_worker.distributed(dcp_worker.full(11), None, fill=0)
    dcp.load(target, storage_reader=cc.Reader(d))
    dcp_worker.same(target, dcp_worker.full(11))
    dcp.load(target, storage_reader=dcp.FileSystemReader(d))
    dcp_worker.same(target, dcp_worker.full(11))
    # The failing rank's unfinished file is nowhere under a final name.
    names = files(d)
    referenced = {si.relative_path for si in pickle.loads(meta).storage_data.values()}
    leftovers = [x for x in names if x.endswith(".distcp") and x not in referenced]
    assert all(x.startswith("__0_") for x in leftovers), names


def test_a_full_disk_fails_the_save_and_leaves_the_previous_checkpoint(tmp_path):
    require("loop", os.geteuid() == 0 and shutil.which("mkfs.ext4") is not None, "a loop-mounted ext4 needs root and mkfs.ext4")
    img, mnt = tmp_path / "small.img", tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "24M", str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    try:
        d = mnt / "ck"
        small = dcp_worker.full(5)
        dcp.save(small, storage_writer=cc.Writer(d))
        meta = (d / ".metadata").read_bytes()
        big = dict(small, huge=torch.ones(8 << 20))  # 32 MiB: more than the filesystem holds
        with pytest.raises(CheckpointException) as e:
            dcp.save(big, storage_writer=cc.Writer(d))
        assert "No space left" in str(e.value) or "ENOSPC" in str(e.value) or "space" in str(e.value), str(e.value)
        assert (d / ".metadata").read_bytes() == meta
        assert not [x for x in files(d) if x.endswith(".tmp")], files(d)
        target = dcp_worker.distributed(small, None, fill=0)
        dcp.load(target, storage_reader=cc.Reader(d))
        dcp_worker.same(target, small)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_options_a_door_cannot_honour_are_refused_before_anything_moves(tmp_path):
    with pytest.raises(ValueError, match="endpoint_url"):
        cc.Writer(tmp_path / "x", endpoint_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="sync_files"):
        cc.Writer("s3://bucket/ck", sync_files=False)
    with pytest.raises(ValueError, match="mode"):
        cc.Reader("s3://bucket/ck", mode="direct")
    # A web server takes no uploads: refused when the writer is made, before DCP plans anything.
    with pytest.raises(cacheless.UnsupportedError, match="web server"):
        cc.Writer("http://127.0.0.1:1/ck")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("server", [name for name, _, _ in s3_servers()] or ["s3"])
def test_s3_prefix_saved_by_two_ranks_loads_by_one_and_two_and_the_aws_cli_sees_it(tmp_path, monkeypatch, server):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_store(server, monkeypatch))
    bucket = os.environ["CACHELESS_TEST_S3_BUCKET"]
    aws = os.environ.get("CACHELESS_TEST_AWS", "aws")
    if os.sep in aws and not os.path.isabs(aws):
        aws = str(REPO / aws)
    url = f"s3://{bucket}/dcp-{os.getpid()}-{int(time.time())}"
    local = tmp_path / "dcp"
    ranks(2, "save", dict(seed=9, ours=url, dcp=str(local)))
    listing = subprocess.run([aws, "s3", "ls", url + "/"], capture_output=True, text=True, check=True).stdout
    names = sorted(line.split()[-1] for line in listing.splitlines())
    assert ".metadata" in names and len([x for x in names if x.endswith(".distcp")]) == 2, names
    for m in (1, 2):
        ranks(m, "load", dict(seed=9, reference=str(local), paths=[url]))
    # The oracle: the objects, fetched by the aws CLI, are a checkpoint DCP's own reader loads.
    got = tmp_path / "fetched"
    subprocess.run([aws, "s3", "cp", "--recursive", url + "/", str(got)], capture_output=True, check=True)
    target = dcp_worker.distributed(dcp_worker.full(9), None, fill=0)
    dcp.load(target, storage_reader=dcp.FileSystemReader(got))
    dcp_worker.same(target, dcp_worker.full(9))


def test_http_serves_a_checkpoint_ours_or_dcp_s_that_loads_equal(disk):
    """The http:// door: checkpoints written by our writer and by DCP's, served by nginx, load
    through our reader equal to DCP's own load of the same folders."""
    require("http", "CACHELESS_TEST_HTTP" in os.environ, "CACHELESS_TEST_HTTP is not set (scripts/test starts the servers)")
    served = Path(os.environ["CACHELESS_TEST_HTTP_ROOT"])
    name = f"dcp-{os.getpid()}-{disk.name}"
    dcp.save(dcp_worker.full(4), storage_writer=cc.Writer(served / name / "ours"))
    dcp.save(dcp_worker.full(4), storage_writer=dcp.FileSystemWriter(served / name / "dcp"))
    try:
        for kind in ("ours", "dcp"):
            ref = dcp_worker.distributed(dcp_worker.full(4), None, fill=0)
            dcp.load(ref, storage_reader=dcp.FileSystemReader(served / name / kind))
            got = dcp_worker.distributed(dcp_worker.full(4), None, fill=0)
            r = cc.Reader(f"{os.environ['CACHELESS_TEST_HTTP']}/{name}/{kind}")
            dcp.load(got, storage_reader=r)
            dcp_worker.same(got, ref)
            assert r.report["decision"]["mode"] == "remote" and r.report["bytes"] > 0, r.report
    finally:
        shutil.rmtree(served / name, ignore_errors=True)
