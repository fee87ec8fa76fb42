#!/usr/bin/env bash
# Peak RSS over many entries, cacheless against GNU on the same tree: `cp -a` against GNU cp,
# `pack` against `tar -c`, `extract` against `tar -x` (of one archive GNU tar made of the tree),
# for N empty files in one folder and N empty files spread over a chain of DEPTH folders. Each
# run starts from a cold cache (drop_caches, as root) and a synced filesystem; the tools take
# turns, the first one rotating from run to run. Prints a Markdown table.
#   N=1000000 DEPTH=100 RUNS=3 TREES="flat deep" JOBS="cp pack extract" bench/tree-memory.sh [WORKDIR]
# COLD=0 skips the drop_caches (peak RSS is the process's own memory, the same warm or cold; the
# seconds are then warm ones): for a run beside other work that a global drop would disturb.
# (GNU cp resolves every name from the top: a chain of 1,000 folders costs it a thousand lookups
# per file, and hours for a million files; 100 deep is what the recorded runs use.)
set -euo pipefail
n=${N:-1000000}
depth=${DEPTH:-100}
trees=${TREES:-flat deep}
runs=${RUNS:-3}
jobs=${JOBS:-cp pack extract}
cold=${COLD:-1}
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
echo "| tree | job | tool | runs | peak RSS MiB (median) | seconds (median) |"
echo "|---|---|---|---:|---:|---:|"
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for tree in $trees; do
  for job in $jobs; do
    if [ "$job" = extract ] && [ ! -f "$work/$tree.tar" ]; then
      tar -cf "$work/$tree.tar" -C "$work" "$tree"
    fi
    declare -A rss=() secs=()
    for r in $(seq "$runs"); do
      order=(gnu cacheless); [ $((r % 2)) = 0 ] && order=(cacheless gnu)
      for tool in "${order[@]}"; do
        rm -rf "$work/copy" "$work/out.tar"; sync
        [ "$cold" = 1 ] && echo 3 >/proc/sys/vm/drop_caches
        case $job/$tool in
          cp/gnu) cmd=(cp -a "$work/$tree" "$work/copy") ;;
          cp/cacheless) cmd=("$bin" cp -a "$work/$tree" "$work/copy") ;;
          pack/gnu) cmd=(tar -cf "$work/out.tar" -C "$work" "$tree") ;;
          pack/cacheless) cmd=("$bin" pack -o "$work/out.tar" -C "$work" "$tree") ;;
          extract/gnu) mkdir "$work/copy"; cmd=(tar -xf "$work/$tree.tar" -C "$work/copy") ;;
          extract/cacheless) mkdir "$work/copy"; cmd=("$bin" extract "$work/$tree.tar" -C "$work/copy") ;;
        esac
        out=$(/usr/bin/time -f "%M %e" "${cmd[@]}" 2>&1 >/dev/null | tail -1)
        rss[$tool]+="${out% *} "; secs[$tool]+="${out#* } "
      done
    done
    for tool in gnu cacheless; do
      # shellcheck disable=SC2086
      printf '| %s (%s entries) | %s | %s | %s | %.1f | %s |\n' "$tree" "$n" "$job" "$tool" "$runs" "$(echo "$(med ${rss[$tool]}) / 1024" | bc -l)" "$(med ${secs[$tool]})"
    done
    unset rss secs
  done
done
rm -rf "$work/copy" "$work/out.tar"
