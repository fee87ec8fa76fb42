//! `cacheless demo`: a 1 GiB file copied cold with plain buffered std::io and with cacheless,
//! side by side: wall time, CPU, page-cache growth, throughput.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use cacheless::residency::{evict_path, residency_of};
use cacheless::{copy_file, Progress};
use clap::Args;
use serde::Serialize;

use crate::common::{parse_size, CommonOpts};
use crate::ui;

/// Arguments of `cacheless demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Size of the demo file.
    #[arg(long, value_parser = parse_size, default_value = "1G")]
    pub size: u64,
    /// Where to make the temporary folder (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Serialize)]
struct Row {
    method: String,
    wall_s: f64,
    cpu_user_s: f64,
    cpu_sys_s: f64,
    mib_per_s: f64,
    page_cache_growth_bytes: i64,
    src_resident_bytes: u64,
    dst_resident_bytes: u64,
}

/// `Cached` from /proc/meminfo, in bytes.
pub fn meminfo_cached() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Cached:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<i64>().ok()))
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn make_file(p: &Path, size: u64, common: &CommonOpts) -> Result<()> {
    let budget = common.budget();
    let mut wo = common.write_options(&budget);
    wo.size_hint = Some(size);
    let mut w = cacheless::Writer::create(p, &wo)?;
    // Incompressible, cheap pseudo-random data (xorshift), so no layer can shortcut it.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for c in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        w.write_all(&block[..n])?;
        left -= n as u64;
    }
    w.finish()?;
    Ok(())
}

fn buffered_copy(src: &Path, dst: &Path) -> Result<()> {
    let mut r = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(src)?);
    let f = std::fs::File::create(dst)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, &f);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n])?;
    }
    w.flush()?;
    drop(w);
    // Durable, as cacheless cp is, so the comparison is like for like.
    f.sync_data()?;
    Ok(())
}

fn measure(name: &str, size: u64, src: &Path, dst: &Path, f: impl FnOnce() -> Result<()>) -> Result<Row> {
    evict_path(src)?;
    let _ = std::fs::remove_file(dst);
    let c0 = meminfo_cached();
    let (u0, s0) = ui::cpu_seconds();
    let t = Instant::now();
    f()?;
    let wall = t.elapsed().as_secs_f64();
    let (u1, s1) = ui::cpu_seconds();
    let c1 = meminfo_cached();
    Ok(Row {
        method: name.into(),
        wall_s: wall,
        cpu_user_s: u1 - u0,
        cpu_sys_s: s1 - s0,
        mib_per_s: size as f64 / (1 << 20) as f64 / wall,
        page_cache_growth_bytes: c1 - c0,
        src_resident_bytes: residency_of(src)?.cached_bytes(),
        dst_resident_bytes: residency_of(dst)?.cached_bytes(),
    })
}

pub fn run(args: &DemoArgs, common: &CommonOpts) -> Result<ExitCode> {
    let base = args.dir.clone().unwrap_or_else(crate::common::default_workdir);
    let dir = tempfile::Builder::new().prefix("cacheless-demo-").tempdir_in(&base).with_context(|| format!("create a temporary folder in '{}'", base.display()))?;
    let src = dir.path().join("source.bin");
    let dst = dir.path().join("copy.bin");
    if !common.json {
        eprintln!("cacheless demo: writing a {} test file in {} ...", ui::size(args.size), dir.path().display());
    }
    make_file(&src, args.size, common)?;
    let mut rows = Vec::new();
    rows.push(measure("std::io buffered + fdatasync", args.size, &src, &dst, || buffered_copy(&src, &dst))?);
    let budget = common.budget();
    let (ro, wo) = (common.read_options(&budget), common.write_options(&budget));
    let mut how = String::new();
    rows.push(measure(&format!("cacheless cp (--mode {})", common.mode), args.size, &src, &dst, || {
        let r = copy_file(&src, &dst, &ro, &wo, &Progress::new())?;
        how = format!("read: {} ({}); write: {} ({})", r.read.mode, r.read.reason, r.write.decision.mode, r.write.decision.reason);
        Ok(())
    })?);
    if common.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "size": args.size, "rows": rows, "cacheless": how }))?);
    } else {
        println!("Copying a {} file, cold cache each time:", ui::size(args.size));
        println!("| method                         | wall s | MiB/s  | CPU user+sys s | page-cache growth | left cached (src+dst) |");
        println!("|--------------------------------|--------|--------|----------------|-------------------|-----------------------|");
        for r in &rows {
            println!(
                "| {:<30} | {:>6.2} | {:>6.0} | {:>14.2} | {:>17} | {:>21} |",
                r.method,
                r.wall_s,
                r.mib_per_s,
                r.cpu_user_s + r.cpu_sys_s,
                ui::size(r.page_cache_growth_bytes.max(0) as u64),
                ui::size(r.src_resident_bytes + r.dst_resident_bytes)
            );
        }
        println!("cacheless chose {how}");
    }
    Ok(ExitCode::SUCCESS)
}
