"""``cacheless.patch_safetensors()``: the safetensors package's loaders, and every place
transformers has bound them, replaced by cacheless's, so that ``from_pretrained`` (and anything
else that reads through those names) reads with direct I/O and leaves no page cache behind.

What is replaced, while a patch is active:

- ``safetensors.safe_open``, ``safetensors.torch.load_file`` and ``safetensors.numpy.load_file``
  (the package's module attributes, so a module imported while the patch is active binds ours);
- every attribute of an imported module of the safetensors or transformers packages that is
  one of those objects (as ``transformers.modeling_utils.safe_open``, bound by ``from safetensors
  import safe_open`` when transformers was imported).

The replacements are objects of each installation's own (a subclass of
:class:`cacheless.safetensors.safe_open`, and functions calling
:func:`cacheless.safetensors.torch.load_file` and :func:`cacheless.safetensors.load_file`), so
that undoing finds exactly what was patched: every attribute of every loaded module that still
holds one is given its original back, including modules imported while the patch was active.

The binding points transformers' loading path needs are known per transformers version
(:data:`TRANSFORMERS_BINDINGS`) and required: if one is missing, or holds something other than
the safetensors object, the patch raises :class:`RuntimeError` naming the transformers version
and the binding, and patches nothing, rather than leaving ``from_pretrained`` reading around it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import re
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["SafetensorsPatch", "TRANSFORMERS_BINDINGS", "patch_safetensors"]

# The safetensors objects replaced, by the name reported in `SafetensorsPatch.calls`: (module, attribute).
_ORIGINALS: Tuple[Tuple[str, str], ...] = (
    ("safetensors", "safe_open"),
    ("safetensors.torch", "load_file"),
    ("safetensors.numpy", "load_file"),
)

# Where transformers binds the safetensors names on the from_pretrained path, by the first
# transformers version the set applies to (newest first; a version uses the first set whose
# version it reaches): (module, attribute, the safetensors object it must hold).
# 5.x: checked against transformers 5.24.0, whose from_pretrained opens every shard with
# `safe_open(..., framework="pt", device=..., backend=...)` and hands `get_slice(name)` handles to
# its weight-conversion machinery (modeling_utils); modeling_layers opens multi-token-prediction
# shards the same way, and integrations.accelerate lists a shard's keys for disk offload.
# 4.x: checked against the source of transformers 4.57.1 (load_state_dict and the meta-device
# loader in modeling_utils).
TRANSFORMERS_BINDINGS: Tuple[Tuple[Tuple[int, int], Tuple[Tuple[str, str, str], ...]], ...] = (
    (
        (5, 0),
        (
            ("transformers.modeling_utils", "safe_open", "safetensors.safe_open"),
            ("transformers.modeling_layers", "safe_open", "safetensors.safe_open"),
            ("transformers.integrations.accelerate", "safe_open", "safetensors.safe_open"),
        ),
    ),
    (
        (4, 0),
        (
            ("transformers.modeling_utils", "safe_open", "safetensors.safe_open"),
            ("transformers.modeling_utils", "safe_load_file", "safetensors.torch.load_file"),
        ),
    ),
)

# Packages whose loaded modules are searched for bindings of the safetensors objects when a patch starts.
_SCOPE = ("safetensors", "transformers")
# The safetensors extension module: the class is defined there, and nothing reads through it by name.
_SKIP = ("safetensors._safetensors_rust",)
# safe_open frameworks cacheless reads; others ("tf", "flax", "mlx", "paddle") go to the package's own safe_open.
_FRAMEWORKS = ("pt", "torch", "np", "numpy")

_lock = threading.RLock()
_holders: List["SafetensorsPatch"] = []
_installed: Optional["_Installation"] = None


def _version_tuple(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _record(name: str) -> None:
    """Counts a call through a replacement in every active patch."""
    with _lock:
        for p in _holders:
            p._calls[name] = p._calls.get(name, 0) + 1


class _Installation:
    """The replacements of one installation (from the first active patch to the last undo), by
    the names of the safetensors objects they replace."""

    def __init__(self, originals: Dict[str, Any]) -> None:
        self.originals = originals
        self.wrappers: Dict[str, Any] = {}
        for name, original in originals.items():
            self.wrappers[name] = _REPLACEMENTS[name](original)
        self.by_original = {id(o): self.wrappers[n] for n, o in originals.items()}
        self.by_wrapper = {id(w): originals[n] for n, w in self.wrappers.items()}


def _safe_open_replacement(original: Any) -> Any:
    from .safetensors import safe_open as cacheless_safe_open

    class safe_open(cacheless_safe_open):  # noqa: N801 - the name it stands in for
        __doc__ = (
            "``safetensors.safe_open`` as installed by :func:`cacheless.patch_safetensors`: "
            "cacheless's safe_open for the frameworks cacheless reads (pt, np), the package's own for others.\n\n"
            + (cacheless_safe_open.__doc__ or "")
        )

        # from_pretrained reads every tensor of each shard it opens (from 4 threads): one
        # direct read of the whole shard serves them all, instead of a locked read per tensor.
        _read_whole = True

        def __new__(cls, filename: Any, framework: str, *args: Any, **kwargs: Any) -> Any:
            if framework not in _FRAMEWORKS:
                return original(filename, framework, *args, **kwargs)
            _record("safetensors.safe_open")
            return super().__new__(cls)

    safe_open.__module__ = __name__
    safe_open.__qualname__ = "safe_open"
    return safe_open


def _load_file_replacement(name: str, module: str) -> Callable[[Any], Callable[..., Any]]:
    """The factory of a replacement for the ``load_file`` named ``name``: it calls ``load_file``
    of cacheless's ``module`` (which takes the same parameters)."""

    def make(original: Any) -> Callable[..., Any]:
        @functools.wraps(original)
        def load_file(filename: Any, *args: Any, **kwargs: Any) -> Any:
            _record(name)
            return importlib.import_module(module).load_file(filename, *args, **kwargs)

        load_file.__doc__ = f"``{name}`` as installed by :func:`cacheless.patch_safetensors`: :func:`{module}.load_file`."
        load_file.__module__ = __name__
        return load_file

    return make


