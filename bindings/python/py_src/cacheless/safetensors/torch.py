"""torch tensors from and to safetensors files: a drop-in for ``safetensors.torch``.

``load_file``, ``save_file``, ``load``, ``save``, ``load_model``, ``save_model``, ``storage_ptr``
and ``storage_size`` take the parameters of the ``safetensors.torch`` functions of those names,
return what they return and raise what they raise. Loads read with O_DIRECT into one aligned
buffer and hand out tensors that are views into it (``torch.frombuffer``: no copy, nothing left in
the page cache); saves write the package's exact bytes under a temporary name, durable, then
renamed. Shared and tied tensors are treated as the package treats them: ``save_file`` refuses
tensors that share memory, ``save_model`` keeps one name of each shared group (recording the
others in the metadata) and ``load_model`` fills them all again.

The package's helpers that callers and its own tests import (``_find_shared_tensors``,
``_remove_duplicate_names``, ``_is_complete``, ``_end_ptr``) are here under the same names.

Our extras are keyword-only: ``mode=``, ``memory=``, ``progress=``, ``keys=``, ``report=`` and the
engine's tuning keywords. ``load_model`` also takes a sharded checkpoint (an index file, or a
folder of shards) where the package takes one file.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import torch

from .. import _native
from .._files import _fspath
from ._core import Builder, Memory, PathLike, Progress, SafetensorError, Size, engine_backend, load_path, save_to, specs, tuning

__all__ = ["SafetensorError", "load", "load_file", "load_model", "save", "save_file", "save_model", "storage_ptr", "storage_size"]

Device = Union[str, int, "torch.device"]


def storage_ptr(tensor: torch.Tensor) -> int:
    """Address of the storage behind ``tensor`` (0 for storage without memory, such as meta)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """Bytes of the storage behind ``tensor`` (all of it, not only the part the tensor views)."""
    try:
        return tensor.untyped_storage().nbytes()
    except (NotImplementedError, RuntimeError):
        return tensor.nelement() * tensor.element_size()


def _span(t: torch.Tensor) -> Tuple[int, int]:
    """[first byte, one past the last byte) of the memory ``t`` views (any strides)."""
    start = t.data_ptr()
    if t.nelement() == 0:
        return start, start
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _find_shared_tensors(state_dict: Mapping[str, torch.Tensor]) -> List[Set[str]]:
    """Names grouped by the memory they share: tensors of one storage whose byte ranges overlap
    (directly or through a chain of others) form one group; every other tensor is a group of one."""
    by_storage: Dict[Tuple[Any, int, int], List[str]] = defaultdict(list)
    for name, t in state_dict.items():
        if t.device.type == "meta":
            continue
        ptr, size = storage_ptr(t), storage_size(t)
        if ptr and size:
            by_storage[(t.device, ptr, size)].append(name)
    groups: List[Set[str]] = []
    for names in by_storage.values():
        spans = sorted((*_span(state_dict[n]), n) for n in names)
        reach = None
        for start, stop, name in spans:
            if reach is not None and start < reach:
                groups[-1].add(name)
                reach = max(reach, stop)
            else:
                groups.append({name})
                reach = stop
    return groups


def _end_ptr(tensor: torch.Tensor) -> int:
    """One past the last byte of the memory ``tensor`` views (its first byte when it is empty)."""
    return _span(tensor)[1]


def _is_complete(t: torch.Tensor) -> bool:
    """True when ``t`` views all of its storage, from its first byte."""
    return t.data_ptr() == storage_ptr(t) and t.nelement() * t.element_size() == storage_size(t)


def _remove_duplicate_names(
    state_dict: Mapping[str, torch.Tensor], *, preferred_names: Optional[Sequence[str]] = None, discard_names: Optional[Sequence[str]] = None
) -> Dict[str, List[str]]:
    """For each group of tensors sharing memory, the name kept (one viewing the whole storage:
    preferably among ``preferred_names``, else not among ``discard_names``, else the first in
    sorted order) mapped to the sorted names dropped for it. As in the safetensors package, a
    group (even of one tensor) none of whose tensors views its whole storage is refused."""
    drop: Dict[str, List[str]] = {}
    preferred, discard = set(preferred_names or ()), set(discard_names or ())
    for group in _find_shared_tensors(state_dict):
        whole = sorted(n for n in group if _is_complete(state_dict[n]))
        if not whole:
            raise RuntimeError(
                f"tensors {sorted(group)} view part of a storage and none of them covers all of it, so no name can stand "
                "for the memory they share; save copies of them (.clone()) instead"
            )
        if len(group) < 2:
            continue
        keep = ([n for n in whole if n in preferred] or [n for n in whole if n not in discard] or whole)[0]
        drop[keep] = sorted(n for n in group if n != keep)
    return drop


