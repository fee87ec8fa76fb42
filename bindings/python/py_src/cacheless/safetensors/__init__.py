"""safetensors files at direct-I/O speed: a drop-in for the ``safetensors`` package.

This module matches ``safetensors.numpy`` (``load_file``, ``save_file``, ``load``, ``save``) and
``safetensors.safe_open``, and the package's top level too (``serialize``, ``serialize_file``,
``deserialize``, ``TensorSpec``, ``_safe_open_handle``); :mod:`cacheless.safetensors.torch` matches ``safetensors.torch``;
:mod:`cacheless.safetensors.numpy` is this module's numpy API under the package's module name.
Same parameter names, defaults, return values and exceptions: malformed files, missing tensors,
bad slices and closed handles raise :class:`SafetensorError`, which ``except
safetensors.SafetensorError`` catches too. Our extras are keyword-only: ``mode=``, ``memory=``,
``progress=``, ``keys=``, ``report=`` and the engine's tuning keywords; plus :func:`load_model`
for sharded checkpoints.

A load reads the file (or, with ``keys=``, only the byte spans of those tensors) into one
page-aligned buffer whose byte *i* is file byte *i*, with O_DIRECT when the file is cold, then
hands out arrays that are views into that buffer: no copy, and no page of the file left in the
page cache. A file that is already mostly cached is read buffered and stays cached. The buffer
lives as long as any array taken from it. A tensor whose file offset is not aligned to its
dtype (possible only in hand-made files) is copied into an aligned array of its own.

``save_file`` writes exactly the bytes the ``safetensors`` package writes (same header, same
tensor order) with direct I/O, under a temporary name, fsync'ed and renamed: readers and
mappings of an old file keep seeing the old file, and no page cache is left behind.

Where the safetensors package is wrong we are not: a non-contiguous numpy array is saved by its
values (the package saves its raw memory); ``get_slice`` takes negative slice bounds, a slice
whose start is past its stop (empty) and a full slice of an empty dimension (the package fails
on all three); ``load(bytes)`` returns tensors in file order (the package's order is that of a
hash map, different from call to call).

bfloat16 and float8 tensors load into numpy as ``ml_dtypes`` types (``pip install ml_dtypes``);
without it they raise ``TypeError`` naming it. ``framework="pt"`` uses ``torch.frombuffer`` over
the same buffer (zero-copy) when torch is installed.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from .. import _native
from .._files import _fspath
from ._core import Builder, Memory, PathLike, Progress, SafeOpen, SafetensorError, Size, call, engine_backend, load_path, save_to, specs, tuning
from ._raw import TensorSpec, _safe_open_handle, deserialize, serialize, serialize_file

__all__ = ["SafetensorError", "TensorSpec", "deserialize", "load", "load_file", "load_model", "safe_open", "save", "save_file", "serialize", "serialize_file"]


class safe_open(SafeOpen):
    __doc__ = SafeOpen.__doc__


def load_file(
    filename: PathLike,
    *,
    backend: str = "mmap",
    framework: str = "np",
    device: Any = "cpu",
    keys: Optional[Sequence[str]] = None,
    memory: Memory = None,
    mode: str = "auto",
    progress: Progress = None,
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
) -> Dict[str, Any]:
    """Loads a safetensors file: ``{name: array}`` in file order (``keys`` order when given).

    ``keys`` reads only the byte spans of those tensors. A malformed file, or a name in
    ``keys`` that is not in it, is :class:`SafetensorError` naming the file and what is wrong;
    nothing is returned. ``backend=`` takes safetensors' ``"mmap"``/``"pread"`` (the engine
    reads either way) or the engine's ``"auto"``/``"uring"``/``"threads"``; ``block_size=``,
    ``queue_depth=`` and ``threads=`` tune the reads.
    """
    path = _fspath(filename)
    return load_path(Builder(framework, device, path), path, keys, backend, mode, memory, progress, tuning(block_size, queue_depth, threads))


def load_model(
    path: PathLike,
    framework: str = "np",
    device: Any = "cpu",
    *,
    memory: Memory = None,
    mode: str = "auto",
    progress: Progress = None,
    parallel: int = 4,
    backend: str = "mmap",
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
) -> Dict[str, Any]:
    """Loads a sharded checkpoint: every tensor of every shard, as one dict.

    ``path`` is a ``*.safetensors.index.json`` (as ``model.safetensors.index.json``), a folder
    holding one (without one, every ``*.safetensors`` in the folder is a shard), or a single
    file. Shards are read ``parallel`` at a time under the one ``memory`` budget. The index is
    checked against the shards (every tensor it names is in its shard, none is in two).
    (:func:`cacheless.safetensors.torch.load_model` is the safetensors package's function of
    that name, loading into a ``torch.nn.Module``.)
    """
    b = Builder(framework, device, _fspath(path))
    engine = engine_backend(backend)
    options = tuning(block_size, queue_depth, threads)
    shards, _index = call(_native.st_load_model, _fspath(path), memory=memory, mode=mode, progress=progress, parallel=parallel, backend=engine, **options)
    out: Dict[str, Any] = {}
    for arena, entries, _meta, report in shards:
        b.path = report["path"]
        out.update(b.build(arena, entries))
    return out


def load(data: bytes, *, framework: str = "np", device: Any = "cpu") -> Dict[str, Any]:
    """Loads a whole safetensors file held in memory (as ``safetensors.numpy.load``): writable
    arrays of their own, in file order."""
    return Builder(framework, device, "<bytes>").from_bytes(data)


def save_file(
    tensor_dict: Mapping[str, Any],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    mode: str = "auto",
    memory: Memory = None,
    progress: Progress = None,
    report: Optional[dict] = None,
    backend: str = "auto",
    block_size: Size = None,
    queue_depth: Optional[int] = None,
) -> None:
    """Saves numpy arrays (or torch tensors) byte-for-byte as the safetensors package does:
    durable and atomic, with direct I/O, leaving no page cache. Returns None; pass a dict as
    ``report=`` to have the write report (mode, bytes, backend) put in it."""
    options = {"mode": mode, "memory": memory, "progress": progress, "backend": backend, **tuning(block_size, queue_depth)}
    save_to(filename, specs(tensor_dict), metadata, report, options)


def save(tensor_dict: Mapping[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of ``tensor_dict``, as ``safetensors.numpy.save`` returns them."""
    return _native.st_serialize(specs(tensor_dict), metadata)
