//! How a [`BenchReport`] reads: the Markdown table with its warnings, the plain sentences under it, and the
//! CSV. Every figure and every comparison word comes from the report.

use std::fmt::Write as _;

use crate::report::{pct_vs, BenchReport, CacheSource, ModeReport};
use crate::stats::PositionEffect;
pub use crate::units::human_bytes;
use crate::units::human_signed;

impl BenchReport {
    /// The main table in Markdown, as in the published erofs table, followed by a detail table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let c = &self.config;
        let _ = writeln!(s, "{}, qd {}, {} run(s) in rotated order, scenario {}{}", c.workload(), c.queue_depth, c.runs, c.scenario, c.limit_note());
        s.push('\n');
        s.push_str("| mode | MiB/s | diff | CPU s/GiB | cache growth |\n");
        s.push_str("|---|---:|---:|---:|---:|\n");
        for m in &self.modes {
            let x = &m.summary;
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} | {:.2} | {} |",
                m.mode,
                x.mib_s.median,
                or_dash(x.diff_vs_buffered_pct.map(|d| format!("{d:+.1}%"))),
                x.cpu_s_per_gib.median,
                human_signed(x.cache_peak_growth_bytes.median),
            );
        }
        s.push('\n');
        s.push_str(
            "| mode | MiB/s min-max | CoV/s | user/sys s/GiB | kswapd CPU s | pgscan | pgsteal | \
             cache end | peak dirty+wb | files cached |\n",
        );
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for m in &self.modes {
            let x = &m.summary;
            let _ = writeln!(
                s,
                "| {} | {:.0}-{:.0} | {:.1}% | {:.2}/{:.2} | {:.2} | {:.0} | {:.0} | {} | {} | {} |",
                m.mode,
                x.mib_s.min,
                x.mib_s.max,
                x.series_cov.median * 100.0,
                x.user_s_per_gib,
                x.sys_s_per_gib,
                x.kswapd_cpu_s.median,
                x.pgscan_total.median,
                x.pgsteal_total.median,
                human_signed(x.cache_growth_bytes.median),
                human_bytes(x.peak_dirty_writeback_bytes.median),
                human_bytes(x.files_resident_bytes.median),
            );
        }
        self.scenario_tables(&mut s);
        let disturbed: usize = self.modes.iter().flat_map(|m| &m.runs).filter(|t| t.caches_dropped_during > 0).count();
        if disturbed > 0 {
            let _ = writeln!(
                s,
                "\nWARNING: another program dropped the page cache during {disturbed} trial(s) \
                 (caches_dropped_during in the JSON/CSV): their cache figures are not their own."
            );
        }
        let order = self.position_warnings();
        if !order.is_empty() {
            s.push('\n');
            for w in order {
                let _ = writeln!(s, "{w}");
            }
        }
        let decided: Vec<_> = self.modes.iter().filter(|m| !m.decisions.is_empty()).collect();
        if !decided.is_empty() {
            s.push('\n');
            for m in decided {
                let _ = writeln!(s, "{}: {}", m.mode, m.decisions.join("; "));
            }
        }
        if !self.fio.is_empty() {
            s.push('\n');
            s.push_str("| mode | ours MiB/s | fio MiB/s | ours vs fio |\n|---|---:|---:|---:|\n");
            for f in &self.fio {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} ({:.0}-{:.0}) | {} |",
                    f.mode,
                    or_dash(f.ours_mib_s.map(|o| format!("{o:.0}"))),
                    f.mib_s.median,
                    f.mib_s.min,
                    f.mib_s.max,
                    or_dash(f.ours_vs_fio_pct.map(|d| format!("{d:+.1}%"))),
                );
            }
        }
        s
    }

    /// The pressure scenario's reclaim table and the neighbour scenario's co-tenant table (medians), when
    /// the trials have them.
    fn scenario_tables(&self, s: &mut String) {
        let runs = || self.modes.iter().flat_map(|m| &m.runs);
        if runs().any(|t| t.pressure.is_some()) {
            s.push_str(
                "\nUnder pressure (medians per trial):\n\n| mode | held | MemAvailable min | kswapd CPU s | kswapd peak %/s | \
                 pgscan kswapd | pgscan direct | pgsteal kswapd | pgsteal direct | allocstalls |\n",
            );
            s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for m in &self.modes {
                let x = &m.summary;
                let peak: Vec<f64> = m.runs.iter().map(|t| t.kswapd_cpu_pct_series.iter().copied().fold(0.0, f64::max)).collect();
                let avail: Vec<f64> = m.runs.iter().map(|t| t.mem_available_min_bytes as f64).collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:.2} | {:.0}% | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    m.mode,
                    or_dash(x.pressure_held_bytes.map(|h| human_bytes(h.median))),
                    human_bytes(crate::stats::median(&avail)),
                    x.kswapd_cpu_s.median,
                    crate::stats::median(&peak),
                    x.pgscan_kswapd.median,
                    x.pgscan_direct.median,
                    x.pgsteal_kswapd.median,
                    x.pgsteal_direct.median,
                    x.allocstall.median,
                );
            }
            let lost = runs().filter(|t| t.pressure.is_some_and(|p| p.holder_lost)).count();
            if lost > 0 {
                let _ = writeln!(s, "\nWARNING: the memory holder was gone before {lost} trial(s) ended (OOM killer?): their pressure did not last.");
            }
            if self.system.swap_bytes > 0 && runs().any(|t| t.pressure.is_some_and(|p| !p.locked)) {
                let _ = writeln!(
                    s,
                    "\nWARNING: swap is on ({}) and the held memory could not be locked: the kernel may have swapped it out.",
                    human_bytes(self.system.swap_bytes as f64)
                );
            }
        }
        if runs().any(|t| t.neighbour.is_some()) {
            let hot = self.config.hot_size.map(|h| format!(" of {}", human_bytes(h as f64))).unwrap_or_default();
            let _ = writeln!(s, "\nCo-tenant re-reading a hot set{hot} during each trial (medians):\n");
            s.push_str("| mode | co-tenant MiB/s | hot set evicted | co-tenant disk reads |\n|---|---:|---:|---:|\n");
            for m in &self.modes {
                let x = &m.summary;
                let disk: Vec<f64> = m.runs.iter().filter_map(|t| t.neighbour?.disk_read_bytes).map(|d| d as f64).collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} |",
                    m.mode,
                    or_dash(x.neighbour_mib_s.map(|v| format!("{:.0}", v.median))),
                    or_dash(x.neighbour_evicted_fraction.map(|v| format!("{:.1}%", v.median * 100.0))),
                    or_dash((!disk.is_empty()).then(|| human_bytes(crate::stats::median(&disk)))),
                );
            }
            s.push_str("\nCache figures are system-wide: they include what the hot file gained or lost.\n");
        }
    }

    /// One warning line per mode (or fio run) whose per-position medians disagree beyond the run-to-run
    /// noise, naming the positions.
    pub fn position_warnings(&self) -> Vec<String> {
        let ours = self.modes.iter().filter_map(|m| Some((m.mode.clone(), m.summary.position_effect?)));
        let fio = self.fio.iter().filter_map(|f| Some((format!("fio {}", f.mode), f.position_effect?)));
        let n = self.positions();
        // Only when the rounds do not make whole squares: then some positions weigh more than others.
        let hint =
            (n > 0 && self.config.runs as usize % n != 0).then(|| format!(" Medians over whole rounds (--runs a multiple of {n}) weigh every position alike."));
        ours.chain(fio).map(|(name, e)| position_warning(&name, &e) + hint.as_deref().unwrap_or("")).collect()
    }

    /// Two or three plain sentences about the run: the fastest mode and whether its lead is beyond the
    /// run-to-run spread, then the CPU and page-cache differences between buffered and the other modes.
    pub fn sentences(&self) -> Vec<String> {
        let mut out: Vec<String> = fastest_sentence(&self.modes).into_iter().collect();
        let (buffered, others): (Vec<&ModeReport>, Vec<&ModeReport>) = self.modes.iter().partition(|m| m.mode == "buffered");
        match (buffered.first(), others.is_empty()) {
            (_, true) => {}
            (Some(b), false) => {
                out.push(cpu_sentence(b, &others));
                out.push(cache_sentence(b, &others));
            }
            (None, false) => out.push(no_baseline_sentence(&others)),
        }
        out
    }

    /// What `cacheless bench` prints: the table, its warnings, and the sentences under it.
    pub fn text(&self) -> String {
        let mut s = self.table();
        let sentences = self.sentences();
        if !sentences.is_empty() {
            let _ = writeln!(s, "\n{}", sentences.join(" "));
        }
        s
    }

    /// One CSV row per trial (header included).
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "mode,run,position,bytes,seconds,mib_s,series_min,series_median,series_max,series_cov,user_s,sys_s,\
             cpu_s_per_gib,kswapd_cpu_s,pgscan_kswapd,pgscan_direct,pgsteal_kswapd,pgsteal_direct,\
             pgscan_total,pgsteal_total,cache_source,cache_growth_bytes,cache_peak_growth_bytes,\
             peak_dirty_writeback_bytes,system_cache_growth_bytes,files_resident_start_bytes,\
             files_resident_end_bytes,files_total_bytes,cgroup_peak_bytes,caches_dropped_during,settle_s,\
             start_dirty_writeback_bytes,allocstall,mem_available_min_bytes,kswapd_cpu_pct_max,held_bytes,\
             neighbour_mib_s,neighbour_evicted_fraction,neighbour_disk_read_bytes\n",
        );
        for m in &self.modes {
            for t in &m.runs {
                let r = &t.reclaim;
                let _ = writeln!(
                    s,
                    "{},{},{},{},{:.6},{:.3},{:.3},{:.3},{:.3},{:.5},{:.3},{:.3},{:.4},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{:.1},{},{},{},{}",
                    m.mode,
                    t.run,
                    t.position,
                    t.bytes,
                    t.seconds,
                    t.mib_s,
                    t.series.spread.min,
                    t.series.spread.median,
                    t.series.spread.max,
                    t.series.cov,
                    t.cpu.user_s,
                    t.cpu.sys_s,
                    t.cpu_s_per_gib,
                    t.kswapd_cpu_s,
                    r.pgscan_kswapd,
                    r.pgscan_direct,
                    r.pgsteal_kswapd,
                    r.pgsteal_direct,
                    r.pgscan_total,
                    r.pgsteal_total,
                    if t.cache.source == CacheSource::Cgroup { "cgroup" } else { "meminfo" },
                    t.cache.growth_bytes,
                    t.cache.peak_growth_bytes,
                    t.cache.peak_dirty_writeback_bytes,
                    t.system_cache_growth_bytes,
                    t.files_resident_start_bytes,
                    t.files_resident_end_bytes,
                    t.files_total_bytes,
                    t.cgroup_peak_bytes.map(|p| p.to_string()).unwrap_or_default(),
                    t.caches_dropped_during,
                    t.settle_s,
                    t.cache.start_dirty_writeback_bytes,
                    r.allocstall,
                    t.mem_available_min_bytes,
                    t.kswapd_cpu_pct_series.iter().copied().fold(0.0, f64::max),
                    t.pressure.map(|p| p.held_bytes.to_string()).unwrap_or_default(),
                    t.neighbour.map(|n| format!("{:.3}", n.mib_s)).unwrap_or_default(),
                    t.neighbour.map(|n| format!("{:.4}", n.evicted_fraction)).unwrap_or_default(),
                    t.neighbour.and_then(|n| n.disk_read_bytes).map(|d| d.to_string()).unwrap_or_default(),
                );
            }
        }
        // fio's trials: only what fio reports (its bandwidth) beside their place in the schedule.
        let columns = s.lines().next().map_or(0, |h| h.split(',').count());
        for f in &self.fio {
            for (k, (bw, pos)) in f.runs_mib_s.iter().zip(&f.runs_position).enumerate() {
                let _ = writeln!(s, "fio {},{},{pos},,,{bw:.3}{}", f.mode, k + 1, ",".repeat(columns - 6));
            }
        }
        s
    }
}

