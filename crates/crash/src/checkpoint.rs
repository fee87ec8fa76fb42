//! The `checkpoint` workload: a `torch.distributed.checkpoint` save through the Python
//! package's `cacheless.checkpoint.Writer` over a checkpoint saved before, in a child
//! interpreter. Its files' names carry each save's id, so what is held to account is the
//! checkpoint as a whole: in every crash state the folder loads, through
//! `cacheless.checkpoint.Reader` and through DCP's own `FileSystemReader`, as the previous
//! checkpoint or the new one, equal to what was saved, and as the new one once `dcp.save`
//! returned. Never a folder that fails to load or loads wrong.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use crate::workload::{Ctx, Ran, Workload};
use crate::workloads::python;

/// The checkpoint's folder under the mount point.
const FOLDER: &str = "ckpt";
/// The seeds of the checkpoint there before and of the one the run saves.
const OLD: u32 = 1;
const NEW: u32 = 2;

/// What the child runs: `save SEED PATH` (prints `saved` once `dcp.save` returned), or `check`
/// (for each folder read from standard input, one line: `seed N` for the checkpoint it loads
/// as through both readers, else what is wrong).
const SCRIPT: &str = r#"
import sys, warnings
warnings.filterwarnings("ignore")
import torch
import torch.distributed.checkpoint as dcp
import cacheless.checkpoint as cc

def state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(512, 1024, generator=g), "h": torch.randn(300, 70, generator=g).to(torch.bfloat16),
            "n": torch.arange(1000) * seed, "step": seed, "name": f"step-{seed}"}

def blank():
    return {"w": torch.zeros(512, 1024), "h": torch.zeros(300, 70, dtype=torch.bfloat16), "n": torch.zeros(1000, dtype=torch.int64), "step": 0, "name": ""}

def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)

if sys.argv[1] == "save":
    dcp.save(state(int(sys.argv[2])), storage_writer=cc.Writer(sys.argv[3]), no_dist=True)
    print("saved", flush=True)
else:
    for line in sys.stdin:
        path = line.rstrip("\n")
        seen = []
        try:
            for reader in (cc.Reader(path), dcp.FileSystemReader(path)):
                got = blank()
                dcp.load(got, storage_reader=reader, no_dist=True)
                seen.append([s for s in (1, 2) if same(got, state(s))])
            if seen[0] and seen[0] == seen[1]:
                print(f"seed {seen[0][0]}", flush=True)
            else:
                print(f"loads, but as neither checkpoint (cacheless: {seen[0]}, DCP: {seen[1]})", flush=True)
        except BaseException as e:
            msg = " ".join(str(e).split())[:300]
            print(f"does not load: {type(e).__name__}: {msg}", flush=True)
"#;

