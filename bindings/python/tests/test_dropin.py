"""cacheless.safetensors as a drop-in for safetensors.numpy and safe_open, with the installed
safetensors package as the oracle in every test: the same parameter names and defaults, return
values, exception classes and the messages callers match on. Where the package is wrong (it says
so in each case) we check that ours gives numpy's answer instead."""

import inspect
import json
import struct

import numpy as np
import pytest
import safetensors
import safetensors.numpy as stn

from cacheless import safetensors as cst
from cacheless.safetensors import numpy as cnp
from conftest import require_module


def outcome(f):
    """("ok", value) or ("raise", exception) of calling f."""
    try:
        return "ok", f()
    except Exception as e:  # noqa: BLE001 - the oracle's exception is what is compared
        return "raise", e


def params(f):
    """[(name, kind, default)] of a function, or of a class's constructor."""
    sig = inspect.signature(f)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", ["load_file", "save_file", "load", "save"])
def test_the_numpy_functions_take_the_packages_parameters_first_and_extras_only_by_keyword(name):
    theirs = params(getattr(stn, name))
    ours = params(getattr(cst, name))
    assert ours[: len(theirs)] == theirs, f"{name}: {ours} does not start with {theirs}"
    extra = ours[len(theirs) :]
    assert all(kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD) for _, kind, _ in extra), extra
    assert getattr(cnp, name) is getattr(cst, name)


def test_safe_open_takes_the_packages_parameters():
    # The package's safe_open is a native class: its text signature names the parameters, and
    # `*` marks where the keyword-only ones start.
    text = safetensors.safe_open.__text_signature__.strip("()")
    theirs = [p.split("=")[0].strip() for p in text.split(",")]
    star = theirs.index("*")
    ours = params(cst.safe_open)
    assert [p[0] for p in ours[: len(theirs) - 1]] == theirs[:star] + theirs[star + 1 :]
    kinds = [p[1] for p in ours[: len(theirs) - 1]]
    assert all(k == inspect.Parameter.POSITIONAL_OR_KEYWORD for k in kinds[:star]) and all(k == inspect.Parameter.KEYWORD_ONLY for k in kinds[star:])


def test_the_error_class_is_the_packages_and_a_value_error():
    assert issubclass(cst.SafetensorError, safetensors.SafetensorError)
    assert issubclass(cst.SafetensorError, ValueError)
    assert cnp.SafetensorError is cst.SafetensorError


def sample_file(path):
    t = {"a": np.arange(24, dtype=np.float32).reshape(4, 6), "v": np.arange(5), "z": np.array(3.0), "e": np.zeros((0, 3)), "b": np.arange(6, dtype=np.int16)}
    stn.save_file(t, path)
    return t


