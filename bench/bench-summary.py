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


def erofs(normal, lowmem):
    n, l = load(normal), load(lowmem)
    print("| mode | normal MiB/s (min-max) | diff | CPU s/GiB | cache growth "
          "| low-memory MiB/s (min-max) | diff | CPU s/GiB | cache growth |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for a, b in zip(n["modes"], l["modes"]):
        sa, sb = a["summary"], b["summary"]
        print(f"| {a['mode']} | {spread(sa['mib_s'])} | {diff(a)} | {sa['cpu_s_per_gib']['median']:.2f} "
              f"| {size(sa['cache_peak_growth_bytes']['median'])} "
              f"| {spread(sb['mib_s'])} | {diff(b)} | {sb['cpu_s_per_gib']['median']:.2f} "
              f"| {size(sb['cache_peak_growth_bytes']['median'])} |")
    print()
    print("| mode | scenario | pages scanned | files cached at end | cgroup peak |")
    print("|---|---|---:|---:|---:|")
    for d, name in [(n, "normal"), (l, "low-memory")]:
        for m in d["modes"]:
            s = m["summary"]
            peaks = [t["cgroup_peak_bytes"] for t in m["runs"] if t["cgroup_peak_bytes"] is not None]
            print(f"| {m['mode']} | {name} | {s['pgscan_total']['median']:.0f} "
                  f"| {size(s['files_resident_bytes']['median'])} | {size(max(peaks)) if peaks else '-'} |")


def stability(p):
    d = load(p)
    print("| mode | MiB/s (min-max) | diff | per-second CoV (median run) | per-second min-max (median run) "
          "| CPU s/GiB | kswapd CPU s | pages scanned (kswapd / direct) | peak cache growth |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in d["modes"]:
        s = m["summary"]
        runs = sorted(m["runs"], key=lambda t: t["mib_s"])
        t = runs[len(runs) // 2]
        r = t["reclaim"]
        print(f"| {m['mode']} | {spread(s['mib_s'])} | {diff(m)} | {t['series']['cov'] * 100:.0f}% "
              f"| {t['series']['spread']['min']:.0f}-{t['series']['spread']['max']:.0f} "
              f"| {s['cpu_s_per_gib']['median']:.2f} | {s['kswapd_cpu_s']['median']:.2f} "
              f"| {r['pgscan_kswapd']} / {r['pgscan_direct']} | {size(s['cache_peak_growth_bytes']['median'])} |")


def write(p):
    d = load(p)
    print("| mode | MiB/s (min-max) | diff | CPU s/GiB | peak page-cache growth | peak Dirty+Writeback "
          "| file cached at end |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m in d["modes"]:
        s = m["summary"]
        print(f"| {m['mode']} | {spread(s['mib_s'])} | {diff(m)} | {s['cpu_s_per_gib']['median']:.2f} "
              f"| {size(s['cache_peak_growth_bytes']['median'])} "
              f"| {size(s['peak_dirty_writeback_bytes']['median'])} "
              f"| {size(s['files_resident_bytes']['median'])} |")


def fio(p):
    d = load(p)
    print("| mode | ours MiB/s per round | fio MiB/s per round | ours median | fio median | ours vs fio |")
    print("|---|---|---|---:|---:|---:|")
    for f in d["fio"]:
        ours = next(m for m in d["modes"] if m["mode"] == f["mode"])
        ours_runs = ", ".join("%.0f" % t["mib_s"] for t in ours["runs"])
        fio_runs = ", ".join("%.0f" % x for x in f["runs_mib_s"])
        print(f"| {f['mode']} | {ours_runs} | {fio_runs} | {f['ours_mib_s']:.0f} "
              f"| {f['mib_s']['median']:.0f} | {f['ours_vs_fio_pct']:+.1f}% |")


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    {"erofs": erofs, "stability": stability, "write": write, "fio": fio}[what](*args)
