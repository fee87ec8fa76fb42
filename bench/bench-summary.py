#!/usr/bin/env python3
"""Prints the Markdown tables of docs/BENCHMARKS.md from `cacheless bench --json-out` reports.

Usage: bench/bench-summary.py erofs NORMAL.json LOWMEM.json | stability R.json | write R.json | fio R.json
"""
import json
import sys

MIB = 1 << 20


def load(p):
    with open(p) as f:
        d = json.load(f)
    assert d["schema"] == "cacheless-bench/1", d["schema"]
    return d


def size(b):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if abs(b) < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024


def diff(m):
    d = m["summary"]["diff_vs_buffered_pct"]
    return "-" if d is None or m["mode"] == "buffered" else f"{d:+.0f}%"


def spread(s):
    return f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})"


def lead(m):
    """The cells every per-mode table starts with: mode, MiB/s (min-max), diff against buffered."""
    return [m["mode"], spread(m["summary"]["mib_s"]), diff(m)]


def cpu(s):
    return f"{s['cpu_s_per_gib']['median']:.2f}"


def growth(s):
    return size(s["cache_peak_growth_bytes"]["median"])


def table(header, rows, left=1):
    """Prints a Markdown table: the first `left` columns are text, the rest right-aligned figures."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * left + "---:|" * (len(header) - left))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def erofs(normal, lowmem):
    n, l = load(normal), load(lowmem)
    table(["mode", "normal MiB/s (min-max)", "diff", "CPU s/GiB", "cache growth",
           "low-memory MiB/s (min-max)", "diff", "CPU s/GiB", "cache growth"],
          [lead(a) + [cpu(a["summary"]), growth(a["summary"])]
           + lead(b)[1:] + [cpu(b["summary"]), growth(b["summary"])]
           for a, b in zip(n["modes"], l["modes"])])
    print()
    rows = []
    for d, name in [(n, "normal"), (l, "low-memory")]:
        for m in d["modes"]:
            s = m["summary"]
            peaks = [t["cgroup_peak_bytes"] for t in m["runs"] if t["cgroup_peak_bytes"] is not None]
            rows.append([m["mode"], name, f"{s['pgscan_total']['median']:.0f}",
                         size(s["files_resident_bytes"]["median"]), size(max(peaks)) if peaks else "-"])
    table(["mode", "scenario", "pages scanned", "files cached at end", "cgroup peak"], rows, left=2)


def stability(p):
    d = load(p)
    rows = []
    for m in d["modes"]:
        s = m["summary"]
        runs = sorted(m["runs"], key=lambda t: t["mib_s"])
        t = runs[len(runs) // 2]
        se, r = t["series"], t["reclaim"]
        rows.append(lead(m) + [f"{se['cov'] * 100:.0f}%", f"{se['spread']['min']:.0f}-{se['spread']['max']:.0f}",
                               cpu(s), f"{s['kswapd_cpu_s']['median']:.2f}",
                               f"{r['pgscan_kswapd']} / {r['pgscan_direct']}", growth(s)])
    table(["mode", "MiB/s (min-max)", "diff", "per-second CoV (median run)", "per-second min-max (median run)",
           "CPU s/GiB", "kswapd CPU s", "pages scanned (kswapd / direct)", "peak cache growth"], rows)


def write(p):
    d = load(p)
    table(["mode", "MiB/s (min-max)", "diff", "CPU s/GiB", "peak page-cache growth", "peak Dirty+Writeback",
           "file cached at end"],
          [lead(m) + [cpu(m["summary"]), growth(m["summary"]),
                      size(m["summary"]["peak_dirty_writeback_bytes"]["median"]),
                      size(m["summary"]["files_resident_bytes"]["median"])]
           for m in d["modes"]])


def fio(p):
    d = load(p)
    rows = []
    for f in d["fio"]:
        ours = next(m for m in d["modes"] if m["mode"] == f["mode"])
        rows.append([f["mode"], ", ".join("%.0f" % t["mib_s"] for t in ours["runs"]),
                     ", ".join("%.0f" % x for x in f["runs_mib_s"]), f"{f['ours_mib_s']:.0f}",
                     f"{f['mib_s']['median']:.0f}", f"{f['ours_vs_fio_pct']:+.1f}%"])
    table(["mode", "ours MiB/s per round", "fio MiB/s per round", "ours median", "fio median", "ours vs fio"],
          rows, left=3)


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    {"erofs": erofs, "stability": stability, "write": write, "fio": fio}[what](*args)