def corrupt_files(disk):
    good = stn.save({"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})
    n = struct.unpack("<Q", good[:8])[0]
    h, d = good[8 : 8 + n], good[8 + n :]
    files = {
        "empty": b"",
        "short": b"\x05\x00",
        "truncated data": good[:-3],
        "bad json": struct.pack("<Q", 5) + b"{abc}",
        "header past the end": struct.pack("<Q", len(h) + len(d) + 100) + h + d,
        "unknown dtype": struct.pack("<Q", len(h)) + h.replace(b'"F32"', b'"F99"', 1) + d,
    }
    out = []
    for name, data in files.items():
        p = disk / f"{name.replace(' ', '-')}.safetensors"
        p.write_bytes(data)
        out.append((name, p))
    return out


def test_malformed_and_truncated_files_raise_safetensor_error_as_the_package_does(disk):
    for name, p in corrupt_files(disk):
        for what, theirs, ours in [
            ("load_file", lambda: stn.load_file(p), lambda: cst.load_file(p)),
            ("safe_open", lambda: safetensors.safe_open(p, "np"), lambda: cst.safe_open(p, "np")),
            ("load", lambda: stn.load(p.read_bytes()), lambda: cst.load(p.read_bytes())),
        ]:
            t, o = outcome(theirs), outcome(ours)
            assert t[0] == "raise" and isinstance(t[1], safetensors.SafetensorError), f"{name} {what}: the oracle gave {t}"
            assert o[0] == "raise" and isinstance(o[1], safetensors.SafetensorError) and isinstance(o[1], cst.SafetensorError), f"{name} {what}: {o}"
            if what != "load":
                assert str(p) in str(o[1]), f"{name} {what}: the message should name the file: {o[1]}"


def test_a_missing_tensor_is_safetensor_error_worded_as_the_package_words_it(disk):
    p = disk / "m.safetensors"
    sample_file(p)
    with safetensors.safe_open(p, "np") as theirs, cst.safe_open(p, "np") as ours:
        for call in ("get_tensor", "get_slice"):
            t = outcome(lambda: getattr(theirs, call)("nope"))
            o = outcome(lambda: getattr(ours, call)("nope"))
            assert t[0] == o[0] == "raise" and type(t[1]) is safetensors.SafetensorError and isinstance(o[1], safetensors.SafetensorError)
            assert str(o[1]).startswith(str(t[1])), (str(o[1]), str(t[1]))
    with pytest.raises(safetensors.SafetensorError):
        cst.load_file(p, keys=["nope"])


def test_a_missing_file_is_file_not_found_with_the_packages_text(disk):
    p = disk / "absent.safetensors"
    for theirs, ours in [(lambda: stn.load_file(p), lambda: cst.load_file(p)), (lambda: safetensors.safe_open(p, "np"), lambda: cst.safe_open(p, "np"))]:
        t, o = outcome(theirs), outcome(ours)
        assert type(t[1]) is type(o[1]) is FileNotFoundError
        assert str(o[1]) == str(t[1]) == f"No such file or directory: {p}"
        assert o[1].errno == 2


def test_a_closed_handle_answers_file_is_closed_as_the_package_does(disk):
    p = disk / "c.safetensors"
    sample_file(p)
    with safetensors.safe_open(p, "np") as theirs, cst.safe_open(p, "np") as ours:
        kept = ours.get_tensor("a")
    for call in ("keys", "offset_keys", "metadata", "get_tensors"):
        t, o = outcome(getattr(theirs, call)), outcome(getattr(ours, call))
        assert t[0] == o[0] == "raise" and isinstance(o[1], safetensors.SafetensorError) and str(o[1]) == str(t[1]) == "File is closed", (call, t, o)
    for call in ("get_tensor", "get_slice"):
        t, o = outcome(lambda: getattr(theirs, call)("a")), outcome(lambda: getattr(ours, call)("a"))
        assert t[0] == o[0] == "raise" and str(o[1]) == str(t[1]) == "File is closed", (call, t, o)
    assert kept.tolist() == np.arange(24, dtype=np.float32).reshape(4, 6).tolist(), "arrays taken stay valid"


INDEXES = [
    0, -1, -4, -5, 3, 4, True, np.int64(2),
    slice(None), slice(1, 3), slice(0, 4), slice(0, 5), slice(4, None), slice(5, None), slice(None, None, 2), slice(1, None, 3), slice(None, None, -1),
    (1, 2), (1, slice(2, 4)), (slice(None), 1), (slice(1, 3), -6), (slice(1, 2), -7), (slice(None), slice(6, None)),
    (Ellipsis, 1), (1, Ellipsis), (Ellipsis,), (), (1, 2, 3), (Ellipsis, Ellipsis),
    None, (None, 1), [0, 1], [], ([],), 1.0, "x", slice(None, 9), (slice(2, None), 9),
]
# Where the package fails (numpy) with something other than SafetensorError, it is wrong: a
# negative slice bound is an OverflowError there, a start past the stop a SystemError. Ours gives
# numpy's answer for these, and for a full slice of an empty dimension ("out of bounds" there).
PACKAGE_BUGS = [slice(-3, -1), slice(-4, 2), slice(3, 1), (slice(None), slice(-2, None))]


class WholeOpen(cst.safe_open):
    """safe_open reading the whole file at the first tensor asked for (as the one
    cacheless.patch_safetensors installs for from_pretrained)."""

    _read_whole = True


@pytest.mark.parametrize("opener", [cst.safe_open, WholeOpen], ids=["lazy", "whole"])
@pytest.mark.parametrize("framework", ["np", "pt"])
@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
def test_get_slice_answers_what_the_package_answers(disk, framework, opener):
    if framework == "pt":
        require_module("torch", "installed by scripts/test")
    p = disk / "s.safetensors"
    t = sample_file(p)
    with safetensors.safe_open(p, framework) as theirs, opener(p, framework) as ours:
        for name in ("a", "v", "z", "e"):
            their_slice, our_slice = theirs.get_slice(name), ours.get_slice(name)
            assert our_slice.get_shape() == their_slice.get_shape() and our_slice.get_dtype() == their_slice.get_dtype()
            for index in INDEXES + [(), Ellipsis]:
                want, got = outcome(lambda: their_slice[index]), outcome(lambda: our_slice[index])
                case = f"{name}[{index!r}]: theirs {want}, ours {got}"
                if want[0] == "raise" and framework == "pt":
                    # torch's own indexing, as the package applies it: the same exception.
                    assert got[0] == "raise" and type(got[1]) is type(want[1]) and str(got[1]) == str(want[1]), case
                    continue
                if want[0] == "raise":
                    assert isinstance(want[1], safetensors.SafetensorError), f"a new kind of failure in the package: {case}"
                    if name == "e" and got[0] == "ok":
                        # The package refuses any slice of an empty dimension; ours gives numpy's answer.
                        assert np.asarray(got[1]).shape == t[name][index].shape, case
                        continue
                    assert got[0] == "raise" and isinstance(got[1], safetensors.SafetensorError) and str(got[1]) == str(want[1]), case
                    continue
                assert got[0] == "ok", case
                w, g = want[1], got[1]
                assert type(g) is type(w) and tuple(g.shape) == tuple(w.shape) and g.dtype == w.dtype, case
                assert np.asarray(g).tobytes() == np.asarray(w).tobytes(), case
            for index in PACKAGE_BUGS if name == "a" else []:
                got = our_slice[index]
                want = t[name][index]
                assert tuple(got.shape) == want.shape and np.asarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), index
        empty = ours.get_slice("e")[:]
        assert tuple(empty.shape) == (0, 3)


def test_slices_are_writable_arrays_of_their_own(disk):
    p = disk / "w.safetensors"
    sample_file(p)
    with cst.safe_open(p, "np") as f:
        x, y = f.get_slice("a")[1], f.get_slice("a")[1]
        x[0] = 99
        assert y[0] == 6 and x.flags.writeable and type(f.get_slice("z")[()]) is np.ndarray


@pytest.mark.parametrize("backend", ["mmap", "pread", "bogus"])
def test_the_backend_keyword_takes_the_packages_values(disk, backend):
    p = disk / "b.safetensors"
    sample_file(p)
    for theirs, ours in [
        (lambda: stn.load_file(p, backend=backend), lambda: cst.load_file(p, backend=backend)),
        (lambda: safetensors.safe_open(p, "np", backend=backend).keys(), lambda: cst.safe_open(p, "np", backend=backend).keys()),
    ]:
        t, o = outcome(theirs), outcome(ours)
        assert t[0] == o[0], (t, o)
        if t[0] == "raise":
            assert isinstance(o[1], safetensors.SafetensorError) and f'backend "{backend}" is invalid' in str(o[1])
        elif isinstance(t[1], dict):
            assert list(o[1]) == list(t[1]) and all(o[1][k].tobytes() == t[1][k].tobytes() for k in t[1])
        else:
            assert o[1] == t[1]


def test_frameworks_and_devices_are_refused_as_the_package_refuses_them(disk):
    p = disk / "f.safetensors"
    sample_file(p)
    for framework, device in [("xx", "cpu"), ("np", "cuda")]:
        t = outcome(lambda: safetensors.safe_open(p, framework, device=device))
        o = outcome(lambda: cst.safe_open(p, framework, device=device))
        assert t[0] == o[0] == "raise" and isinstance(t[1], safetensors.SafetensorError) and isinstance(o[1], safetensors.SafetensorError), (t, o)
    for framework in ("numpy", "np"):
        with cst.safe_open(p, framework) as f, safetensors.safe_open(p, framework) as g:
            assert f.keys() == g.keys() and f.offset_keys() == g.offset_keys() and f.metadata() == g.metadata()


def test_save_file_and_save_by_keyword_return_what_the_package_returns(disk):
    t = {"x": np.arange(7, dtype=np.int32), "y": np.ones((2, 2), np.float64)}
    ours, theirs = disk / "ours.safetensors", disk / "theirs.safetensors"
    got = cst.save_file(tensor_dict=t, filename=ours, metadata={"k": "v"})
    want = stn.save_file(tensor_dict=t, filename=theirs, metadata={"k": "v"})
    assert got is None and want is None
    assert ours.read_bytes() == theirs.read_bytes()
    assert cst.save(tensor_dict=t) == stn.save(tensor_dict=t)
    report = {}
    cst.save_file(t, ours, report=report)
    assert report["bytes"] == ours.stat().st_size, report


def test_load_of_bytes_gives_writable_arrays_of_their_own_in_file_order(disk):
    t = {f"t{i:02d}": np.full(3 + i, i, np.dtype(["float32", "int64", "int8"][i % 3])) for i in range(20)}
    data = stn.save(t)
    theirs, ours = stn.load(data), cst.load(data)
    assert set(ours) == set(theirs)
    assert all(ours[k].tobytes() == theirs[k].tobytes() and ours[k].dtype == theirs[k].dtype for k in t)
    assert all(a.flags.writeable for a in ours.values()) and all(a.flags.writeable for a in theirs.values())
    with safetensors.safe_open(stn.save_file(t, disk / "o.safetensors") or disk / "o.safetensors", "np") as f:
        assert list(ours) == f.offset_keys(), "file order (the package's order is a hash map's)"
    first = next(iter(ours))
    ours[first][0] = 42
    assert cst.load(data)[first][0] != 42 or t[first][0] == 42, "each load is a copy of its own"


def test_a_non_contiguous_array_is_saved_by_its_values(disk):
    # The package saves the raw memory under a strided view (here 0..4 instead of 0, 2, .., 8).
    a = np.arange(10)[::2]
    assert cst.load(cst.save({"a": a}))["a"].tolist() == [0, 2, 4, 6, 8]
    assert stn.load(cst.save({"a": a}))["a"].tolist() == [0, 2, 4, 6, 8], "and the package reads our file so"


def test_an_unknown_dtype_is_refused_with_safetensor_error_as_the_package_does():
    t = {"s": np.array(["x"])}
    assert isinstance(outcome(lambda: stn.save(t))[1], safetensors.SafetensorError)
    assert isinstance(outcome(lambda: cst.save(t))[1], safetensors.SafetensorError)


def test_documented_examples_run_with_our_names_swapped_in(disk):
    # The package's README example for numpy, with only the import changed.
    from cacheless.safetensors import safe_open
    from cacheless.safetensors.numpy import load_file, save_file

    tensors = {"weight1": np.zeros((1024, 1024)), "weight2": np.zeros((1024, 1024))}
    save_file(tensors, disk / "model.safetensors")
    loaded = load_file(disk / "model.safetensors")
    assert sorted(loaded) == ["weight1", "weight2"] and loaded["weight1"].shape == (1024, 1024)
    tensors = {}
    with safe_open(disk / "model.safetensors", framework="np", device="cpu") as f:
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
        tensor_slice = f.get_slice("weight1")
        vocab_size, hidden_dim = tensor_slice.get_shape()
        part = tensor_slice[:, :hidden_dim]
    assert part.shape == (1024, 1024) and sorted(tensors) == ["weight1", "weight2"]
    meta = json.loads(json.dumps({"format": "np"}))
    save_file(tensors, disk / "meta.safetensors", metadata=meta)
    with safetensors.safe_open(disk / "meta.safetensors", "np") as f:
        assert f.metadata() == meta


def raw_specs(module, arrays):
    """{name: module.TensorSpec} over the memory of numpy arrays (which the caller keeps alive)."""
    names = {"float32": "float32", "int8": "int8", "int64": "int64", "bool": "bool", "float16": "float16", "uint16": "uint16"}
    return {k: module.TensorSpec(dtype=names[a.dtype.name], shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes) for k, a in arrays.items()}


def test_the_packages_top_level_serialize_deserialize_and_tensor_spec(disk):
    arrays = {
        "w": np.arange(24, dtype=np.float32).reshape(4, 6),
        "b": np.array([True, False, True]),
        "i": np.arange(-5, 5, dtype=np.int8),
        "z": np.zeros((0, 3), np.int64),
        "h": np.arange(7, dtype=np.float16),
        "u": np.arange(3, dtype=np.uint16).reshape(1, 3),
    }
    theirs, ours = raw_specs(safetensors, arrays), raw_specs(cst, arrays)
    for k in arrays:
        assert (ours[k].dtype, ours[k].shape, ours[k].data_ptr, ours[k].data_len) == (theirs[k].dtype, theirs[k].shape, theirs[k].data_ptr, theirs[k].data_len)
        assert repr(ours[k]) == repr(theirs[k])
    for name in ("TensorSpec", "serialize", "serialize_file", "deserialize"):
        assert [p[:2] for p in params(getattr(cst, name))] == [p[:2] for p in params(getattr(safetensors, name))], name
    assert [p[:2] for p in params(cst._safe_open_handle)] == [p[:2] for p in params(safetensors._safe_open_handle)]
    meta = {"format": "np"}
    want = safetensors.serialize(theirs, meta)
    assert cst.serialize(ours, meta) == want
    assert cst.serialize(tensor_dict=ours) == safetensors.serialize(tensor_dict=theirs)
    assert cst.serialize_file(ours, disk / "ours.safetensors", metadata=meta) is None
    assert safetensors.serialize_file(theirs, disk / "theirs.safetensors", metadata=meta) is None
    assert (disk / "ours.safetensors").read_bytes() == (disk / "theirs.safetensors").read_bytes() == want
    got, expected = cst.deserialize(want), safetensors.deserialize(want)
    assert sorted(got, key=lambda e: e[0]) == sorted(expected, key=lambda e: e[0])
    assert all(type(d["data"]) is bytearray for _, d in got)
    # F4 packs two values a byte: both double the last dimension of the shape given.
    assert cst.TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 3], data_ptr=0, data_len=6).shape == safetensors.TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 3], data_ptr=0, data_len=6).shape == [2, 6]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0),
        lambda m: m.TensorSpec(dtype="float32", shape="ab", data_ptr=0, data_len=0),
        lambda m: m.TensorSpec(dtype=4, shape=[1], data_ptr=0, data_len=0),
        lambda m: m.TensorSpec(dtype="float32", shape=[1], data_ptr=-1, data_len=0),
        lambda m: m.TensorSpec("float32", [1], 0, 0),
        lambda m: m.serialize({"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}}),
        lambda m: m.serialize([("t", 1)]),
        lambda m: m.serialize({"t": m.TensorSpec(dtype="float32", shape=[2], data_ptr=0, data_len=0)}),
        lambda m: m.deserialize(b"\x05\x00\x00\x00\x00\x00\x00\x00{}"),
    ],
    ids=["unknown-dtype", "string-shape", "dtype-not-str", "negative-ptr", "positional", "raw-dict", "not-a-dict", "length-mismatch", "bad-header"],
)
def test_the_top_level_refuses_what_the_package_refuses_with_its_exception_classes(call):
    want, got = outcome(lambda: call(safetensors)), outcome(lambda: call(cst))
    assert want[0] == got[0] == "raise", (want, got)
    their_class = type(want[1])
    assert isinstance(got[1], their_class), (want, got)


def test_safe_open_handle_reads_an_open_file_as_the_package_does(disk):
    p = disk / "h.safetensors"
    stn.save_file({"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.ones(4, np.float64)}, p)
    with open(p, "rb") as f, safetensors._safe_open_handle(f, framework="np", device="cpu") as theirs, cst._safe_open_handle(f, framework="np", device="cpu") as ours:
        assert ours.keys() == theirs.keys() and ours.metadata() == theirs.metadata()
        assert all(ours.get_tensor(k).tobytes() == theirs.get_tensor(k).tobytes() for k in theirs.keys())
    want, got = outcome(lambda: safetensors._safe_open_handle(object(), "np")), outcome(lambda: cst._safe_open_handle(object(), "np"))
    assert want[0] == got[0] == "raise" and type(got[1]) is type(want[1]) is AttributeError, (want, got)
