"""Read, write, copy, extract and load big data at direct-I/O speed without filling the page cache.

Every call picks, per file, the best mechanism the kernel and filesystem offer (O_DIRECT,
RWF_DONTCACHE, write-behind, or plain buffered reads for a file that is already cached) and
releases the GIL while it works. ``mode=`` forces one ("auto", "direct", "dontcache",
"writebehind", "buffered"); a forced mode the filesystem cannot honour raises
:class:`UnsupportedError`. ``memory=`` bounds the I/O buffers in flight (bytes, or a size such
as "512M"; default 256 MiB). ``progress=`` is called as ``progress(done_bytes, total_bytes)``
from the calling thread, a few times a second and once at the end. Ctrl-C cancels a running
call cleanly: nothing half-written is left under a final name.

Calls that read or write also take the engine's tuning keywords: ``backend=`` ("auto",
"uring" or "threads"), ``block_size=`` (bytes per request), ``queue_depth=`` (requests in
flight per file) and, where a file is read into one buffer, ``threads=``.

The safetensors loader and saver are in :mod:`cacheless.safetensors`.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Union

import numpy as np

from . import _native
from ._files import CachelessReader, CachelessWriter, open
from ._native import UnsupportedError, __version__

__all__ = [
    "CachelessReader",
    "CachelessWriter",
    "UnsupportedError",
    "__version__",
    "copy",
    "evict",
    "extract",
    "hash",
    "info",
    "open",
    "read_file",
    "residency",
]

PathLike = Union[str, "os.PathLike[str]"]
Memory = Union[int, str, None]
Progress = Optional[Callable[[int, int], Any]]


def info(path: PathLike = ".", mode: str = "auto") -> Dict[str, Any]:
    """What ``cacheless info PATH --json`` reports for one file or directory.

    Keys: ``path``, ``kind`` ("file" or "directory"), ``size``, ``fs`` (filesystem type, O_DIRECT
    support and alignment with where the figure came from, RWF_DONTCACHE support), ``residency``
    (page-cache residency of a file), ``read`` and ``write`` (the mode ``mode`` would use and
    why; for a forced mode the filesystem refuses, ``hint`` lists the modes to ask for instead,
    as ``{"modes": ["auto", ...]}``; ``write`` is None in a directory where nothing can be
    created), and ``system`` (kernel release, io_uring, cachestat, memlock limit, page size).
    """
    return _native.info(os.fspath(path), mode)


def residency(path: PathLike) -> Dict[str, Any]:
    """How much of a file is in the page cache (cachestat(2), else mincore(2)).

    Keys: ``path``, ``size``, ``cached_pages``, ``total_pages``, ``dirty_pages``,
    ``writeback_pages``, ``page_size``, ``source`` ("cachestat" or "mincore"),
    ``cached_bytes`` and ``fraction``.
    """
    return _native.residency(os.fspath(path))


def evict(path: PathLike) -> Dict[str, Any]:
    """Writes back and drops a file's pages from the page cache (no root needed).

    Returns ``{"path", "before", "after"}``, residency before and after, as ``cacheless evict --json``.
    """
    return _native.evict(os.fspath(path))


def read_file(path: PathLike, *, mode: str = "auto", memory: Memory = None, progress: Progress = None, **options: Any) -> memoryview:
    """Reads a whole file into one page-aligned buffer, with direct I/O when the file is cold.

    Returns a writable ``memoryview`` of exactly the file's bytes (``numpy.asarray`` of it is a
    zero-copy uint8 array). A file already mostly cached is read buffered and stays cached; a
    cold one leaves nothing in the page cache.
    """
    arena, _decision = _native.read_file(os.fspath(path), mode=mode, memory=memory, progress=progress, **options)
    return memoryview(np.asarray(arena))


def copy(src: PathLike, dst: PathLike, *, mode: str = "auto", memory: Memory = None, progress: Progress = None, sync: bool = True, **options: Any) -> Dict[str, Any]:
    """Copies the file ``src`` to ``dst`` (into it, if ``dst`` is a directory), like ``shutil.copy``.

    The copy is written under a temporary name beside ``dst``, fdatasync'ed (unless
    ``sync=False``) and renamed into place, so an interrupted copy never leaves a partial file.
    Copying a file onto itself raises ``shutil.SameFileError``. Returns the report (how each
    side was read and written, and why).
    """
    s, d = os.fspath(src), os.fspath(dst)
    if os.path.isdir(d):
        d = os.path.join(d, os.path.basename(s))
    return _native.copy(s, d, mode=mode, memory=memory, progress=progress, sync=sync, **options)


def extract(
    archive: PathLike,
    dest: PathLike,
    *,
    strip_components: int = 0,
    keep_old_files: bool = False,
    mode: str = "auto",
    memory: Memory = None,
    progress: Progress = None,
    sync: bool = True,
    threads: Optional[int] = None,
) -> Dict[str, Any]:
    """Unpacks a tar archive (zstd, gzip, xz, lz4, bzip2 or none, detected from its bytes) into ``dest``.

    Members are never created outside ``dest`` or through a symlink. Returns the report (as
    ``cacheless extract --json``). A corrupt or truncated archive raises ``ValueError``; members
    that could not be written raise ``OSError`` with the report in its ``report`` attribute.
    ``progress`` counts compressed bytes read out of the archive's size.
    """
    return _native.extract(os.fspath(archive), os.fspath(dest), strip_components, keep_old_files, mode=mode, memory=memory, progress=progress, sync=sync, threads=threads)


def hash(path: PathLike, algo: str = "sha256", *, mode: str = "auto", memory: Memory = None, progress: Progress = None, **options: Any) -> str:
    """The file's checksum in hex, as ``sha256sum`` (``algo="sha256"``), ``b3sum`` ("blake3") or ``xxhsum -H3`` ("xxh3") print it."""
    digest, _mode = _native.hash(os.fspath(path), algo, mode=mode, memory=memory, progress=progress, **options)
    return digest
