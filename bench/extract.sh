#!/usr/bin/env bash
# bench/extract.sh: `cacheless extract` vs `tar -I zstd -xf ... && sync` and
# `tar -I 'zstd -T0' -xf ... && sync`, each on a single-frame archive (`tar -I zstd -cf`) and on a
# multi-frame one (`cacheless pack`: 32 MiB frames, each after a pzstd-style size frame), of a
# snapshot-like tree.
#
# Cold every run (sync + drop_caches + bench/lib.sh's settle, needs root), RUNS interleaved runs
# whose order rotates (bench/lib.sh; the position is recorded).
# Per run: wall, user and sys CPU (GNU time, children included), page-cache growth (Cached in
# /proc/meminfo after minus before) and the exact residency of the archive and the extracted
# tree afterwards (fincore). Writes WORK/raw-NAME.csv and prints a markdown summary with CPU
# seconds (user + sys) per GiB of tree and microseconds per file, and for cacheless the frames
# and decompression threads its --json report gives.
# After the timed runs, two more cold runs of each tool and archive, not timed, that count system
# calls: under perf stat's syscall and io_uring tracepoints, and under strace -f -c for the table
# of calls (bench/lib.sh's syscall_counts): WORK/syscalls-NAME.csv, WORK/strace-*.txt, and
# syscalls per file in the summary. SYSCALLS=0 leaves them out.
#
# Environment: CACHELESS (binary, default target/release/cacheless), WORK (scratch dir on the
# filesystem under test, default /var/tmp/cacheless-bench-extract), RUNS (5), NAME (label),
# LARGE (16 x 64 MiB), MEDIUM (4000 x 128 KiB), SMALL (20000 x SMALL_MIN_KIB..SMALL_MAX_KIB KiB),
# SMALL_MIN_KIB (1), SMALL_MAX_KIB (40), EXTRA (extra flags for cacheless extract), TOOLS (the
# tools to compare, a subset of: cacheless before tar tar-T0; `before` is the binary BEFORE, a
# previous build, run as cacheless is), ARCHIVES (single multi), SYSCALLS (1),
# FRESH_FS (ext4 or xfs: every trial extracts into a filesystem of that kind made for it on a
# loop device, see bench/lib.sh's fresh_fs; FRESH_GIB and FRESH_INODES size it; default: into
# WORK itself).
# Beside them, by default, the tool `floor`: bench/floor.c replaying the tree's names and sizes
# (mkdirat, openat + write + close, symlinkat, one syncfs; one thread, the data from memory), the
# least an extraction does, so that every figure stands beside its floor (once a round, whatever
# the archive). SOURCE_TREE (an existing folder, e.g. an unpacked source tree) is extracted in
# place of the generated one.
# The 200,000-file variant: NAME=200k LARGE=0 MEDIUM=0 SMALL=200000 SMALL_MAX_KIB=8 bench/extract.sh
# The 1,000,000-file variant (0-4 KiB; about 12 GiB of scratch space with both archives and the
# output): NAME=1m LARGE=0 MEDIUM=0 SMALL=1000000 SMALL_MIN_KIB=0 SMALL_MAX_KIB=4 bench/extract.sh
# A smoke run: NAME=smoke RUNS=1 LARGE=1 MEDIUM=20 SMALL=200 bench/extract.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
WORK=${WORK:-/var/tmp/cacheless-bench-extract}
. bench/snapshot-tree.sh
TOOLS=${TOOLS:-cacheless tar tar-T0 floor}
ARCHIVES=${ARCHIVES:-single multi}
ARCH_single=$WORK/$NAME.tar.zst
ARCH_multi=$WORK/$NAME.frames.tar.zst
[ "$TREE_BUILT" = 0 ] || rm -f "$ARCH_single" "$ARCH_multi"
[ -f "$ARCH_single" ] || tar -I zstd -cf "$ARCH_single" -C "$TREE" .
[ -f "$ARCH_multi" ] || "$BIN" pack -o "$ARCH_multi" -C "$TREE" . >/dev/null
# The floor (bench/floor.c): the tree's names and sizes, replayed by a plain program.
MANIFEST=$WORK/$NAME.manifest
[ "$TREE_BUILT" = 0 ] && [ -f "$MANIFEST" ] || find "$TREE" -mindepth 1 -printf '%y\0%m\0%s\0%P\0%l\0' > "$MANIFEST"
FLOOR=$WORK/floor
[ "$FLOOR" -nt bench/floor.c ] || cc -O2 -o "$FLOOR" bench/floor.c
TREE_BYTES=$(du -sb --apparent-size "$TREE" | cut -f1)
FILES=$(find "$TREE" -type f | wc -l)
# With FRESH_FS, the tree is extracted into a filesystem made anew for each trial (bench/lib.sh).
FRESH_FS=${FRESH_FS:-}
MNT=$WORK/fresh-mnt
if [ -n "$FRESH_FS" ]; then
    OUT=$MNT/out
    fresh_fs_size "$TREE_BYTES" "$FILES"
    trap 'fresh_fs_release "$MNT"' EXIT
