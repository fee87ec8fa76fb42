"""cacheless.safetensors against the safetensors package: its files load into equal arrays,
our files are byte-identical to its and load in it; corrupt files are SafetensorError (a ValueError); page-cache
footprint of loads and saves; sharded checkpoints; slices; torch when installed."""

import json
import os
import signal
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy as stn

import cacheless
from cacheless import safetensors as cst
from conftest import fincore_fraction, fraction_cached, require, require_direct, require_module, run_python

ml_dtypes = require_module("ml_dtypes", "installed by scripts/test; without it bf16/f8 cannot be compared")

NUMPY_DTYPES = ["bool", "uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32", "complex64", "uint64", "int64", "float64"]
ML_DTYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz", "float8_e5m2fnuz"]


def sample(dtype, shape, seed):
    """Random bytes viewed as `dtype` (every bit pattern, NaNs included: compared as bytes)."""
    dt = np.dtype(getattr(ml_dtypes, dtype) if dtype in ML_DTYPES else dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    if dt == np.bool_:
        raw &= 1
    return raw.view(dt).reshape(shape)


def same(a, b):
    """Equal dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def every_dtype_tensors():
    t = {}
    for i, d in enumerate(NUMPY_DTYPES + ML_DTYPES):
        t[f"{d}.2d"] = sample(d, (3, 5), i)
        t[f"{d}.0d"] = sample(d, (), 100 + i)
        t[f"{d}.empty"] = sample(d, (0, 4), 200 + i)
    return t


def raw_tensors(path):
    """The safetensors package's own view of a file: {name: (dtype code, shape, bytes)}."""
    data = Path(path).read_bytes()
    return {k: (v["dtype"], list(v["shape"]), bytes(v["data"])) for k, v in safetensors.deserialize(data)}


def test_files_written_by_safetensors_load_as_equal_arrays_for_every_dtype(disk):
    tensors = every_dtype_tensors()
    p = disk / "all.safetensors"
    meta = {"format": "np", "note": "every dtype"}
    stn.save_file(tensors, p, metadata=meta)
    ours = cst.load_file(p)
    theirs_raw = raw_tensors(p)
    assert set(ours) == set(tensors) == set(theirs_raw)
    for k, v in tensors.items():
        a = ours[k]
        assert same(a, v), k
        code, shape, data = theirs_raw[k]
        assert list(a.shape) == shape and a.tobytes() == data, k
        assert a.flags.writeable and a.flags.aligned, k
    # Where the safetensors package has a numpy type, its arrays equal ours.
    with safetensors.safe_open(p, framework="np") as f:
        for k in f.keys():
            if k.split(".")[0] in NUMPY_DTYPES:
                assert same(ours[k], f.get_tensor(k)), k
        assert f.metadata() == meta
    with cst.safe_open(p, framework="np") as f:
        assert f.metadata() == meta
        assert f.keys() == sorted(tensors)
        assert list(ours) == f.offset_keys(), "load_file returns tensors in file order"
        for k in tensors:
            assert same(f.get_tensor(k), tensors[k]), k


def test_packed_f4_is_a_clear_error_in_numpy(disk):
    data, ones = np.arange(8, dtype=np.uint8), np.ones(2, np.float32)
    # TensorSpec takes torch's storage shape for float4_e2m1fn_x2 ([2, 4] bytes) and records
    # the logical one ([2, 8] values) in the header.
    spec = safetensors.TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 4], data_ptr=data.ctypes.data, data_len=data.nbytes)
    p = disk / "f4.safetensors"
    safetensors.serialize_file({"q": spec, "w": safetensors.TensorSpec(dtype="float32", shape=[2], data_ptr=ones.ctypes.data, data_len=8)}, str(p))
    with pytest.raises(TypeError, match="F4.*no numpy type"):
        cst.load_file(p)
    assert cst.load_file(p, keys=["w"])["w"].tolist() == [1.0, 1.0]
    with cst.safe_open(p, "np") as f:
        assert f.get_slice("q").get_shape() == [2, 8] and f.get_slice("q").get_dtype() == "F4"


