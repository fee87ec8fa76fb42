#!/usr/bin/env bash
# Measures where O_DIRECT stops paying for small files, which sets policy::TINY_READ and
# policy::SMALL_WRITE: N files of each size read cold with --mode direct vs --mode writebehind
# (buffered + drop what was brought in), and copied with --mode direct vs dontcache. Medians of
# RUNS interleaved runs; root needed for drop_caches.
#   bench/thresholds.sh [DIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/runs/$(date +%Y-%m-%d)-$(hostname)}/thresholds
runs=${2:-5}
B=$PWD/target/release/cacheless
mkdir -p "$dir"
out=$dir/raw.csv
echo "run,op,size,mode,wall_s" > "$out"
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
    for mode in direct writebehind; do
      echo 3 > /proc/sys/vm/drop_caches
      /usr/bin/time -o "$dir/t" -f %e "$B" --mode "$mode" cat "$d"/f* > /dev/null; t=$(tail -1 "$dir/t")
      echo "$run,read,$size,$mode,$t" >> "$out"
    done
    for mode in direct dontcache; do
      rm -rf "$dir/copy"; echo 3 > /proc/sys/vm/drop_caches
      /usr/bin/time -o "$dir/t" -f %e "$B" --mode "$mode" cp -r --no-sync "$d" "$dir/copy" > /dev/null; t=$(tail -1 "$dir/t")
      echo "$run,write,$size,$mode,$t" >> "$out"
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
