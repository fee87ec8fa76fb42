#!/usr/bin/env bash
# bench/cp.sh: `cacheless cp -a` vs `cp -a && sync` vs `rsync -a && sync` on a tree of many small
# files plus a few large ones; `cacheless cp -a --verify` beside them (the cost of verifying);
# and, with REFLINK_FS, the same tree copied inside xfs and btrfs loop images, where both
# `cacheless cp -a` and GNU `cp -a` clone with reflinks.
#
# Cold every run (sync + drop_caches + bench/lib.sh's settle, needs root), RUNS interleaved runs
# whose order rotates (bench/lib.sh; the position is recorded). Per run: wall, user and sys CPU
# (GNU time, children included), page-cache growth (Cached in /proc/meminfo after minus before)
# and the residency of the source and the copy afterwards (fincore). Writes WORK/raw-NAME.csv
# and prints a markdown summary, with CPU microseconds per file.
# After the timed runs on the host, two more cold runs of each tool, not timed, that count system
# calls: under perf stat's syscall and io_uring tracepoints, and under strace -f -c for the table
# of calls (bench/lib.sh's syscall_counts): WORK/syscalls-NAME.csv, WORK/strace-*.txt, and
# syscalls per file in the summary. SYSCALLS=0 leaves them out.
#
# Environment: CACHELESS (binary, default target/release/cacheless), WORK (scratch dir on the
# filesystem under test, default /var/tmp/cacheless-bench-cp), RUNS (5), FILES (100000 small
# files of 1..MAX_KIB KiB), MAX_KIB (64), BIG (8 large files of BIG_MIB MiB), BIG_MIB (512),
# NAME (label), EXTRA (extra flags for cacheless cp), REFLINK_FS (e.g. "xfs btrfs": also run on
# loop images of these filesystems; default none), TOOLS (default "cacheless cp rsync verify"),
# SYSCALLS (1), FRESH_FS (ext4 or xfs: every trial copies into a filesystem of that kind made for
# it on a loop device, see bench/lib.sh's fresh_fs; default: into WORK itself), BEFORE (another
# cacheless binary, e.g. a build of the previous commit: the tool `before` in TOOLS runs its
# `cp -a`, so that a change is measured against what it replaced in the same rotated runs).
# Small files only (100,000 of 1-8 KiB): NAME=cp-100k-small FILES=100000 MAX_KIB=8 BIG=0 bench/cp.sh
# Smoke run: FILES=2000 BIG=2 BIG_MIB=64 RUNS=1 REFLINK_FS="xfs btrfs" bench/cp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BIN=$(realpath "${CACHELESS:-target/release/cacheless}")
WORK=${WORK:-/var/tmp/cacheless-bench-cp}
RUNS=${RUNS:-5}
FILES=${FILES:-100000}
MAX_KIB=${MAX_KIB:-64}
BIG=${BIG:-8}
BIG_MIB=${BIG_MIB:-512}
NAME=${NAME:-cp-${FILES}-${BIG}x${BIG_MIB}}
EXTRA=${EXTRA:-}
REFLINK_FS=${REFLINK_FS:-}
TOOLS=${TOOLS:-cacheless cp rsync verify}
[ "$(id -u)" = 0 ] || { echo "needs root for drop_caches (and loop images)" >&2; exit 2; }
mkdir -p "$WORK"