_REPLACEMENTS: Dict[str, Callable[[Any], Any]] = {
    "safetensors.safe_open": _safe_open_replacement,
    "safetensors.torch.load_file": _load_file_replacement("safetensors.torch.load_file", "cacheless.safetensors.torch"),
    "safetensors.numpy.load_file": _load_file_replacement("safetensors.numpy.load_file", "cacheless.safetensors"),
}


def _originals() -> Dict[str, Any]:
    """The safetensors objects to replace that this environment has, by name. safetensors itself
    is required; its torch module only where torch is installed."""
    try:
        import safetensors
    except ImportError as e:
        raise RuntimeError(f"cacheless.patch_safetensors() replaces the safetensors package's loaders, but safetensors cannot be imported ({e})") from e
    found: Dict[str, Any] = {}
    for module_name, attr in _ORIGINALS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if module_name == "safetensors.torch" and importlib.util.find_spec("torch") is None:
                continue  # without torch nothing can bind safetensors.torch's names
            raise
        value = getattr(module, attr, None)
        if value is None:
            raise RuntimeError(f"safetensors {getattr(safetensors, '__version__', '?')}: {module_name} has no {attr}, which cacheless.patch_safetensors() replaces")
        found[f"{module_name}.{attr}"] = value
    return found


def _bindings_for(version: str) -> Sequence[Tuple[str, str, str]]:
    v = _version_tuple(version)
    if not v:  # no version to go by: the newest set
        return TRANSFORMERS_BINDINGS[0][1]
    for first, bindings in TRANSFORMERS_BINDINGS:
        if v >= first:
            return bindings
    raise RuntimeError(f"transformers {version} is older than any version cacheless.patch_safetensors() knows the safetensors bindings of (4.0 and later)")


def _check_transformers(require: Optional[bool], inst: Optional[_Installation], originals: Dict[str, Any]) -> None:
    """Imports the transformers modules that bind the safetensors names and checks that each
    binding holds the safetensors object (or, while installed, its replacement). Raises
    RuntimeError naming the version and the binding otherwise."""
    if require is False:
        return
    if importlib.util.find_spec("transformers") is None:
        if require:
            raise RuntimeError("cacheless.patch_safetensors(transformers=True): transformers is not installed")
        return
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:  # importable without distribution metadata (a source tree)
        version = str(getattr(importlib.import_module("transformers"), "__version__", "?"))
    for module_name, attr, expected in _bindings_for(version):
        where = f"transformers {version}: {module_name}.{attr}"
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise RuntimeError(
                f"{where} cannot be checked: {module_name} does not import ({e}); install what it needs (torch), "
                "or pass transformers=False to patch only the safetensors package"
            ) from e
        if expected not in originals:
            raise RuntimeError(f"{where} should be {expected}, which cannot be imported here (is torch installed?)")
        if attr not in vars(module):
            raise RuntimeError(
                f"{where} does not exist: this transformers no longer binds {expected} there, so cacheless.patch_safetensors() "
                "cannot make from_pretrained read through cacheless (it knows the bindings of the versions in "
                "cacheless._patch.TRANSFORMERS_BINDINGS)"
            )
        value = vars(module)[attr]
        ok = value is originals[expected] or (inst is not None and value is inst.wrappers.get(expected))
        if not ok:
            raise RuntimeError(
                f"{where} is {value!r}, not {expected}: something else has replaced it, or this transformers binds "
                "another object there, so cacheless.patch_safetensors() will not patch it"
            )


