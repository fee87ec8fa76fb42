#!/usr/bin/env bash
# bench/extract.sh: `cacheless extract` vs `tar -I zstd -xf ... && sync` on a snapshot-like tree.
#
# Cold every run (sync + drop_caches + bench/lib.sh's settle, needs root), RUNS interleaved runs
# whose order rotates (bench/lib.sh; the position is recorded).
# Per run: wall, user and sys CPU (GNU time, children included), page-cache growth (Cached in
# /proc/meminfo after minus before) and the exact residency of the archive and the extracted
# tree afterwards (fincore). Writes WORK/raw-NAME.csv and prints a markdown summary.
#
# Environment: CACHELESS (binary, default target/release/cacheless), WORK (scratch dir on the
# filesystem under test, default /var/tmp/cacheless-bench-extract), RUNS (5), NAME (label),
# LARGE (16 x 64 MiB), MEDIUM (4000 x 128 KiB), SMALL (20000 x 1..SMALL_MAX_KIB KiB),
# SMALL_MAX_KIB (40), EXTRA (extra flags for cacheless extract).
# The 200,000-file variant: NAME=200k LARGE=0 MEDIUM=0 SMALL=200000 SMALL_MAX_KIB=8 bench/extract.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
WORK=${WORK:-/var/tmp/cacheless-bench-extract}
. bench/snapshot-tree.sh
ARCH=$WORK/$NAME.tar.zst
[ "$TREE_BUILT" = 0 ] || rm -f "$ARCH"
[ -f "$ARCH" ] || tar -I zstd -cf "$ARCH" -C "$TREE" .
TREE_BYTES=$(du -sb --apparent-size "$TREE" | cut -f1)
FILES=$(find "$TREE" -type f | wc -l)
OUT=$WORK/out
RAW=$WORK/raw-$NAME.csv
echo "tool,run,position,wall_s,user_s,sys_s,cache_growth_kib,resident_after_kib,tree_bytes,files" > "$RAW"

cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
resident_kib() { # archive + every extracted file, exact (fincore)
    { echo "$ARCH"; find "$OUT" -type f; } | xargs -d '\n' fincore -b -n -o RES 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}'
}
one() { # tool run position
    local tool=$1 run=$2 pos=$3 cmd
    rm -rf "$OUT"; mkdir -p "$OUT"; sync; echo 3 > /proc/sys/vm/drop_caches; settle
    if [ "$tool" = cacheless ]; then
        cmd="\"$BIN\" extract $EXTRA \"$ARCH\" -C \"$OUT\""
    else
        cmd="tar -I zstd -xf \"$ARCH\" -C \"$OUT\" && sync"
    fi
    local before after t
    before=$(cached_kib)
    /usr/bin/time -f "%e %U %S" -o "$WORK/time.txt" bash -c "$cmd" >/dev/null 2>"$WORK/stderr-$tool.txt" \
        || { echo "$tool failed:" >&2; cat "$WORK/stderr-$tool.txt" >&2; exit 1; }
    t=$(tail -1 "$WORK/time.txt")
    after=$(cached_kib)
    echo "$tool,$run,$pos,${t// /,},$((after - before)),$(resident_kib),$TREE_BYTES,$FILES" | tee -a "$RAW"
}
for run in $(seq 1 "$RUNS"); do
    pos=0
    for tool in $(rotate "$run" cacheless tar); do
        pos=$((pos + 1))
        one "$tool" "$run" "$pos"
    done
done
rm -rf "$OUT"
python3 - "$RAW" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(tool, k): return st.median(float(r[k]) for r in rows if r["tool"] == tool)
tb = float(rows[0]["tree_bytes"]); n = rows[0]["files"]
print(f"\ntree: {tb/2**30:.2f} GiB apparent, {n} files; medians of {len([r for r in rows if r['tool']=='tar'])} cold interleaved runs\n")
print("| tool | wall s | user s | sys s | page-cache growth | resident after (archive+tree) |")
print("|---|---|---|---|---|---|")
for t, label in [("cacheless", "cacheless extract"), ("tar", "tar -I zstd -xf && sync")]:
    g = med(t, "cache_growth_kib") * 1024
    print(f"| {label} | {med(t,'wall_s'):.2f} | {med(t,'user_s'):.2f} | {med(t,'sys_s'):.2f} | {g/2**20:.0f} MiB ({100*g/tb:.1f} %) | {med(t,'resident_after_kib')/1024:.0f} MiB |")
print(f"\nspeed-up (tar wall / cacheless wall): {med('tar','wall_s')/med('cacheless','wall_s'):.2f}x; "
      f"sys CPU ratio (cacheless/tar): {med('cacheless','sys_s')/max(med('tar','sys_s'),1e-9):.2f}")
PY
