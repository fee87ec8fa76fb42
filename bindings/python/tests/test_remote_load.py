"""The safetensors loaders and ``cacheless.open`` with URLs, against the real servers the test
command starts (SeaweedFS for S3, nginx for HTTP): every tensor byte-exact against the
safetensors package loading the same file from disk, ``keys=`` fetching only those tensors,
file objects read and written through the store, and an aborted write leaving nothing."""

import base64
import io
import json
import os
import urllib.error
import urllib.request

import numpy as np
import pytest

import cacheless
import cacheless.safetensors as cst
from conftest import require_module
from test_remote import MIB, aws, data, prefix  # noqa: F401 - aws is a fixture

st_numpy = require_module("safetensors.numpy", "the safetensors package is the oracle")


def tensors(seed):
    """Tensors around the ranges' edges: tiny, one byte past 8 MiB, many ranges, odd dtypes."""
    r = np.random.default_rng(seed)
    return {
        "a.tiny": r.standard_normal(3).astype(np.float32),
        "b.past": r.integers(0, 255, 8 * MIB + 1, dtype=np.uint8),
        "c.many": r.standard_normal((5 * MIB // 4, 3)).astype(np.float16),
        "d.small": r.integers(-9, 9, (7, 5), dtype=np.int64),
    }


def same(got, want):
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert np.array_equal(got[k], want[k]), k


def open_uploads(pre):
    """Multipart uploads under `pre` the server still keeps (folders in its filer)."""
    url = f"{os.environ['CACHELESS_TEST_S3_FILER']}/buckets/{os.environ['CACHELESS_TEST_S3_BUCKET']}/.uploads/?limit=100000"
    try:
        entries = json.load(urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}), timeout=10)).get("Entries") or []
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise
    keys = [base64.b64decode((e.get("Extended") or {}).get("key", "")).decode() for e in entries]
    return [k for k in keys if k.startswith(pre)]


def test_load_file_safe_open_and_keys_from_s3_match_the_package_on_the_local_file(aws, disk):
    pre = prefix("st")
    local = disk / "m.safetensors"
    st_numpy.save_file(tensors(1), str(local), metadata={"format": "np"})
    url = f"s3://{aws}/{pre}m.safetensors"
    cacheless.copy(local, url)
    want = st_numpy.load_file(str(local))
    same(cst.load_file(url), want)
    some = cst.load_file(url, keys=["d.small", "a.tiny"])
    assert list(some) == ["d.small", "a.tiny"]
    for k in some:
        assert np.array_equal(some[k], want[k])
    with cst.safe_open(url, framework="np") as f:
        assert f.keys() == sorted(want)
        assert f.metadata() == {"format": "np"}
        assert f.decision["mode"] == "remote"
        assert np.array_equal(f.get_tensor("c.many"), want["c.many"])
        assert np.array_equal(f.get_slice("c.many")[10:20], want["c.many"][10:20])
        same(f.get_tensors(), want)
    with pytest.raises(FileNotFoundError, match=f"{pre}nothing"):
        cst.load_file(f"s3://{aws}/{pre}nothing.safetensors")


def test_torch_loads_from_s3_and_http_match_the_package(aws, disk):
    torch = require_module("torch", "torch is part of the test command")
    st_torch = require_module("safetensors.torch", "the safetensors package is the oracle")
    import cacheless.safetensors.torch as ct

    pre = prefix("pt")
    model = torch.nn.Sequential(torch.nn.Linear(300, 200), torch.nn.ReLU(), torch.nn.Linear(200, 10)).to(torch.bfloat16)
    local = disk / "model.safetensors"
    st_torch.save_model(model, str(local))
    want = st_torch.load_file(str(local))
    url = f"s3://{aws}/{pre}model.safetensors"
    cacheless.copy(local, url)
    got = ct.load_file(url)
    assert list(got) == list(want)
    assert all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)
    fresh = torch.nn.Sequential(torch.nn.Linear(300, 200), torch.nn.ReLU(), torch.nn.Linear(200, 10)).to(torch.bfloat16)
    assert ct.load_model(fresh, url) == (set(), [])
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    # Over HTTP, from a server with ranges and one without.
    root, origin = os.environ["CACHELESS_TEST_HTTP_ROOT"], os.environ["CACHELESS_TEST_HTTP"]
    for folder in ("ranges", "noranges"):
        served = os.path.join(root, folder, f"pt-{os.getpid()}.safetensors")
        with open(served, "wb") as fh:
            fh.write(local.read_bytes())
        try:
            got = ct.load_file(f"{origin}/{folder}/pt-{os.getpid()}.safetensors")
            assert all(torch.equal(got[k], want[k]) for k in want), folder
        finally:
            os.remove(served)