fn position_warning(name: &str, e: &PositionEffect) -> String {
    format!(
        "WARNING: {name}'s throughput depends on its place in the round: {:.0} MiB/s at position {}, \
         while its trials at the other positions ran at {:.0}-{:.0} MiB/s ({:.1}% apart); the trial \
         before it or another program is skewing the comparison.",
        e.median, e.position, e.others_min, e.others_max, e.gap_pct
    )
}

/// `n run(s)`.
fn runs_of(m: &ModeReport) -> String {
    match m.runs.len() {
        1 => "1 run".into(),
        n => format!("median of {n} runs"),
    }
}

/// Which mode was fastest, by how much, and whether that is beyond the run-to-run spread (the min-max
/// ranges of the two fastest do not overlap).
fn fastest_sentence(modes: &[ModeReport]) -> Option<String> {
    let mut ranked: Vec<&ModeReport> = modes.iter().collect();
    ranked.sort_by(|a, b| b.summary.mib_s.median.total_cmp(&a.summary.mib_s.median));
    let (first, second) = match ranked.as_slice() {
        [] => return None,
        [only] => {
            let x = only.summary.mib_s;
            return Some(format!("Only {} ran: {:.0} MiB/s ({}).", only.mode, x.median, runs_of(only)));
        }
        [first, second, ..] => (*first, *second),
    };
    let (a, b) = (first.summary.mib_s, second.summary.mib_s);
    let lead = pct_vs(Some(a.median), Some(b.median)).unwrap_or(0.0);
    Some(if first.runs.len() < 2 || second.runs.len() < 2 {
        format!(
            "{} was fastest at {:.0} MiB/s, {:.1}% ahead of {} at {:.0} MiB/s; with a single run of \
             either, the run-to-run spread is unknown.",
            first.mode, a.median, lead, second.mode, b.median
        )
    } else if a.min > b.max {
        format!(
            "{} was fastest at {:.0} MiB/s ({}), {:.1}% ahead of {} at {:.0} MiB/s, beyond the \
             run-to-run spread: its slowest run ({:.0}) beat the fastest of {} ({:.0}).",
            first.mode,
            a.median,
            runs_of(first),
            lead,
            second.mode,
            b.median,
            a.min,
            second.mode,
            b.max
        )
    } else {
        format!(
            "{} led at {:.0} MiB/s, {:.1}% ahead of {} at {:.0} MiB/s, but that is within noise: \
             their runs overlap ({:.0}-{:.0} and {:.0}-{:.0} MiB/s).",
            first.mode, a.median, lead, second.mode, b.median, a.min, a.max, b.min, b.max
        )
    })
}

