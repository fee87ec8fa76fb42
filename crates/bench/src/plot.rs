//! `--plot F.png|F.svg`: per-second throughput lines, one per mode (the run closest to the median), and bars
//! for CPU per GiB and page-cache growth, so that one picture shows what buffered I/O costs. Under the
//! pressure and neighbour scenarios a second line chart shows kswapd's CPU per second of the same runs.
//!
//! Text needs a TrueType font (plotters' ab_glyph backend has no built-in font and the workspace avoids system
//! freetype): we load `$CACHELESS_FONT`, else DejaVu Sans or Liberation Sans, else any .ttf under
//! /usr/share/fonts. Without one the plot fails with a message saying what to install.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};
use crate::report::BenchReport;

const FAMILY: &str = "sans-serif";

fn font_candidates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("CACHELESS_FONT") {
        v.push(p.into());
    }
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    ] {
        v.push(p.into());
    }
    // Any TrueType font, up to three levels deep.
    files_under(Path::new("/usr/share/fonts"), 3, &mut v);
    v.retain(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")));
    v
}

/// Appends the files under `dir`, descending at most `depth` levels of directories.
fn files_under(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for p in rd.flatten().map(|e| e.path()) {
        if p.is_dir() {
            if depth > 1 {
                files_under(&p, depth - 1, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// Registers a TrueType font for plot text once per process; returns the file used.
pub fn ensure_font() -> std::result::Result<PathBuf, String> {
    static FONT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    FONT.get_or_init(|| {
        for p in font_candidates() {
            let Ok(bytes) = std::fs::read(&p) else { continue };
            // plotters keeps fonts for the life of the process ('static); one small leak per process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok() {
                let _ = plotters::style::register_font(FAMILY, FontStyle::Bold, bytes);
                return Ok(p);
            }
        }
        Err("no TrueType font found for plot text: install fonts-dejavu-core (apt) or set CACHELESS_FONT=/path/font.ttf".into())
    })
    .clone()
}

/// Colour of a mode, the same in every plot.
pub fn mode_color(mode: &str) -> RGBColor {
    match mode {
        "buffered" => RGBColor(214, 39, 40),
        "direct" => RGBColor(31, 119, 180),
        "dontcache" => RGBColor(44, 160, 44),
        "writebehind" => RGBColor(255, 127, 14),
        "auto" => RGBColor(148, 103, 189),
        _ => RGBColor(127, 127, 127),
    }
}

/// Draws the report to `path`; the extension picks SVG (`.svg`) or PNG (anything else).
pub fn plot(report: &BenchReport, path: &Path) -> Result<()> {
    let err = |what: String| Error::Plot { path: path.to_path_buf(), what };
    ensure_font().map_err(err)?;
    let size = (1200, if kswapd_panel(report) { 1200 } else { 900 });
    let svg = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if svg { render(report, SVGBackend::new(path, size).into_drawing_area()) } else { render(report, BitMapBackend::new(path, size).into_drawing_area()) }
        .map_err(err)
}

/// Draws the report on `root` and writes it out.
fn render<DB: DrawingBackend>(r: &BenchReport, root: DrawingArea<DB, Shift>) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    draw(r, &root)?;
    root.present().map_err(|e| e.to_string())
}

fn draw<DB: DrawingBackend>(r: &BenchReport, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let c = &r.config;
    let title = format!("cacheless bench: {}, {}{}", c.workload(), c.scenario, c.limit_note());
    let root = root.titled(&title, (FAMILY, 24)).map_err(e)?;
    let (top, rest) = root.split_vertically(540);

    // Per-second throughput of each mode's median run.
    let lines: Vec<(&str, f64, &Vec<f64>)> =
        r.modes.iter().filter_map(|m| m.representative().map(|t| (m.mode.as_str(), t.series.interval_s, &t.series.mib_s))).collect();
    line_chart(&top, "throughput per interval (run closest to the median), MiB/s", "MiB/s", &lines)?;
    let bottom = if kswapd_panel(r) {
        let (mid, bottom) = rest.split_vertically(300);
        let lines: Vec<(&str, f64, &Vec<f64>)> =
            r.modes.iter().filter_map(|m| m.representative().map(|t| (m.mode.as_str(), t.series.interval_s, &t.kswapd_cpu_pct_series))).collect();
        line_chart(&mid, "kswapd CPU per interval (same runs), % of one CPU", "kswapd CPU %", &lines)?;
        bottom
    } else {
        rest
    };
    let (left, right) = bottom.split_horizontally(600);

    let names: Vec<String> = r.modes.iter().map(|m| m.mode.clone()).collect();
    let cpu: Vec<f64> = r.modes.iter().map(|m| m.summary.cpu_s_per_gib.median).collect();
    let kswapd: Vec<f64> = r.modes.iter().map(|m| m.summary.kswapd_cpu_s.median).collect();
    bars(&left, &format!("CPU s/GiB (kswapd s: {})", kswapd.iter().map(|k| format!("{k:.1}")).collect::<Vec<_>>().join(" / ")), &names, &cpu)?;
    let cache: Vec<f64> = r.modes.iter().map(|m| m.summary.cache_peak_growth_bytes.median.max(0.0) / (1024.0 * 1024.0)).collect();
    bars(&right, "peak page-cache growth, MiB", &names, &cache)?;
    Ok(())
}

/// Whether the plot has the kswapd CPU chart: under the pressure and neighbour scenarios.
fn kswapd_panel(r: &BenchReport) -> bool {
    matches!(r.config.scenario.as_str(), "pressure" | "neighbour")
}

/// One line per mode: `(mode, interval in seconds, value per interval)`.
fn line_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    y_desc: &str,
    lines: &[(&str, f64, &Vec<f64>)],
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let max_t = lines.iter().map(|(_, dt, v)| dt * v.len() as f64).fold(1.0, f64::max);
    let max_y = lines.iter().flat_map(|(_, _, v)| v.iter().copied()).fold(1.0, f64::max) * 1.1;
    let mut ch = ChartBuilder::on(area)
        .caption(caption, (FAMILY, 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_t, 0f64..max_y)
        .map_err(e)?;
    ch.configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .y_label_formatter(&|v| if max_y >= 10.0 { format!("{v:.0}") } else { format!("{v:.1}") })
        .label_style((FAMILY, 14))
        .draw()
        .map_err(e)?;
    for (mode, dt, v) in lines {
        let color = mode_color(mode);
        let pts: Vec<(f64, f64)> = v.iter().enumerate().map(|(i, y)| ((i as f64 + 0.5) * dt, *y)).collect();
        ch.draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(e)?
            .label(*mode)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)?;
    Ok(())
}

fn bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, caption: &str, names: &[String], values: &[f64]) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let n = names.len().max(1);
    let max_y = values.iter().copied().fold(0.0, f64::max).max(1e-3) * 1.15;
    let mut ch = ChartBuilder::on(area)
        .caption(caption, (FAMILY, 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..max_y)
        .map_err(e)?;
    ch.configure_mesh()
        .disable_x_mesh()
        .label_style((FAMILY, 14))
        .y_label_formatter(&|v| {
            if max_y >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        })
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => names.get(*i).cloned().unwrap_or_default(),
            SegmentValue::Last => String::new(),
        })
        .draw()
        .map_err(e)?;
    ch.draw_series(values.iter().enumerate().map(|(i, v)| {
        let color = mode_color(&names[i]);
        let mut bar = Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)], color.filled());
        bar.set_margin(0, 0, 25, 25);
        bar
    }))
    .map_err(e)?;
    ch.draw_series(values.iter().enumerate().map(|(i, v)| {
        Text::new(
            if *v >= 100.0 { format!("{v:.0}") } else { format!("{v:.2}") },
            (SegmentValue::CenterOf(i), *v),
            (FAMILY, 14).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom)),
        )
    }))
    .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_svg_and_png() {
        if !cacheless_testkit::require("font", ensure_font().map(|_| ())) {
            return;
        }
        let r = crate::report::tests::sample_report();
        let dir = cacheless_testkit::scratch();
        let svg = dir.path().join("p.svg");
        plot(&r, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("buffered") && text.contains("direct"));
        let png = dir.path().join("p.png");
        plot(&r, &png).unwrap();
        let b = std::fs::read(&png).unwrap();
        assert_eq!(&b[1..4], b"PNG");
        if let Some(keep) = std::env::var_os("CACHELESS_BENCH_KEEP_PLOT") {
            std::fs::copy(&png, keep).unwrap();
        }
    }

    #[test]
    fn pressure_plots_kswapd_per_second() {
        if !cacheless_testkit::require("font", ensure_font().map(|_| ())) {
            return;
        }
        let mut r = crate::report::tests::sample_report();
        assert!(!kswapd_panel(&r));
        r.config.scenario = "pressure".into();
        for m in &mut r.modes {
            for t in &mut m.runs {
                t.kswapd_cpu_pct_series = vec![5.0, 80.0];
            }
        }
        let dir = cacheless_testkit::scratch();
        let svg = dir.path().join("p.svg");
        plot(&r, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("kswapd CPU per interval") && text.contains("height=\"1200\""), "no kswapd chart");
    }
}