def test_load_model_from_a_prefix_of_shards(aws, disk):
    pre = prefix("shards")
    one, two = tensors(2), {f"l1.{k}": v for k, v in tensors(3).items()}
    ckpt = disk / "ckpt"
    ckpt.mkdir()
    st_numpy.save_file(one, str(ckpt / "model-00001-of-00002.safetensors"))
    st_numpy.save_file(two, str(ckpt / "model-00002-of-00002.safetensors"))
    wm = {k: "model-00001-of-00002.safetensors" for k in one} | {k: "model-00002-of-00002.safetensors" for k in two}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    cacheless.copy(ckpt, f"s3://{aws}/{pre}", recursive=True)
    want = cst.load_model(ckpt)
    for url in (f"s3://{aws}/{pre}", f"s3://{aws}/{pre}model.safetensors.index.json"):
        got = cst.load_model(url)
        assert sorted(got) == sorted(want), url
        for k in want:
            assert np.array_equal(got[k], want[k]), (url, k)


def test_open_reads_and_writes_objects(aws, disk):
    pre = prefix("open")
    body = data(20 * MIB + 3, 4)
    url = f"s3://{aws}/{pre}obj"
    with cacheless.open(url, "wb") as w:
        for i in range(0, len(body), 3 * MIB + 1):
            w.write(body[i : i + 3 * MIB + 1])
        assert w.tell() == len(body)
    assert w.report["bytes"] == len(body) and w.report["parts"] > 1
    with cacheless.open(url) as r:
        assert r.decision["mode"] == "remote"
        with pytest.raises(io.UnsupportedOperation):
            r.fileno()
        assert r.read(10) == body[:10]
        r.seek(-5, io.SEEK_END)
        assert r.read() == body[-5:]
        r.seek(MIB + 1)
        big = bytearray(9 * MIB)
        assert r.readinto(big) == len(big)
        assert bytes(big) == body[MIB + 1 : 10 * MIB + 1]
        r.seek(0)
        assert r.readall() == body
    # Small reads through a buffered reader walk the whole object.
    with io.BufferedReader(cacheless.open(url), buffer_size=64 << 10) as b:
        assert b.read() == body
    # An exception inside the block aborts the upload: no object, no parts left.
    bad = f"s3://{aws}/{pre}aborted"
    with pytest.raises(RuntimeError):
        with cacheless.open(bad, "wb") as w:
            w.write(body)
            raise RuntimeError("stop")
    with pytest.raises(FileNotFoundError, match="aborted"):
        cacheless.open(bad)
    assert open_uploads(pre) == []
    # A prefix (a URL ending in /) is no object's key: open and pack refuse it, naming it, and
    # start no upload.
    folder = f"s3://{aws}/{pre}folder/"
    (disk / "one").write_bytes(body[:100])
    with pytest.raises(ValueError, match=f"{folder}.*not a prefix"):
        cacheless.open(folder, "wb")
    with pytest.raises(ValueError, match=f"{folder}.*not a prefix"):
        cacheless.pack(folder, ["one"], directory=disk)
    assert open_uploads(pre) == []
    # A web server takes no uploads: refused at open, naming the URL.
    with pytest.raises(cacheless.UnsupportedError, match="s3://"):
        cacheless.open(f"{os.environ['CACHELESS_TEST_HTTP']}/ranges/new", "wb")
