"""Read, write, copy, pack, extract and load big data at direct-I/O speed without filling the page cache.

Every call picks, per file, the best mechanism the kernel and filesystem offer (O_DIRECT,
RWF_DONTCACHE, write-behind, or plain buffered reads for a file that is already cached) and
releases the GIL while it works. ``mode=`` forces one ("auto", "direct", "dontcache",
"writebehind", "buffered"); a forced mode the filesystem cannot honour raises
:class:`UnsupportedError`. ``memory=`` bounds the I/O buffers in flight (bytes, or a size such
as "512M"; default 256 MiB). ``progress=`` is called as ``progress(done_bytes, total_bytes)``
from the calling thread, a few times a second and once at the end. Ctrl-C cancels a running
call cleanly: nothing half-written is left under a final name.

Calls that read or write also take the engine's tuning keywords: ``backend=`` ("auto",
"uring" or "threads"), ``block_size=`` (bytes per request, or a size such as "1M"),
``queue_depth=`` (requests in flight per file) and, where a file is read into one buffer,
``threads=``. Every keyword is named in each call's signature, with its default; a bad value
is a ``ValueError`` (a ``TypeError`` where its type is wrong) naming the keyword.

The safetensors loader and saver are in :mod:`cacheless.safetensors`.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, Optional, Union

import numpy as np

from . import _native
from ._files import _fspath
from ._files import CachelessReader, CachelessWriter, _only_for_files, _only_for_urls, _remote, open
from ._native import UnsupportedError, __version__
from ._patch import SafetensorsPatch, patch_safetensors

__all__ = [
    "CachelessReader",
    "CachelessWriter",
    "SafetensorsPatch",
    "UnsupportedError",
    "__version__",
    "copy",
    "evict",
    "extract",
    "hash",
    "info",
    "open",
    "pack",
    "patch_safetensors",
    "read_file",
    "write_file",
    "residency",
]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
Memory = Union[int, str, None]
Size = Union[int, str, None]
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
    return _native.info(_fspath(path), mode)


def residency(path: PathLike) -> Dict[str, Any]:
    """How much of a file is in the page cache (cachestat(2), else mincore(2)).

    Keys: ``path``, ``size``, ``cached_pages``, ``total_pages``, ``dirty_pages``,
    ``writeback_pages``, ``page_size``, ``source`` ("cachestat" or "mincore"),
    ``cached_bytes`` and ``fraction``.
    """
    return _native.residency(_fspath(path))


def evict(path: PathLike) -> Dict[str, Any]:
    """Writes back and drops a file's pages from the page cache (no root needed).

    Returns ``{"path", "before", "after"}``, residency before and after, as ``cacheless evict --json``.
    """
    return _native.evict(_fspath(path))


def read_file(
    path: PathLike,
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Memory = None,
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
    progress: Progress = None,
) -> memoryview:
    """Reads a whole file into one page-aligned buffer, with direct I/O when the file is cold.

    Returns a writable ``memoryview`` of exactly the file's bytes (``numpy.asarray`` of it is a
    zero-copy uint8 array). A file already mostly cached is read buffered and stays cached; a
    cold one leaves nothing in the page cache. An ``s3://`` or ``http(s)://`` URL (a ``str``) is
    fetched as ranged GETs in parallel (docs/remote.md).
    """
    arena, _decision = _native.read_file(
        _fspath(path), mode=mode, backend=backend, memory=memory, block_size=block_size, queue_depth=queue_depth, threads=threads, progress=progress
    )
    return memoryview(np.asarray(arena))


def write_file(path: PathLike, data: Any, *, mode: str = "auto", sync: bool = True) -> Dict[str, Any]:
    """Writes a whole bytes-like object (bytes, bytearray, memoryview, numpy array) to ``path``.

    The file is written under a temporary name beside ``path`` in the best mode for its size
    (RWF_DONTCACHE or write-behind for small files, O_DIRECT for large ones), fsync'ed
    (unless ``sync=False``) and renamed over ``path``: readers see the old file or the whole new
    one, and nothing is left in the page cache. Returns the report (bytes, mode and why).
    """
    return _native.write_file(_fspath(path), data, mode=mode, sync=sync)


def copy(
    src: PathLike,
    dst: PathLike,
    *,
    recursive: bool = False,
    archive: bool = False,
    no_clobber: bool = False,
    update: bool = False,
    interactive: Optional[Callable[[str], bool]] = None,
    force: bool = False,
    remove_destination: bool = False,
    backup: Optional[str] = None,
    suffix: Optional[str] = None,
    preserve: Union[str, Iterable[str], None] = None,
    no_preserve: Union[str, Iterable[str], None] = None,
    attributes_only: bool = False,
    parents: bool = False,
    link: bool = False,
    symbolic_link: bool = False,
    dereference: Optional[str] = None,
    one_file_system: bool = False,
    copy_contents: bool = False,
    no_target_directory: bool = False,
    inplace: bool = False,
    reflink: str = "auto",
    sparse: str = "auto",
    verify: Optional[str] = None,
    bwlimit: Union[int, str, None] = None,
    threads: Optional[int] = None,
    sync: bool = True,
    mode: str = "auto",
    backend: str = "auto",
    memory: Memory = None,
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    progress: Progress = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Size = None,
    ca_bundle: Optional[PathLike] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Dict[str, Any]:
    """``cacheless cp SRC DST`` from Python: the same copy job, with GNU cp's options as keywords.

    With no keyword it does what ``cp SRC DST`` does: a file is copied to ``dst`` (into it, if
    ``dst`` is a directory) with the source's mode less the umask (``shutil.copy`` gives the
    same mode to a new file under the usual umask 022) and a new time; ``preserve="mode,timestamps"``
    keeps both (``shutil.copy2``'s result); ``archive=True`` is ``cp -a``. The copy is written
    under a temporary name beside ``dst``, made durable (unless ``sync=False``) and renamed into
    place: an interrupted copy never leaves a partial file. Copying a file onto itself raises
    ``shutil.SameFileError``; a directory without ``recursive`` raises ``IsADirectoryError``.

    GNU cp's options, by their long names: ``recursive`` (-R), ``archive`` (-a), ``no_clobber``
    (-n), ``update`` (-u), ``interactive`` (-i: a callable asked ``interactive(dst)`` before an
    existing destination is replaced, which is replaced only where it returns true), ``force``
    (-f), ``remove_destination``, ``backup`` (a CONTROL word: "numbered", "existing", "simple",
    "none") and ``suffix`` (-S), ``preserve`` and ``no_preserve`` (a list, or words separated
    by commas: mode, timestamps, ownership, links, xattr, all), ``attributes_only``,
    ``parents``, ``link`` (-l), ``symbolic_link`` (-s), ``dereference`` ("always" -L, "never"
    -P, "command-line" -H), ``one_file_system`` (-x), ``copy_contents``,
    ``no_target_directory`` (-T). cacheless's own: ``inplace``, ``reflink`` and ``sparse``
    ("auto", "always", "never"), ``verify`` (read the durable copy back from the disk and
    compare: "xxh3", "sha256" or "blake3"; with a URL "etag", the server's checksum),
    ``bwlimit`` (bytes per second, or "200M"), ``threads``.

    An ``s3://`` or ``http(s)://`` URL (a ``str``) on either side downloads or uploads, as
    ``cacheless cp`` does (docs/remote.md): every option above works with GNU's meaning or is
    refused (``ValueError``, naming it) before anything is sent. The store's settings are the
    command line's flags by the same names: ``endpoint_url``, ``region``, ``no_sign_request``,
    ``concurrency``, ``part_size``, ``ca_bundle``, ``retries``, ``read_timeout`` (each over the
    environment: ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_CA_BUNDLE``, ``CACHELESS_PART_SIZE``,
    ...); given with local paths only, they are refused.

    Returns the report of ``cacheless cp --json``: ``copied``, ``skipped``, ``errors``,
    ``files`` (each local file's copy: how it was read and written, and why), ``transfers``
    (each download or upload). Items that failed raise the ``OSError`` of the first, with that
    report in its ``report`` attribute (403 is a ``PermissionError``, a missing object a
    ``FileNotFoundError``).
    """
    s, d = _fspath(src), _fspath(dst)
    remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
    _only_for_urls(s, d, **remote)
    return _native.copy(
        s,
        d,
        recursive=recursive,
        archive=archive,
        no_clobber=no_clobber,
        update=update,
        interactive=interactive,
        force=force,
        remove_destination=remove_destination,
        backup=backup,
        suffix=suffix,
        preserve=_words(preserve),
        no_preserve=_words(no_preserve),
        attributes_only=attributes_only,
        parents=parents,
        link=link,
        symbolic_link=symbolic_link,
        dereference=dereference,
        one_file_system=one_file_system,
        copy_contents=copy_contents,
        no_target_directory=no_target_directory,
        inplace=inplace,
        reflink=reflink,
        sparse=sparse,
        verify=verify,
        bwlimit=bwlimit,
        threads=threads,
        sync=sync,
        mode=mode,
        backend=backend,
        memory=memory,
        block_size=block_size,
        queue_depth=queue_depth,
        progress=progress,
        **remote,
    )


def _words(v: Union[str, Iterable[str], None]) -> Optional[list]:
    """A list of words given as one string (separated by commas, as ``--preserve=`` takes them) or as words."""
    if v is None:
        return None
    if isinstance(v, str):
        return [w for w in v.split(",")]
    return [str(w) for w in v]


def extract(
    archive: PathLike,
    dest: PathLike,
    *,
    strip_components: int = 0,
    keep_old_files: bool = False,
    ignore_zeros: bool = False,
    mode: str = "auto",
    memory: Memory = None,
    progress: Progress = None,
    sync: bool = True,
    threads: Optional[int] = None,
    decompress_threads: Optional[int] = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Size = None,
    ca_bundle: Optional[PathLike] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Dict[str, Any]:
    """Unpacks a tar archive (zstd, gzip, xz, lz4, bzip2 or none, detected from its bytes) into ``dest``.

    ``archive`` may be an ``s3://`` or ``http(s)://`` URL (a ``str``): it is extracted while it
    downloads (docs/remote.md), with the store's keywords of :func:`copy`.

    Members are never created outside ``dest`` or through a symlink. Returns the report (as
    ``cacheless extract --json``). A corrupt or truncated archive raises ``ValueError``; members
    that could not be written raise ``OSError`` with the report in its ``report`` attribute.
    ``progress`` counts compressed bytes read out of the archive's size. ``threads`` are the
    file writers; ``decompress_threads`` decode a zstd archive of several frames (as pzstd and
    ``pack`` write) in parallel (default one per CPU, at most 8; 1 decodes on one thread). The
    report's ``source`` says how many frames were decoded on how many threads.
    ``ignore_zeros`` is GNU tar's ``-i``: archives written one after another extract whole.
    """
    a = _fspath(archive)
    remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
    _only_for_urls(a, **remote)
    return _native.extract(
        a,
        _fspath(dest),
        strip_components,
        keep_old_files,
        ignore_zeros=ignore_zeros,
        mode=mode,
        memory=memory,
        progress=progress,
        sync=sync,
        threads=threads,
        decompress_threads=decompress_threads,
        **remote,
    )


def pack(
    archive: PathLike,
    paths: Union[PathLike, Iterable[PathLike]],
    *,
    directory: Optional[PathLike] = None,
    compression: Optional[str] = None,
    level: Optional[int] = None,
    threads: Optional[int] = None,
    frame_size: Union[int, str, None] = None,
    sort: str = "none",
    mtime: Union[int, float, str, Any, None] = None,
    owner: Union[str, int, None] = None,
    group: Union[str, int, None] = None,
    numeric_owner: bool = False,
    exclude: Union[str, Iterable[str]] = (),
    one_file_system: bool = False,
    xattrs: bool = False,
    acls: bool = False,
    sync: bool = True,
    mode: str = "auto",
    memory: Memory = None,
    progress: Progress = None,
    read_threads: Optional[int] = None,
    backend: str = "auto",
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Size = None,
    ca_bundle: Optional[PathLike] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Dict[str, Any]:
    """Creates the tar archive ``archive`` from ``paths`` (files and directories, recursively), as ``cacheless pack``.

    ``archive`` may be an ``s3://`` URL (a ``str``): the archive is uploaded as it is written and
    appears only when complete (docs/remote.md), with the store's keywords of :func:`copy`.

    ``paths`` (one path or several) are relative to ``directory`` (like ``tar -C``; default the
    working directory) and become the member names. ``compression`` is "zstd", "gzip", "xz",
    "lz4", "bzip2" or "none" (default: from the archive's extension, else zstd); ``level`` its
    level (default the format's own); ``threads`` the compression workers (default one per
    CPU); ``frame_size`` the bytes of tar per independent compressed frame (default "32M"), so
    that extraction decompresses them in parallel. ``sort="name"`` with ``mtime`` (seconds since
    the epoch, a ``datetime``, or "YYYY-MM-DD[THH:MM:SS]" in UTC) gives byte-identical archives
    of the same tree. ``owner`` and ``group`` (a name, "NAME:ID" or an id) are stored for every
    member; ``numeric_owner`` stores ids without names. ``exclude`` globs leave out members
    whose name or any tail of it matches; ``one_file_system`` stays on each path's filesystem;
    ``xattrs`` stores extended attributes (as GNU tar ``--xattrs``); ``acls`` stores POSIX ACLs
    as GNU tar ``--acls`` does (``SCHILY.acl.access`` and ``SCHILY.acl.default`` text records).

    Inputs are read without leaving them cached; the archive is written under a temporary name
    beside it, fsync'ed (unless ``sync=False``) and renamed into place, so a failed or
    interrupted pack leaves no archive and no temporary. Returns the report (as
    ``cacheless pack --json``). Members that could not be read, or changed while read, raise
    ``OSError`` with the report in its ``report`` attribute (the archive is valid without
    them, except that one whose read failed part way holds the bytes read, padded with zeros to
    its size, as with tar). ``progress`` counts file bytes read out of the bytes walked so far.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    if isinstance(exclude, str):
        exclude = [exclude]
    if mtime is not None and hasattr(mtime, "timestamp"):
        mtime = mtime.timestamp()
    a = _fspath(archive)
    remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
    _only_for_urls(a, **remote)
    return _native.pack(
        a,
        [_fspath(p) for p in paths],
        None if directory is None else _fspath(directory),
        compression,
        level,
        frame_size,
        sort,
        mtime,
        owner,
        group,
        numeric_owner,
        list(exclude),
        one_file_system,
        xattrs,
        read_threads,
        acls,
        mode=mode,
        memory=memory,
        progress=progress,
        sync=sync,
        threads=threads,
        backend=backend,
        block_size=block_size,
        queue_depth=queue_depth,
        **remote,
    )


def hash(
    path: PathLike,
    algo: str = "sha256",
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Memory = None,
    block_size: Size = None,
    queue_depth: Optional[int] = None,
    progress: Progress = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Size = None,
    ca_bundle: Optional[PathLike] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> str:
    """The file's checksum in hex, as ``sha256sum`` (``algo="sha256"``), ``b3sum`` ("blake3") or ``xxhsum -H3`` ("xxh3") print it.

    An ``s3://`` or ``http(s)://`` URL (a ``str``) is hashed as it downloads (docs/remote.md), with
    the store's keywords of :func:`copy` (``mode=`` and the tuning keywords are refused there:
    nothing local is read).
    """
    p = _fspath(path)
    remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
    _only_for_urls(p, **remote)
    _only_for_files(p, "a checksum", mode=mode, backend=backend, block_size=block_size, queue_depth=queue_depth)
    digest, _mode = _native.hash(
        p, algo, mode=mode, backend=backend, memory=memory, block_size=block_size, queue_depth=queue_depth, progress=progress, **remote
    )
    return digest
