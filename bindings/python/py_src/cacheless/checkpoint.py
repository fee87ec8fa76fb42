"""``torch.distributed.checkpoint`` storage through cacheless: :class:`Writer` and :class:`Reader`.

Two lines in a training loop::

    dcp.save(state_dict, storage_writer=cacheless.checkpoint.Writer("ckpt/step-100"))
    dcp.load(state_dict, storage_reader=cacheless.checkpoint.Reader("ckpt/step-100"))

``dcp.async_save`` takes the writer too, and a path may be an ``s3://`` prefix.

**Format: DCP's own.** A checkpoint is a folder (or an ``s3://`` prefix) holding one ``.distcp``
file per rank and a pickled ``.metadata``, item for item what DCP's ``FileSystemWriter`` writes:
every tensor is a ``torch.save`` frame at the offset the metadata gives. So DCP's
``FileSystemReader``, ``dcp_to_torch_save`` and every tool built on them read our checkpoints, and
our :class:`Reader` reads what ``FileSystemWriter`` writes. What differs is where the bytes sit
and how they move:

- each rank writes one file (``thread_count`` files when asked), every tensor of 64 KiB or more
  placed so that its data starts on a 4 KiB boundary of the file and goes to the device as large
  direct writes, in one copy (into aligned staging, what O_DIRECT needs); small items are packed
  together before them. The frame's head and tail are made by ``torch.save`` itself from an
  untouched tensor of the same layout, so the data is neither copied for them nor read: the
  frames carry no CRC-32, as ``torch.save`` writes them under ``set_crc32_options(False)``
  (``torch.load`` skips the check for such records).
- the writer notes where each large tensor's data starts in its frame and how it is laid out (an
  extra attribute of the item's storage entry, which DCP's own reader ignores); our reader then
  reads only the bytes a load plan needs (resharding: saved by N ranks, loaded by M) straight into
  the destination tensor when it is contiguous. Frames written by DCP are read whole and decoded
  with ``torch.load``, as DCP's reader does, through the same direct reads.
- durable before ``finish`` returns, and a checkpoint is loadable or absent: each rank's file is
  written under a temporary name, fsynced and renamed; its name carries the save's id, so a save
  into a folder that holds a checkpoint touches none of its files; the coordinator writes
  ``.metadata`` last, the same way. Only then are the files of the checkpoint it replaced (named
  by the replaced ``.metadata`` and not by the new one) removed. A crash at any moment leaves the
  previous checkpoint loadable; a failed save leaves its ranks' complete files, unreferenced.

On ``s3://`` every rank file is one multipart upload (parts sent as they fill, aborted on
failure) and ``.metadata`` is put last; loads are ranged GETs. Nothing is removed from a store.

Each call leaves ``report`` (bytes, files, items, seconds, the I/O mode taken and why) on the
writer or reader of its rank, and calls ``progress(done, total)`` as bytes move (a save counts
its tensors' bytes, a load the bytes it reads).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import io
import os
import pickle
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import _StorageInfo, _StoragePrefix, _StorageReaderTransforms
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from . import _native
from ._files import _fspath, _only_for_files, _only_for_urls, _remote
from ._files import open as _open

__all__ = ["Writer", "Reader"]

PathLike = Union[str, "os.PathLike[str]"]

METADATA = ".metadata"
SUFFIX = ".distcp"
# Tensors at least this large get an aligned frame of their own; smaller ones are packed.
LARGE = 64 << 10
ALIGN = 4096
# The attribute of a storage entry that says where a large tensor's data sits in its frame:
# (data offset in the frame, dtype name, size, stride, storage offset).
LAYOUT = "cacheless_layout"
# A reader reads through gaps up to this long between the ranges it needs rather than seek.
SKIP = 1 << 20
# How much of a tensor on an accelerator is copied to the CPU at a time.
COPY_AHEAD = 64 << 20

_crc_lock = threading.Lock()


def _bytes_of(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy."""
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


class _Recorder:
    """A file for ``torch.save`` that keeps the frame's head and tail and skips its data."""

    def __init__(self, data_len: int) -> None:
        self.data_len = data_len
        self.head = io.BytesIO()
        self.tail = io.BytesIO()
        self.data_at: Optional[int] = None
        self.pos = 0

    def write(self, b: Any) -> int:
        n = memoryview(b).nbytes
        if self.data_at is None and n == self.data_len:
            self.data_at = self.pos
        elif self.data_at is None:
            self.head.write(b)
        else:
            self.tail.write(b)
        self.pos += n
        return n

    def flush(self) -> None:
        pass