/// The child interpreter that checks crash states, started at the first check.
struct Checker {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Checker {
    fn start(py: &Path) -> Result<Checker, String> {
        let mut child = Command::new(py)
            .args(["-c", SCRIPT, "check"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", py.display()))?;
        let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the checker's pipes are missing".into());
        };
        Ok(Checker { child, to, from: BufReader::new(from) })
    }

    /// The checker's verdict on the checkpoint folder `path`.
    fn ask(&mut self, path: &Path) -> Result<String, String> {
        writeln!(self.to, "{}", path.display()).map_err(|e| format!("the checker: {e}"))?;
        let mut line = String::new();
        match self.from.read_line(&mut line) {
            Ok(0) | Err(_) => Err("the checker exited".into()),
            Ok(_) => Ok(line.trim().to_string()),
        }
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `save SEED PATH` in `py`; with `ctx`, marks `checkpoint` when the child says it returned.
fn save(py: &Path, seed: u32, path: &Path, ctx: Option<&Ctx>) -> Result<(), String> {
    let mut child = Command::new(py)
        .args(["-c", SCRIPT, "save", &seed.to_string()])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", py.display()))?;
    let (Some(from), Some(mut errs)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("the child's pipes are missing".into());
    };
    // Its standard error drained beside, so that a chatty child never blocks on a full pipe.
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut errs, &mut s);
        s
    });
    for line in BufReader::new(from).lines() {
        let Ok(line) = line else { break };
        if line.trim() == "saved" {
            if let Some(c) = ctx {
                c.mark("checkpoint");
            }
        }
    }
    let status = child.wait().map_err(|e| format!("wait for {}: {e}", py.display()))?;
    let err = err.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    Err(format!("{} exited with {status}: {}", py.display(), err.trim().lines().last().unwrap_or("")))
}

/// The interpreter, when it can import `cacheless.checkpoint` (torch with it); else why not.
pub fn interpreter() -> Result<PathBuf, String> {
    // Looked for once: each run would otherwise pay an interpreter's start.
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(find).clone()
}

fn find() -> Result<PathBuf, String> {
    let py = python()?;
    let out = Command::new(&py).args(["-c", "import cacheless.checkpoint"]).output().map_err(|e| format!("{}: {e}", py.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} cannot import cacheless.checkpoint: {}", py.display(), err.trim().lines().last().unwrap_or("")));
    }
    Ok(py)
}

/// The workload (see the module's documentation).
pub fn workload() -> Workload {
    let checker: Mutex<Option<Checker>> = Mutex::new(None);
    Workload {
        name: "checkpoint".into(),
        setup: Box::new(|root, _scratch| {
            // Without the interpreter the run says so (unsupported); nothing to set up.
            let Ok(py) = interpreter() else { return Ok(()) };
            save(&py, OLD, &root.join(FOLDER), None).map_err(std::io::Error::other)
        }),
        run: Box::new(|ctx: &Ctx| {
            let py = match interpreter() {
                Ok(p) => p,
                Err(why) => return Ok(Ran::Unsupported(why)),
            };
            save(&py, NEW, &ctx.path(FOLDER), Some(ctx))?;
            Ok(Ran::Done)
        }),
        files: vec![],
        dirs: vec![],
        symlinks: vec![],
        absent: vec![],
        checks: vec![Box::new(move |root: &Path, promised: &BTreeSet<String>| {
            let mut g = checker.lock().unwrap_or_else(|e| e.into_inner());
            if g.is_none() {
                match interpreter().and_then(|py| Checker::start(&py)) {
                    Ok(c) => *g = Some(c),
                    Err(e) => return Some(format!("cannot check the checkpoint: {e}")),
                }
            }
            let verdict = match g.as_mut().map(|c| c.ask(&root.join(FOLDER))) {
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    *g = None;
                    return Some(format!("cannot check the checkpoint: {e}"));
                }
                None => return Some("cannot check the checkpoint".into()),
            };
            let returned = promised.contains("checkpoint");
            match verdict.strip_prefix("seed ").and_then(|s| s.parse::<u32>().ok()) {
                Some(NEW) => None,
                Some(OLD) if !returned => None,
                Some(OLD) => Some(format!("{FOLDER} loads as the previous checkpoint, though dcp.save had returned")),
                _ => Some(format!("{FOLDER}: {verdict}")),
            }
        })],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check holds a folder to the promise: the new checkpoint passes always, the old one
    /// only before `dcp.save` returned, and one that lost a data file fails, naming why.
    #[test]
    fn the_check_tells_old_new_and_broken_checkpoints_apart() {
        let found = interpreter();
        if !cacheless_testkit::require("python", found.clone().map(drop)) {
            return;
        }
        let py = found.unwrap();
        let w = workload();
        let check = &w.checks[0];
        let before: BTreeSet<String> = BTreeSet::new();
        let after: BTreeSet<String> = ["checkpoint".to_string()].into();
        let old = tempfile::tempdir().unwrap();
        save(&py, OLD, &old.path().join(FOLDER), None).unwrap();
        assert_eq!(check(old.path(), &before), None);
        let v = check(old.path(), &after).expect("the old checkpoint after the save returned");
        assert!(v.contains("previous checkpoint"), "{v}");
        let new = tempfile::tempdir().unwrap();
        save(&py, NEW, &new.path().join(FOLDER), None).unwrap();
        assert_eq!(check(new.path(), &after), None);
        for e in std::fs::read_dir(new.path().join(FOLDER)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "distcp") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let v = check(new.path(), &before).expect("a checkpoint without its data");
        assert!(v.contains("does not load"), "{v}");
    }
}
