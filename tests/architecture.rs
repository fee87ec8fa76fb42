//! docs/ARCHITECTURE.md held to the code: no module of any crate imports, directly or through
//! others, a module that imports it (nor a submodule a sibling that imports it), and every
//! module of the engine is in the floors table and imports only from floors below its own.
//! Imports are read from the source: `crate::NAME` paths (a name the crate root re-exports
//! counts as the module it comes from) and, between siblings, `super::NAME`; comments and
//! test modules (what follows `#[cfg(test)]`) are left out.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose modules are checked, by their source folder.
const CRATES: [&str; 9] = [
    "crates/cacheless/src",
    "crates/archive/src",
    "crates/remote/src",
    "crates/safetensors/src",
    "crates/cli/src",
    "crates/crash/src",
    "crates/testkit/src",
    "crates/bench/src",
    "bindings/python/src",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.rs` files under `p` (itself where it is one).
fn rs_files(p: &Path) -> Vec<PathBuf> {
    if p.is_file() {
        return vec![p.to_path_buf()];
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rs_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The modules of the folder `dir` (files and folders, less `skip`), with their files.
fn modules(dir: &Path, skip: &[&str]) -> BTreeMap<String, Vec<PathBuf>> {
    let mut mods = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if skip.contains(&name.as_str()) {
            continue;
        }
        let module = match name.strip_suffix(".rs") {
            Some(m) => m.to_string(),
            None if p.is_dir() => name,
            None => continue,
        };
        mods.insert(module, rs_files(&p));
    }
    mods
}

/// The code of `file` that counts: no comment lines, nothing from its first `#[cfg(test)]` on.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if !t.starts_with("//") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The names `prefix` reaches in `code`: `prefix::a` and each first name of `prefix::{a, b::c}`.
fn reached(code: &str, prefix: &str) -> BTreeSet<String> {
    let one = regex::Regex::new(&format!(r"\b{prefix}::(\w+)")).unwrap();
    let group = regex::Regex::new(&format!(r"\b{prefix}::\{{([^}}]*)\}}")).unwrap();
    let first = regex::Regex::new(r"(?:^|,)\s*(\w+)").unwrap();
    let mut out: BTreeSet<String> = one.captures_iter(code).map(|c| c[1].to_string()).collect();
    for g in group.captures_iter(code) {
        out.extend(first.captures_iter(&g[1]).map(|c| c[1].to_string()));
    }
    out
}

/// The items the crate root re-exports (`pub use module::{A, B}`), to the module each comes from.
fn root_exports(src: &Path) -> BTreeMap<String, String> {
    let re = regex::Regex::new(r"pub use (\w+)::(\{[^}]*\}|\w+)").unwrap();
    let word = regex::Regex::new(r"\w+").unwrap();
    let mut out = BTreeMap::new();
    for f in ["lib.rs", "main.rs"] {
        let Ok(text) = std::fs::read_to_string(src.join(f)) else { continue };
        for c in re.captures_iter(&text) {
            for w in word.find_iter(&c[2]) {
                out.insert(w.as_str().to_string(), c[1].to_string());
            }
        }
    }
    out
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module -> the modules of the same graph it imports, through `prefix` paths in its files.
fn graph(mods: &BTreeMap<String, Vec<PathBuf>>, prefix: &str, exports: &BTreeMap<String, String>) -> Graph {
    mods.iter()
        .map(|(m, files)| {
            let mut to = BTreeSet::new();
            for f in files {
                for name in reached(&code(f), prefix) {
                    let name = exports.get(&name).cloned().unwrap_or(name);
                    if &name != m && mods.contains_key(&name) {
                        to.insert(name);
                    }
                }
            }
            (m.clone(), to)
        })
        .collect()
}

/// A cycle of `g` (its modules in import order, the first again at the end), if it has one.
fn cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(g: &Graph, m: &str, state: &mut BTreeMap<String, bool>, path: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(m.to_string(), false);
        path.push(m.to_string());
        for n in &g[m] {
            match state.get(n) {
                Some(false) => {
                    let at = path.iter().position(|p| p == n).unwrap_or(0);
                    let mut c = path[at..].to_vec();
                    c.push(n.clone());
                    return Some(c);
                }
                Some(true) => {}
                None => {
                    if let Some(c) = visit(g, n, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(m.to_string(), true);
        None
    }
    let mut state = BTreeMap::new();
    for m in g.keys() {
        if !state.contains_key(m) {
            if let Some(c) = visit(g, m, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Every folder under `dir` that is a module with submodules (holds `mod.rs`).
fn module_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.join("mod.rs").exists() {
                out.push(p.clone());
            }
            out.extend(module_dirs(&p));
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_cycle() {
    let mut found = Vec::new();
    for src in CRATES {
        let src = root().join(src);
        let mods = modules(&src, &["lib.rs", "main.rs", "bin"]);
        if let Some(c) = cycle(&graph(&mods, "crate", &root_exports(&src))) {
            found.push(format!("{}: {}", src.display(), c.join(" -> ")));
        }
        for dir in module_dirs(&src) {
            let mods = modules(&dir, &["mod.rs"]);
            if let Some(c) = cycle(&graph(&mods, "super", &BTreeMap::new())) {
                found.push(format!("{}: {}", dir.display(), c.join(" -> ")));
            }
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// The check itself finds a cycle, and one through a name the root re-exports.
#[test]
fn the_cycle_check_sees_a_cycle() {
    let d = cacheless_testkit::scratch();
    std::fs::write(d.path().join("lib.rs"), "pub use b::Thing;\n").unwrap();
    std::fs::write(d.path().join("a.rs"), "use crate::Thing;\n").unwrap();
    std::fs::write(d.path().join("b.rs"), "use crate::{c::x, y};\n").unwrap();
    std::fs::write(d.path().join("c.rs"), "// use crate::b;\nfn f() { crate::a::g() }\n#[cfg(test)]\nuse crate::b;\n").unwrap();
    let mods = modules(d.path(), &["lib.rs"]);
    let g = graph(&mods, "crate", &root_exports(d.path()));
    assert_eq!(cycle(&g), Some(vec!["a".to_string(), "b".into(), "c".into(), "a".into()]));
    std::fs::write(d.path().join("c.rs"), "// use crate::a;\n").unwrap();
    assert_eq!(cycle(&graph(&modules(d.path(), &["lib.rs"]), "crate", &root_exports(d.path()))), None, "comments do not import");
}

#[test]
fn the_engine_s_modules_stand_on_their_floors() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let table = doc.split("## The engine's floors").nth(1).expect("the floors section").split("\n## ").next().unwrap();
    let row = regex::Regex::new(r"(?m)^\| (\d+) \| ([^|]*) \|").unwrap();
    let name = regex::Regex::new(r"`(\w+)`").unwrap();
    let mut floor: BTreeMap<String, u32> = BTreeMap::new();
    for r in row.captures_iter(table) {
        for n in name.captures_iter(&r[2]) {
            floor.insert(n[1].to_string(), r[1].parse().unwrap());
        }
    }
    let src = root().join("crates/cacheless/src");
    let mods = modules(&src, &["lib.rs"]);
    let listed: BTreeSet<&String> = floor.keys().collect();
    let present: BTreeSet<&String> = mods.keys().collect();
    assert_eq!(listed, present, "the floors table lists exactly the engine's modules");
    let g = graph(&mods, "crate", &root_exports(&src));
    let mut up = Vec::new();
    for (m, to) in &g {
        for n in to {
            if floor[n] >= floor[m] {
                up.push(format!("{m} (floor {}) imports {n} (floor {})", floor[m], floor[n]));
            }
        }
    }
    assert!(up.is_empty(), "imports from the same floor or above:\n{}", up.join("\n"));
}

/// The crates whose kernel calls go through the engine's `sys` facade: the shipped ones. (The
/// crash simulator, the benchmark harness and the test kit drive the kernel as tools of their
/// own: mounts, cgroups, block devices.)
const SHIPPED: [&str; 6] =
    ["crates/cacheless/src", "crates/archive/src", "crates/remote/src", "crates/safetensors/src", "crates/cli/src", "bindings/python/src"];

/// The engine's files that may name rustix or libc calls: the facade, and what sits below it or
/// beside it on purpose (the I/O requests, the probes, the residency calls, aligned memory).
const KERNEL: [&str; 5] = [
    "crates/cacheless/src/sys/",
    "crates/cacheless/src/backend/",
    "crates/cacheless/src/caps.rs",
    "crates/cacheless/src/residency.rs",
    "crates/cacheless/src/buf.rs",
];

/// rustix's functions that make no system call (device numbers).
const PURE: [&str; 3] = ["makedev", "major", "minor"];

/// The rustix and libc calls `code` makes: `rustix::a::f(`, `libc::f(`, and functions imported
/// from them by name (`use rustix::fs::{openat, Mode}`: a lower-case name that is no module).
fn kernel_calls(code: &str) -> Vec<String> {
    // Lower-case paths only: `rustix::fs::Mode::empty()` builds a value.
    let call = regex::Regex::new(r"\b((?:rustix(?:::[a-z][a-z0-9_]*)+|libc)::([a-z_][a-z0-9_]*))\s*\(").unwrap();
    let import = regex::Regex::new(r"\buse (rustix|libc)((?:::\w+)*)::\{([^}]*)\}|\buse (rustix|libc)((?:::\w+)*)::([a-z_][a-z0-9_]*)\s*;").unwrap();
    let modules = ["fs", "io", "process", "param", "mm", "path", "fd", "pipe", "thread", "time", "event", "system", "net", "termios", "rand", "stdio"];
    let mut out: Vec<String> = call.captures_iter(code).filter(|c| !PURE.contains(&&c[2])).map(|c| c[1].to_string()).collect();
    for c in import.captures_iter(code) {
        let names: Vec<&str> = match (c.get(3), c.get(6)) {
            (Some(list), _) => list.as_str().split(',').map(str::trim).collect(),
            (None, Some(one)) => vec![one.as_str()],
            _ => continue,
        };
        for n in names {
            let n = n.split_whitespace().next().unwrap_or("");
            if n.starts_with(|ch: char| ch.is_ascii_lowercase()) && !modules.contains(&n) && n != "self" && !PURE.contains(&n) {
                out.push(format!("use {}{}::{n}", c.get(1).or(c.get(4)).unwrap().as_str(), c.get(2).or(c.get(5)).unwrap().as_str()));
            }
        }
    }
    out
}

#[test]
fn kernel_calls_go_through_the_sys_facade() {
    let mut found = Vec::new();
    for dir in SHIPPED {
        for f in rs_files(&root().join(dir)) {
            let rel = f.strip_prefix(root()).unwrap().to_string_lossy().into_owned();
            if KERNEL.iter().any(|k| rel.starts_with(k)) {
                continue;
            }
            for c in kernel_calls(&code(&f)) {
                found.push(format!("{rel}: {c}"));
            }
        }
    }
    assert!(found.is_empty(), "kernel calls outside sys/, backend/, caps, residency and buf (add them to cacheless::sys):\n{}", found.join("\n"));
}

#[test]
fn the_facade_check_sees_a_call_and_an_imported_function() {
    let code = "use rustix::fs::{Mode, openat as o, OFlags};\nuse libc::getpid;\nfn f() { rustix::fs::fchmod(x, m); libc::close(3); let d = rustix::fs::makedev(1, 2); let m = rustix::fs::Mode::empty(); }\n";
    assert_eq!(kernel_calls(code), ["rustix::fs::fchmod", "libc::close", "use rustix::fs::openat", "use libc::getpid"]);
}

/// The files that may hold unsafe code (docs/ARCHITECTURE.md): the I/O requests, aligned memory,
/// the probes, the residency calls, and the Python binding's buffer protocol. Every crate
/// denies unsafe code at its root; these allow it again.
const UNSAFE: [&str; 5] = [
    "crates/cacheless/src/backend/",
    "crates/cacheless/src/buf.rs",
    "crates/cacheless/src/caps.rs",
    "crates/cacheless/src/residency.rs",
    "bindings/python/src/pybuf.rs",
];

#[test]
fn unsafe_code_is_allowed_only_where_the_architecture_says() {
    let mut found = Vec::new();
    let mut roots = 0;
    for dir in SHIPPED {
        for f in rs_files(&root().join(dir)) {
            let rel = f.strip_prefix(root()).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&f).unwrap();
            if text.contains("#![deny(unsafe_code)]") {
                roots += 1;
            }
            if text.contains("allow(unsafe_code)") && !UNSAFE.iter().any(|u| rel.starts_with(u)) {
                found.push(rel);
            }
        }
    }
    assert_eq!(roots, SHIPPED.len(), "every shipped crate denies unsafe code at its root");
    assert!(found.is_empty(), "unsafe code allowed outside the files docs/ARCHITECTURE.md names: {found:?}");
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    for u in &UNSAFE[..4] {
        let name = u.rsplit_once("src/").unwrap().1;
        assert!(doc.contains(&format!("`{name}`")), "docs/ARCHITECTURE.md names {name} among the unsafe files");
    }
}
