#!/usr/bin/env bash
# Issue-2 benchmarks: sequential read and copy of a 4 GiB file, cold each run, 5 interleaved
# runs, cacheless against cat / dd / fio and cp+sync / dd. Also the request-size x depth sweep
# that chose the defaults. Needs root (drop_caches) and fio. Not part of the tests.
# The commands compared rotate every round (bench/lib.sh: each in each position equally often).
#
#   bench/engine.sh [DIR] [SIZE_GIB] [RUNS]
# Writes DIR/raw.csv (one row per run, with its position in the round) and prints medians.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
dir=${1:-bench/runs/$(date +%Y-%m-%d)-$(hostname)}
gib=${2:-4}
runs=${3:-5}
mkdir -p "$dir/data"
cargo build --release --locked -q
B=$PWD/target/release/cacheless
F=$dir/data/src.bin
G=$dir/data/dst.bin
if [ ! -f "$F" ] || [ "$(stat -c %s "$F")" != $((gib << 30)) ]; then
  head -c $((gib << 30)) /dev/urandom > "$F"
fi
raw=$dir/raw.csv
header="run,position,bench,tool,wall_s,user_s,sys_s,cache_growth_kib,resident_kib"
[ -f "$raw" ] || echo "$header" > "$raw"
[ "$(head -1 "$raw")" = "$header" ] || { echo "$raw has other columns: move it away first" >&2; exit 2; }

cached_kib() { awk '/^Cached:/{print $2}' /proc/meminfo; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; "$B" evict "$@" >/dev/null 2>&1 || true; settle; }
resident_kib() { local t=0; for f in "$@"; do [ -f "$f" ] && t=$((t + $(fincore -b -n -o RES "$f" | awk '{print int($1/1024)}'))); done; echo $t; }

# measure RUN POSITION BENCH TOOL FILES-TO-CHECK -- COMMAND...
measure() {
  local run=$1 pos=$2 bench=$3 tool=$4 files=$5; shift 6
  local c0 c1 t tf
  tf=$(mktemp)
  c0=$(cached_kib)
  /usr/bin/time -o "$tf" -f "%e %U %S" bash -c "$*" >/dev/null 2>&1
  c1=$(cached_kib)
  t=$(tail -1 "$tf"); rm -f "$tf"
  # shellcheck disable=SC2086
  echo "$run,$pos,$bench,$tool,${t// /,},$((c1 - c0)),$(resident_kib $files)" >> "$raw"
}

fio_read() { # bs depth
  fio --name=r --filename="$F" --rw=read --bs="$1" --iodepth="$2" --ioengine=io_uring --direct=1 --size="${gib}G" --numjobs=1 --output-format=terse --terse-version=3 >/dev/null
}
export -f fio_read; export F gib

sweep=()
for bs in 1M 4M 8M; do for qd in 2 4 8 16; do sweep+=("bs$bs-qd$qd"); done; done
for run in $(seq 1 "$runs"); do
  pos=0
  for tool in $(rotate "$run" cacheless cat dd fio-1M-4 fio-1M-16 fio-4M-4 fio-4M-16); do
    pos=$((pos + 1))
    cold "$F"
    case $tool in
      cacheless) measure "$run" "$pos" read "$tool" "$F" -- "$B cat $F > /dev/null" ;;
      cat) measure "$run" "$pos" read "$tool" "$F" -- "cat $F > /dev/null" ;;
      dd) measure "$run" "$pos" read "$tool" "$F" -- "dd if=$F of=/dev/null bs=1M iflag=direct" ;;
      fio-*) IFS=- read -r _ bs qd <<< "$tool"; measure "$run" "$pos" read "$tool" "$F" -- "fio_read $bs $qd" ;;
    esac
  done
  pos=0
  for tool in $(rotate "$run" cacheless cp+sync dd); do
    pos=$((pos + 1))
    rm -f "$G"; cold "$F"
    case $tool in
      cacheless) measure "$run" "$pos" copy "$tool" "$F $G" -- "$B cp $F $G" ;;
      cp+sync) measure "$run" "$pos" copy "$tool" "$F $G" -- "cp $F $G && sync" ;;
      dd) measure "$run" "$pos" copy "$tool" "$F $G" -- "dd if=$F of=$G bs=1M iflag=direct oflag=direct conv=fsync" ;;
    esac
  done
  if [ "${SWEEP:-1}" = 1 ]; then
    pos=0
    for tool in $(rotate "$run" "${sweep[@]}"); do
      pos=$((pos + 1))
      IFS=- read -r bs qd <<< "${tool#bs}"
      cold "$F"
      measure "$run" "$pos" sweep "$tool" "$F" -- "$B --block-size $bs --queue-depth ${qd#qd} cat $F > /dev/null"
    done
  fi
done
rm -f "$G"

python3 - "$raw" "$gib" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]))); gib = float(sys.argv[2])
by = {}
for r in rows:
    by.setdefault((r["bench"], r["tool"]), []).append(r)
print("| bench | tool | runs | median s | MiB/s | user+sys s/GiB | sys s/GiB | cache growth | left resident |")
print("|---|---|---|---|---|---|---|---|---|")
for (b, t), rs in by.items():
    med = lambda k: statistics.median(float(x[k]) for x in rs)
    w = med("wall_s")
    print(f"| {b} | {t} | {len(rs)} | {w:.2f} | {gib*1024/w:.0f} | {(med('user_s')+med('sys_s'))/gib:.3f} | {med('sys_s')/gib:.3f} | {med('cache_growth_kib')/1024:.0f} MiB | {med('resident_kib')/1024:.0f} MiB |")
PY