def _check(tensors: Any) -> None:
    """Refuses what ``safetensors.torch.save_file`` refuses, with the package's exception types
    and messages (callers match on them)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(t)}")
        if t.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support. You can make it a "
            "dense tensor before saving with `.to_dense()` but be aware this might make a much larger file than needed."
        )
    shared = [g for g in _find_shared_tensors(tensors) if len(g) > 1]
    if shared:
        raise RuntimeError(
            f"Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading "
            f"them again: {shared}. A potential way to correctly save your model is to use `save_model`."
        )
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. Save only the full tensors "
                "and slice them after loading, or call `.contiguous()` on this one before saving."
            )


def load_file(
    filename: PathLike,
    device: Device = "cpu",
    *,
    backend: str = "mmap",
    keys: Optional[Sequence[str]] = None,
    memory: Memory = None,
    mode: str = "auto",
    progress: Progress = None,
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
) -> Dict[str, torch.Tensor]:
    """Loads a safetensors file as ``{name: tensor}`` in file order, as
    ``safetensors.torch.load_file``: tensors on the CPU are zero-copy views into one buffer
    read with direct I/O; on another ``device`` they are copied there from it.

    ``backend=`` takes safetensors' ``"mmap"``/``"pread"`` (the engine reads either way) or the
    engine's ``"auto"``/``"uring"``/``"threads"``; ``keys=`` reads only those tensors.
    """
    path = _fspath(filename)
    return load_path(Builder("pt", device, path), path, keys, backend, mode, memory, progress, tuning(block_size, queue_depth, threads))


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """Loads a whole safetensors file held in memory (as ``safetensors.torch.load``): CPU
    tensors of their own, in file order."""
    return Builder("pt", "cpu", "<bytes>").from_bytes(data)


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of ``tensors`` (as ``safetensors.torch.save``)."""
    _check(tensors)
    return _native.st_serialize(specs(tensors), metadata)


def save_file(
    tensors: Dict[str, torch.Tensor],
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
    """Saves tensors as ``safetensors.torch.save_file`` does, byte for byte: durable and atomic,
    with direct I/O, leaving no page cache. Returns None; pass a dict as ``report=`` to have the
    write report put in it."""
    _check(tensors)
    options = {"mode": mode, "memory": memory, "progress": progress, "backend": backend, **tuning(block_size, queue_depth)}
    save_to(filename, specs(tensors), metadata, report, options)


def save_model(
    model: torch.nn.Module,
    filename: str,
    metadata: Optional[Dict[str, str]] = None,
    force_contiguous: bool = True,
    *,
    mode: str = "auto",
    memory: Memory = None,
    progress: Progress = None,
    report: Optional[dict] = None,
    backend: str = "auto",
    block_size: Size = None,
    queue_depth: Optional[int] = None,
) -> None:
    """Saves ``model.state_dict()`` as ``safetensors.torch.save_model``: of tensors sharing
    memory (tied weights) one is saved and each other name is recorded in the metadata as
    ``{dropped: kept}`` (a caller's own metadata entry of that name is kept);
    ``force_contiguous`` saves non-contiguous tensors by their values."""
    state = model.state_dict()
    for kept, dropped in _remove_duplicate_names(state).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)
            del state[name]
    if force_contiguous:
        state = {k: v.contiguous() for k, v in state.items()}
    try:
        tuned = dict(backend=backend, block_size=block_size, queue_depth=queue_depth)
        save_file(state, filename, metadata, mode=mode, memory=memory, progress=progress, report=report, **tuned)
    except ValueError as e:
        if isinstance(e, SafetensorError):
            raise
        raise ValueError(f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential caveats.") from None


def load_model(
    model: torch.nn.Module,
    filename: PathLike,
    strict: bool = True,
    device: Device = "cpu",
    *,
    backend: str = "mmap",
    memory: Memory = None,
    mode: str = "auto",
    progress: Progress = None,
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
) -> Tuple[Set[str], List[str]]:
    """Loads a file saved by :func:`save_model` (or any safetensors file) into ``model``, as
    ``safetensors.torch.load_model``: tied weights dropped at save are filled from the name kept.
    Returns ``(missing, unexpected)``; with ``strict`` either being non-empty is a
    ``RuntimeError`` listing them. ``filename`` may also be a sharded checkpoint (an index
    ``*.safetensors.index.json`` or a folder of shards), read shards in parallel."""
    path = _fspath(filename)
    opts = {"memory": memory, "mode": mode, "progress": progress, "block_size": block_size, "queue_depth": queue_depth, "threads": threads}
    if os.path.isdir(path) or path.endswith(".index.json") or (_native.is_url(path) and path.endswith("/")):
        from . import load_model as load_shards

        state = load_shards(path, "pt", device, backend=backend, **opts)
    else:
        state = load_file(path, device, backend=backend, **opts)
    own = model.state_dict()
    tied = _remove_duplicate_names(own, preferred_names=list(state))
    missing_list, unexpected = model.load_state_dict(state, strict=False)
    missing = set(missing_list)
    for dropped in tied.values():
        for name in dropped:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        msg = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            msg += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            msg += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(msg)
    return missing, unexpected
