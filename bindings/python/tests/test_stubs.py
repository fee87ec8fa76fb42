"""The .pyi stubs of the native module say what the module has: the same names, and the
same parameters for every function, class constructor and method, with the same defaults (from
the compiled module) and the same types (from the Rust signatures). The public API's
keywords have the native calls' defaults."""

import ast
import inspect
import re
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


# The Rust sources of the native module, beside this suite.
SRC = Path(__file__).resolve().parents[1] / "src"

# What each Rust parameter type accepts from Python, as the stubs write it. A type missing here
# fails the test: say what it accepts, then stub it.
RUST_TYPES = {
    "PathBuf": "str",
    "str": "str",
    "String": "str",
    "bool": "bool",
    "usize": "int",
    "u64": "int",
    "u32": "int",
    "i32": "int",
    "i64": "int",
    "f64": "float",
    "Rate": "_Rate",
    "Callback": "_Progress",
    "Time": "Union[int, float, str]",
    "Owner": "Union[str, int]",
    "Group": "Union[str, int]",
    "Bound<PyAny>": "Any",
    "Bound<PyList>": "List[_Tensor]",
    "Vec<PathBuf>": "List[str]",
    "Vec<String>": "List[str]",
    "Vec<OsString>": "List[str]",
    "HashMap<String,String>": "Dict[str, str]",
}


def rust_type_to_py(rust):
    """The stub annotation of a Rust parameter type (lifetimes and references dropped)."""
    r = re.sub(r"'\w+,?", "", rust).replace(" ", "").replace("<>", "").lstrip("&")
    m = re.fullmatch(r"Option<(.*)>", r)
    if m:
        return f"Optional[{rust_type_to_py(m.group(1))}]"
    if re.fullmatch(r"Size<\w+>", r):
        return "_Size"
    if re.fullmatch(r"Count<\w+>", r):
        return "int"
    assert r in RUST_TYPES, f"no Python type known for the Rust parameter type {rust!r}"
    return RUST_TYPES[r]


def split_top(s):
    """`s` split at its commas outside <>, () and []."""
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "<([" and 1 or 0
        depth -= ch in ">)]" and 1 or 0
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in out + [cur] if p.strip()]


def closing(text, at, open_ch, close_ch):
    """The index of the bracket closing the one at `at`."""
    depth = 0
    for i in range(at, len(text)):
        depth += text[i] == open_ch
        depth -= text[i] == close_ch
        if depth == 0:
            return i
    raise AssertionError("unbalanced")


def rust_signatures():
    """{python name: [(param, rust type)]} of every #[pyfunction] ("name"), constructor
    ("Class.__init__") and method ("Class.name") of the Rust sources; getters and dunders left
    out."""
    out = {}
    # fault.rs is the test build's `_fault` module, never in a wheel (nor stubbed).
    for f in sorted(p for p in SRC.glob("*.rs") if p.name != "fault.rs"):
        text = f.read_text()
        classes = {m.group(2): m.group(1) for m in re.finditer(r'#\[pyclass\([^)]*name = "(\w+)"\)\]\s*pub struct (\w+)', text)}
        blocks = []
        for m in re.finditer(r"#\[pymethods\]\s*impl (\w+) \{", text):
            blocks.append((m.end() - 1, closing(text, m.end() - 1, "{", "}"), classes[m.group(1)]))
        for m in re.finditer(r"\bfn (\w+)(<[^>(]*>)?\(", text):
            name, at = m.group(1), m.start()
            attrs = text[text.rfind("\n\n", 0, at) : at]
            params = text[m.end() : closing(text, m.end() - 1, "(", ")")]
            cls = next((c for lo, hi, c in blocks if lo < at < hi), None)
            if cls is None and "#[pyfunction]" not in attrs:
                continue
            if "#[getter]" in attrs or name.startswith("__"):
                continue
            key = f"{cls}.__init__" if "#[new]" in attrs else (f"{cls}.{name}" if cls else name)
            got = []
            for p in split_top(params):
                if p in ("&self", "self") or ":" not in p:
                    continue
                pname, ptype = (x.strip() for x in p.split(":", 1))
                if ptype.startswith("Python<"):
                    continue
                got.append((pname.removeprefix("mut "), ptype))
            out[key] = got
    return out


