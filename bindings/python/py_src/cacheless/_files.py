"""File objects: ``cacheless.open(path, "rb")`` and ``cacheless.open(path, "wb")``."""

from __future__ import annotations

import errno
import io
import os
import warnings
from typing import Any, Dict, Optional, Union

from . import _native

__all__ = ["CachelessReader", "CachelessWriter", "open"]


def _fspath(path: Any) -> str:
    """A path as every call takes it, as the built-in ``open()`` does: ``str`` (a name that is
    not UTF-8 surrogate-escaped, as ``os.fsdecode`` gives it), ``bytes`` (the name's bytes), or
    an ``os.PathLike`` of either; the native calls get the same bytes back."""
    return os.fsdecode(os.fspath(path))


class _File(io.RawIOBase):
    """What the reader and the writer share: the path, the access, the mode decision."""

    _access = ""

    def __init__(self, native: Any, path: str) -> None:
        super().__init__()
        self._path = path
        self._n = native

    @property
    def name(self) -> str:
        """The path given to ``open``."""
        return self._path

    @property
    def mode(self) -> str:
        """The access, as for built-in files: ``"rb"`` or ``"wb"``."""
        return self._access

    @property
    def decision(self) -> Dict[str, str]:
        """The I/O mode in use and why: ``{"mode": ..., "reason": ...}``."""
        m, r = self._n.decision()
        return {"mode": m, "reason": r}

    def fileno(self) -> int:
        self._checkClosed()
        if not hasattr(self._n, "fileno"):
            raise io.UnsupportedOperation(f"{self._path}: an object in a store has no file descriptor")
        return self._n.fileno()

    def __repr__(self) -> str:
        return f"<cacheless.{type(self).__name__} name={self._path!r} mode={self._access!r} closed={self.closed}>"


def _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout) -> Dict[str, Any]:
    """The store's keywords, as the native calls take them."""
    return dict(endpoint_url=endpoint_url, region=region, no_sign_request=no_sign_request, concurrency=concurrency, part_size=part_size,
                ca_bundle=None if ca_bundle is None else os.fspath(ca_bundle), retries=retries, read_timeout=read_timeout)


def _only_for_urls(*paths: str, **remote: Any) -> None:
    """Refuses the store's keywords where no operand is a URL: they would change nothing."""
    if any(_native.is_url(p) for p in paths):
        return
    given = [k for k, v in remote.items() if v not in (None, False)]
    if given:
        raise ValueError(f"{given[0]}= applies to s3:// and http(s):// URLs, and no operand is one")


def _only_for_files(path: str, what: str, **local: Any) -> None:
    """Refuses the local I/O keywords where the operand is a URL: nothing local is read or written."""
    if not _native.is_url(path):
        return
    defaults = {"mode": "auto", "backend": "auto", "block_size": None, "queue_depth": None, "size_hint": None, "sync": True, "sync_files": True}
    given = [k for k, v in local.items() if v != defaults.get(k)]
    if given:
        raise ValueError(f"{given[0]}= applies to local files: {what} of a URL reads or writes none")


class CachelessReader(_File):
    """A file open for reading: ``readinto`` fills any writable buffer, straight from the device
    (zero-copy) when the buffer is large and its address and the position are aligned, else
    from the read-ahead. Seekable; ``io.BufferedReader(f)`` works too.

    An ``s3://`` or ``http(s)://`` URL is read with ranged GETs pinned to the ETag seen at open
    (an object replaced meanwhile is an error, never a mix): a large read lands in the caller's
    buffer as parallel ranges, small ones come through a read-ahead window (the part size times
    the requests in flight, within ``memory=``), with the store's keywords of
    :func:`cacheless.copy` (``endpoint_url=``, ``part_size=``, ...). ``mode=`` and the tuning
    keywords are for local files, and refused with a URL; ``fileno()`` is
    ``io.UnsupportedOperation``."""

    _access = "rb"

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        mode: str = "auto",
        backend: str = "auto",
        memory: Union[int, str, None] = None,
        block_size: Union[int, str, None] = None,
        queue_depth: Optional[int] = None,
        endpoint_url: Optional[str] = None,
        region: Optional[str] = None,
        no_sign_request: bool = False,
        concurrency: Optional[int] = None,
        part_size: Union[int, str, None] = None,
        ca_bundle: Union[str, "os.PathLike[str]", None] = None,
        retries: Optional[int] = None,
        read_timeout: Optional[float] = None,
    ) -> None:
        p = _fspath(path)
        remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
        _only_for_urls(p, **remote)
        _only_for_files(p, "reading", mode=mode, backend=backend, block_size=block_size, queue_depth=queue_depth)
        if _native.is_url(p):
            super().__init__(_native.RemoteReader(p, memory=memory, **remote), p)
            return
        super().__init__(_native.Reader(p, mode=mode, backend=backend, memory=memory, block_size=block_size, queue_depth=queue_depth), p)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        self._checkClosed()
        # A pipe or FIFO is read as it comes, as Python's own open() reads it: no seeking.
        return not getattr(self._n, "streams", lambda: False)()

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        self._checkClosed()
        return self._n.readinto(buffer)

    def readall(self) -> bytes:
        self._checkClosed()
        return self._n.readall()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        if not self.seekable():
            raise OSError(errno.ESPIPE, "Illegal seek", self._path)
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._n.tell() + offset
        elif whence == io.SEEK_END:
            pos = self._n.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument: negative seek position", self._path)
        return self._n.seek(pos)

    def tell(self) -> int:
        self._checkClosed()
        return self._n.tell()

    def close(self) -> None:
        if not self.closed:
            try:
                self._n.close()
            finally:
                super().close()


