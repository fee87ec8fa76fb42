"""Puts cacheless.checkpoint's Writer and Reader wherever PyTorch's DCP tests (and DCP itself,
when it picks a storage for a checkpoint_id) find FileSystemWriter and FileSystemReader, in every
interpreter started with this folder on PYTHONPATH and CACHELESS_DCP_SWAP set to a log file: the
test process and the ranks it spawns alike (scripts/peer-suites dcp). Each writer and reader made
appends a line to the log, which shows the swap took effect."""

import os

_log = os.environ.get("CACHELESS_DCP_SWAP")
if _log:
    import importlib

    import torch.distributed.checkpoint  # noqa: F401 - the package whose names are swapped

    import cacheless.checkpoint as _cc

    def _note(what, path):
        with open(_log, "a") as f:
            f.write(f"{os.getpid()} {what} {os.fspath(path)}\n")

    class FileSystemWriter(_cc.Writer):
        def __init__(self, path, *args, **kwargs):
            _note("Writer", path)
            super().__init__(path, *args, **kwargs)

    class FileSystemReader(_cc.Reader):
        def __init__(self, path, *args, **kwargs):
            _note("Reader", path)
            super().__init__(path, *args, **kwargs)

    for name in ("torch.distributed.checkpoint", "torch.distributed.checkpoint.filesystem", "torch.distributed.checkpoint._storage_utils",
                 "torch.distributed.checkpoint.format_utils"):
        mod = importlib.import_module(name)
        if hasattr(mod, "FileSystemWriter"):
            mod.FileSystemWriter = FileSystemWriter
        if hasattr(mod, "FileSystemReader"):
            mod.FileSystemReader = FileSystemReader
