"""The numpy half of the drop-in, under the ``safetensors`` package's module name:
``from cacheless.safetensors.numpy import load_file, save_file, load, save`` as one writes
``from safetensors.numpy import ...``. The functions are those of :mod:`cacheless.safetensors`."""

from . import SafetensorError, load, load_file, save, save_file

__all__ = ["SafetensorError", "load", "load_file", "save", "save_file"]
