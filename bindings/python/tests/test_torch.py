"""cacheless.safetensors.torch against safetensors.torch (installed by scripts/test): the same
signatures, every dtype byte-exact both ways, save_model/load_model of a module with tied
weights, the same exceptions for what the package refuses, and zero-copy loads (peak RSS)."""

import inspect
import json

import pytest

from conftest import require_module, run_python

torch = require_module("torch", "installed by scripts/test")
stt = require_module("safetensors.torch", "installed by scripts/test")

import safetensors  # noqa: E402

import cacheless  # noqa: E402
from cacheless.safetensors import torch as ct  # noqa: E402

DTYPES = [
    "bool", "uint8", "int8", "int16", "uint16", "float16", "bfloat16", "int32", "uint32", "float32", "complex64",
    "int64", "uint64", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
]


def outcome(f):
    try:
        return "ok", f()
    except Exception as e:  # noqa: BLE001 - the oracle's exception is what is compared
        return "raise", e


def sample(dtype, shape, seed):
    """Random bytes viewed as `dtype` (every bit pattern: compared as bytes)."""
    dt = getattr(torch, dtype)
    n = int(torch.Size(shape).numel()) * torch.empty((), dtype=dt).element_size()
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    if dt == torch.bool:
        raw &= 1
    return raw.view(dt).reshape(shape)


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def same(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and raw(a) == raw(b)


def same_file(a, b):
    """Equal headers (as JSON: `__metadata__` entries are written in a hash map's order, which
    changes from run to run, by the package and by ours, which uses its serializer) and equal
    data bytes."""
    x, y = a.read_bytes(), b.read_bytes()
    nx, ny = (int.from_bytes(d[:8], "little") for d in (x, y))
    return nx == ny and json.loads(x[8 : 8 + nx]) == json.loads(y[8 : 8 + ny]) and x[8 + nx :] == y[8 + ny :]


def every_dtype():
    t = {}
    for i, d in enumerate(DTYPES):
        if hasattr(torch, d):
            t[f"{d}.2d"] = sample(d, (3, 5), i)
            t[f"{d}.0d"] = sample(d, (), 100 + i)
            t[f"{d}.empty"] = sample(d, (0, 4), 200 + i)
    return t


@pytest.mark.parametrize("name", ["load_file", "save_file", "load", "save", "load_model", "save_model", "storage_ptr", "storage_size"])
def test_the_functions_take_the_packages_parameters_first_and_extras_only_by_keyword(name):
    theirs = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(stt, name)).parameters.values()]
    ours = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(ct, name)).parameters.values()]
    assert ours[: len(theirs)] == theirs, f"{name}: {ours} does not start with {theirs}"
    assert all(k in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD) for _, k, _ in ours[len(theirs) :])


def test_every_dtype_is_byte_exact_both_ways(disk):
    t = every_dtype()
    ours, theirs = disk / "ours.safetensors", disk / "theirs.safetensors"
    assert ct.save_file(t, ours, metadata={"m": "1"}) is None
    stt.save_file(t, theirs, metadata={"m": "1"})
    assert ours.read_bytes() == theirs.read_bytes()
    assert ct.save(t) == stt.save(t)
    for loaded in (ct.load_file(theirs), stt.load_file(ours), ct.load(theirs.read_bytes())):
        assert set(loaded) == set(t)
        for k, v in t.items():
            assert same(loaded[k], v), k
    with safetensors.safe_open(ours, "pt") as f:
        assert list(ct.load_file(ours)) == f.offset_keys(), "file order"


def test_loads_are_zero_copy_views_into_one_buffer(disk):
    t = {f"w{i}": sample("float32", (256, 256), i) for i in range(4)}
    p = disk / "z.safetensors"
    stt.save_file(t, p)
    out = ct.load_file(p)
    data = p.read_bytes()
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    start = {k: v["data_offsets"][0] for k, v in header.items() if k != "__metadata__"}
    base = out["w0"].data_ptr() - start["w0"]
    assert all(v.data_ptr() - base == start[k] for k, v in out.items()), "each tensor is at its file offset in one buffer"
    out["w0"][0, 0] = 1234.0  # writable, and independent of its neighbours
    assert out["w1"][0, 0] == t["w1"][0, 0]


def test_save_file_refuses_what_the_package_refuses_with_the_same_exceptions(disk):
    shared = torch.zeros(4)
    cases = {
        "not a dict": [1, 2],
        "not a tensor": {"a": [1.0, 2.0]},
        "shared memory": {"a": shared, "b": shared},
        "overlapping views": {"a": shared[:3], "b": shared[1:]},
        "not contiguous": {"a": torch.zeros(4, 4).t()},
        "sparse": {"a": torch.zeros(3, 3).to_sparse()},
    }
    for name, tensors in cases.items():
        t = outcome(lambda: stt.save_file(tensors, disk / "theirs.safetensors"))
        o = outcome(lambda: ct.save_file(tensors, disk / "ours.safetensors"))
        assert t[0] == o[0] == "raise" and type(o[1]) is type(t[1]), f"{name}: theirs {t}, ours {o}"
        t, o = outcome(lambda: stt.save(tensors)), outcome(lambda: ct.save(tensors))
        assert t[0] == o[0] == "raise" and type(o[1]) is type(t[1]), f"save, {name}: theirs {t}, ours {o}"
    assert not (disk / "ours.safetensors").exists()
    # A view of part of a storage that shares it with nothing else is saved by its values.
    view = torch.arange(10)[2:5]
    assert ct.save({"a": view}) == stt.save({"a": view})