# make_tree DIR: FILES files of 1..MAX_KIB KiB in directories of 1000, and BIG files of BIG_MIB MiB.
make_tree() {
    python3 - "$1" "$FILES" "$MAX_KIB" "$BIG" "$BIG_MIB" <<'PY'
import os, random, sys
root, files, max_kib, big, big_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rnd = random.Random(12)
pool = os.urandom(max_kib * 1024 + 4096)
for i in range(files):
    d = os.path.join(root, "small", f"d{i // 1000:04d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    n = rnd.randint(1, max_kib) * 1024 - rnd.randint(0, 1023)
    off = rnd.randint(0, 4096)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(pool[off:off + n])
os.makedirs(os.path.join(root, "big"), exist_ok=True)
chunk = os.urandom(8 << 20)
for i in range(big):
    with open(os.path.join(root, "big", f"big{i}.bin"), "wb") as f:
        for j in range(big_mib // 8):
            f.write(chunk[j % 7:] + chunk[:j % 7])
PY
}

resident_kib() { # every file of the source and the copy, exact (fincore)
    find "$@" -type f -print0 2>/dev/null | xargs -0 -r fincore -b -n -o RES 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}'
}

RAW=$WORK/raw-$NAME.csv
echo "fs,tool,run,position,wall_s,user_s,sys_s,cache_growth_kib,resident_after_kib,tree_bytes,files" > "$RAW"

# command_for TOOL SRC OUT: the command line that copies SRC to OUT with TOOL.
command_for() {
    case $1 in
        cacheless) echo "\"$BIN\" cp -a $EXTRA \"$2\" \"$3\"" ;;
        verify) echo "\"$BIN\" cp -a --verify $EXTRA \"$2\" \"$3\"" ;;
        before) echo "\"$(realpath "${BEFORE:?BEFORE names the binary of tool before}")\" cp -a $EXTRA \"$2\" \"$3\"" ;;
        cp) echo "cp -a \"$2\" \"$3\" && sync" ;;
        rsync) echo "rsync -a \"$2/\" \"$3/\" && sync" ;;
        *) echo "unknown tool $1" >&2; exit 2 ;;
    esac
}

# one FS SRC OUT TOOL RUN POSITION
one() {
    local fs=$1 src=$2 out=$3 tool=$4 run=$5 pos=$6 cmd
    cmd=$(command_for "$tool" "$src" "$out")
    [ "$fs" != "$HOST" ] || fresh_fs "$MNT"
    rm -rf "$out"; sync; echo 3 > /proc/sys/vm/drop_caches; settle
    local m
    m=$(timed "$tool" "$cmd")
    echo "$fs,$tool,$run,$pos,$m,$(resident_kib "$src" "$out"),$TREE_BYTES,$NFILES" | tee -a "$RAW"
}

# series FS SRC OUT TOOL...: RUNS rotated rounds of the tools.
series() {
    local fs=$1 src=$2 out=$3 run pos tool
    shift 3
    for run in $(seq 1 "$RUNS"); do
        pos=0
        for tool in $(rotate "$run" "$@"); do
            pos=$((pos + 1))
            one "$fs" "$src" "$out" "$tool" "$run" "$pos"
        done
    done
    rm -rf "$out"
}

TREE=$WORK/tree-$NAME
if [ ! -f "$TREE.done" ]; then
    rm -rf "$TREE"
    make_tree "$TREE"
    touch "$TREE.done"
fi
TREE_BYTES=$(du -sb --apparent-size "$TREE" | cut -f1)
NFILES=$(find "$TREE" -type f | wc -l)
# shellcheck disable=SC2086
# With FRESH_FS, the copy goes to a filesystem made anew for each trial (bench/lib.sh).
FRESH_FS=${FRESH_FS:-}
MNT=$WORK/fresh-mnt
HOST=host OUT=$WORK/out
if [ -n "$FRESH_FS" ]; then
    HOST=fresh-$FRESH_FS OUT=$MNT/out
    fresh_fs_size "$TREE_BYTES" "$NFILES"
    trap 'fresh_fs_release "$MNT"' EXIT
fi
series "$HOST" "$TREE" "$OUT" $TOOLS
# More cold runs of each on the host, not timed: the system calls it makes.
SYS=$WORK/syscalls-$NAME.csv
echo "fs,tool,syscalls,futex,io_uring_enter,uring_ops,strace_syscalls,strace_futex,files" > "$SYS"
cold_host() { fresh_fs "$MNT"; rm -rf "$OUT"; sync; echo 3 > /proc/sys/vm/drop_caches; settle; }
for tool in $TOOLS; do
    counts=$(syscall_counts "$NAME-$tool" cold_host "$(command_for "$tool" "$TREE" "$OUT")")
    echo "$HOST,$tool,$counts,$NFILES" | tee -a "$SYS"
done
rm -rf "$OUT"
fresh_fs_release "$MNT"
trap - EXIT

