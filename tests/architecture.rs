//! docs/ARCHITECTURE.md held to the code: no module of any crate imports, directly or through
//! others, a module that imports it (nor a submodule a sibling that imports it), and every
//! module of the engine is in the floors table and imports only from floors below its own; no
//! shipped crate calls the kernel (rustix, libc) nor changes the filesystem through `std::fs`
//! outside the engine's facade; unsafe code only where the architecture says.
//!
//! The sources are parsed as Rust (syn): every item counts but those under `#[cfg(test)]`,
//! wherever they stand in a file. Imports are `crate::NAME` paths (a name the crate root
//! re-exports counts as the module it comes from) and, between siblings, `super::NAME`, in
//! `use` trees, expressions and types alike; calls are resolved through the file's `use`
//! declarations (`use std::fs; fs::write(..)` is `std::fs::write`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose modules are checked, by their source folder.
const CRATES: [&str; 11] = [
    "crates/sys/src",
    "crates/cacheless/src",
    "crates/archive/src",
    "crates/remote/src",
    "crates/cp/src",
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

/// Whether `attrs` hold `#[cfg(test)]` (or a `cfg` that needs `test`, as `cfg(all(test, ...))`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated).is_ok_and(|metas| {
                fn needs_test(m: &syn::Meta) -> bool {
                    match m {
                        syn::Meta::Path(p) => p.is_ident("test"),
                        syn::Meta::List(l) if l.path.is_ident("all") => l
                            .parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
                            .is_ok_and(|inner| inner.iter().any(needs_test)),
                        _ => false,
                    }
                }
                metas.iter().any(needs_test)
            })
    })
}

/// The items of `file` that count: every one but those under `#[cfg(test)]` (modules, functions,
/// impls, uses), at any depth.
fn code(file: &Path) -> syn::File {
    let text = std::fs::read_to_string(file).unwrap();
    let mut f = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    fn prune(items: &mut Vec<syn::Item>) {
        items.retain(|i| {
            let attrs = match i {
                syn::Item::Mod(m) => &m.attrs,
                syn::Item::Fn(f) => &f.attrs,
                syn::Item::Impl(x) => &x.attrs,
                syn::Item::Use(u) => &u.attrs,
                syn::Item::Const(c) => &c.attrs,
                syn::Item::Static(x) => &x.attrs,
                syn::Item::Struct(x) => &x.attrs,
                syn::Item::Enum(x) => &x.attrs,
                syn::Item::Trait(x) => &x.attrs,
                syn::Item::Macro(x) => &x.attrs,
                _ => return true,
            };
            !is_test(attrs)
        });
        for i in items.iter_mut() {
            if let syn::Item::Mod(m) = i {
                if let Some((_, inner)) = &mut m.content {
                    prune(inner);
                }
            }
        }
    }
    if is_test(&f.attrs) {
        f.items.clear();
    }
    prune(&mut f.items);
    f
}

/// What a file's code says, read once: the paths it names (each as its segments, `use`
/// trees flattened) and the functions it calls by path, both as written.
#[derive(Default)]
struct Names {
    /// Every path: `use` trees, expressions, types, patterns, macros' paths.
    paths: Vec<Vec<String>>,
    /// The paths called as functions (`a::b::f(..)`).
    calls: Vec<Vec<String>>,
    /// `use` declarations: the name each brings in, to its full path.
    uses: BTreeMap<String, Vec<String>>,
}

impl<'ast> syn::visit::Visit<'ast> for Names {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        fn walk(t: &syn::UseTree, pre: &mut Vec<String>, out: &mut Names) {
            match t {
                syn::UseTree::Path(p) => {
                    pre.push(p.ident.to_string());
                    walk(&p.tree, pre, out);
                    pre.pop();
                }
                syn::UseTree::Name(n) => {
                    let mut full = pre.clone();
                    if n.ident != "self" {
                        full.push(n.ident.to_string());
                    }
                    out.uses.insert(full.last().cloned().unwrap_or_default(), full.clone());
                    out.paths.push(full);
                }
                syn::UseTree::Rename(r) => {
                    let mut full = pre.clone();
                    full.push(r.ident.to_string());
                    out.uses.insert(r.rename.to_string(), full.clone());
                    out.paths.push(full);
                }
                syn::UseTree::Glob(_) => out.paths.push(pre.clone()),
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        walk(t, pre, out);
                    }
                }
            }
        }
        walk(&u.tree, &mut Vec::new(), self);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.paths.push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }

    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*c.func {
            self.calls.push(p.path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_expr_call(self, c);
    }
}

fn names(file: &Path) -> Names {
    let mut n = Names::default();
    syn::visit::Visit::visit_file(&mut n, &code(file));
    n
}