else
    OUT=$WORK/out
fi
RAW=$WORK/raw-$NAME.csv
echo "tool,archive,run,position,wall_s,user_s,sys_s,cache_growth_kib,resident_after_kib,tree_bytes,files,frames,decompress_threads" > "$RAW"

cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
resident_kib() { # archive + every extracted file, exact (fincore)
    { echo "$1"; find "$OUT" -type f; } | xargs -d '\n' fincore -b -n -o RES 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}'
}
# command_for TOOL ARCHIVE: the command line that extracts ARCHIVE into OUT with TOOL.
command_for() {
    case $1 in
        cacheless) echo "\"$BIN\" extract --json $EXTRA \"$2\" -C \"$OUT\" > \"$WORK/report.json\"" ;;
        before) echo "\"$BEFORE\" extract --json $EXTRA \"$2\" -C \"$OUT\" > \"$WORK/report.json\"" ;;
        tar) echo "tar -I zstd -xf \"$2\" -C \"$OUT\" && sync" ;;
        tar-T0) echo "tar -I 'zstd -T0' -xf \"$2\" -C \"$OUT\" && sync" ;;
        floor) echo "\"$FLOOR\" \"$MANIFEST\" \"$OUT\"" ;;
        *) echo "unknown tool $1" >&2; exit 2 ;;
    esac
}
cold() { fresh_fs "$MNT"; rm -rf "$OUT"; mkdir -p "$OUT"; sync; echo 3 > /proc/sys/vm/drop_caches; settle; }
one() { # tool@archive run position
    local tool=${1%@*} kind=${1#*@} run=$2 pos=$3 cmd arch frames=- dthreads=-
    arch=ARCH_$kind
    arch=${!arch}
    cmd=$(command_for "$tool" "$arch")
    cold
    local before after t
    before=$(cached_kib)
    /usr/bin/time -f "%e %U %S" -o "$WORK/time.txt" bash -c "$cmd" >/dev/null 2>"$WORK/stderr-$tool.txt" \
        || { echo "$tool failed:" >&2; cat "$WORK/stderr-$tool.txt" >&2; exit 1; }
    t=$(tail -1 "$WORK/time.txt")
    after=$(cached_kib)
    if [ "$tool" = cacheless ] || [ "$tool" = before ]; then
        read -r frames dthreads < <(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["source"]; print(s.get("frames") if s.get("frames") is not None else "-", s.get("decompress_threads", "-"))' "$WORK/report.json")
    fi
    echo "$tool,$kind,$run,$pos,${t// /,},$((after - before)),$(resident_kib "$arch"),$TREE_BYTES,$FILES,$frames,$dthreads" | tee -a "$RAW"
}
ITEMS=()
# The floor reads no archive: it runs once a round, under the first kind.
for a in $ARCHIVES; do for t in $TOOLS; do
    [ "$t" = floor ] && [ "$a" != "${ARCHIVES%% *}" ] && continue
    ITEMS+=("$t@$a")
done; done
for run in $(seq 1 "$RUNS"); do
    pos=0
    for item in $(rotate "$run" "${ITEMS[@]}"); do
        pos=$((pos + 1))
        one "$item" "$run" "$pos"
    done
done
# More cold runs of each, not timed: the system calls it makes.
SYS=$WORK/syscalls-$NAME.csv
echo "tool,archive,syscalls,futex,io_uring_enter,uring_ops,strace_syscalls,strace_futex,files" > "$SYS"
for item in "${ITEMS[@]}"; do
    tool=${item%@*} kind=${item#*@}
    arch=ARCH_$kind
    cmd=$(command_for "$tool" "${!arch}")
    counts=$(syscall_counts "$NAME-$tool-$kind" cold "$cmd")
    echo "$tool,$kind,$counts,$FILES" | tee -a "$SYS"
done
rm -rf "$OUT"
python3 - "$RAW" "$SYS" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sysc = {(r["tool"], r["archive"]): r for r in csv.DictReader(open(sys.argv[2]))}
def per_file(k, f):
    r = sysc.get(k)
    if r is None or r[f] in ("", "-"):
        return "-"
    v = float(r[f]) / float(r["files"])
    return f"{v:.2f}" if v == 0 or v >= 0.1 else f"{v:.4f}"
def calls(k):
    # perf's undisturbed count where there is one, else strace's (its futex count inflated).
    r = sysc.get(k)
    if r is not None and r["syscalls"] in ("", "-"):
        return f"{per_file(k, 'strace_syscalls')} ({per_file(k, 'strace_futex')}, strace)"
    return f"{per_file(k, 'syscalls')} ({per_file(k, 'futex')})"
keys = list(dict.fromkeys((r["tool"], r["archive"]) for r in rows))
def sel(k): return [r for r in rows if (r["tool"], r["archive"]) == k]
def med(k, f): return st.median(float(r[f]) for r in sel(k))
def cpu(k): return st.median(float(r["user_s"]) + float(r["sys_s"]) for r in sel(k))
tb = float(rows[0]["tree_bytes"]); n = rows[0]["files"]; gib = tb / 2**30
labels = {"cacheless": "cacheless extract", "before": "previous binary", "tar": "tar -I zstd -xf && sync", "tar-T0": "tar -I 'zstd -T0' -xf && sync", "floor": "floor (bench/floor.c: names and sizes from memory, one syncfs)"}
print(f"\ntree: {gib:.2f} GiB apparent, {n} files; medians of {len(sel(keys[0]))} cold interleaved runs\n")
print("| tool | archive | wall s | user s | sys s | CPU s/GiB | CPU us/file (user + sys) | syscalls/file (futex) | io_uring_enter / io_uring ops per file | page-cache growth | resident after (archive+tree) | frames / decompression threads |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for k in keys:
    g = med(k, "cache_growth_kib") * 1024
    r0 = sel(k)[0]
    fr = f"{r0['frames']} / {r0['decompress_threads']}" if k[0] in ("cacheless", "before") else "-"
    pf = lambda f: float(med(k, f)) / float(n) * 1e6
    kind = "-" if k[0] == "floor" else f"{k[1]}-frame"
    print(f"| {labels[k[0]]} | {kind} | {med(k,'wall_s'):.2f} | {med(k,'user_s'):.2f} | {med(k,'sys_s'):.2f} | {cpu(k)/gib:.2f} | "
          f"{cpu(k)/float(n)*1e6:.1f} ({pf('user_s'):.1f} + {pf('sys_s'):.1f}) | {calls(k)} | "
          f"{per_file(k, 'io_uring_enter')} / {per_file(k, 'uring_ops')} | "
          f"{g/2**20:.0f} MiB ({100*g/tb:.1f} %) | {med(k,'resident_after_kib')/1024:.0f} MiB | {fr} |")
for a in dict.fromkeys(k[1] for k in keys):
    c = ("cacheless", a)
    if c not in keys:
        continue
    for t in ("tar", "tar-T0"):
        if (t, a) in keys:
            print(f"\n{a}-frame archive: {labels[t]} wall / cacheless wall: {med((t,a),'wall_s')/med(c,'wall_s'):.2f}x; "
                  f"CPU (user+sys) cacheless/{t}: {cpu(c)/max(cpu((t,a)),1e-9):.2f}")
    floor = [k for k in keys if k[0] == "floor"]
    if floor:
        print(f"\n{a}-frame archive: cacheless's speed against the floor's (floor wall / cacheless wall): "
              f"{med(floor[0],'wall_s')/med(c,'wall_s'):.2f}x; CPU (user+sys) cacheless/floor: {cpu(c)/max(cpu(floor[0]),1e-9):.2f}")
PY