# The reflink path: the tree and its copy inside a loop image of each filesystem (sized for the
# source, two copies' metadata and slack), O_DIRECT loop so the image file itself stays uncached.
for fs in $REFLINK_FS; do
    img=$WORK/$fs.img mnt=$WORK/$fs-mnt
    size=$(((TREE_BYTES * 3 / 2 + (512 << 20)) >> 20 << 20))
    ((size >= 400 << 20)) || size=$((400 << 20))
    rm -f "$img"; truncate -s "$size" "$img"
    dev=$(losetup --direct-io=on -f --show "$img")
    cleanup() { umount "$mnt" 2>/dev/null || true; losetup -d "$dev" 2>/dev/null || true; rm -f "$img"; }
    trap cleanup EXIT
    "mkfs.$fs" -f -q "$dev"
    mkdir -p "$mnt"; mount "$dev" "$mnt"
    cp -a "$TREE" "$mnt/tree"; sync
    series "$fs" "$mnt/tree" "$mnt/out" cacheless cp
    cleanup; trap - EXIT
done

python3 - "$RAW" "$SYS" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sysc = {(r["fs"], r["tool"]): r for r in csv.DictReader(open(sys.argv[2]))}
def sel(fs, tool): return [r for r in rows if r["fs"] == fs and r["tool"] == tool]
def med(fs, tool, k): return st.median(float(r[k]) for r in sel(fs, tool))
def per_file(fs, tool, f):
    r = sysc.get((fs, tool))
    if r is None or r[f] in ("", "-"):
        return "-"
    v = float(r[f]) / float(r["files"])
    return f"{v:.2f}" if v == 0 or v >= 0.1 else f"{v:.4f}"
def calls(fs, tool):
    # perf's undisturbed count where there is one, else strace's (its futex count inflated).
    r = sysc.get((fs, tool))
    if r is not None and r["syscalls"] in ("", "-"):
        return f"{per_file(fs, tool, 'strace_syscalls')} ({per_file(fs, tool, 'strace_futex')}, strace)"
    return f"{per_file(fs, tool, 'syscalls')} ({per_file(fs, tool, 'futex')})"
tb = float(rows[0]["tree_bytes"]); n = rows[0]["files"]
labels = {"cacheless": "cacheless cp -a", "before": "cacheless cp -a (BEFORE)", "verify": "cacheless cp -a --verify", "cp": "cp -a && sync", "rsync": "rsync -a && sync"}
for fs in dict.fromkeys(r["fs"] for r in rows):
    tools = [t for t in labels if sel(fs, t)]
    runs = len(sel(fs, tools[0]))
    print(f"\n{fs}: tree {tb/2**30:.2f} GiB apparent, {n} files; medians of {runs} cold interleaved runs\n")
    print("| tool | wall s | user s | sys s | CPU us/file (user + sys) | syscalls/file (futex) | io_uring_enter / io_uring ops per file | page-cache growth | resident after (source+copy) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in tools:
        g = med(fs, t, "cache_growth_kib") * 1024
        u, s_ = med(fs, t, "user_s"), med(fs, t, "sys_s")
        pf = lambda v: v / float(n) * 1e6
        print(f"| {labels[t]} | {med(fs,t,'wall_s'):.2f} | {u:.2f} | {s_:.2f} | {pf(u + s_):.1f} ({pf(u):.1f} + {pf(s_):.1f}) | "
              f"{calls(fs, t)} | {per_file(fs, t, 'io_uring_enter')} / {per_file(fs, t, 'uring_ops')} | "
              f"{g/2**20:.0f} MiB ({100*g/tb:.1f} %) | {med(fs,t,'resident_after_kib')/1024:.0f} MiB |")
    c = med(fs, "cacheless", "wall_s")
    peers = [t for t in ("cp", "rsync") if t in tools]
    if peers:
        best = min(med(fs, t, "wall_s") for t in peers)
        print(f"\nspeed-up (faster of {', '.join(labels[t] for t in peers)} / cacheless): {best / c:.2f}x")
    if "before" in tools:
        print(f"speed-up over BEFORE: {med(fs, 'before', 'wall_s') / c:.2f}x")
    if "verify" in tools:
        print(f"cost of --verify: {100 * (med(fs, 'verify', 'wall_s') - c) / c:.0f} % of the copy's wall time")
PY
