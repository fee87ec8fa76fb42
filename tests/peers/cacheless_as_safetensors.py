"""A pytest plugin (``-p cacheless_as_safetensors``) that runs the safetensors package's own tests
against cacheless: ``safetensors``, ``safetensors.numpy`` and ``safetensors.torch`` become
``cacheless.safetensors`` and its numpy and torch modules before any test module imports them.
The package itself is imported first, so that cacheless.safetensors.SafetensorError subclasses
the package's class as it does for callers."""

import sys

import safetensors  # noqa: F401 - the package's error class, which ours subclasses

import cacheless.safetensors
import cacheless.safetensors.numpy
import cacheless.safetensors.torch

sys.modules["safetensors"] = cacheless.safetensors
sys.modules["safetensors.numpy"] = cacheless.safetensors.numpy
sys.modules["safetensors.torch"] = cacheless.safetensors.torch
