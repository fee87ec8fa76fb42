"""The safetensors package's framework-free top level: ``TensorSpec``, ``serialize``,
``serialize_file``, ``deserialize`` and ``_safe_open_handle``, with its parameter names, return
values and exceptions.

``TensorSpec`` describes a tensor by a raw address and length, as the package's does: the caller
keeps that memory alive and unchanged while ``serialize``/``serialize_file`` runs (the package
asks the same). The bytes are read through a view of that memory, never copied first;
``serialize_file`` writes them with the engine (direct I/O, durable, atomic) and releases the GIL
while it does."""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .. import _native
from .._files import _fspath
from ._core import PathLike, SafeOpen, SafetensorError, save_to

# The constructor names TensorSpec takes (numpy's and torch's spelling) -> format code.
_CODES = {
    "bool": "BOOL",
    "int8": "I8",
    "uint8": "U8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2": "F8_E5M2",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4",
    "complex64": "C64",
}


def _index(value: Any, what: str) -> int:
    """A non-negative int, as the package's integer arguments take it (TypeError, OverflowError)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"TensorSpec(): '{what}' must be an int, got {type(value).__name__}")
    n = value.__index__()
    if n < 0:
        raise OverflowError(f"TensorSpec(): '{what}' must not be negative, got {n}")
    return n


class TensorSpec:
    """One tensor for :func:`serialize` / :func:`serialize_file`: ``TensorSpec(*, dtype, shape,
    data_ptr, data_len)``, as the safetensors package's.

    ``dtype`` is the constructor-style name (``"float32"``, ``"bfloat16"``, ...), checked at once:
    an unknown one raises :class:`SafetensorError`. The ``dtype`` property gives the format code
    written to the header (``"F32"``). For ``float4_e2m1fn_x2`` (two values per byte) the last
    dimension of ``shape`` is doubled, so ``shape`` is the element count the header records.
    ``data_ptr`` is a raw address: the caller keeps its ``data_len`` bytes alive while they are
    serialized."""

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        if not isinstance(dtype, str):
            raise TypeError(f"TensorSpec(): 'dtype' must be a str, got {type(dtype).__name__}")
        code = _CODES.get(dtype)
        if code is None:
            raise SafetensorError(f"Unknown dtype {dtype!r}. Supported dtypes: {', '.join(_CODES)}")
        if isinstance(shape, (str, bytes)):
            raise TypeError("TensorSpec(): 'shape' must be a sequence of ints, got a string")
        dims = [_index(d, "shape") for d in shape]
        if code == "F4" and dims:
            dims[-1] *= 2
        self._dtype = code
        self._shape = dims
        self._data_ptr = _index(data_ptr, "data_ptr")
        self._data_len = _index(data_len, "data_len")

    @property
    def dtype(self) -> str:
        """The format code written to the header (``"F32"``, ``"BF16"``, ...)."""
        return self._dtype

    @property
    def shape(self) -> List[int]:
        """The element-count shape the header records."""
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        """The address of the tensor's contiguous bytes."""
        return self._data_ptr

    @property
    def data_len(self) -> int:
        """The number of bytes at ``data_ptr``."""
        return self._data_len

    def __repr__(self) -> str:
        return f"TensorSpec(dtype='{self._dtype}', shape={self._shape}, data_ptr={self._data_ptr}, data_len={self._data_len})"


def _given(tensor_dict: Any) -> List[Tuple[str, str, List[int], np.ndarray]]:
    """(name, code, shape, bytes) per TensorSpec, each a view of the caller's memory."""
    if not isinstance(tensor_dict, Mapping):
        raise TypeError(f"tensor_dict must be a dict of str to TensorSpec, got {type(tensor_dict).__name__}")
    out = []
    for name, spec in tensor_dict.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {type(name).__name__}")
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"tensor '{name}': expected a TensorSpec, got {type(spec).__name__}")
        n = spec.data_len
        if n == 0:
            data = np.empty(0, dtype=np.uint8)
        else:
            data = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(spec.data_ptr))
        out.append((name, spec.dtype, spec.shape, data))
    return out


def serialize(tensor_dict: Dict[str, TensorSpec], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of the tensors ``tensor_dict`` describes (``safetensors.serialize``)."""
    return _native.st_serialize(_given(tensor_dict), metadata)


def serialize_file(tensor_dict: Dict[str, TensorSpec], filename: PathLike, metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes those bytes to ``filename`` (``safetensors.serialize_file``): with direct I/O, under
    a temporary name, durable, then renamed; the GIL is released while it writes."""
    save_to(filename, _given(tensor_dict), metadata, None, {})


def deserialize(bytes: Any) -> List[Tuple[str, Dict[str, Any]]]:  # noqa: A002 - the package's parameter name
    """``[(name, {"shape": [...], "dtype": "F32", "data": bytearray}), ...]`` for a whole file
    held in memory, in file order (``safetensors.deserialize``)."""
    entries, _meta = _native.st_parse(bytes)
    whole = memoryview(bytes).cast("B")
    return [(name, {"shape": list(shape), "dtype": code, "data": bytearray(whole[off : off + n])}) for name, code, shape, off, n in entries]


class _safe_open_handle(SafeOpen):  # noqa: N801 - the package's name
    """``safe_open`` over an open file object (``safetensors._safe_open_handle``): the object must
    have ``fileno()``, and the file is read by its ``name``."""

    def __init__(self, f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap") -> None:
        f.fileno  # noqa: B018 - AttributeError for an object that is not a file, as the package raises
        super().__init__(_fspath(f.name), framework, device, backend=backend)
