"""What the numpy and torch halves of :mod:`cacheless.safetensors` share: the error class, dtype
tables, turning a loaded arena into arrays or tensors, ``safe_open`` and its slices, and turning
arrays or tensors into the bytes to save."""

from __future__ import annotations

import errno
import mmap
import os
import sys
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _native
from .._files import _fspath

PathLike = Union[str, "os.PathLike[str]"]
Memory = Union[int, str, None]
Size = Union[int, str, None]
Progress = Optional[Callable[[int, int], Any]]


def tuning(block_size: Size, queue_depth: Optional[int], threads: Optional[int] = None) -> Dict[str, Any]:
    """The engine's tuning keywords a caller gave (``None``: the engine's default)."""
    given = {"block_size": block_size, "queue_depth": queue_depth, "threads": threads}
    return {k: v for k, v in given.items() if v is not None}

try:  # The safetensors package's own class, so that `except safetensors.SafetensorError` works.
    from safetensors import SafetensorError as _PeerError
except ImportError:  # pragma: no cover - exercised where safetensors is not installed
    _PeerError = None


if _PeerError is not None:

    class SafetensorError(_PeerError, ValueError):  # type: ignore[misc, valid-type]
        """A malformed or truncated file, a missing tensor, a bad slice or a closed handle.

        A subclass of the ``safetensors`` package's ``SafetensorError`` (so ``except
        safetensors.SafetensorError`` catches it) and of ``ValueError``."""

else:

    class SafetensorError(ValueError):  # type: ignore[no-redef]
        """A malformed or truncated file, a missing tensor, a bad slice or a closed handle
        (a ``ValueError``; also a ``safetensors.SafetensorError`` when that package is installed)."""


SafetensorError.__module__ = "cacheless.safetensors"

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

# (name, dtype code, shape, arena offset, bytes)
_Entry = Tuple[str, str, List[int], int, int]
# safe_open reads a small tensor together with the tensors after it, up to this many bytes
# (the engine's read window).
_WINDOW = 4 << 20
# The safetensors package's `backend=` values. Neither maps the file here: both read through the
# engine, which picks direct or buffered reads per file; the engine's own backends are accepted too.
_ST_BACKENDS = ("mmap", "pread")
_ENGINE_BACKENDS = ("auto", "uring", "threads")


def engine_backend(backend: str) -> str:
    """The engine backend for a ``backend=`` value: safetensors' ``"mmap"`` and ``"pread"`` read
    with the engine's automatic choice; ``"auto"``, ``"uring"`` and ``"threads"`` force ours."""
    if backend in _ST_BACKENDS:
        return "auto"
    if backend in _ENGINE_BACKENDS:
        return backend
    choices = ", ".join(f'"{b}"' for b in _ST_BACKENDS + _ENGINE_BACKENDS)
    raise SafetensorError(f'backend "{backend}" is invalid (expected one of: {choices})')