def test_packed_f6_is_a_clear_error_in_either_framework(disk):
    # Four 6-bit values in three bytes; neither numpy nor torch has a type for them.
    header = json.dumps({"q": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}}).encode()
    p = disk / "f6.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + bytes(3))
    with pytest.raises(TypeError, match="F6_E2M3.*neither numpy nor torch"):
        cst.load_file(p)
    with cst.safe_open(p, "np") as f:
        assert f.get_slice("q").get_dtype() == "F6_E2M3"
        with pytest.raises(TypeError, match="F6_E2M3"):
            f.get_tensor("q")


def test_small_tensors_from_safe_open_are_independent_arrays(disk):
    tensors = {f"t{i}": sample("float32", (4,), i) for i in range(8)}
    p = disk / "small.safetensors"
    stn.save_file(tensors, p)
    with cst.safe_open(p, "np") as f:
        a, again, b = f.get_tensor("t1"), f.get_tensor("t1"), f.get_tensor("t2")
        a[:] = 0
        assert same(again, tensors["t1"]) and same(b, tensors["t2"]) and same(f.get_tensor("t1"), tensors["t1"])


def test_thousands_of_tiny_tensors_and_odd_header_lengths(disk):
    tensors = {f"layer.{i}.w": sample("float32", (i % 5 + 1,), i) for i in range(3000)}
    p = disk / "tiny.safetensors"
    stn.save_file(tensors, p)
    ours = cst.load_file(p)
    assert len(ours) == 3000 and all(same(ours[k], v) for k, v in tensors.items())
    with cst.safe_open(p, "np") as f:
        assert all(same(f.get_tensor(k), v) for k, v in list(tensors.items())[::97])
    # A hand-made header whose length is not a multiple of 8 puts every tensor at an odd
    # offset: misaligned tensors are copied into aligned arrays, the others are views.
    header = json.dumps({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}, "b": {"dtype": "F64", "shape": [2], "data_offsets": [3, 19]}, "c": {"dtype": "I16", "shape": [0], "data_offsets": [19, 19]}}, separators=(",", ":")).encode()
    assert len(header) % 8
    body = bytes([1, 2, 3]) + np.array([1.5, -2.25]).tobytes()
    q = disk / "odd.safetensors"
    q.write_bytes(struct.pack("<Q", len(header)) + header + body)
    theirs = stn.load_file(q)
    for keys in (None, ["b", "a"]):
        ours = cst.load_file(q, keys=keys)
        for k in keys or theirs:
            assert same(ours[k], theirs[k]), k
            assert ours[k].flags.aligned, k
        assert list(ours) == (keys or ["a", "b", "c"])
    assert cst.load(q.read_bytes())["b"].tolist() == [1.5, -2.25]


def test_save_file_is_byte_identical_to_safetensors_and_loads_in_it(disk):
    tensors = every_dtype_tensors()
    tensors["big"] = sample("float32", (1 << 20, 3), 9)
    tensors["strided"] = np.arange(40, dtype=np.int32).reshape(5, 8)[:, ::2]  # not contiguous
    tensors["bigendian"] = np.arange(6, dtype=">i4")
    for meta in (None, {"format": "pt"}):
        ours, theirs = disk / "ours.safetensors", disk / "theirs.safetensors"
        report = {}
        assert cst.save_file(tensors, ours, metadata=meta, report=report) is None
        stn.save_file({k: v.astype(v.dtype.newbyteorder("<")).copy(order="C") for k, v in tensors.items()}, theirs, metadata=meta)
        assert ours.read_bytes() == theirs.read_bytes(), f"metadata {meta}"
        assert report["bytes"] == ours.stat().st_size
        assert {k for k, _ in safetensors.deserialize(ours.read_bytes())} == set(tensors)
        assert cst.save(tensors, metadata=meta) == theirs.read_bytes()
    with safetensors.safe_open(ours, framework="np") as f:
        assert same(f.get_tensor("strided"), np.ascontiguousarray(tensors["strided"]))
        assert f.get_tensor("bigendian").tolist() == list(range(6))
        assert same(f.get_tensor("big"), tensors["big"])