/// `40% less`, `12% more` or `about the same` for `value` against `base`; empty without a base.
fn relative(value: f64, base: f64) -> String {
    match pct_vs(Some(value), Some(base)).map(f64::round) {
        None => String::new(),
        Some(0.0) => "about the same".into(),
        Some(p) if p < 0.0 => format!("{:.0}% less", -p),
        Some(p) => format!("{p:.0}% more"),
    }
}

fn cpu_sentence(buffered: &ModeReport, others: &[&ModeReport]) -> String {
    let base = buffered.summary.cpu_s_per_gib.median;
    let each: Vec<String> = others
        .iter()
        .map(|m| {
            let c = m.summary.cpu_s_per_gib.median;
            match relative(c, base) {
                r if r.is_empty() => format!("{} {c:.2}", m.mode),
                r => format!("{} {c:.2} ({r})", m.mode),
            }
        })
        .collect();
    format!("Per GiB moved, buffered used {base:.2} CPU seconds; {}.", each.join(", "))
}

/// The mode among `modes` whose median peak page-cache growth was highest, with that growth.
fn most_cache(modes: &[&ModeReport]) -> Option<(String, f64)> {
    modes.iter().map(|m| (m.mode.clone(), m.summary.cache_peak_growth_bytes.median)).max_by(|a, b| a.1.total_cmp(&b.1))
}