def call(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls a native function, raising a missing file as the safetensors package does
    (``FileNotFoundError("No such file or directory: PATH")``, with ``errno`` set)."""
    try:
        return f(*args, **kwargs)
    except FileNotFoundError as e:
        if e.errno != errno.ENOENT or e.filename is None:
            raise
        err = FileNotFoundError(f"No such file or directory: {e.filename}")
        err.errno = errno.ENOENT
        raise err from None


def framework_of(framework: str) -> str:
    if framework in ("np", "numpy"):
        return "np"
    if framework in ("pt", "torch"):
        return "pt"
    raise SafetensorError(f"framework {framework} is invalid (cacheless reads 'np'/'numpy' and 'pt'/'torch')")


def numpy_dtype(code: str, where: str) -> np.dtype:
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


def torch_dtype(code: str, where: str) -> Any:
    import torch

    attr = _TORCH.get(code)
    dt = getattr(torch, attr, None) if attr else None
    if dt is None:
        raise TypeError(f"{where} is {code}, which this torch ({torch.__version__}) has no dtype for")
    return dt


def torch_device(device: Any) -> Any:
    """The torch device for a ``device=`` value (a name, an index, or a ``torch.device``), refused
    as the safetensors package refuses it."""
    import torch

    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise SafetensorError(f"device {device} is invalid") from None
    if d.type == "meta":
        raise SafetensorError(f"device {device} is invalid")
    return d


class Builder:
    """Turns (arena, entries) into arrays or tensors of one framework, sharing the arena."""

    def __init__(self, framework: str, device: Any, path: str) -> None:
        self.framework = framework_of(framework)
        if self.framework == "np":
            if device not in ("cpu", None):
                raise SafetensorError(f"Device {device} is not supported for framework numpy")
            self.device = None
        else:
            d = torch_device("cpu" if device is None else device)
            self.device = None if d.type == "cpu" else d
        self.path = path

    def tensor(self, whole: np.ndarray, base: int, name: str, code: str, shape: Sequence[int], off: int, nbytes: int) -> Any:
        where = f"{self.path}: tensor '{name}'"
        if self.framework == "np":
            dt = numpy_dtype(code, where)
            raw = whole[off : off + nbytes]
            if nbytes and (base + off) % dt.alignment:
                raw = raw.copy()  # misaligned in the file: an aligned copy of its own
            return raw.view(dt).reshape(tuple(shape))
        return self._torch(whole, base, where, code, shape, off, nbytes)

    def _torch(self, whole: np.ndarray, base: int, where: str, code: str, shape: Sequence[int], off: int, nbytes: int) -> Any:
        import torch

        dt = torch_dtype(code, where)
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
        if self.device is not None:
            t = t.to(self.device)
        return t

    def build(self, arena: Any, entries: Iterable[_Entry]) -> Dict[str, Any]:
        """Tensors over an arena, or over a numpy byte array of the whole file (a mapping)."""
        whole = np.asarray(arena)
        base = whole.__array_interface__["data"][0]
        return {name: self.tensor(whole, base, name, code, shape, off, n) for name, code, shape, off, n in entries}

    def from_bytes(self, data: Any) -> Dict[str, Any]:
        """Every tensor of a whole file held in memory, in file order, each in memory of its own
        (writable, and independent of ``data`` and of each other)."""
        entries, _meta = _native.st_parse(data)
        src = np.frombuffer(data, dtype=np.uint8)
        whole = np.empty(src.size, dtype=np.uint8)  # numpy's allocations are aligned for every dtype
        whole[:] = src
        return self.build(whole, entries)

    def copy(self, t: Any) -> Any:
        """A copy of an array or tensor in memory of its own (0-d stays 0-d)."""
        if self.framework == "np":
            return np.array(t, copy=True)
        return t.clone()


def map_whole(fd: int) -> Optional[Tuple[np.ndarray, List[_Entry]]]:
    """The file open on ``fd`` mapped privately (copy on write) as one byte array, with its
    tensors' entries; None if its header no longer parses (it changed since the caller decided:
    the engine's read then reports it, naming the file)."""
    whole = np.frombuffer(mmap.mmap(fd, 0, access=mmap.ACCESS_COPY), dtype=np.uint8)
    try:
        entries, _meta = _native.st_parse(whole)
    except SafetensorError:
        return None
    return whole, entries


def resident(path: str, mode: str, backend: str, progress: Progress) -> Optional[Tuple[np.ndarray, List[_Entry]]]:
    """A file that auto reads buffered because it is already resident in the page cache, mapped
    (:func:`map_whole`): its tensors are then the page cache's own pages, as with the safetensors
    package's mmap load, with nothing copied or read, and writing into one never reaches the
    file. None for any other file or mode (read it). The decision is the engine's, from opening
    the file (a stat and a residency query: no data is read).

    A mapping sees the file as it is on disk: a file replaced by rename (as every save here
    does) keeps the old contents mapped, but one truncated in place by another program faults
    (SIGBUS) where a loaded copy would not; the safetensors package's default has the same trait."""
    if mode != "auto" or _native.is_url(path):
        return None
    r = call(_native.Reader, path, mode=mode, backend=backend)
    try:
        got = map_whole(r.fileno()) if r.decision()[0] == "buffered" else None
    finally:
        r.close()
    if got is not None and progress is not None:
        progress(got[0].size, got[0].size)
    return got


def load_path(b: Builder, path: str, keys: Optional[Sequence[str]], backend: str, mode: str, memory: Memory, progress: Progress, options: Dict[str, Any]) -> Dict[str, Any]:
    """``load_file`` of either framework: a resident file mapped (see :func:`resident`), any
    other read into one arena (only the spans of ``keys`` when given). A URL's header is fetched
    first, then its tensors' ranges in parallel straight into the arena. ``options``: the tuning
    keywords given (see :func:`tuning`); a file read with them is read, never mapped."""
    engine = engine_backend(backend)
    if keys is None and not options:
        mapped = resident(path, mode, engine, progress)
        if mapped is not None:
            return b.build(*mapped)
    arena, entries, _meta, _report = call(_native.st_load, path, None if keys is None else list(keys), memory=memory, mode=mode, progress=progress, backend=engine, **options)
    return b.build(arena, entries)


def _spec(name: Any, value: Any) -> Tuple[str, str, List[int], np.ndarray]:
    """(name, dtype code, shape, bytes) of a numpy array or torch tensor, little-endian, C order."""
    if not isinstance(name, str):
        raise TypeError(f"tensor names must be str, got {type(name).__name__}")
    if type(value).__module__.split(".")[0] == "torch":
        import torch

        codes = {getattr(torch, a): c for c, a in _TORCH.items() if hasattr(torch, a)}
        code = codes.get(value.dtype)
        if code is None:
            raise SafetensorError(f"tensor '{name}': torch dtype {value.dtype} has no safetensors code")
        t = value.detach().to("cpu").contiguous()
        shape = list(t.shape)
        if code == "F4":
            shape[-1] *= 2
        data = t.reshape(-1).view(torch.uint8).numpy()
        return name, code, shape, data
    a = np.asarray(value)
    code = _TO_CODE.get(a.dtype.name)
    if code is None:
        raise SafetensorError(f"tensor '{name}': dtype {a.dtype} has no safetensors code (supported: {', '.join(sorted(_TO_CODE))})")
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return name, code, list(a.shape), a.reshape(-1).view(np.uint8)


def specs(tensors: Mapping[str, Any]) -> List[Tuple[str, str, List[int], np.ndarray]]:
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of names to arrays, got {type(tensors).__name__}")
    return [_spec(k, v) for k, v in tensors.items()]


def save_to(filename: PathLike, given: List[Tuple[str, str, List[int], np.ndarray]], metadata: Optional[Dict[str, str]], report: Optional[dict], options: Dict[str, Any]) -> None:
    """Saves specs (see :func:`specs`), filling ``report`` (a dict) with the write report when given."""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict of str to str, got {type(metadata).__name__}")
    rep = call(_native.st_save, _fspath(filename), given, metadata, **options)
    if report is not None:
        report.clear()
        report.update(rep)


# ---------------------------------------------------------------- slicing


def _shown(items: Sequence[Any]) -> str:
    """An index as the safetensors package shows it in its errors: ``[2:, 20]``."""
    parts = []
    for i in items:
        if isinstance(i, slice):
            text = f"{'' if i.start is None else int(i.start)}:{'' if i.stop is None else int(i.stop)}"
            parts.append(text if i.step in (None, 1) else f"{text}:{int(i.step)}")
        else:
            parts.append(str(int(i)))
    return f"[{', '.join(parts)}]"


def plan_index(index: Any, shape: Sequence[int]) -> List[Union[int, slice]]:
    """One int or a positive-step slice per dimension, checked as the safetensors package checks
    an index, with its messages: ints, slices, one ``...`` and the empty list (nothing of the first
    dimension) only; an int or a slice bound past the end of its dimension is an error rather than
    clipped. Negative ints and bounds count from the end (the safetensors package fails on
    negative bounds, and on a full slice of an empty dimension)."""
    if isinstance(index, list):
        if index:
            raise SafetensorError("Non empty lists are not implemented")
        index = slice(0, 0)
    idx = index if isinstance(index, tuple) else (index,)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise SafetensorError("Only one ellipsis (...) is allowed in slice index")
    given = len(idx) - (1 if any(i is Ellipsis for i in idx) else 0)
    shown: List[Any] = []
    for pos, i in enumerate(idx):
        if i is Ellipsis:
            shown.extend([slice(None)] * max(0, len(shape) - given))
        elif isinstance(i, (slice, int, np.integer)):
            shown.append(i)
        else:
            raise SafetensorError(f"Unsupported slice index at position {len(shown)}: expected slice, int, or ellipsis")
    for dim, i in enumerate(shown):
        if isinstance(i, slice):
            step = 1 if i.step is None else int(i.step)
            if step <= 0:
                raise SafetensorError(f"Slice step must be a positive integer, got {step}")
        elif int(i) < 0:
            size = shape[dim] if dim < len(shape) else 0
            if int(i) + size < 0:
                raise SafetensorError(f"Invalid index {int(i)} for dimension {dim} of size {size}")
            shown[dim] = int(i) + size

    def error(what: str) -> SafetensorError:
        return SafetensorError(f"Error during slicing {_shown(shown)} with shape {list(shape)}: {what}")

    if len(shown) > len(shape):
        raise error("more slicing indexes than dimensions in tensor")
    out: List[Union[int, slice]] = []
    for dim, size in reversed(list(enumerate(shape))):  # the package reports the last dimension at fault
        i = shown[dim] if dim < len(shown) else slice(None)
        if isinstance(i, slice):
            start, stop = [0 if b is None else int(b) + (size if int(b) < 0 else 0) for b in (i.start, i.stop)]
            stop = size if i.stop is None else stop
            if (i.start is not None and not 0 <= start < size) or (i.stop is not None and not 0 <= stop <= size):
                # as the package words it: the start if it is past the end, else the last index the stop asks for
                asked = start if start >= size else int(i.stop) if stop < 0 else int(i.start) if start < 0 else stop - 1
                raise error(f"index {asked} out of bounds for tensor dimension #{dim} of size {size}")
            out.append(slice(start, max(start, stop), 1 if i.step is None else int(i.step)))
        else:
            if not int(i) < size:
                raise error(f"index {int(i)} out of bounds for tensor dimension #{dim} of size {size}")
            out.append(int(i))
    return out[::-1]


class Slice:
    """A tensor to slice without reading all of it (``safe_open(...).get_slice(name)``): the
    rows the first index selects are read, the rest of the index is applied to them. The result
    is always an array (or tensor) of its own, 0-d where every dimension was indexed by an int.
    As in the safetensors package, numpy slices are checked strictly (:func:`plan_index`) and
    torch slices follow torch's indexing."""

    def __init__(self, f: "SafeOpen", name: str) -> None:
        self._f = f
        self._name = name
        self._code, self._shape, self._nbytes = f._native().describe(name)

    def get_shape(self) -> List[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._code

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, index: Any) -> Any:
        b = self._f._builder
        if b.framework == "pt":
            return self._torch_item(index)
        plan = plan_index(index, self._shape)
        if not plan or self._f._read_whole:
            return b.copy(self._f.get_tensor(self._name)[tuple(plan)])
        first = plan[0]
        lo, hi = (first, first + 1) if isinstance(first, int) else (first.start, first.stop)
        block = self._rows(lo, hi)
        local: List[Any] = [0 if isinstance(first, int) else slice(0, hi - lo, first.step)] + list(plan[1:])
        return b.copy(block[tuple(local)])

    def _rows(self, lo: int, hi: int) -> Any:
        """Rows ``[lo, hi)`` of the tensor (read from the file, or an empty block)."""
        b = self._f._builder
        if hi <= lo:
            return self._empty(b)
        per_row = self._nbytes // self._shape[0]
        arena, off = self._f._native().tensor_range(self._name, lo * per_row, hi * per_row)
        return b.build(arena, [(self._name, self._code, [hi - lo, *self._shape[1:]], off, (hi - lo) * per_row)])[self._name]

    def _torch_item(self, index: Any) -> Any:
        """torch's own indexing, as the safetensors package applies it for ``framework="pt"``
        (torch's bounds clipping and exceptions), reading only the rows the first index
        selects where it is a plain int or a forward slice (with the whole file read at once,
        from memory)."""
        idx = index if isinstance(index, tuple) else (index,)
        if all(i is Ellipsis or i == slice(None) for i in idx) and sum(1 for i in idx if i is Ellipsis) <= 1 and sum(1 for i in idx if i is not Ellipsis) <= len(self._shape):
            # The whole tensor (`[...]`, `[:]`, `[()]`: how transformers reads each tensor): get_tensor's
            # result is already memory of its own.
            return self._f.get_tensor(self._name)
        first = idx[0] if idx else None
        rows = self._shape[0] if self._shape and not self._f._read_whole else None
        if rows is not None and isinstance(first, (int, np.integer)) and not isinstance(first, (bool, np.bool_)) and -rows <= int(first) < rows:
            i = int(first) % rows
            return self._rows(i, i + 1)[(0, *idx[1:])].clone()
        if rows is not None and isinstance(first, slice) and (first.step is None or (isinstance(first.step, int) and first.step > 0)):
            try:
                lo, hi, step = first.indices(rows)
            except TypeError:
                lo = None
            if lo is not None:
                return self._rows(lo, max(lo, hi))[(slice(0, max(lo, hi) - lo, step), *idx[1:])].clone()
        whole = self._f.get_tensor(self._name)
        return whole[index].clone()

    def _empty(self, b: Builder) -> Any:
        shape = [0, *self._shape[1:]]
        if b.framework == "np":
            return np.zeros(shape, dtype=numpy_dtype(self._code, f"{self._f._path}: tensor '{self._name}'"))
        import torch

        return torch.zeros(shape, dtype=torch_dtype(self._code, f"{self._f._path}: tensor '{self._name}'"), device=b.device)


class SafeOpen:
    """Opens a safetensors file to read tensors one at a time, as ``safetensors.safe_open``:
    ``keys()``, ``offset_keys()``, ``metadata()``, ``get_tensor(name)``, ``get_slice(name)``,
    ``get_tensors()``. The header is read (and checked) at open; each tensor is read when asked
    for, with the tensors that follow it up to 4 MiB, so walking a file of many small tensors
    takes few reads. Arrays stay valid after the file is closed; the handle itself answers
    ``SafetensorError("File is closed")`` once closed, as the safetensors package's does.

    ``backend=`` takes safetensors' ``"mmap"`` and ``"pread"`` (both read through the engine
    here: nothing is mapped) or the engine's ``"auto"``, ``"uring"``, ``"threads"``."""

    # Read every tensor in one pass at the first one asked for, and serve the rest from memory
    # (set by subclasses for callers that read whole files through safe_open, as transformers'
    # from_pretrained does: cacheless.patch_safetensors).
    _read_whole = False

    def __init__(self, filename: PathLike, framework: str, device: Any = "cpu", *, backend: str = "mmap", mode: str = "auto", memory: Memory = None) -> None:
        self._all: Optional[Dict[str, Any]] = None
        self._all_lock = threading.Lock()
        self._path = _fspath(filename)
        self._builder = Builder(framework, device, self._path)
        self._options = {"mode": mode, "memory": memory, "backend": engine_backend(backend)}
        self._n: Any = call(_native.SafeFile, self._path, **self._options)

    def _native(self) -> Any:
        if self._n is None:
            raise SafetensorError("File is closed")
        return self._n

    def __enter__(self) -> "SafeOpen":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file; arrays already taken stay valid."""
        if self._n is not None:
            self._n.close()
            self._n = None
        self._all = None

    def keys(self) -> List[str]:
        """Tensor names, sorted (as the safetensors package returns them)."""
        return sorted(self._native().offset_keys())

    def offset_keys(self) -> List[str]:
        """Tensor names in file order."""
        return self._native().offset_keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        """The free-form ``__metadata__`` strings, or None."""
        return self._native().metadata()

    def get_tensor(self, name: str) -> Any:
        """One tensor (``SafetensorError`` if there is none of that name)."""
        n = self._native()
        code, shape, nbytes = n.describe(name)
        if self._read_whole:
            with self._all_lock:
                if self._all is None:
                    self._all = self.get_tensors()
            return self._all[name]
        arena, off = n.tensor(name)
        t = self._builder.build(arena, [(name, code, shape, off, nbytes)])[name]
        if nbytes > _WINDOW:
            return t
        # A small tensor lies in a read window shared with its neighbours (and with a later
        # get_tensor of the same name): hand out its own copy, so writing into one array never
        # changes another, as with the safetensors package.
        return self._builder.copy(t)

    def get_slice(self, name: str) -> Slice:
        """A sliceable handle: ``f.get_slice(name)[a:b]`` reads only the rows asked for."""
        return Slice(self, name)

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor in file order, read in one pass (as ``load_file``; a resident file is mapped)."""
        n = self._native()
        if self._options["mode"] == "auto" and n.decision()[0] == "buffered":
            with open(self._path, "rb") as fh:
                mapped = map_whole(fh.fileno())
            if mapped is not None:
                return self._builder.build(*mapped)
        arena, entries, _meta, _report = call(_native.st_load, self._path, None, **self._options)
        return self._builder.build(arena, entries)

    @property
    def decision(self) -> Dict[str, str]:
        """How the file is read and why: ``{"mode": ..., "reason": ...}``."""
        m, r = self._native().decision()
        return {"mode": m, "reason": r}
