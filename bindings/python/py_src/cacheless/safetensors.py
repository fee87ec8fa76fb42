"""safetensors files at direct-I/O speed: a drop-in for the ``safetensors`` package's
``load_file``, ``save_file``, ``load``, ``save`` and ``safe_open`` (numpy, or torch with
``framework="pt"``), plus :func:`load_model` for sharded checkpoints.

A load reads the file (or, with ``keys=``, only the byte spans of those tensors) into one
page-aligned buffer whose byte *i* is file byte *i*, with O_DIRECT when the file is cold, then
hands out arrays that are views into that buffer: no copy, and no page of the file left in the
page cache. A file that is already mostly cached is read buffered and stays cached. The buffer
lives as long as any array taken from it. A tensor whose file offset is not aligned to its
dtype (possible only in hand-made files) is copied into an aligned array of its own.

``save_file`` writes exactly the bytes the ``safetensors`` package writes (same header, same
tensor order) with direct I/O, under a temporary name, fdatasync'ed and renamed: readers and
mappings of an old file keep seeing the old file, and no page cache is left behind.

bfloat16 and float8 tensors load into numpy as ``ml_dtypes`` types (``pip install ml_dtypes``);
without it they raise ``TypeError`` naming it. ``framework="pt"`` uses ``torch.frombuffer`` over
the same buffer (zero-copy) when torch is installed.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native

__all__ = ["load", "load_file", "load_model", "safe_open", "save", "save_file"]

PathLike = Union[str, "os.PathLike[str]"]
Memory = Union[int, str, None]
Progress = Optional[Callable[[int, int], Any]]

# safetensors dtype code -> numpy dtype name (numpy's own types).
_NUMPY = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "F16": "float16",
    "U32": "uint32",
    "I32": "int32",
    "F32": "float32",
    "C64": "complex64",
    "U64": "uint64",
    "I64": "int64",
    "F64": "float64",
}
# Codes numpy holds only through ml_dtypes.
_ML_DTYPES = {
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
_TO_CODE = {v: k for k, v in {**_NUMPY, **_ML_DTYPES}.items()}
# safetensors code -> torch dtype attribute (torch names its types as numpy and ml_dtypes do).
_TORCH = {**_NUMPY, **_ML_DTYPES, "F4": "float4_e2m1fn_x2"}

_Entry = Tuple[str, str, List[int], int, int]
# safe_open reads a small tensor together with the tensors after it, up to this many bytes
# (the engine's read window).
_WINDOW = 4 << 20


def _framework(framework: str) -> str:
    if framework in ("np", "numpy"):
        return "np"
    if framework in ("pt", "torch"):
        return "pt"
    raise ValueError(f"framework must be 'np' (numpy) or 'pt' (torch), not {framework!r}")


def _numpy_dtype(code: str, where: str) -> np.dtype:
    if code in _NUMPY:
        return np.dtype(_NUMPY[code])
    if code in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(f"{where} is {code}, which numpy holds only as an ml_dtypes type: pip install ml_dtypes (or load with framework='pt')") from None
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[code]))
    if code in _TORCH:
        raise TypeError(f"{where} is {code} (packed values narrower than a byte), which has no numpy type: load it with framework='pt'")
    raise TypeError(f"{where} is {code} (packed values narrower than a byte), which neither numpy nor torch has a type for")


def _torch_dtype(code: str, where: str) -> Any:
    import torch

    attr = _TORCH.get(code)
    dt = getattr(torch, attr, None) if attr else None
    if dt is None:
        raise TypeError(f"{where} is {code}, which this torch ({torch.__version__}) has no dtype for")
    return dt


class _Builder:
    """Turns (arena, entries) into arrays of one framework, sharing the arena."""

    def __init__(self, framework: str, device: str, path: str) -> None:
        self.framework = _framework(framework)
        if self.framework == "np" and device not in ("cpu", None):
            raise ValueError(f"numpy arrays live in host memory: device must be 'cpu', not {device!r} (use framework='pt' for devices)")
        self.device = device
        self.path = path

    def whole(self, arena: Any) -> np.ndarray:
        return np.asarray(arena)

    def tensor(self, whole: np.ndarray, base: int, name: str, code: str, shape: Sequence[int], off: int, nbytes: int) -> Any:
        where = f"{self.path}: tensor '{name}'"
        if self.framework == "np":
            dt = _numpy_dtype(code, where)
            raw = whole[off : off + nbytes]
            if nbytes and (base + off) % dt.alignment:
                raw = raw.copy()  # misaligned in the file: an aligned copy of its own
            return raw.view(dt).reshape(tuple(shape))
        return self._torch(whole, base, where, code, shape, off, nbytes)

    def _torch(self, whole: np.ndarray, base: int, where: str, code: str, shape: Sequence[int], off: int, nbytes: int) -> Any:
        import torch

        dt = _torch_dtype(code, where)
        tshape = list(shape)
        if code == "F4":  # two values per byte: torch's float4_e2m1fn_x2 counts bytes
            if not tshape or tshape[-1] % 2:
                raise TypeError(f"{where} is F4 with an odd last dimension {shape}, which torch's float4_e2m1fn_x2 cannot hold")
            tshape[-1] //= 2
        if nbytes == 0:
            t = torch.empty(tshape, dtype=dt)
        else:
            size = torch.empty((), dtype=dt).element_size()
            if (base + off) % size:
                t = torch.frombuffer(whole[off : off + nbytes].copy(), dtype=dt)
            else:
                t = torch.frombuffer(whole, dtype=dt, count=nbytes // size, offset=off)
            t = t.reshape(tshape)
        if self.device not in ("cpu", None):
            t = t.to(self.device)
        return t

    def build(self, arena: Any, entries: Iterable[_Entry]) -> Dict[str, Any]:
        whole = self.whole(arena)
        base = arena.address
        return {name: self.tensor(whole, base, name, code, shape, off, n) for name, code, shape, off, n in entries}


def load_file(
    filename: PathLike,
    framework: str = "np",
    device: str = "cpu",
    *,
    keys: Optional[Sequence[str]] = None,
    memory: Memory = None,
    mode: str = "auto",
    progress: Progress = None,
    **options: Any,
) -> Dict[str, Any]:
    """Loads a safetensors file: ``{name: array}`` in file order (``keys`` order when given).

    ``keys`` reads only the byte spans of those tensors (a missing name is ``KeyError``).
    A malformed file is ``ValueError`` naming the file and what is wrong; nothing is returned.
    ``backend=``, ``block_size=``, ``queue_depth=`` and ``threads=`` tune the reads.
    """
    path = os.fspath(filename)
    b = _Builder(framework, device, path)
    arena, entries, _meta, _report = _native.st_load(path, None if keys is None else list(keys), memory=memory, mode=mode, progress=progress, **options)
    return b.build(arena, entries)


def load_model(
    path: PathLike,
    framework: str = "np",
    device: str = "cpu",
    *,
    memory: Memory = None,
    mode: str = "auto",
    progress: Progress = None,
    parallel: int = 4,
    **options: Any,
) -> Dict[str, Any]:
    """Loads a sharded checkpoint: every tensor of every shard, as one dict.

    ``path`` is a ``*.safetensors.index.json`` (as ``model.safetensors.index.json``), a folder
    holding one (without one, every ``*.safetensors`` in the folder is a shard), or a single
    file. Shards are read ``parallel`` at a time under the one ``memory`` budget. The index is
    checked against the shards (every tensor it names is in its shard, none is in two).
    """
    b = _Builder(framework, device, os.fspath(path))
    shards, _index = _native.st_load_model(os.fspath(path), memory=memory, mode=mode, progress=progress, parallel=parallel, **options)
    out: Dict[str, Any] = {}
    for arena, entries, _meta, report in shards:
        b.path = report["path"]
        out.update(b.build(arena, entries))
    return out


def load(data: bytes, framework: str = "np", device: str = "cpu") -> Dict[str, Any]:
    """Loads a whole safetensors file held in memory (as ``safetensors.numpy.load``): arrays are
    read-only views into ``data``."""
    b = _Builder(framework, device, "<bytes>")
    entries, _meta = _native.st_parse(data)
    whole = np.frombuffer(data, dtype=np.uint8)
    base = whole.__array_interface__["data"][0]
    return {name: b.tensor(whole, base, name, code, shape, off, n) for name, code, shape, off, n in entries}


def _spec(name: Any, value: Any) -> Tuple[str, str, List[int], np.ndarray]:
    """(name, dtype code, shape, bytes) of a numpy array or torch tensor, little-endian, C order."""
    if not isinstance(name, str):
        raise TypeError(f"tensor names must be str, got {type(name).__name__}")
    if type(value).__module__.split(".")[0] == "torch":
        import torch

        codes = {getattr(torch, a): c for c, a in _TORCH.items() if hasattr(torch, a)}
        code = codes.get(value.dtype)
        if code is None:
            raise TypeError(f"tensor '{name}': torch dtype {value.dtype} has no safetensors code")
        t = value.detach().to("cpu").contiguous()
        shape = list(t.shape)
        if code == "F4":
            shape[-1] *= 2
        data = t.reshape(-1).view(torch.uint8).numpy()
        return name, code, shape, data
    a = np.asarray(value)
    code = _TO_CODE.get(a.dtype.name)
    if code is None:
        raise TypeError(f"tensor '{name}': dtype {a.dtype} has no safetensors code (supported: {', '.join(sorted(_TO_CODE))})")
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return name, code, list(a.shape), a.reshape(-1).view(np.uint8)


def _specs(tensors: Mapping[str, Any]) -> List[Tuple[str, str, List[int], np.ndarray]]:
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of names to arrays, got {type(tensors).__name__}")
    return [_spec(k, v) for k, v in tensors.items()]


def save_file(
    tensors: Mapping[str, Any],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    mode: str = "auto",
    memory: Memory = None,
    progress: Progress = None,
    **options: Any,
) -> Dict[str, Any]:
    """Saves numpy arrays (or torch tensors) byte-for-byte as the safetensors package does:
    durable and atomic, with direct I/O, leaving no page cache. Returns the write report."""
    return _native.st_save(os.fspath(filename), _specs(tensors), metadata, mode=mode, memory=memory, progress=progress, **options)


def save(tensors: Mapping[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of ``tensors``, as ``safetensors.numpy.save`` returns them."""
    return _native.st_serialize(_specs(tensors), metadata)