@pytest.mark.parametrize(
    "name,make,reason",
    [
        ("bad JSON", lambda h, d: struct.pack("<Q", 9) + b"{bad json" + d, "not valid safetensors JSON"),
        ("header past EOF", lambda h, d: struct.pack("<Q", len(h) + len(d) + 100) + h + d, "runs past the end"),
        ("huge header", lambda h, d: struct.pack("<Q", 1 << 40) + h + d, "exceeds the limit"),
        ("offsets out of range", lambda h, d: hdr({"a": ("F32", [2], [0, 8]), "b": ("F32", [4], [8, 24])}) + d, "truncated"),
        ("overlapping", lambda h, d: hdr({"a": ("F32", [2], [0, 8]), "b": ("F32", [2], [4, 12])}) + d[:12], "overlaps"),
        ("span does not match shape", lambda h, d: hdr({"a": ("F32", [3], [0, 8]), "b": ("F32", [2], [8, 16])}) + d, "needs 12"),
        ("truncated data", lambda h, d: struct.pack("<Q", len(h)) + h + d[:-4], "truncated"),
        ("unknown dtype", lambda h, d: hdr({"a": ("F99", [2], [0, 8]), "b": ("F32", [2], [8, 16])}) + d, "not valid safetensors JSON"),
    ],
)
def test_corrupt_files_are_value_errors_naming_the_file_and_the_fault(disk, name, make, reason):
    good = stn.save({"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})
    n = struct.unpack("<Q", good[:8])[0]
    p = disk / "corrupt.safetensors"
    p.write_bytes(make(good[8 : 8 + n], good[8 + n :]))
    for call in (lambda: cst.load_file(p), lambda: cst.load_file(p, keys=["a"]), lambda: cst.safe_open(p, "np")):
        with pytest.raises(ValueError) as e:
            call()
        assert reason in str(e.value) and str(p) in str(e.value), f"{name}: {e.value}"


def hdr(tensors):
    h = json.dumps({k: {"dtype": d, "shape": s, "data_offsets": o} for k, (d, s, o) in tensors.items()}).encode()
    return struct.pack("<Q", len(h)) + h


def test_arrays_keep_their_buffer_alive(disk):
    import gc

    p = disk / "alive.safetensors"
    t = {"a": sample("float32", (1 << 20,), 1), "b": sample("int16", (33,), 2)}
    stn.save_file(t, p)
    cacheless.evict(p)  # read into an arena (a resident file is mapped: see the next test)
    b = cst.load_file(p)["b"]  # the dict and every other array are gone at once
    with cst.safe_open(p, "np") as f:
        a = f.get_tensor("a")
    gc.collect()
    junk = [np.full(1 << 18, 0xAB, np.uint8) for _ in range(64)]  # reuse freed memory, if any was
    assert same(b, t["b"]) and same(a, t["a"])
    base = b
    while getattr(base, "base", None) is not None:
        base = base.base
    assert type(base).__name__ == "Arena", "the chain of bases ends at the buffer that owns the bytes"
    b[0] = 7  # writable, like any array
    assert b[0] == 7
    del junk


def test_missing_keys_and_dtypes_without_ml_dtypes_are_clear_errors(disk, monkeypatch):
    p = disk / "m.safetensors"
    stn.save_file({"w": sample("bfloat16", (4,), 1), "x": np.ones(3, np.float32)}, p)
    with pytest.raises(cst.SafetensorError, match=f"File does not contain tensor nope .*{p.name}"):
        cst.load_file(p, keys=["nope"])
    with cst.safe_open(p, "np") as f:
        with pytest.raises(safetensors.SafetensorError):
            f.get_tensor("nope")
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(TypeError, match="BF16.*pip install ml_dtypes"):
        cst.load_file(p)
    assert cst.load_file(p, keys=["x"])["x"].tolist() == [1, 1, 1]


def test_keys_read_only_the_spans_asked_for(disk):
    p = disk / "k.safetensors"
    stn.save_file({"a": sample("float32", (1 << 20,), 1), "b": sample("int8", (5,), 2), "c": sample("float32", (1 << 20,), 3)}, p)
    seen = []
    out = cst.load_file(p, keys=["b"], progress=lambda done, total: seen.append((done, total)))
    assert same(out["b"], stn.load_file(p)["b"])
    done, total = seen[-1]
    assert done == total and total < 2 << 20, f"read {total} bytes of a {p.stat().st_size}-byte file for one tiny tensor"


def test_a_cold_load_and_a_save_leave_no_page_cache_and_a_warm_file_stays_warm(disk):
    require_direct(disk)
    tensors = {f"w{i}": sample("float32", (1 << 20,), i) for i in range(8)} | {"small": sample("float16", (77,), 99)}
    p = disk / "cold.safetensors"
    cst.save_file(tensors, p)
    assert fraction_cached(p) < 0.02, "save_file left the file cached"
    cacheless.evict(p)
    out = cst.load_file(p)
    assert all(same(out[k], v) for k, v in tensors.items())
    assert fraction_cached(p) < 0.02, "a cold load left the file cached"
    fc = fincore_fraction(p)
    assert fc is None or fc < 0.02, f"fincore sees {fc:.1%} cached"
    with cst.safe_open(p, "np") as f:
        f.get_tensor("w3")
        assert f.decision["mode"] == "direct"
    assert fraction_cached(p) < 0.02, "safe_open left the file cached"
    p.read_bytes()  # now fully resident
    assert fraction_cached(p) == 1.0
    out = cst.load_file(p)
    assert all(same(out[k], v) for k, v in tensors.items())
    assert fraction_cached(p) == 1.0, "loading a resident file must keep it resident"


def test_the_fallback_without_direct_or_dontcache_leaves_no_page_cache_either(disk):
    p = disk / "fb.safetensors"
    stn.save_file({"w": sample("float32", (3 << 20,), 5)}, p)
    cacheless.evict(p)
    code = f"""
import cacheless, cacheless.safetensors as cst, numpy as np
r = cst.load_file({str(p)!r})
assert r["w"].shape == (3 << 20,)
with cst.safe_open({str(p)!r}, "np") as f:
    print(f.decision["mode"], cacheless.residency({str(p)!r})["cached_pages"])
"""
    done = run_python(code, env={"CACHELESS_DISABLE": "direct,dontcache"})
    assert done.returncode == 0, done.stderr
    mode, cached = done.stdout.split()
    assert mode == "writebehind"
    assert int(cached) / (p.stat().st_size / 4096) < 0.02, f"{cached} pages left cached by the drop-behind fallback"


def test_loading_from_tmpfs_works(tmp_path_factory):
    shm = Path("/dev/shm")
    require("tmpfs", shm.is_dir() and os.access(shm, os.W_OK), "no writable /dev/shm on this machine")
    p = shm / f"cacheless-test-{os.getpid()}.safetensors"
    try:
        t = {"w": sample("float32", (1 << 20,), 1), "b": sample("int64", (3,), 2)}
        stn.save_file(t, p)
        out = cst.load_file(p)
        assert all(same(out[k], v) for k, v in t.items())
        assert fraction_cached(p) == 1.0, "tmpfs files live in the page cache"
    finally:
        p.unlink(missing_ok=True)


def test_a_save_over_a_file_being_read_or_mapped_never_changes_what_the_reader_sees(disk):
    p = disk / "live.safetensors"
    old = {"w": np.full(1 << 20, 1.0, np.float32)}
    stn.save_file(old, p)
    mapped = np.memmap(p, mode="r", dtype=np.uint8)
    with safetensors.safe_open(p, framework="np") as f, open(p, "rb") as fh:
        cst.save_file({"w": np.full(1 << 20, 2.0, np.float32)}, p)
        assert f.get_tensor("w")[123] == 1.0, "an open safetensors reader sees the old tensor"
        assert bytes(mapped[-4:]) == np.float32(1.0).tobytes(), "a mapping of the old file is unchanged"
        fh.seek(-4, os.SEEK_END)
        assert fh.read() == np.float32(1.0).tobytes()
    assert cst.load_file(p)["w"][123] == 2.0
    del mapped


def test_load_model_equals_loading_each_shard(disk):
    weight_map, want = {}, {}
    for s in range(8):
        shard = {f"model.layers.{s}.{k}": sample("float32", (1000 + s, 7), s * 10 + i) for i, k in enumerate(["q", "k", "v"])}
        name = f"model-{s + 1:05d}-of-00008.safetensors"
        stn.save_file(shard, disk / name)
        weight_map.update({k: name for k in shard})
        want.update(shard)
    (disk / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    for target in (disk, disk / "model.safetensors.index.json"):
        got = cst.load_model(target, memory="16M")
        assert set(got) == set(want) and all(same(got[k], v) for k, v in want.items())
    per_shard = {}
    for name in sorted(set(weight_map.values())):
        per_shard.update(cst.load_file(disk / name))
    assert all(same(got[k], per_shard[k]) for k in want)
    weight_map["model.layers.0.q"] = "model-00002-of-00008.safetensors"
    (disk / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match="does not hold it"):
        cst.load_model(disk)


@pytest.mark.parametrize("index", [np.s_[2:5], np.s_[-3:], np.s_[1], np.s_[-1], np.s_[::3], np.s_[4:4], np.s_[:, 2:4], np.s_[1:3, ::2], np.s_[..., 1], np.s_[:]])
def test_get_slice_matches_safetensors(disk, index):
    p = disk / "slice.safetensors"
    stn.save_file({"w": sample("float32", (7, 6), 3), "s": sample("int8", (), 4)}, p)
    with safetensors.safe_open(p, "np") as theirs, cst.safe_open(p, "np") as ours:
        sl = ours.get_slice("w")
        assert sl.get_shape() == [7, 6] and sl.get_dtype() == "F32"
        want = theirs.get_tensor("w")[index]
        got = sl[index]
        assert same(np.asarray(got), np.ascontiguousarray(want)), index


def test_keyboard_interrupt_cancels_a_save_and_leaves_no_temporary(disk, sigint):
    p = disk / "ki.safetensors"
    p.write_bytes(b"previous contents")
    big = {f"w{i}": sample("float32", (16 << 20,), i) for i in range(4)}
    with pytest.raises(KeyboardInterrupt):
        cst.save_file(big, p, progress=lambda done, total: os.kill(os.getpid(), signal.SIGINT))
    assert sorted(os.listdir(disk)) == ["ki.safetensors"], "a temporary file was left behind"
    # Cancelled in time, the old file is untouched; a save that finished before the signal
    # was seen is complete. Never anything in between.
    assert p.read_bytes() in (b"previous contents", cst.save(big))


def test_torch_loads_zero_copy_and_saves_identically(disk):
    torch = require_module("torch", "installed by scripts/test")
    t = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "h": torch.ones(5, dtype=torch.bfloat16), "e": torch.zeros(0, 3)}
    p, q = disk / "pt.safetensors", disk / "pt-theirs.safetensors"
    cst.save_file(t, p)
    import safetensors.torch as stt

    stt.save_file(t, q)
    assert p.read_bytes() == q.read_bytes()
    out = cst.load_file(p, framework="pt")
    for k, v in t.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape and torch.equal(out[k], v), k
    with cst.safe_open(p, framework="pt") as f:
        assert torch.equal(f.get_slice("w")[1:3], t["w"][1:3])


def mapped_from(path, address):
    """True when `address` lies in a mapping of `path` (/proc/self/maps)."""
    for line in open("/proc/self/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5] == str(path):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return True
    return False


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_a_resident_file_is_mapped_copy_on_write_and_a_cold_one_read(disk, framework):
    if framework == "pt":
        require_module("torch", "installed by scripts/test")
    p = disk / "warm.safetensors"
    t = {"a": sample("float32", (1 << 18,), 1), "b": sample("int16", (33,), 2)}
    stn.save_file(t, p)
    raw = p.read_bytes()  # resident now
    assert fraction_cached(p) == 1.0
    seen = []
    warm = cst.load_file(p, framework=framework, progress=lambda d, n: seen.append((d, n)))
    a = np.asarray(warm["a"]) if framework == "np" else warm["a"].numpy()
    assert mapped_from(p, a.__array_interface__["data"][0]), "a resident file's tensors are its mapped pages, not a copy"
    assert seen[-1] == (len(raw), len(raw))
    assert all(np.asarray(warm[k] if framework == "np" else warm[k].numpy()).tobytes() == t[k].tobytes() for k in t)
    a[:4] = 0  # copy on write: the file keeps its bytes
    assert p.read_bytes() == raw and fraction_cached(p) == 1.0
    forced = cst.load_file(p, mode="buffered")["a"]
    assert forced.tobytes() == t["a"].tobytes() and not mapped_from(p, forced.__array_interface__["data"][0]), "a forced mode reads"
    # (Pages mapped by a live tensor cannot be dropped: the warm tensors go first.)
    del warm, a
    cacheless.evict(p)
    cold = cst.load_file(p, framework=framework)
    c = np.asarray(cold["a"]) if framework == "np" else cold["a"].numpy()
    assert not mapped_from(p, c.__array_interface__["data"][0]) and fraction_cached(p) == 0.0
    assert c.tobytes() == t["a"].tobytes()