impl Names {
    /// `p` with its first name resolved through the file's `use` declarations.
    fn resolve(&self, p: &[String]) -> Vec<String> {
        match p.first().and_then(|f| self.uses.get(f)) {
            Some(full) if p.len() > 1 || full.len() > 1 => full.iter().cloned().chain(p[1..].iter().cloned()).collect(),
            _ => p.to_vec(),
        }
    }
}

/// The names `prefix` (`crate` or `super`) reaches in a file: the name after it in each path.
fn reached(n: &Names, prefix: &str) -> BTreeSet<String> {
    n.paths.iter().filter(|p| p.len() > 1 && p[0] == prefix).map(|p| p[1].clone()).collect()
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
                for name in reached(&names(f), prefix) {
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

/// The check itself finds a cycle, and one through a name the root re-exports; comments do not
/// import, and an item under `#[cfg(test)]` does not either, wherever it stands in the file.
#[test]
fn the_cycle_check_sees_a_cycle() {
    let d = cacheless_testkit::scratch();
    std::fs::write(d.path().join("lib.rs"), "pub use b::Thing;\n").unwrap();
    std::fs::write(d.path().join("a.rs"), "use crate::Thing;\n").unwrap();
    std::fs::write(d.path().join("b.rs"), "use crate::{c::x, y};\n").unwrap();
    std::fs::write(d.path().join("c.rs"), "// use crate::b;\n#[cfg(test)]\nmod t { use crate::b; }\nfn f() { crate::a::g() }\n").unwrap();
    let mods = modules(d.path(), &["lib.rs"]);
    let g = graph(&mods, "crate", &root_exports(d.path()));
    assert_eq!(cycle(&g), Some(vec!["a".to_string(), "b".into(), "c".into(), "a".into()]));
    std::fs::write(d.path().join("c.rs"), "// use crate::a;\n#[cfg(test)]\nfn t() { crate::a::g() }\nfn f() {}\n").unwrap();
    assert_eq!(cycle(&graph(&modules(d.path(), &["lib.rs"]), "crate", &root_exports(d.path()))), None, "comments and test items do not import");
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
    // The engine is two crates: the kernel facade (cacheless-sys) below, and the engine proper,
    // which names the facade's modules at its root (`use cacheless_sys::buf;`), so that one
    // table and one graph hold both.
    let mut mods = BTreeMap::new();
    let mut exports = BTreeMap::new();
    for src in ["crates/sys/src", "crates/cacheless/src"] {
        let src = root().join(src);
        mods.extend(modules(&src, &["lib.rs"]));
        exports.extend(root_exports(&src));
    }
    let listed: BTreeSet<&String> = floor.keys().collect();
    let present: BTreeSet<&String> = mods.keys().collect();
    assert_eq!(listed, present, "the floors table lists exactly the engine's modules");
    let g = graph(&mods, "crate", &exports);
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
const SHIPPED: [&str; 8] = [
    "crates/sys/src",
    "crates/cacheless/src",
    "crates/archive/src",
    "crates/remote/src",
    "crates/cp/src",
    "crates/safetensors/src",
    "crates/cli/src",
    "bindings/python/src",
];

/// The engine's files that may name rustix or libc calls: the facade, and what sits below it or
/// beside it on purpose (the I/O requests, the probes, the residency calls, aligned memory).
const KERNEL: [&str; 5] = ["crates/sys/src/sys/", "crates/sys/src/backend/", "crates/sys/src/caps.rs", "crates/sys/src/residency.rs", "crates/sys/src/buf.rs"];

/// rustix's functions that make no system call (device numbers).
const PURE: [&str; 3] = ["makedev", "major", "minor"];

/// A function's name: lower case (a type, a trait or a constant is not called).
fn is_fn(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
}

/// The rustix and libc functions a file calls (`rustix::fs::openat(..)`, `libc::close(..)`,
/// through any `use` of them or of their modules) or imports by name.
fn kernel_calls(n: &Names) -> Vec<String> {
    // A function of rustix's modules or of libc; `rustix::fs::Mode::empty()` builds a value.
    let kernel = |p: &[String]| {
        matches!(p.first().map(String::as_str), Some("rustix" | "libc"))
            && p.len() > 1
            && p[1..].iter().all(|s| is_fn(s))
            && p.last().is_some_and(|l| !PURE.contains(&l.as_str()))
    };
    let modules = ["fs", "io", "process", "param", "mm", "path", "fd", "pipe", "thread", "time", "event", "system", "net", "termios", "rand", "stdio"];
    let mut out: Vec<String> = n.calls.iter().map(|c| n.resolve(c)).filter(|p| kernel(p)).map(|p| p.join("::")).collect();
    for full in n.uses.values() {
        if kernel(full) && !modules.contains(&full.last().map(String::as_str).unwrap_or("")) {
            out.push(format!("use {}", full.join("::")));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The `std` calls that change the filesystem: what the facade (`cacheless::sys`) is for.
const FS_CHANGES: [&str; 19] = [
    "std::fs::write",
    "std::fs::create_dir",
    "std::fs::create_dir_all",
    "std::fs::remove_file",
    "std::fs::remove_dir",
    "std::fs::remove_dir_all",
    "std::fs::rename",
    "std::fs::hard_link",
    "std::fs::copy",
    "std::fs::set_permissions",
    "std::fs::soft_link",
    "std::fs::File::create",
    "std::fs::File::create_new",
    "std::fs::File::options",
    "std::fs::OpenOptions::new",
    "std::fs::DirBuilder::new",
    "std::os::unix::fs::symlink",
    "std::os::unix::fs::chown",
    "std::os::unix::fs::lchown",
];

/// The calls of a file that change the filesystem outside the facade.
fn fs_changes(n: &Names) -> Vec<String> {
    let mut out: Vec<String> = n.calls.iter().map(|c| n.resolve(c).join("::")).filter(|p| FS_CHANGES.contains(&p.as_str())).collect();
    out.sort();
    out.dedup();
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
            let n = names(&f);
            for c in kernel_calls(&n).into_iter().chain(fs_changes(&n)) {
                found.push(format!("{rel}: {c}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "kernel calls and std::fs changes outside sys/, backend/, caps, residency and buf (add them to cacheless::sys):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_facade_check_sees_a_call_and_an_imported_function() {
    let d = cacheless_testkit::scratch();
    let f = d.path().join("x.rs");
    std::fs::write(
        &f,
        "use rustix::fs::{Mode, openat as o, OFlags};\nuse libc::getpid;\nuse std::fs;\nuse std::fs::File;\n\
         #[cfg(test)]\nmod tests { fn t() { rustix::fs::unlink(p); std::fs::remove_file(p); } }\n\
         fn f() { rustix::fs::fchmod(x, m); libc::close(3); let d = rustix::fs::makedev(1, 2); let m = rustix::fs::Mode::empty(); o(); \
         fs::write(p, b); File::create(p); std::fs::read(p); }\n",
    )
    .unwrap();
    let n = names(&f);
    assert_eq!(kernel_calls(&n), ["libc::close", "rustix::fs::fchmod", "rustix::fs::openat", "use libc::getpid", "use rustix::fs::openat"]);
    assert_eq!(fs_changes(&n), ["std::fs::File::create", "std::fs::write"], "test items are not read, a read changes nothing");
}

/// The files that may hold unsafe code (docs/ARCHITECTURE.md): the I/O requests, aligned memory,
/// the probes, the residency calls, and the Python binding's buffer protocol. Every crate
/// denies unsafe code at its root; these allow it again.
const UNSAFE: [&str; 6] = [
    "crates/sys/src/backend/",
    "crates/sys/src/buf.rs",
    "crates/sys/src/caps.rs",
    "crates/sys/src/residency.rs",
    "crates/sys/src/sys/lock.rs",
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

/// The manifest of the shipped crate whose sources are in `src` (the command line's is the
/// workspace's root).
fn manifest(src: &str) -> String {
    match src {
        "crates/cli/src" => "Cargo.toml".to_string(),
        s => s.replace("/src", "/Cargo.toml"),
    }
}

/// The crates that bind the kernel's calls.
const BINDINGS: [&str; 4] = ["rustix", "libc", "nix", "io-uring"];

/// The crates a manifest's `[dependencies]` name (not its dev-dependencies: a test may set up
/// what it checks with the kernel's own calls).
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]" || line.starts_with("[target.") && line.ends_with(".dependencies]");
            continue;
        }
        if inside && !line.starts_with('#') {
            if let Some(name) = line.split(['=', '.', ' ']).next().filter(|n| !n.is_empty()) {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// Cargo holds the facade's boundary: only cacheless-sys depends on the kernel's bindings, so
/// that no other shipped crate can call them.
#[test]
fn only_the_facade_crate_depends_on_the_kernel_s_bindings() {
    let mut found = Vec::new();
    for m in SHIPPED.map(manifest) {
        let deps = dependencies(&std::fs::read_to_string(root().join(&m)).unwrap());
        let bound: Vec<&str> = BINDINGS.iter().copied().filter(|b| deps.contains(*b)).collect();
        if m == "crates/sys/Cargo.toml" {
            assert_eq!(bound, BINDINGS, "the facade is where the bindings are");
        } else if !bound.is_empty() {
            found.push(format!("{m}: {bound:?}"));
        }
    }
    assert!(found.is_empty(), "shipped crates that depend on the kernel's bindings (call them through cacheless::sys):\n{}", found.join("\n"));
    let sample =
        "[package]\nname = \"x\"\n[dependencies]\nrustix.workspace = true\nlibc = \"0.2\"\n# nix = \"1\"\n[dev-dependencies]\nio-uring.workspace = true\n";
    assert_eq!(
        dependencies(sample),
        BTreeSet::from(["rustix".to_string(), "libc".to_string()]),
        "the check reads the manifest's dependencies, not its comments nor dev-dependencies"
    );
}
