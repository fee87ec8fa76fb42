#!/usr/bin/env bash
# Peak RSS of `cp -a` of many entries, cacheless against GNU cp on the same tree: N empty files
# in one folder, and N empty files spread over a chain of DEPTH folders. Each copy starts from a
# cold cache (drop_caches, as root) and a synced filesystem. Prints a Markdown table.
#   N=1000000 DEPTH=100 RUNS=3 TREES="flat deep" bench/tree-memory.sh [WORKDIR]
# (GNU cp resolves every name from the top: a chain of 1,000 folders costs it a thousand lookups
# per file, and hours for a million files; 100 deep is what the recorded runs use.)
set -euo pipefail
n=${N:-1000000}
depth=${DEPTH:-100}
trees=${TREES:-flat deep}
runs=${RUNS:-3}
bin=${CACHELESS:-$(dirname "$0")/../target/release/cacheless}
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/tree-memory.XXXXXX")}
mkdir -p "$work"
python3 - "$work" "$n" "$depth" <<'PY'
import os, sys
work, n, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
flat = os.path.join(work, "flat")
if not os.path.isdir(flat):
    os.mkdir(flat)
    for i in range(n):
        os.close(os.open(os.path.join(flat, f"f{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))
deep = os.path.join(work, "deep")
if not os.path.isdir(deep):
    d = deep
    per = max(1, n // depth)
    for level in range(depth):
        d = os.path.join(d, "d")
        os.makedirs(d)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        for i in range(per):
            os.close(os.open(f"f{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        os.close(fd)
PY
echo "| tree | tool | runs | peak RSS MiB (median) | seconds (median) |"
echo "|---|---|---:|---:|---:|"
for tree in $trees; do
  for tool in gnu cacheless; do
    rss=(); secs=()
    for _ in $(seq "$runs"); do
      rm -rf "$work/copy"; sync; echo 3 >/proc/sys/vm/drop_caches
      if [ $tool = gnu ]; then cmd=(cp -a); else cmd=("$bin" cp -a); fi
      out=$(/usr/bin/time -f "%M %e" "${cmd[@]}" "$work/$tree" "$work/copy" 2>&1 >/dev/null | tail -1)
      rss+=("${out% *}"); secs+=("${out#* }")
    done
    med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    printf '| %s (%s entries) | %s | %s | %.1f | %s |\n' "$tree" "$n" "$tool" "$runs" "$(echo "$(med "${rss[@]}") / 1024" | bc -l)" "$(med "${secs[@]}")"
  done
done
rm -rf "$work/copy"