def _frame(t: torch.Tensor) -> Tuple[bytes, int, bytes]:
    """(head, data offset in the frame, tail) of ``torch.save(t)`` for a tensor whose storage is
    exactly its bytes: they depend on its layout alone (shape, strides, dtype), so tensors of
    one layout share them."""
    return _frame_of(tuple(t.size()), tuple(t.stride()), t.dtype)


@functools.lru_cache(maxsize=256)
def _frame_of(size: Tuple[int, ...], stride: Tuple[int, ...], dtype: torch.dtype) -> Tuple[bytes, int, bytes]:
    """`_frame` of a layout, made from an untouched tensor of it (no data read)."""
    shadow = torch.empty_strided(size, stride, dtype=dtype)
    rec = _Recorder(shadow.nbytes)
    with _crc_lock:
        was = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(shadow, rec)
        finally:
            torch.serialization.set_crc32_options(was)
    if rec.data_at is None or rec.data_at != len(rec.head.getbuffer()):
        raise RuntimeError("torch.save wrote a tensor frame this writer does not know (no single data record)")
    return rec.head.getvalue(), rec.data_at, rec.tail.getvalue()


def _dense(t: torch.Tensor) -> torch.Tensor:
    """The tensor with a storage that is exactly its bytes (DCP's rule), on the same device."""
    t = t.detach()
    if t.untyped_storage().nbytes() != t.nbytes or t.storage_offset() != 0:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _storage_view(t: torch.Tensor) -> torch.Tensor:
    """A flat view of the tensor's whole storage, in storage order."""
    return t.as_strided((t.numel(),), (1,), 0)


class _Progress:
    def __init__(self, total: int, callback: Optional[Callable[[int, int], Any]]) -> None:
        self.total = total
        self.done = 0
        self.cb = callback
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.cb is None:
            return
        with self.lock:
            self.done += n
            done = self.done
        self.cb(done, self.total)


class _Place:
    """Where a checkpoint is (a folder or an ``s3://`` prefix) and how its files are reached:
    what Writer and Reader share."""

    def __init__(self, path: PathLike, what: str, memory: Union[int, str, None], mode: str, progress: Optional[Callable[[int, int], Any]], remote: Dict[str, Any], **local: Any) -> None:
        self.path = _fspath(path)
        self._remote = remote
        _only_for_urls(self.path, **remote)
        _only_for_files(self.path, what, mode=mode, **local)
        self.memory = memory
        self.mode = mode
        self.progress = progress
        self.rank: Optional[int] = None
        self.use_collectives = True
        self.report: Optional[Dict[str, Any]] = None

    @property
    def _url(self) -> bool:
        return _native.is_url(self.path)

    def _join(self, name: str) -> str:
        return self.path.rstrip("/") + "/" + name if self._url else os.path.join(self.path, name)

    def _open(self, name: str, access: str, **local: Any) -> Any:
        """`name` in the checkpoint, opened through :func:`cacheless.open` with this place's
        keywords (`mode=` and `local` for a folder's files, the store's for a URL's)."""
        extra = self._remote if self._url else dict(local, mode=self.mode)
        return _open(self._join(name), access, memory=self.memory, **extra)

    def _reset_path(self, checkpoint_id: Union[PathLike, None]) -> None:
        if checkpoint_id:
            self.path = _fspath(checkpoint_id)

    @property
    def checkpoint_id(self) -> Union[str, "os.PathLike[str]"]:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, "os.PathLike[str]"]) -> bool:
        p = _fspath(checkpoint_id)
        return p.startswith("s3://") or "://" not in p