fn cache_sentence(buffered: &ModeReport, others: &[&ModeReport]) -> String {
    let gb = buffered.summary.cache_peak_growth_bytes.median;
    let Some((mode, go)) = most_cache(others) else {
        return String::new();
    };
    let diff = if go < gb {
        format!("{} less", human_bytes(gb - go))
    } else if go > gb {
        format!("{} more", human_bytes(go - gb))
    } else {
        "the same".into()
    };
    format!(
        "{} grew by {} at its peak under buffered, and by at most {} under the other modes ({mode}), \
         {diff}.",
        cache_name(buffered),
        human_bytes(gb),
        human_bytes(go)
    )
}

/// `The page cache`, or `The cgroup's page cache` when the figures are the cgroup's.
fn cache_name(m: &ModeReport) -> &'static str {
    match m.runs.first().map(|t| t.cache.source) {
        Some(CacheSource::Cgroup) => "The cgroup's page cache",
        _ => "The page cache",
    }
}

fn no_baseline_sentence(modes: &[&ModeReport]) -> String {
    let cpu: Vec<f64> = modes.iter().map(|m| m.summary.cpu_s_per_gib.median).collect();
    let lo = cpu.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = cpu.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = if lo == hi { format!("{lo:.2}") } else { format!("{lo:.2}-{hi:.2}") };
    let (mode, go) = most_cache(modes).unwrap_or_default();
    format!(
        "Buffered was not run, so there is no baseline for CPU or page cache: these modes used {range} \
         CPU seconds per GiB, and {} grew by at most {} ({mode}).",
        cache_name(modes[0]).to_lowercase(),
        human_bytes(go)
    )
}