class _Slice:
    """A tensor to slice without reading all of it (``safe_open(...).get_slice(name)``): the
    rows the first index selects are read, the rest of the index is applied to them."""

    def __init__(self, f: "safe_open", name: str) -> None:
        self._f = f
        self._name = name
        self._code, self._shape, self._nbytes = f._n.describe(name)

    def get_shape(self) -> List[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._code

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, index: Any) -> Any:
        idx = index if isinstance(index, tuple) else (index,)
        rows = self._shape[0] if self._shape else 0
        first = idx[0] if idx else slice(None)
        if not self._shape or rows == 0 or self._nbytes % rows or not isinstance(first, (int, np.integer, slice)):
            return self._f.get_tensor(self._name)[index]
        if isinstance(first, slice):
            r = range(*first.indices(rows))
            if len(r) == 0:
                lo = hi = 0
            else:
                lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            local: Any = slice(r.start - lo, r.stop - lo, r.step) if r.step > 0 and len(r) else [i - lo for i in r]
        else:
            i = int(first) + (rows if first < 0 else 0)
            if not 0 <= i < rows:
                raise IndexError(f"index {int(first)} is out of bounds for dimension 0 of '{self._name}' with size {rows}")
            lo, hi, local = i, i + 1, 0
        per_row = self._nbytes // rows
        arena, off = self._f._n.tensor_range(self._name, lo * per_row, hi * per_row)
        block = self._f._builder.build(arena, [(self._name, self._code, [hi - lo, *self._shape[1:]], off, (hi - lo) * per_row)])[self._name]
        if isinstance(local, list):
            if self._f._builder.framework == "np":
                local = np.asarray(local, dtype=np.intp)
            else:
                import torch

                local = torch.tensor(local, dtype=torch.long)
        out = block[(local,) + tuple(idx[1:])]
        if self._f._builder.framework == "np":
            return np.ascontiguousarray(out)
        return out.contiguous()


