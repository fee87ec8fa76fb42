"""The .pyi stubs of the native module say what the module has: the same names, and the
same parameters for every function, class constructor and method, with the same defaults."""

import ast
import inspect
from pathlib import Path

import cacheless
from cacheless import _native

STUB = Path(cacheless.__file__).with_name("_native.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


NO_DEFAULT = "<none>"


def default(node):
    """A stub's default as a value (`...` stays Ellipsis)."""
    return NO_DEFAULT if node is None else ast.literal_eval(node)


def params(node):
    """(name, kind, default) of each parameter a stub declares."""
    a = node.args
    positional = a.posonlyargs + a.args
    pos_defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [(x.arg, "positional", default(d)) for x, d in zip(positional, pos_defaults)]
    out += [(x.arg, "keyword", default(d)) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.vararg:
        out.append((a.vararg.arg, "*", NO_DEFAULT))
    if a.kwarg:
        out.append((a.kwarg.arg, "**", NO_DEFAULT))
    return [p for p in out if p[0] != "self"]


KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword",
    inspect.Parameter.VAR_POSITIONAL: "*",
    inspect.Parameter.VAR_KEYWORD: "**",
}


def runtime_params(obj):
    """(name, kind, default) of each parameter of the compiled function, from its text
    signature (pyo3 writes the Rust signature's defaults there)."""
    sig = inspect.signature(obj)
    dflt = lambda p: NO_DEFAULT if p.default is inspect.Parameter.empty else p.default
    return [(n, KINDS[p.kind], dflt(p)) for n, p in sig.parameters.items() if n not in ("self", "$self")]


def test_every_native_name_is_stubbed_and_every_stub_exists():
    tree = stub_tree()
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    stubbed |= {t.target.id for t in tree.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    public = {n for n in dir(_native) if not n.startswith("_") or n == "__version__"}
    assert public == {n for n in stubbed if not n.startswith("_") or n == "__version__"}


def test_stub_signatures_match_the_module():
    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            assert params(node) == runtime_params(getattr(_native, node.name)), node.name
        elif isinstance(node, ast.ClassDef) and node.name != "UnsupportedError":
            cls = getattr(_native, node.name)
            methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
            runtime = {n for n, v in vars(cls).items() if not n.startswith("_") or n in ("__len__", "__array_interface__")}
            assert runtime == {n for n in methods if n != "__init__"}, node.name
            for name, m in methods.items():
                if name == "__init__":
                    assert params(m) == runtime_params(cls), f"{node.name}()"
                elif not any(isinstance(d, ast.Name) and d.id == "property" for d in m.decorator_list):
                    assert params(m) == runtime_params(getattr(cls, name)), f"{node.name}.{name}"


def test_unsupported_error_is_an_os_error():
    assert issubclass(cacheless.UnsupportedError, OSError)


def test_the_shipped_module_has_no_fault_injection():
    # The fault plan is a test build's (the bindings crate's `fault-injection` feature); the
    # module this suite runs against is the one a wheel ships.
    assert not hasattr(_native, "_fault")