class CachelessWriter(_File):
    """A file being written: under a temporary name beside the destination until ``close()``,
    which writes the rest, fsyncs (unless ``sync=False``) and renames it into place. An
    exception inside a ``with`` block, ``discard()``, or dropping the object unclosed removes
    the temporary and leaves the destination as it was. Sequential: ``seek`` only to the
    current position.

    An ``s3://`` URL is a multipart upload: parts are sent as they fill (the part size times
    the requests in flight, within ``memory=``), and the object appears under its key only at
    ``close()``; an exception in the ``with`` block, ``discard()``, a failed write or Ctrl-C
    aborts the upload, leaving no object and no parts. The store's keywords are those of
    :func:`cacheless.copy`; ``mode=``, ``size_hint=``, ``sync=`` and the tuning keywords are for
    local files, and refused with a URL."""

    _access = "wb"

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        mode: str = "auto",
        backend: str = "auto",
        memory: Union[int, str, None] = None,
        block_size: Union[int, str, None] = None,
        queue_depth: Optional[int] = None,
        size_hint: Optional[int] = None,
        sync: bool = True,
        endpoint_url: Optional[str] = None,
        region: Optional[str] = None,
        no_sign_request: bool = False,
        concurrency: Optional[int] = None,
        part_size: Union[int, str, None] = None,
        ca_bundle: Union[str, "os.PathLike[str]", None] = None,
        retries: Optional[int] = None,
        read_timeout: Optional[float] = None,
    ) -> None:
        p = _fspath(path)
        remote = _remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)
        _only_for_urls(p, **remote)
        _only_for_files(p, "an upload", mode=mode, backend=backend, block_size=block_size, queue_depth=queue_depth, size_hint=size_hint, sync=sync)
        if _native.is_url(p):
            n: Any = _native.RemoteWriter(p, memory=memory, **remote)
        else:
            n = _native.Writer(p, mode=mode, backend=backend, memory=memory, block_size=block_size, queue_depth=queue_depth, size_hint=size_hint, sync=sync)
        super().__init__(n, p)
        self.report: Optional[Dict[str, Any]] = None

    def writable(self) -> bool:
        return True

    def write(self, buffer: Any) -> int:  # type: ignore[override]
        self._checkClosed()
        return self._n.write(buffer)

    def tell(self) -> int:
        self._checkClosed()
        return self._n.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        here = self._n.tell()
        if (whence == io.SEEK_CUR and offset == 0) or (whence == io.SEEK_SET and offset == here):
            return here
        raise io.UnsupportedOperation("cacheless writers are sequential: seek only to the current position")

    def close(self) -> None:
        """Commits the file: writes the rest, makes it durable and renames it into place."""
        if not self.closed:
            try:
                self.report = self._n.commit()
            finally:
                super().close()

    def discard(self) -> None:
        """Abandons the file: the temporary is removed, the destination left as it was."""
        if not self.closed:
            try:
                self._n.discard()
            finally:
                super().close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.discard()
        else:
            self.close()

    def __del__(self) -> None:
        # Never commit a file nobody closed: it may be incomplete.
        if not getattr(self, "closed", True) and hasattr(self, "_n"):
            warnings.warn(f"unclosed cacheless writer for {self._path!r}: discarded, nothing was written under that name", ResourceWarning, stacklevel=2)
            self.discard()


def open(
    path: Union[str, "os.PathLike[str]"],
    access: str = "rb",
    mode: str = "auto",
    *,
    memory: Union[int, str, None] = None,
    size_hint: Optional[int] = None,
    sync: bool = True,
    backend: str = "auto",
    block_size: Union[int, str, None] = None,
    queue_depth: Optional[int] = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Union[int, str, None] = None,
    ca_bundle: Union[str, "os.PathLike[str]", None] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Union[CachelessReader, CachelessWriter]:
    """Opens a file for reading (``"rb"``) or writing (``"wb"``) as an ``io.RawIOBase``.

    ``mode`` is the I/O mode ("auto", "direct", "dontcache", "writebehind", "buffered"). For
    writing, ``size_hint`` (the final size, if known) picks the mode and preallocates, and
    ``sync=False`` skips the fsync before the rename. ``backend=``, ``block_size=`` and
    ``queue_depth=`` tune the engine. Binary only: wrap in
    ``io.TextIOWrapper(io.BufferedReader(f))`` for text. ``path`` may be an ``s3://`` or
    ``http(s)://`` URL (a ``str``; writing: ``s3://`` only), with the store's keywords of
    :func:`cacheless.copy`: see :class:`CachelessReader` and :class:`CachelessWriter`.
    """
    tuning = dict(backend=backend, block_size=block_size, queue_depth=queue_depth, endpoint_url=endpoint_url, region=region, no_sign_request=no_sign_request,
                  concurrency=concurrency, part_size=part_size, ca_bundle=ca_bundle, retries=retries, read_timeout=read_timeout)
    if access in ("rb", "br"):
        return CachelessReader(path, mode=mode, memory=memory, **tuning)
    if access in ("wb", "bw"):
        return CachelessWriter(path, mode=mode, memory=memory, size_hint=size_hint, sync=sync, **tuning)
    raise ValueError(f"access must be 'rb' or 'wb', not {access!r} (cacheless files are binary: wrap one in io.TextIOWrapper for text; mode= is the I/O mode)")
