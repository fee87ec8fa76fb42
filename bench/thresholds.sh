#!/usr/bin/env bash
# Measures where O_DIRECT stops paying for small files, which sets policy::TINY_READ and
# policy::SMALL_WRITE: N files of each size read cold with --mode direct vs --mode writebehind
# (buffered + drop what was brought in), and copied with --mode direct vs dontcache. Medians of
# RUNS interleaved runs, the four commands of a size in an order that rotates every round
# (bench/lib.sh; the position is recorded); root needed for drop_caches.
#   bench/thresholds.sh [DIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
dir=${1:-bench/runs/$(date +%Y-%m-%d)-$(hostname)}/thresholds
runs=${2:-5}
B=$PWD/target/release/cacheless
mkdir -p "$dir"
out=$dir/raw.csv
echo "run,position,op,size,mode,wall_s" > "$out"
for size in 16K 64K 256K 1M 4M; do
  d=$dir/data-$size
  if [ ! -d "$d" ]; then
    mkdir -p "$d"
    n=$(( (256 << 20) / $(numfmt --from=iec "$size") )); [ "$n" -gt 2000 ] && n=2000
    for i in $(seq 1 "$n"); do head -c "$size" /dev/urandom > "$d/f$i"; done
  fi
done
sync
for run in $(seq 1 "$runs"); do
  for size in 16K 64K 256K 1M 4M; do
    d=$dir/data-$size
    pos=0
    for cmd in $(rotate "$run" read-direct read-writebehind write-direct write-dontcache); do
      pos=$((pos + 1))
      op=${cmd%%-*} mode=${cmd#*-}
      rm -rf "$dir/copy"; sync; echo 3 > /proc/sys/vm/drop_caches; settle
      if [ "$op" = read ]; then
        /usr/bin/time -o "$dir/t" -f %e "$B" --mode "$mode" cat "$d"/f* > /dev/null
      else
        /usr/bin/time -o "$dir/t" -f %e "$B" --mode "$mode" cp -r --no-sync "$d" "$dir/copy" > /dev/null
      fi
      t=$(tail -1 "$dir/t")
      echo "$run,$pos,$op,$size,$mode,$t" >> "$out"
    done
  done
done
rm -rf "$dir/copy" "$dir/t"
python3 - "$out" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows: by.setdefault((r["op"], r["size"], r["mode"]), []).append(float(r["wall_s"]))
print("| op | file size | mode | median s |"); print("|---|---|---|---|")
for k, v in by.items(): print(f"| {k[0]} | {k[1]} | {k[2]} | {statistics.median(v):.3f} |")
PY