def test_devices_are_refused_as_the_package_refuses_them(disk):
    p = disk / "d.safetensors"
    stt.save_file({"a": torch.ones(2)}, p)
    t, o = outcome(lambda: stt.load_file(p, device="meta")), outcome(lambda: ct.load_file(p, device="meta"))
    assert t[0] == o[0] == "raise" and isinstance(o[1], safetensors.SafetensorError) and str(o[1]) == str(t[1])
    t, o = outcome(lambda: stt.load_file(p, device="bogus")), outcome(lambda: ct.load_file(p, device="bogus"))
    assert t[0] == o[0] == "raise" and isinstance(o[1], type(t[1])), (t, o)
    assert ct.load_file(p, device=torch.device("cpu"))["a"].device.type == "cpu"


class Tied(torch.nn.Module):
    """A small language-model shape: embedding and output head share one weight."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.body = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.arange(3))


def test_save_model_and_load_model_handle_tied_weights_as_the_package_does(disk):
    torch.manual_seed(0)
    m = Tied()
    ours, theirs = disk / "ours.safetensors", disk / "theirs.safetensors"
    assert ct.save_model(m, ours, metadata={"by": "test"}) is None
    stt.save_model(m, theirs, metadata={"by": "test"})
    assert same_file(ours, theirs), "same tensors kept, same metadata for the dropped names"
    with safetensors.safe_open(ours, "pt") as f:
        assert set(f.keys()) == set(m.state_dict()) - {"head.weight"} and f.metadata()["head.weight"] == "embed.weight"
    for loader in (ct.load_model, stt.load_model):
        fresh = Tied()
        got = loader(fresh, ours)
        assert got == ct.load_model(Tied(), theirs) == stt.load_model(Tied(), ours)
        assert fresh.head.weight is fresh.embed.weight, "the tie survives"
        for k, v in m.state_dict().items():
            assert torch.equal(fresh.state_dict()[k], v), k
    # strict: a model with a tensor the file lacks, and a file with a tensor the model lacks.
    class Bigger(Tied):
        def __init__(self):
            super().__init__()
            self.extra = torch.nn.Linear(2, 2)

    t, o = outcome(lambda: stt.load_model(Bigger(), ours)), outcome(lambda: ct.load_model(Bigger(), ours))
    assert t[0] == o[0] == "raise" and type(o[1]) is type(t[1]) is RuntimeError and str(o[1]) == str(t[1])
    assert ct.load_model(Bigger(), ours, strict=False) == stt.load_model(Bigger(), ours, strict=False)
    small = torch.nn.Linear(16, 16)
    t, o = outcome(lambda: stt.load_model(small, ours)), outcome(lambda: ct.load_model(small, ours))
    assert t[0] == o[0] == "raise" and str(o[1]) == str(t[1])


def test_save_model_refuses_partial_views_and_saves_non_contiguous_by_value(disk):
    class Partial(torch.nn.Module):
        def __init__(self):
            super().__init__()
            base = torch.zeros(10)
            self.a = torch.nn.Parameter(base[:5])
            self.b = torch.nn.Parameter(base[5:8])

    class Transposed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3).t())

    for module in (Partial(), Transposed()):
        for force in (True, False):
            t = outcome(lambda: stt.save_model(module, disk / "t.safetensors", force_contiguous=force))
            o = outcome(lambda: ct.save_model(module, disk / "o.safetensors", force_contiguous=force))
            assert t[0] == o[0], (type(module).__name__, force, t, o)
            if t[0] == "raise":
                assert type(o[1]) is type(t[1]), (t, o)
            else:
                assert same_file(disk / "o.safetensors", disk / "t.safetensors")


def test_load_model_takes_a_sharded_checkpoint_too(disk):
    torch.manual_seed(1)
    m = Tied()
    sd = {k: v for k, v in m.state_dict().items() if k != "head.weight"}
    names = sorted(sd)
    shards = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2 :]}
    weight_map = {}
    for shard, keys in shards.items():
        stt.save_file({k: sd[k].contiguous() for k in keys}, disk / shard)
        weight_map.update({k: shard for k in keys})
    (disk / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    fresh = Tied()
    assert ct.load_model(fresh, disk) == (set(), [])
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in m.state_dict().items())


def test_storage_helpers_agree_with_the_package():
    base = torch.arange(20, dtype=torch.float32)
    for t in (base, base[3:9], base.view(4, 5).t(), torch.empty(0), torch.empty(3, device="meta")):
        assert ct.storage_ptr(t) == stt.storage_ptr(t) and ct.storage_size(t) == stt.storage_size(t)


def test_peak_memory_of_a_load_is_the_file_plus_the_budget_at_most(disk):
    # A 512 MiB file in a fresh process: the tensors are views into the one buffer the file is
    # read into, so the peak resident set grows by the file and the in-flight buffers (the
    # budget), not by a second copy.
    p = disk / "big.safetensors"
    n = 64
    stt.save_file({f"w{i}": torch.full((8 << 20,), float(i), dtype=torch.bfloat16) for i in range(n)}, p)
    size = p.stat().st_size
    budget = 64 << 20
    cacheless.evict(p)
    code = f"""
import torch, cacheless.safetensors.torch as ct
def status(key):
    # VmHWM, the peak of this process image (getrusage's ru_maxrss is carried over from the
    # parent across fork and exec, so it can report the test runner's size instead).
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))
before = status("VmRSS")
out = ct.load_file({str(p)!r}, memory={budget})
peak = status("VmHWM")
assert float(out["w{n - 1}"][0]) == {n - 1}
print(before, peak)
"""
    done = run_python(code, timeout=300)
    assert done.returncode == 0, done.stderr
    before, peak = map(int, done.stdout.split())
    assert peak - before <= (size + budget) * 1.1, f"peak grew by {(peak - before) >> 20} MiB for a {size >> 20} MiB file and a {budget >> 20} MiB budget"
    assert peak - before >= size * 0.9, "the tensors were not all resident: the measurement measured nothing"