def _modules(prefixes: Optional[Sequence[str]]) -> List[ModuleType]:
    """Loaded modules (of those packages, or all), without the safetensors extension module."""
    out = []
    for name, module in list(sys.modules.items()):
        if module is None or name in _SKIP or name.startswith("cacheless"):
            continue
        if prefixes is not None and not any(name == p or name.startswith(p + ".") for p in prefixes):
            continue
        out.append(module)
    return out


def _swap(modules: Sequence[ModuleType], table: Dict[int, Any]) -> None:
    """Sets every attribute of ``modules`` that is (by identity) a key of ``table`` to its value."""
    for module in modules:
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            new = table.get(id(value))
            if new is not None:
                setattr(module, attr, new)


def _bound(inst: _Installation) -> List[str]:
    wrappers = {id(w) for w in inst.wrappers.values()}
    found = []
    for module in _modules(None):
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        found.extend(f"{module.__name__}.{attr}" for attr, value in items if id(value) in wrappers)
    return sorted(found)


class SafetensorsPatch:
    """An active (or undone) :func:`patch_safetensors`: a context manager, and a handle to undo it.

    ``with patch_safetensors():`` undoes the patch when the block ends, by an exception too;
    ``patch_safetensors()`` alone keeps it until :meth:`undo` (or the process's end). Patches
    nest: the names stay replaced while any patch is active, and the last undo restores them.
    Entering the same object again (``with p:`` twice, nested or in turn) is allowed: it undoes
    when its outermost ``with`` ends.
    """

    def __init__(self, transformers: Optional[bool] = None) -> None:
        self._transformers = transformers
        self._calls: Dict[str, int] = {}
        self._active = False
        self._depth = 0
        self._activate()

    def _activate(self) -> None:
        global _installed
        with _lock:
            if self._active:
                return
            if _installed is None:
                originals = _originals()
                _check_transformers(self._transformers, None, originals)
                inst = _Installation(originals)
            else:
                inst = _installed
                _check_transformers(self._transformers, inst, inst.originals)
            # Validated: now replace the safetensors objects wherever those packages bound them.
            _swap(_modules(_SCOPE), inst.by_original)
            _installed = inst
            _holders.append(self)
            self._active = True

    @property
    def active(self) -> bool:
        """True until :meth:`undo` (or the end of the outermost ``with``)."""
        return self._active

    @property
    def calls(self) -> Dict[str, int]:
        """Calls through the replacements while this patch was active, by the name replaced:
        ``"safetensors.safe_open"`` (files opened; frameworks cacheless does not read are not
        counted), ``"safetensors.torch.load_file"``, ``"safetensors.numpy.load_file"``."""
        with _lock:
            return dict(self._calls)

    @property
    def patched(self) -> List[str]:
        """Every ``module.attribute`` that now holds a replacement (empty once no patch is active)."""
        with _lock:
            return _bound(_installed) if _installed is not None else []

    def undo(self) -> None:
        """Ends this patch; when no other patch is active, every attribute of every loaded module
        that holds a replacement gets the safetensors object back. Undoing twice is harmless."""
        global _installed
        with _lock:
            if not self._active:
                return
            self._active = False
            self._depth = 0
            _holders.remove(self)
            if not _holders and _installed is not None:
                inst, _installed = _installed, None
                _swap(_modules(None), inst.by_wrapper)

    def __enter__(self) -> "SafetensorsPatch":
        with _lock:
            self._activate()
            self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with _lock:
            self._depth -= 1
            if self._depth <= 0:
                self.undo()

    def __repr__(self) -> str:
        return f"<cacheless.SafetensorsPatch {'active' if self._active else 'undone'}>"


def patch_safetensors(*, transformers: Optional[bool] = None) -> SafetensorsPatch:
    """Makes the safetensors package's loaders, and transformers' ``from_pretrained``, read
    through cacheless; returns the patch (a context manager, with ``undo()``).

    ``safetensors.safe_open`` (for ``framework="pt"`` and ``"np"``), ``safetensors.torch.load_file``
    and ``safetensors.numpy.load_file`` are replaced by cacheless's, in the safetensors package
    and wherever a loaded module of safetensors or transformers has bound them. The bindings
    transformers' loading path uses are required (:data:`TRANSFORMERS_BINDINGS`, by version):
    ``transformers=None`` (default) requires them when transformers is installed, ``True``
    requires transformers, ``False`` leaves transformers' modules unchecked (those already
    loaded are still patched). A required binding that is missing, or that holds something else,
    raises :class:`RuntimeError` naming the transformers version and the binding, and nothing is
    patched.

    ::

        with cacheless.patch_safetensors():
            model = AutoModelForCausalLM.from_pretrained(path)   # shards read with O_DIRECT

        cacheless.patch_safetensors()                             # or once, at start-up
    """
    return SafetensorsPatch(transformers)