class Writer(_Place, StorageWriter, BlockingAsyncStager):
    """A DCP ``StorageWriter`` (and ``AsyncStager``, for ``dcp.async_save``): direct I/O,
    durable, atomic, nothing left in the page cache. ``path`` is a folder or an ``s3://`` prefix.

    Takes ``FileSystemWriter``'s arguments with their meanings: ``single_file_per_rank=False``
    writes a file per item, ``sync_files=False`` skips the fsyncs (data still goes direct),
    ``thread_count`` writes that many files per rank at once, ``per_thread_copy_ahead`` bounds
    what is copied from an accelerator at a time, ``overwrite=False`` refuses a folder holding a
    checkpoint. ``memory=`` bounds each file's staging; ``mode=`` is as for :func:`cacheless.copy`;
    ``progress(done, total)`` is called as bytes are written; the store's keywords are those of
    :func:`cacheless.copy`. After a save, ``report`` describes this rank's part."""

    def __init__(
        self,
        path: PathLike,
        single_file_per_rank: bool = True,
        sync_files: bool = True,
        thread_count: int = 1,
        per_thread_copy_ahead: int = 10_000_000,
        cache_staged_state_dict: bool = False,
        overwrite: bool = True,
        _extensions: Optional[Sequence[Any]] = None,
        serialization_format: Any = None,
        *,
        memory: Union[int, str, None] = None,
        mode: str = "auto",
        progress: Optional[Callable[[int, int], Any]] = None,
        endpoint_url: Optional[str] = None,
        region: Optional[str] = None,
        no_sign_request: bool = False,
        concurrency: Optional[int] = None,
        part_size: Union[int, str, None] = None,
        ca_bundle: Union[str, "os.PathLike[str]", None] = None,
        retries: Optional[int] = None,
        read_timeout: Optional[float] = None,
    ) -> None:
        StorageWriter.__init__(self)
        BlockingAsyncStager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)
        if thread_count < 1:
            raise ValueError("thread_count must be at least 1")
        if _extensions:
            raise ValueError("_extensions= (stream transforms) is not supported: cacheless.checkpoint.Writer writes plain torch.save frames, placed for direct I/O")
        if serialization_format is not None and getattr(serialization_format, "value", serialization_format) != "torch_save":
            raise ValueError(f"serialization_format={serialization_format} is not supported: cacheless.checkpoint.Writer writes DCP's torch.save frames (SerializationFormat.TORCH_SAVE)")
        remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
        _Place.__init__(self, path, "a checkpoint save", memory, mode, progress, remote, sync_files=sync_files)
        if self._url and not self.path.startswith("s3://"):
            # Refused here, before DCP plans anything, as the upload would be at the first file.
            raise _native.UnsupportedError(errno.EOPNOTSUPP, "a checkpoint is saved into a folder or an s3:// prefix; a web server takes no uploads", self.path)
        self.single_file_per_rank = single_file_per_rank
        self.sync_files = sync_files
        self.thread_count = thread_count
        self.per_thread_copy_ahead = per_thread_copy_ahead
        self.overwrite = overwrite
        self.save_id = str(uuid.uuid4())
        self.finish_report: Optional[Dict[str, Any]] = None

    # -- what DCP calls ---------------------------------------------------------------------

    def reset(self, checkpoint_id: Union[PathLike, None] = None) -> None:
        self._reset_path(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def _metadata_name(self) -> str:
        if not self.use_collectives and self.rank is not None:
            return f"__{self.rank}{METADATA}"
        return METADATA

    def _exists(self, name: str) -> bool:
        if not self._url:
            return os.path.exists(self._join(name))
        try:
            with self._open(name, "rb"):
                return True
        except FileNotFoundError:
            return False

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if not self._url:
            os.makedirs(self.path, exist_ok=True)
        if not self.overwrite and self._exists(METADATA if self.use_collectives else f"__0{METADATA}"):
            raise RuntimeError(f"{self.path}: a checkpoint is already there and overwrite=False")
        if self.rank is not None and not self.use_collectives:
            plan = dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{self.rank}_"))
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        return [dataclasses.replace(p, storage_data=_StoragePrefix(f"__{i}_")) if p.storage_data is None else p for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> "Future[List[WriteResult]]":
        started = time.monotonic()
        prefix: str = plan.storage_data.prefix
        token = self.save_id.split("-")[0]
        if self.single_file_per_rank:
            groups = _split(plan.items, self.thread_count)
        else:
            groups = [[it] for it in plan.items]
        names = [f"{prefix}{i}-{token}{SUFFIX}" for i in range(len(groups))]
        total = sum(_item_bytes(it) for it in plan.items)
        prog = _Progress(total, self.progress)
        results: List[List[WriteResult]] = [[] for _ in groups]
        reports: List[Optional[Dict[str, Any]]] = [None] * len(groups)
        errors: List[BaseException] = []

        def one(i: int) -> None:
            try:
                results[i], reports[i] = self._write_file(names[i], groups[i], planner, prog)
            except BaseException as e:  # noqa: BLE001 - every failure reaches the caller
                errors.append(e)

        pending = list(range(len(groups)))
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not pending or errors:
                        return
                    i = pending.pop(0)
                one(i)

        # This thread and thread_count - 1 more (none for one file) take the files in turn.
        threads = [threading.Thread(target=worker) for _ in range(min(self.thread_count, len(groups)) - 1)]
        for t in threads:
            t.start()
        worker()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        done = [r for r in reports if r is not None]
        self.report = {
            "rank": self.rank,
            "path": self.path,
            "files": [r["path"] for r in done],
            "bytes": sum(r.get("bytes", 0) for r in done),
            "items": len(plan.items),
            "seconds": time.monotonic() - started,
            "decision": done[0].get("decision") if done else None,
            "synced": None if self._url else all(r.get("synced", False) for r in done),
            "file_reports": done,
        }
        fut: Future = Future()
        fut.set_result([wr for rs in results for wr in rs])
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        started = time.monotonic()
        metadata.version = "1.0.0"
        storage = {}
        for rs in results:
            storage.update({wr.index: wr.storage_data for wr in rs})
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        name = self._metadata_name()
        previous = self._previous_files(name)
        with self._open(name, "wb", sync=self.sync_files) as f:
            f.write(pickle.dumps(metadata))
        rep = f.report or {}
        # The replaced checkpoint is gone now: its files that the new one does not name go too.
        keep = {si.relative_path for si in storage.values()}
        removed = []
        if not self._url:
            for rel in sorted(previous - keep):
                try:
                    os.unlink(os.path.join(self.path, rel))
                    removed.append(rel)
                except FileNotFoundError:
                    pass
        self.finish_report = {"path": self._join(name), "bytes": rep.get("bytes"), "seconds": time.monotonic() - started, "removed": removed, "decision": rep.get("decision")}

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    def stage(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        # The staged copy is on the CPU: nothing to copy ahead.
        self.per_thread_copy_ahead = 0
        return super().stage(state_dict)

    # -- the files --------------------------------------------------------------------------

    def _previous_files(self, name: str) -> set:
        """The files the checkpoint about to be replaced names (plain names in the folder only)."""
        if self._url:
            return set()
        try:
            with self._open(name, "rb") as f:
                old = pickle.loads(f.readall())
        except (FileNotFoundError, pickle.UnpicklingError, EOFError, AttributeError):
            return set()
        out = set()
        for si in (getattr(old, "storage_data", None) or {}).values():
            rel = getattr(si, "relative_path", None)
            if isinstance(rel, str) and rel and "/" not in rel and rel not in (".", "..") and rel != name:
                out.add(rel)
        return out

    def _write_file(self, name: str, items: List[WriteItem], planner: SavePlanner, prog: _Progress) -> Tuple[List[WriteResult], Dict[str, Any]]:
        size_hint = sum(_item_bytes(it) for it in items) + len(items) * (ALIGN + 1024)
        out: List[WriteResult] = []
        with self._open(name, "wb", sync=self.sync_files, size_hint=size_hint) as f:

            def put(it: WriteItem, buf: memoryview) -> None:
                """An item written whole where the file is (packed: no alignment)."""
                out.append(WriteResult(index=it.index, size_in_bytes=len(buf), storage_data=_StorageInfo(name, f.tell(), len(buf))))
                f.write(buf)

            large: List[WriteItem] = []
            for it in items:
                if it.type == WriteItemType.BYTE_IO:
                    put(it, planner.resolve_data(it).getbuffer())
                elif _item_bytes(it) < LARGE:
                    t = _dense(planner.resolve_data(it)).cpu()
                    b = io.BytesIO()
                    torch.save(t, b)
                    put(it, b.getbuffer())
                    prog.add(t.nbytes)
                else:
                    large.append(it)
            for it in large:
                t = _dense(planner.resolve_data(it))
                head, data_at, tail = _frame(t)
                pos = f.tell()
                start = -(-(pos + data_at) // ALIGN) * ALIGN - data_at
                if start > pos:
                    f.write(bytes(start - pos))
                f.write(head)
                self._write_tensor(f, t, prog)
                f.write(tail)
                length = f.tell() - start
                info = _StorageInfo(name, start, length)
                setattr(info, LAYOUT, (data_at, str(t.dtype).removeprefix("torch."), list(t.size()), list(t.stride())))
                out.append(WriteResult(index=it.index, size_in_bytes=length, storage_data=info))
                del t
        rep = dict(f.report or {})
        rep.setdefault("path", self._join(name))
        return out, rep

    def _write_tensor(self, f: Any, t: torch.Tensor, prog: _Progress) -> None:
        flat = _storage_view(t)
        if t.device.type == "cpu":
            f.write(_bytes_of(flat))
            prog.add(t.nbytes)
            return
        # An accelerator's tensor comes over a piece at a time.
        step = max(1, (self.per_thread_copy_ahead or COPY_AHEAD) // max(t.element_size(), 1))
        for lo in range(0, flat.numel(), step):
            piece = flat[lo:lo + step].cpu()
            f.write(_bytes_of(piece))
            prog.add(piece.nbytes)


def _item_bytes(it: WriteItem) -> int:
    if it.tensor_data is None:
        return 0
    n = 1
    for s in it.tensor_data.size:
        n *= s
    return n * torch._utils._element_size(it.tensor_data.properties.dtype)


def _split(items: Sequence[WriteItem], bins: int) -> List[List[WriteItem]]:
    """Items into `bins` files of about equal bytes (every non-tensor item in the first)."""
    if bins <= 1:
        return [list(items)]
    out: List[List[WriteItem]] = [[] for _ in range(bins)]
    sizes = [0] * bins
    for it in items:
        if it.type == WriteItemType.BYTE_IO:
            out[0].append(it)
    for it in sorted((it for it in items if it.type != WriteItemType.BYTE_IO), key=_item_bytes, reverse=True):
        i = sizes.index(min(sizes))
        out[i].append(it)
        sizes[i] += _item_bytes(it)
    return [g for g in out if g] or [[]]


def _contiguous_range(size: Sequence[int], stride: Sequence[int], offsets: Sequence[int], lengths: Sequence[int]) -> Optional[Tuple[int, int]]:
    """(first element, count) when the box `offsets`/`lengths` of a row-major tensor of `size`
    is one run of its storage; else None."""
    expect = 1
    for d in range(len(size) - 1, -1, -1):
        if size[d] != 1 and stride[d] != expect:
            return None
        expect *= size[d]
    count = 1
    for n in lengths:
        count *= n
    if count == 0:
        return (0, 0)
    # Leading dims of length 1, then one narrowed dim, then whole dims.
    d = 0
    while d < len(size) and lengths[d] == 1:
        d += 1
    for e in range(d + 1, len(size)):
        if lengths[e] != size[e]:
            return None
    first = sum(o * s for o, s in zip(offsets, stride))
    return (first, count)


class Reader(_Place, StorageReader):
    """A DCP ``StorageReader``: reads what :class:`Writer` and DCP's ``FileSystemWriter`` write,
    from a folder or an ``s3://`` prefix, each rank only the bytes its load plan needs, with direct
    I/O, nothing left in the page cache. ``memory=``, ``mode=`` and the store's keywords are those
    of :func:`cacheless.open`; ``progress(done, total)`` is called as bytes arrive. After a load,
    ``report`` describes this rank's part."""

    def __init__(
        self,
        path: PathLike,
        _extension_registry: Any = None,
        *,
        memory: Union[int, str, None] = None,
        mode: str = "auto",
        progress: Optional[Callable[[int, int], Any]] = None,
        endpoint_url: Optional[str] = None,
        region: Optional[str] = None,
        no_sign_request: bool = False,
        concurrency: Optional[int] = None,
        part_size: Union[int, str, None] = None,
        ca_bundle: Union[str, "os.PathLike[str]", None] = None,
        retries: Optional[int] = None,
        read_timeout: Optional[float] = None,
    ) -> None:
        StorageReader.__init__(self)
        remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
        _Place.__init__(self, path, "a checkpoint load", memory, mode, progress, remote)
        self.transforms = _StorageReaderTransforms(_extension_registry)
        self.storage_data: Dict[Any, Any] = {}
        self.load_id = str(uuid.uuid4())
        self._gap = bytearray()

    def reset(self, checkpoint_id: Union[PathLike, None] = None) -> None:
        self.storage_data = {}
        self._reset_path(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA if rank is None else f"__{rank}{METADATA}"
        p = self._join(name)
        with self._open(name, "rb") as f:
            raw = f.readall()
        try:
            md = pickle.loads(raw)
        except Exception as e:
            raise ValueError(f"{p}: not a checkpoint's metadata ({type(e).__name__}: {e})") from e
        if not isinstance(md, Metadata):
            raise ValueError(f"{p}: not a checkpoint's metadata (a pickled {type(md).__name__})")
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if metadata.storage_data is None:
            raise ValueError(f"{self.path}: the checkpoint's metadata names no storage")
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> "Future[None]":
        started = time.monotonic()
        per_file: Dict[str, List[Tuple[int, int, ReadItem, Any]]] = {}
        for req in plan.items:
            info = self.storage_data[req.storage_index]
            at, n, place = self._span(req, info)
            per_file.setdefault(info.relative_path, []).append((at, n, req, place))
        prog = _Progress(sum(n for spans in per_file.values() for _, n, _, _ in spans), self.progress)
        moved = 0
        decision = None
        for rel, spans in per_file.items():
            if "/" in rel or rel in ("", ".", ".."):
                raise ValueError(f"{self.path}: the metadata names a file outside the checkpoint: {rel!r}")
            p = self._join(rel)
            with self._open(rel, "rb") as f:
                decision = decision or f.decision
                for at, n, req, place in sorted(spans, key=lambda s: s[0]):
                    self._read_item(p, f, at, n, req, place, planner)
                    prog.add(n)
                    moved += n
        self.report = {
            "rank": self.rank,
            "path": self.path,
            "files": len(per_file),
            "items": len(plan.items),
            "bytes": moved,
            "seconds": time.monotonic() - started,
            "decision": decision,
        }
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _span(self, req: ReadItem, info: Any) -> Tuple[int, int, Any]:
        """(offset, bytes) of what `req` needs of its file, and how the bytes become the tensor:
        None for a whole frame to decode; else (dtype, shape of what is read, the function from
        it to the requested box, whether the box is the bytes read)."""
        layout = getattr(info, LAYOUT, None)
        if req.type == LoadItemType.BYTE_IO or layout is None or info.transform_descriptors:
            return info.offset, info.length, None
        data_at, dtype_name, size, stride = layout
        dtype = getattr(torch, dtype_name)
        esize = torch._utils._element_size(dtype)
        base = info.offset + data_at
        run = _contiguous_range(size, stride, req.storage_offsets, req.lengths)
        if run is not None:
            first, count = run
            return base + first * esize, count * esize, (dtype, (count,), lambda read: read.view(list(req.lengths)), True)
        # A box that is not one run: the span that holds it, then narrowed.
        numel = 1
        for n in size:
            numel *= n
        return base, numel * esize, (dtype, (numel,), lambda read: narrow_tensor_by_index(read.as_strided(size, stride, 0), req.storage_offsets, req.lengths), False)

    def _read_exact(self, p: str, f: Any, at: int, buf: Any, n: int) -> None:
        if n == 0:
            return
        here = f.tell()
        if here < at <= here + SKIP:
            # A frame's head or tail between two tensors: read through it, so that the file's
            # read-ahead runs on rather than starting again after a seek.
            gap = at - here
            if len(self._gap) < gap:
                self._gap = bytearray(gap)
            f.readinto(memoryview(self._gap)[:gap])
        elif at != here:
            f.seek(at)
        got = f.readinto(buf)
        if got != n:
            raise ValueError(f"{p}: truncated: {n} bytes wanted at offset {at}, {got} there")

    def _read_item(self, p: str, f: Any, at: int, n: int, req: ReadItem, place: Any, planner: LoadPlanner) -> None:
        """Reads `n` bytes at `at` for `req` and hands them to the planner as `place` says (see
        :meth:`_span`)."""
        info = self.storage_data[req.storage_index]
        if place is None:
            raw = bytearray(n)
            self._read_exact(p, f, at, raw, n)
            stream: Any = self.transforms.transform_load_stream(req, info.transform_descriptors or (), io.BytesIO(raw))
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(stream.read()))
                return
            if not stream.seekable():
                stream = io.BytesIO(stream.read())
            tensor = torch.load(stream, map_location="cpu", weights_only=True)
            tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
            target = planner.resolve_tensor(req).detach()
            if target.size() != tensor.size():
                raise ValueError(f"{p}: {req.storage_index.fqn} is {tuple(tensor.size())} where the load plan wants {tuple(target.size())}")
            target.copy_(tensor)
            planner.commit_tensor(req, target)
            return
        dtype, shape, box, exact = place
        target = planner.resolve_tensor(req).detach()
        if list(target.size()) != list(req.lengths):
            raise ValueError(f"{p}: {req.storage_index.fqn}: the load plan's box {list(req.lengths)} does not fit its target {list(target.size())}")
        if exact and target.dtype == dtype and target.is_contiguous() and target.device.type == "cpu":
            # Straight into the destination.
            self._read_exact(p, f, at, _bytes_of(target), n)
        else:
            read = torch.empty(shape, dtype=dtype)
            self._read_exact(p, f, at, _bytes_of(read), n)
            target.copy_(box(read))
        planner.commit_tensor(req, target)