/// A table cell: the figure, or `-` when there is none.
fn or_dash(cell: Option<String>) -> String {
    cell.unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{sample_report, synthetic};

    #[test]
    fn table_has_the_published_columns() {
        let t = sample_report().table();
        assert!(t.contains("| mode | MiB/s | diff | CPU s/GiB | cache growth |"), "{t}");
        assert!(t.contains("| buffered | 768 | +0.0% | 1.00 | +2.0 GiB |"), "{t}");
        assert!(t.contains("| direct | 2048 | +166.7% | 1.00 | 0 B |"), "{t}");
        assert!(t.contains("direct: direct: forced"), "{t}");
        assert!(t.contains("| direct | 2048 | 1950 (1900-2000) | +5.0% |"), "{t}");
        assert!(t.contains("2 run(s) in rotated order"), "{t}");
        assert!(!t.contains("WARNING"), "{t}");
    }

    #[test]
    fn csv_has_one_row_per_trial_and_matching_columns() {
        let c = sample_report().to_csv();
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 7);
        let n = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == n), "{c}");
        assert!(lines[0].starts_with("mode,run,position,bytes,"));
        assert!(lines[1].starts_with("buffered,1,1,2147483648,2.000000,1024.000,"));
        assert!(lines[2].starts_with("buffered,2,3,2147483648,4.000000,512.000,"));
        assert!(lines[3].starts_with("direct,1,2,"));
        assert_eq!(lines[5], format!("fio direct,1,3,,,2000.000{}", ",".repeat(n - 6)));
        assert!(lines[6].starts_with("fio direct,2,2,,,1900.000,"));
    }

    fn default_modes(buffered: &[f64], direct: &[f64], dontcache: &[f64]) -> [(&'static str, Vec<f64>, f64, i64); 3] {
        [("buffered", buffered.to_vec(), 1.2, 2 << 30), ("direct", direct.to_vec(), 0.4, 0), ("dontcache", dontcache.to_vec(), 0.9, 3 << 20)]
    }

    fn report(modes: &[(&'static str, Vec<f64>, f64, i64)]) -> BenchReport {
        let m: Vec<(&str, &[f64], f64, i64)> = modes.iter().map(|(n, v, c, g)| (*n, v.as_slice(), *c, *g)).collect();
        synthetic(&m)
    }

    #[test]
    fn sentences_fastest_beyond_noise() {
        let r = report(&default_modes(&[1000.0, 1100.0, 1050.0], &[1500.0, 1480.0, 1520.0], &[1200.0, 1250.0, 1300.0]));
        let s = r.sentences();
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(
            s[0],
            "direct was fastest at 1500 MiB/s (median of 3 runs), 20.0% ahead of dontcache at 1250 \
             MiB/s, beyond the run-to-run spread: its slowest run (1480) beat the fastest of dontcache \
             (1300)."
        );
        assert_eq!(
            s[1],
            "Per GiB moved, buffered used 1.20 CPU seconds; direct 0.40 (67% less), dontcache 0.90 \
             (25% less)."
        );
        assert_eq!(
            s[2],
            "The page cache grew by 2.0 GiB at its peak under buffered, and by at most 3.0 MiB under \
             the other modes (dontcache), 2.0 GiB less."
        );
        let t = r.text();
        assert!(t.ends_with(&format!("\n{}\n", s.join(" "))), "{t}");
    }

    #[test]
    fn sentences_within_noise() {
        let mut modes = default_modes(&[1490.0, 1400.0, 1530.0], &[1500.0, 1460.0, 1520.0], &[1200.0, 1250.0, 1300.0]);
        // dontcache cost more CPU than buffered here: the word follows the figure.
        modes[2].2 = 1.5;
        let s = report(&modes).sentences();
        assert_eq!(
            s[0],
            "direct led at 1500 MiB/s, 0.7% ahead of buffered at 1490 MiB/s, but that is within \
             noise: their runs overlap (1460-1520 and 1400-1530 MiB/s)."
        );
        assert!(s[1].ends_with("dontcache 1.50 (25% more)."), "{}", s[1]);
    }

    #[test]
    fn sentences_without_buffered() {
        let r = report(&[("direct", vec![1500.0, 1480.0, 1520.0], 0.4, 0), ("dontcache", vec![1510.0, 1490.0, 1530.0], 0.9, 3 << 20)]);
        let s = r.sentences();
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s[0].contains("within noise"), "{}", s[0]);
        assert_eq!(
            s[1],
            "Buffered was not run, so there is no baseline for CPU or page cache: these modes used \
             0.40-0.90 CPU seconds per GiB, and the page cache grew by at most 3.0 MiB (dontcache)."
        );
    }

    #[test]
    fn sentences_with_one_mode_or_one_run() {
        let r = report(&[("buffered", vec![800.0, 900.0, 850.0], 1.0, 1 << 30)]);
        assert_eq!(r.sentences(), ["Only buffered ran: 850 MiB/s (median of 3 runs)."]);
        let r = report(&default_modes(&[1000.0], &[1500.0], &[1200.0]));
        assert!(r.sentences()[0].ends_with("with a single run of either, the run-to-run spread is unknown."), "{:?}", r.sentences());
    }

    #[test]
    fn a_position_effect_prints_a_warning_naming_mode_and_positions() {
        let r = report(&[
            ("buffered", vec![1500.0, 1490.0, 1510.0], 1.2, 2 << 30),
            ("direct", vec![1000.0, 1500.0, 1510.0], 0.4, 0),
            ("dontcache", vec![1400.0, 1410.0, 1405.0], 0.9, 0),
        ]);
        let w = r.position_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            w[0],
            "WARNING: direct's throughput depends on its place in the round: 1000 MiB/s at position \
             2, while its trials at the other positions ran at 1500-1510 MiB/s (33.3% apart); the \
             trial before it or another program is skewing the comparison."
        );
        assert!(r.table().contains(&w[0]));
        // Rounds that do not make whole squares add a hint.
        let mut r = r;
        r.config.runs = 4;
        let w = r.position_warnings();
        assert!(w[0].ends_with("(--runs a multiple of 3) weigh every position alike."), "{}", w[0]);
    }

    #[test]
    fn scenario_tables_show_under_their_scenario_only() {
        let mut r = sample_report();
        assert!(!r.table().contains("Under pressure") && !r.table().contains("Co-tenant"));
        for m in &mut r.modes {
            for t in &mut m.runs {
                t.kswapd_cpu_pct_series = vec![10.0, 55.0, 20.0];
                t.mem_available_min_bytes = 1 << 30;
                t.reclaim.allocstall = 7;
                t.pressure = Some(crate::report::PressureReport { held_bytes: 20 << 30, locked: true, ..Default::default() });
                t.neighbour =
                    Some(crate::report::NeighbourReport { mib_s: 900.0, evicted_fraction: 0.25, disk_read_bytes: Some(1 << 20), ..Default::default() });
            }
            *m = ModeReport::summarize(m.mode.clone(), m.decisions.clone(), m.runs.clone());
        }
        r.config.hot_size = Some(1 << 30);
        let t = r.table();
        assert!(t.contains("| buffered | 20.0 GiB | 1.0 GiB | 0.25 | 55% | 0 | 0 | 0 | 0 | 7 |"), "{t}");
        assert!(t.contains("Co-tenant re-reading a hot set of 1.0 GiB"), "{t}");
        assert!(t.contains("| direct | 900 | 25.0% | 1.0 MiB |"), "{t}");
        assert!(!t.contains("WARNING"), "{t}");
        let c = r.to_csv();
        let lines: Vec<&str> = c.lines().collect();
        let n = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == n), "{c}");
        assert!(lines[1].ends_with(",7,1073741824,55.0,21474836480,900.000,0.2500,1048576"), "{}", lines[1]);
    }
}
