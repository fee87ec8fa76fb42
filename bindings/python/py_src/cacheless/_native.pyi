# Type stubs of the native module (Rust, PyO3). tests/test_stubs.py checks them against the
# module (names, parameters, defaults) and against the Rust signatures (types).
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

_Entry = Tuple[str, str, List[int], int, int]
_Loaded = Tuple["Arena", List[_Entry], Optional[Dict[str, str]], Dict[str, Any]]
_Tensor = Tuple[str, str, List[int], Any]
# A size: bytes, or a string such as "512M".
_Size = Union[int, str]
# Bytes per second, or a string such as "200M".
_Rate = Union[int, float, str]
_Progress = Callable[[int, int], Any]

__version__: str

class UnsupportedError(OSError): ...

class Arena:
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...
    @property
    def address(self) -> int: ...
    def __len__(self) -> int: ...

class Reader:
    def __init__(
        self,
        path: str,
        *,
        mode: str = "auto",
        backend: str = "auto",
        memory: Optional[_Size] = None,
        block_size: Optional[_Size] = None,
        queue_depth: Optional[int] = None,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    def readinto(self, buf: Any) -> int: ...
    def readall(self) -> bytes: ...
    def seek(self, pos: int) -> int: ...
    def tell(self) -> int: ...
    def size(self) -> int: ...
    def streams(self) -> bool: ...
    def fileno(self) -> int: ...
    def decision(self) -> Tuple[str, str]: ...
    def close(self) -> None: ...

class Writer:
    def __init__(
        self,
        path: str,
        *,
        mode: str = "auto",
        backend: str = "auto",
        memory: Optional[_Size] = None,
        block_size: Optional[_Size] = None,
        queue_depth: Optional[int] = None,
        size_hint: Optional[int] = None,
        sync: bool = True,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    def write(self, buf: Any) -> int: ...
    def tell(self) -> int: ...
    def commit(self) -> Dict[str, Any]: ...
    def discard(self) -> None: ...
    def is_open(self) -> bool: ...
    def fileno(self) -> int: ...
    def decision(self) -> Tuple[str, str]: ...

class RemoteReader:
    def __init__(self, url: str, *, memory: Optional[_Size] = None, endpoint_url: Optional[str] = None, region: Optional[str] = None, no_sign_request: bool = False, concurrency: Optional[int] = None, part_size: Optional[_Size] = None, ca_bundle: Optional[str] = None, retries: Optional[int] = None, read_timeout: Optional[float] = None) -> None: ...
    def readinto(self, buf: Any) -> int: ...
    def readall(self) -> bytes: ...
    def seek(self, pos: int) -> int: ...
    def tell(self) -> int: ...
    def size(self) -> int: ...
    def decision(self) -> Tuple[str, str]: ...
    def close(self) -> None: ...

class RemoteWriter:
    def __init__(self, url: str, *, memory: Optional[_Size] = None, endpoint_url: Optional[str] = None, region: Optional[str] = None, no_sign_request: bool = False, concurrency: Optional[int] = None, part_size: Optional[_Size] = None, ca_bundle: Optional[str] = None, retries: Optional[int] = None, read_timeout: Optional[float] = None) -> None: ...
    def write(self, buf: Any) -> int: ...
    def tell(self) -> int: ...
    def commit(self) -> Dict[str, Any]: ...
    def discard(self) -> None: ...
    def is_open(self) -> bool: ...
    def decision(self) -> Tuple[str, str]: ...

class SafeFile:
    def __init__(self, path: str, *, mode: str = "auto", backend: str = "auto", memory: Optional[_Size] = None) -> None: ...
    def offset_keys(self) -> List[str]: ...
    def describe(self, name: str) -> Tuple[str, List[int], int]: ...
    def metadata(self) -> Optional[Dict[str, str]]: ...
    def tensor(self, name: str) -> Tuple[Arena, int]: ...
    def tensor_range(self, name: str, lo: int, hi: int) -> Tuple[Arena, int]: ...
    def decision(self) -> Tuple[str, str]: ...
    def close(self) -> None: ...

def is_url(path: str) -> bool: ...
def info(path: str, mode: str = "auto") -> Dict[str, Any]: ...
def residency(path: str) -> Dict[str, Any]: ...
def evict(path: str) -> Dict[str, Any]: ...
def read_file(
    path: str,
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
    progress: Optional[_Progress] = None,
) -> Tuple[Arena, Tuple[str, str]]: ...
def write_file(path: str, data: Any, *, mode: str = "auto", sync: bool = True) -> Dict[str, Any]: ...
def copy(
    src: str,
    dst: str,
    *,
    recursive: bool = False,
    archive: bool = False,
    no_clobber: bool = False,
    update: bool = False,
    interactive: Optional[Any] = None,
    force: bool = False,
    remove_destination: bool = False,
    backup: Optional[str] = None,
    suffix: Optional[str] = None,
    preserve: Optional[List[str]] = None,
    no_preserve: Optional[List[str]] = None,
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
    bwlimit: Optional[_Rate] = None,
    threads: Optional[int] = None,
    sync: bool = True,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    progress: Optional[_Progress] = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Optional[_Size] = None,
    ca_bundle: Optional[str] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Dict[str, Any]: ...
def hash(
    path: str,
    algo: str = "sha256",
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    progress: Optional[_Progress] = None,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Optional[_Size] = None,
    ca_bundle: Optional[str] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Tuple[str, str]: ...
def extract(
    archive: str,
    dest: str,
    strip_components: int = 0,
    keep_old_files: bool = False,
    *,
    ignore_zeros: bool = False,
    mode: str = "auto",
    memory: Optional[_Size] = None,
    threads: Optional[int] = None,
    decompress_threads: Optional[int] = None,
    progress: Optional[_Progress] = None,
    sync: bool = True,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Optional[_Size] = None,
    ca_bundle: Optional[str] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Dict[str, Any]: ...
def pack(
    archive: str,
    paths: List[str],
    directory: Optional[str] = None,
    compression: Optional[str] = None,
    level: Optional[int] = None,
    frame_size: Optional[_Size] = None,
    sort: str = "none",
    mtime: Union[int, float, str, None] = None,
    owner: Union[str, int, None] = None,
    group: Union[str, int, None] = None,
    numeric_owner: bool = False,
    exclude: List[str] = ...,
    one_file_system: bool = False,
    xattrs: bool = False,
    read_threads: Optional[int] = None,
    acls: bool = False,
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
    progress: Optional[_Progress] = None,
    sync: bool = True,
    endpoint_url: Optional[str] = None,
    region: Optional[str] = None,
    no_sign_request: bool = False,
    concurrency: Optional[int] = None,
    part_size: Optional[_Size] = None,
    ca_bundle: Optional[str] = None,
    retries: Optional[int] = None,
    read_timeout: Optional[float] = None,
) -> Dict[str, Any]: ...
def st_load(
    path: str,
    keys: Optional[List[str]] = None,
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
    progress: Optional[_Progress] = None,
) -> _Loaded: ...
def st_load_model(
    path: str,
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    threads: Optional[int] = None,
    parallel: int = 4,
    progress: Optional[_Progress] = None,
) -> Tuple[List[_Loaded], Dict[str, Any]]: ...
def cli_main(argv: List[str], program: str) -> int: ...
def st_parse(data: Any) -> Tuple[List[_Entry], Optional[Dict[str, str]]]: ...
def st_save(
    path: str,
    tensors: List[_Tensor],
    metadata: Optional[Dict[str, str]] = None,
    *,
    mode: str = "auto",
    backend: str = "auto",
    memory: Optional[_Size] = None,
    block_size: Optional[_Size] = None,
    queue_depth: Optional[int] = None,
    progress: Optional[_Progress] = None,
) -> Dict[str, Any]: ...
def st_serialize(tensors: List[_Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes: ...
