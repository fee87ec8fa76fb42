//! `--vs-fio`: runs the equivalent fio job for the modes fio can do (buffered and direct) and reads its
//! bandwidth from `--output-format=json`.
//!
//! The job mirrors ours: one fio job per file (so `--files` should equal `--threads`), the same block size,
//! `iodepth` = our queue depth, the io_uring engine (psync when our backend is the thread pool), and for writes
//! `end_fsync=1` so that the data is durable before fio stops its clock, as ours is. fio's uncached mode is
//! not used: fio 3.17-3.37 sends 0x40 (RWF_ATOMIC on Linux 6.11+) instead of RWF_DONTCACHE (0x80).

use std::path::{Path, PathBuf};
use std::process::Command;

use cacheless::{BackendKind, Mode};

use crate::config::{BenchConfig, Rw};
use crate::error::{Error, Result};
use crate::prepare::fio_target_path;

/// One fio run.
#[derive(Debug, Clone)]
pub struct FioJob {
    /// `read`, `randread` or `write` (fio's rw names; copy has no fio equivalent).
    pub rw: String,
    /// One fio job per file.
    pub files: Vec<PathBuf>,
    /// Bytes per file.
    pub size: u64,
    /// Block size in bytes.
    pub bs: u64,
    /// I/O depth per job.
    pub iodepth: u32,
    /// O_DIRECT (`direct=1`) or buffered.
    pub direct: bool,
    /// fio ioengine (`io_uring`, `psync`).
    pub ioengine: String,
}

impl FioJob {
    /// The fio arguments (without the program name).
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--output-format=json".to_string(),
            format!("--ioengine={}", self.ioengine),
            format!("--iodepth={}", self.iodepth),
            format!("--bs={}", self.bs),
            format!("--rw={}", self.rw),
            format!("--direct={}", u8::from(self.direct)),
            format!("--size={}", self.size),
            "--group_reporting".into(),
            "--thread".into(),
            "--randrepeat=0".into(),
        ];
        if self.rw == "write" {
            a.push("--end_fsync=1".into());
            a.push("--fallocate=none".into());
        }
        for (i, f) in self.files.iter().enumerate() {
            a.push(format!("--name=j{i}"));
            // fio treats ':' as a file-list separator; escape it.
            a.push(format!("--filename={}", f.display().to_string().replace(':', "\\:")));
        }
        a
    }

    /// The command line, for reports.
    pub fn command_line(&self) -> String {
        std::iter::once("fio".to_string()).chain(self.args()).collect::<Vec<_>>().join(" ")
    }

    /// Runs fio and returns its aggregate bandwidth in MiB/s.
    pub fn run(&self) -> Result<f64> {
        let out = Command::new("fio").args(self.args()).output().map_err(|e| Error::Fio(format!("cannot run fio: {e} (install it, e.g. apt install fio)")))?;
        if !out.status.success() {
            return Err(Error::Fio(format!("{} failed ({}): {}", self.command_line(), out.status, String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(parse_bandwidth(&String::from_utf8_lossy(&out.stdout))? / (1024.0 * 1024.0))
    }
}

/// fio's equivalent of each fio-capable mode in `cfg` (buffered, direct), reading `sources` or writing
/// beside them in `dir`. Empty for copy, which fio has no job for.
pub(crate) fn jobs_for(cfg: &BenchConfig, dir: &Path, sources: &[PathBuf]) -> Vec<(Mode, FioJob)> {
    if cfg.rw == Rw::Copy {
        return Vec::new();
    }
    cfg.modes
        .iter()
        .copied()
        .filter(|m| matches!(m, Mode::Buffered | Mode::Direct))
        .map(|m| {
            let files = if cfg.rw == Rw::Write { (0..cfg.files).map(|i| fio_target_path(dir, i)).collect() } else { sources.to_vec() };
            let job = FioJob {
                rw: cfg.rw.name().to_string(),
                files,
                size: cfg.file_size,
                bs: cfg.block_size as u64,
                iodepth: u32::try_from(cfg.queue_depth).unwrap_or(u32::MAX),
                direct: m == Mode::Direct,
                ioengine: if cfg.backend == BackendKind::Threads { "psync".into() } else { "io_uring".into() },
            };
            (m, job)
        })
        .collect()
}

/// fio's version string (`fio-3.33`), or `None` when fio is not installed.
pub fn version() -> Option<String> {
    let out = Command::new("fio").arg("--version").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Sums read and write `bw_bytes` (bytes/s) over the jobs of fio's JSON output. fio may print warnings
/// before the JSON; they are skipped.
pub fn parse_bandwidth(json: &str) -> Result<f64> {
    let start = json.find('{').ok_or_else(|| Error::Fio("no JSON in fio output".into()))?;
    let v: serde_json::Value = serde_json::from_str(&json[start..]).map_err(|e| Error::Fio(format!("bad JSON from fio: {e}")))?;
    let jobs = v["jobs"].as_array().ok_or_else(|| Error::Fio("fio JSON has no jobs".into()))?;
    let mut bw = 0.0;
    for j in jobs {
        if let Some(e) = j["error"].as_i64().filter(|&e| e != 0) {
            return Err(Error::Fio(format!("job {} failed with error {e}", j["jobname"])));
        }
        for dir in ["read", "write"] {
            bw += j[dir]["bw_bytes"].as_f64().unwrap_or(0.0);
        }
    }
    Ok(bw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_fio_json() {
        let bw = parse_bandwidth(include_str!("../tests/data/fio_read.json")).unwrap();
        assert_eq!(bw, 607320036.0);
        let with_warning = format!("fio: some warning\n{}", include_str!("../tests/data/fio_read.json"));
        assert_eq!(parse_bandwidth(&with_warning).unwrap(), 607320036.0);
        assert!(parse_bandwidth("nothing").is_err());
        assert!(parse_bandwidth(r#"{"jobs":[{"jobname":"x","error":5}]}"#).is_err());
    }

    #[test]
    fn job_arguments() {
        let j = FioJob {
            rw: "write".into(),
            files: vec!["/d/a:b".into(), "/d/c".into()],
            size: 1 << 30,
            bs: 1 << 20,
            iodepth: 8,
            direct: true,
            ioengine: "io_uring".into(),
        };
        let a = j.args();
        assert!(a.contains(&"--direct=1".to_string()));
        assert!(a.contains(&"--end_fsync=1".to_string()));
        assert!(a.contains(&"--filename=/d/a\\:b".to_string()));
        assert_eq!(a.iter().filter(|x| x.starts_with("--name=")).count(), 2);
        assert!(j.command_line().starts_with("fio --output-format=json"));
    }

    #[test]
    fn jobs_for_the_modes_fio_can_run() {
        let mut c = BenchConfig::quick(Path::new("."));
        c.files = 2;
        let sources = vec![PathBuf::from("/d/a"), PathBuf::from("/d/b")];
        let j = jobs_for(&c, Path::new("/d"), &sources);
        let modes: Vec<Mode> = j.iter().map(|(m, _)| *m).collect();
        assert_eq!(modes, [Mode::Buffered, Mode::Direct]);
        assert_eq!(j[1].1.files, sources);
        assert!(j[1].1.direct && !j[0].1.direct);
        c.rw = Rw::Write;
        let j = jobs_for(&c, Path::new("/d"), &[]);
        assert_eq!(j[0].1.files, [fio_target_path(Path::new("/d"), 0), fio_target_path(Path::new("/d"), 1)]);
        c.rw = Rw::Copy;
        assert!(jobs_for(&c, Path::new("/d"), &sources).is_empty());
    }
}