def canon(node, aliases):
    """A type annotation as a comparable value: unions as sets (Optional[X] is X | None),
    aliases expanded."""
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return canon(ast.parse(node.value, mode="eval").body, aliases)
    if isinstance(node, ast.Name):
        return canon(aliases[node.id], aliases) if node.id in aliases else node.id
    if isinstance(node, ast.List):
        return tuple(canon(e, aliases) for e in node.elts)
    if isinstance(node, ast.Subscript):
        base = node.value.id
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        args = [canon(a, aliases) for a in args]
        if base in ("Optional", "Union"):
            members = set()
            for a in args + (["None"] if base == "Optional" else []):
                members |= a if isinstance(a, frozenset) else {a}
            return frozenset(members)
        return (base, tuple(args))
    raise AssertionError(f"unexpected annotation {ast.unparse(node)}")


def test_stub_types_match_the_rust_signatures():
    tree = stub_tree()
    aliases = {t.targets[0].id: t.value for t in tree.body if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name)}
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            stubbed[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and not any(isinstance(d, ast.Name) and d.id == "property" for d in m.decorator_list):
                    if m.name == "__init__" or not m.name.startswith("__"):
                        stubbed[f"{node.name}.{m.name}"] = m
    rust = rust_signatures()
    assert set(rust) == set(stubbed), "functions and methods: Rust {} / stub {}".format(sorted(set(rust) - set(stubbed)), sorted(set(stubbed) - set(rust)))
    for key, node in stubbed.items():
        a = node.args
        given = [x for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]
        assert [x.arg for x in given] == [n for n, _ in rust[key]], key
        for x, (name, rtype) in zip(given, rust[key]):
            want = canon(ast.parse(rust_type_to_py(rtype), mode="eval").body, aliases)
            assert x.annotation is not None, f"{key}({name}) has no type in the stub"
            assert canon(x.annotation, aliases) == want, f"{key}({name}): stub says {ast.unparse(x.annotation)}, Rust takes {rtype}"


def test_the_type_check_sees_a_wrong_type():
    aliases = {"_Size": ast.parse("Union[int, str]", mode="eval").body}
    ann = lambda s: canon(ast.parse(s, mode="eval").body, aliases)
    assert ann("Optional[_Size]") == ann("Union[str, int, None]") == ann(rust_type_to_py("Option<Size<Memory>>"))
    assert ann("Optional[int]") != ann(rust_type_to_py("Option<Size<Memory>>"))
    assert ann("bool") != ann(rust_type_to_py("&str"))


def public_calls():
    """(public function, native function it calls, keywords whose defaults differ on purpose)."""
    import cacheless.safetensors as st
    import cacheless.safetensors.torch as stt

    # safetensors' own `backend=` ("mmap") maps to the engine's ("auto").
    return [
        (cacheless.read_file, _native.read_file, ()),
        (cacheless.write_file, _native.write_file, ()),
        (cacheless.copy, _native.copy, ()),
        (cacheless.hash, _native.hash, ()),
        (cacheless.extract, _native.extract, ()),
        (cacheless.pack, _native.pack, ()),
        (cacheless.CachelessReader, _native.Reader, ()),
        (cacheless.CachelessWriter, _native.Writer, ()),
        (st.load_file, _native.st_load, ("backend",)),
        (stt.load_file, _native.st_load, ("backend",)),
        (st.load_model, _native.st_load_model, ("backend",)),
        (st.save_file, _native.st_save, ()),
        (stt.save_file, _native.st_save, ()),
        (st.safe_open, _native.SafeFile, ("backend",)),
    ]


def test_public_keywords_have_the_native_defaults_and_none_is_missing():
    for public, native, differ in public_calls():
        pub = inspect.signature(public).parameters
        nat = {n: d for n, k, d in runtime_params(native) if k == "keyword"}
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in pub.values()), f"{public.__qualname__} takes **kwargs: name each keyword"
        missing = set(nat) - set(pub)
        assert not missing, f"{public.__module__}.{public.__qualname__} lacks the native keywords {sorted(missing)}"
        for name, dflt in nat.items():
            if name not in differ:
                assert pub[name].default == dflt, f"{public.__qualname__}({name}=): {pub[name].default!r} here, {dflt!r} in the native call"
