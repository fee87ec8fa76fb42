#!/usr/bin/env bash
# bench/pack.sh: `cacheless pack` vs `tar -I 'zstd -T0' -cf ... && sync` vs `tar -I zstd -cf ... && sync`
# on the snapshot-like tree of bench/extract.sh, then `cacheless extract` of our multi-frame
# archive vs the single-frame one that tar+zstd wrote.
#
# Every trial is cold (sync + drop_caches + bench/lib.sh's settle, needs root; residency of the
# tree checked before it starts) and the commands run in rotated order (bench/lib.sh's balanced
# Latin square; the position is recorded), RUNS runs. Per trial: wall, user and sys CPU (GNU time, children included),
# page-cache growth (Cached in /proc/meminfo after minus before) and the exact residency of the
# tree and the archive afterwards (fincore). Writes WORK/raw-pack-NAME.csv and prints medians,
# the ratio to the peers in the same runs, CPU seconds per GiB of tree and page-cache growth as
# a share of the bytes read + written.
#
# Environment: CACHELESS (binary, default target/release/cacheless), WORK (scratch dir on the
# filesystem under test, default /var/tmp/cacheless-bench-pack), RUNS (5), NAME (label), LARGE,
# MEDIUM, SMALL, SMALL_MAX_KIB (tree, as bench/extract.sh), EXTRA (extra flags for cacheless
# pack). A tiny smoke run: RUNS=1 LARGE=1 MEDIUM=20 SMALL=200 bench/pack.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
WORK=${WORK:-/var/tmp/cacheless-bench-pack}
. bench/snapshot-tree.sh
for t in tar zstd fincore python3 /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 2; }
done
TREE_BYTES=$(du -sb --apparent-size "$TREE" | cut -f1)
FILES=$(find "$TREE" -type f | wc -l)
OUT=$WORK/out
RAW=$WORK/raw-pack-$NAME.csv
echo "bench,tool,run,pos,wall_s,user_s,sys_s,cache_growth_kib,resident_after_kib,read_bytes,written_bytes" > "$RAW"

cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
resident_kib() { # exact residency of the given files and of every file under the given dirs
    find "$@" -type f -print0 2>/dev/null | xargs -0 -r fincore -b -n -o RES 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}'
}
cold() {
    sync; echo 3 > /proc/sys/vm/drop_caches; settle
    local r; r=$(resident_kib "$TREE")
    # A little stays (directories' pages are metadata); more means the drop did not work.
    [ "$r" -lt $((TREE_BYTES / 1024 / 100 + 1024)) ] || { echo "tree still cached after drop_caches: $r KiB" >&2; exit 1; }
}
# trial BENCH TOOL RUN POS ARCHIVE READ_BYTES CMD
trial() {
    local bench=$1 tool=$2 run=$3 pos=$4 arch=$5 rbytes=$6 cmd=$7 before after t wbytes
    cold
    before=$(cached_kib)
    /usr/bin/time -f "%e %U %S" -o "$WORK/time.txt" bash -c "$cmd" >/dev/null 2>"$WORK/stderr-$tool.txt" \
        || { echo "$tool failed:" >&2; cat "$WORK/stderr-$tool.txt" >&2; exit 1; }
    t=$(tail -1 "$WORK/time.txt")
    after=$(cached_kib)
    if [ "$bench" = pack ]; then wbytes=$(stat -c %s "$arch"); else wbytes=$TREE_BYTES; fi
    echo "$bench,$tool,$run,$pos,${t// /,},$((after - before)),$(resident_kib "$TREE" "$arch" "$OUT"),$rbytes,$wbytes" | tee -a "$RAW"
}

PACK_TOOLS=(cacheless tar-zstd-T0 tar-zstd)
pack_cmd() {
    case $1 in
        cacheless) echo "\"$BIN\" pack $EXTRA -o \"$WORK/$1.tar.zst\" -C \"$TREE\" ." ;;
        tar-zstd-T0) echo "tar -I 'zstd -T0' -cf \"$WORK/$1.tar.zst\" -C \"$TREE\" . && sync" ;;
        tar-zstd) echo "tar -I zstd -cf \"$WORK/$1.tar.zst\" -C \"$TREE\" . && sync" ;;
    esac
}
for run in $(seq 1 "$RUNS"); do
    pos=0
    for tool in $(rotate "$run" "${PACK_TOOLS[@]}"); do
        rm -f "$WORK/$tool.tar.zst"
        trial pack "$tool" "$run" "$pos" "$WORK/$tool.tar.zst" "$TREE_BYTES" "$(pack_cmd "$tool")"
        pos=$((pos + 1))
    done
done

# Extract: our multi-frame archive vs tar+zstd's single frame, both by cacheless extract.
EX_TOOLS=(multi-frame single-frame)
for run in $(seq 1 "$RUNS"); do
    pos=0
    for tool in $(rotate "$run" "${EX_TOOLS[@]}"); do
        if [ "$tool" = multi-frame ]; then arch=$WORK/cacheless.tar.zst; else arch=$WORK/tar-zstd.tar.zst; fi
        rm -rf "$OUT"; mkdir -p "$OUT"
        trial extract "$tool" "$run" "$pos" "$arch" "$(stat -c %s "$arch")" "\"$BIN\" extract \"$arch\" -C \"$OUT\""
        pos=$((pos + 1))
    done
done
rm -rf "$OUT"

python3 - "$RAW" "$TREE_BYTES" "$FILES" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tb, files = float(sys.argv[2]), sys.argv[3]
def med(bench, tool, k):
    return st.median(float(r[k]) for r in rows if r["bench"] == bench and r["tool"] == tool)
def table(bench, tools, peer):
    n = len([r for r in rows if r["bench"] == bench and r["tool"] == tools[0][0]])
    print(f"\n{bench}: medians of {n} cold runs in rotated order\n")
    print(f"| command | wall s | x {peer} | user s | sys s | CPU s/GiB | page-cache growth | % of read+written | resident after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t, label in tools:
        wall, cpu = med(bench, t, "wall_s"), med(bench, t, "user_s") + med(bench, t, "sys_s")
        g = med(bench, t, "cache_growth_kib") * 1024
        io = med(bench, t, "read_bytes") + med(bench, t, "written_bytes")
        print(f"| {label} | {wall:.2f} | {med(bench, peer, 'wall_s') / wall:.2f} | {med(bench, t, 'user_s'):.2f} | "
              f"{med(bench, t, 'sys_s'):.2f} | {cpu / (tb / 2**30):.2f} | {g / 2**20:.0f} MiB | {100 * g / io:.1f} % | "
              f"{med(bench, t, 'resident_after_kib') / 1024:.0f} MiB |")
print(f"tree: {tb / 2**30:.2f} GiB apparent, {files} files")
table("pack", [("cacheless", "cacheless pack"), ("tar-zstd-T0", "tar -I 'zstd -T0' && sync"), ("tar-zstd", "tar -I zstd && sync")], "tar-zstd-T0")
table("extract", [("multi-frame", "cacheless extract, multi-frame"), ("single-frame", "cacheless extract, single frame")], "single-frame")
PY