class safe_open:
    """Opens a safetensors file to read tensors one at a time, as ``safetensors.safe_open``:
    ``keys()``, ``offset_keys()``, ``metadata()``, ``get_tensor(name)``, ``get_slice(name)``,
    ``get_tensors()``. The header is read (and checked) at open; each tensor is read when asked
    for, with the tensors that follow it up to 4 MiB, so walking a file of many small tensors
    takes few reads. Arrays stay valid after the file is closed."""

    def __init__(self, filename: PathLike, framework: str, device: str = "cpu", *, mode: str = "auto", memory: Memory = None, backend: str = "auto") -> None:
        self._path = os.fspath(filename)
        self._builder = _Builder(framework, device, self._path)
        self._options = {"mode": mode, "memory": memory, "backend": backend}
        self._n = _native.SafeFile(self._path, **self._options)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file; arrays already taken stay valid."""
        self._n.close()

    def keys(self) -> List[str]:
        """Tensor names, sorted (as the safetensors package returns them)."""
        return sorted(self._n.offset_keys())

    def offset_keys(self) -> List[str]:
        """Tensor names in file order."""
        return self._n.offset_keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        """The free-form ``__metadata__`` strings, or None."""
        return self._n.metadata()

    def get_tensor(self, name: str) -> Any:
        """One tensor (``KeyError`` if there is none of that name)."""
        code, shape, nbytes = self._n.describe(name)
        arena, off = self._n.tensor(name)
        t = self._builder.build(arena, [(name, code, shape, off, nbytes)])[name]
        if nbytes > _WINDOW:
            return t
        # A small tensor lies in a read window shared with its neighbours (and with a later
        # get_tensor of the same name): hand out its own copy, so writing into one array never
        # changes another, as with the safetensors package.
        return t.copy() if self._builder.framework == "np" else t.clone()

    def get_slice(self, name: str) -> _Slice:
        """A sliceable handle: ``f.get_slice(name)[a:b]`` reads only the rows asked for."""
        return _Slice(self, name)

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, read in one pass (as ``load_file``)."""
        arena, entries, _meta, _report = _native.st_load(self._path, None, **self._options)
        return self._builder.build(arena, entries)

    @property
    def decision(self) -> Dict[str, str]:
        """How the file is read and why: ``{"mode": ..., "reason": ...}``."""
        m, r = self._n.decision()
        return {"mode": m, "reason": r}
