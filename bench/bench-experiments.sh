#!/usr/bin/env bash
# Reproduces the three published experiments of docs/BENCHMARKS.md with `cacheless bench`, plus the
# acceptance check against fio. Usage:
#
#   bench/bench-experiments.sh [erofs|stability|write|fio|all] ...
#
# Environment:
#   CACHELESS  the binary (default: target/release/cacheless, built if missing)
#   DATA       directory for the data files, on the file system to measure (default: ./bench-data); the
#              read files are kept in one subdirectory per data set and reused by later runs; `all` needs
#              about 8 GiB + 4/3 of RAM + 4 GiB free
#   OUT        where results go (default: bench/runs/<date>-<host>); one folder per experiment with
#              command.txt, table.md, report.json, raw.csv, plot.png (no plot without a TrueType font)
#   RUNS       rounds of interleaved trials (default: cacheless bench's, one full rotation of the modes; the
#              fio check always uses 8, two full rotations of its 4 kinds of trial)
#   STABILITY_SIZE  size of each of the two files of the stability experiment (default: 2/3 of RAM, so
#              that the two together are larger than RAM and buffered reads must reclaim)
#   STABILITY_RUNS  rounds of the stability experiment (default: one full rotation, 3)
#
# `cacheless bench` rotates the order of the modes (and fio's runs) every round and records each trial's
# position; a table warns when a mode's figures depend on it. The low-memory scenario creates a memory
# cgroup: run as root. Run nothing else meanwhile.
set -euo pipefail

cd "$(dirname "$0")/.."
CACHELESS=${CACHELESS:-target/release/cacheless}
if [[ ! -x $CACHELESS ]]; then
    cargo build --release --bin cacheless
fi
DATA=${DATA:-$PWD/bench-data}
OUT=${OUT:-bench/runs/$(date -u +%Y-%m-%d)-$(hostname -s)}
# Empty: leave the number of rounds to `cacheless bench`.
RUNS=${RUNS:-}
# runs_flag N: sets RUNS_FLAG to `--runs N`, or to nothing when N is empty.
runs_flag() {
    RUNS_FLAG=()
    if [[ -n $1 ]]; then RUNS_FLAG=(--runs "$1"); fi
}
mkdir -p "$DATA" "$OUT"

# Plots need a TrueType font for their text (the same search as `cacheless bench --plot`); fonts-dejavu-core
# is the usual one. Without any, `--plot` would fail after the run, so it is left out.
has_font() {
    [[ -n ${CACHELESS_FONT:-} ]] || [[ -n $(find /usr/share/fonts -maxdepth 3 -iname '*.ttf' -print -quit 2>/dev/null) ]]
}
if ! has_font && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
    apt-get install -y -q fonts-dejavu-core >/dev/null || true
fi
PLOT=true
if ! has_font; then
    echo "no TrueType font found: the experiments draw no plots" >&2
    PLOT=false
fi

machine() {
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "kernel: $(uname -r)"
        echo "cpus: $(nproc)"
        echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
        echo "data dir: $DATA ($(findmnt -n -o FSTYPE,SOURCE -T "$DATA" || true))"
        echo "fio: $(fio --version 2>/dev/null || echo none)"
        echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$OUT/machine.txt"
}

# bench NAME ARGS...: runs one experiment into $OUT/NAME.
bench() {
    local name=$1
    shift
    local dir=$OUT/$name
    mkdir -p "$dir"
    local args=(bench "$@" --dir "$DATA/$DATASET" --json-out "$dir/report.json" --csv "$dir/raw.csv")
    if $PLOT; then
        args+=(--plot "$dir/plot.png")
    fi
    echo "cacheless ${args[*]}" >"$dir/command.txt"
    echo "== $name: $(cat "$dir/command.txt")" >&2
    "$CACHELESS" "${args[@]}" >"$dir/table.md" 2> >(tee "$dir/log.txt" >&2)
    {
        echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "busiest processes at end:"
        ps -eo pcpu,etime,comm --sort=-pcpu | head -6
    } >>"$dir/log.txt"
    cat "$dir/table.md"
}

# 1. The erofs table: 4 threads, each reading its own 2 GiB file with 1 MiB reads; normal, then inside a
#    1 GiB memory cgroup.
erofs() {
    DATASET=4x2G
    runs_flag "$RUNS"
    # shellcheck disable=SC2054 # the commas separate --modes values, not array elements
    local common=(--rw read --threads 4 --files 4 --size 2G --bs 1M --modes buffered,direct,dontcache,auto "${RUNS_FLAG[@]}")
    bench erofs-normal "${common[@]}"
    bench erofs-lowmem "${common[@]}" --scenario low-memory --memory-limit 1G
}

# 2. The uncached-read stability chart: 2 threads reading files that together exceed RAM.
stability() {
    DATASET=2xbig
    local size=${STABILITY_SIZE:-$(awk '/MemTotal/ {printf "%dM", $2/1024*2/3}' /proc/meminfo)}
    runs_flag "${STABILITY_RUNS:-}"
    bench stability --rw read --threads 2 --files 2 --size "$size" --bs 1M --modes buffered,dontcache,direct \
        "${RUNS_FLAG[@]}"
}

# 3. The write table: 4 GiB sequential write made durable.
write_table() {
    DATASET="write"
    runs_flag "$RUNS"
    bench write --rw write --threads 1 --files 1 --size 4G --bs 1M \
        --modes buffered,direct,dontcache,writebehind "${RUNS_FLAG[@]}"
}

# Acceptance: our direct sequential read against fio on the same job, median of 8 interleaved runs.
fio_check() {
    DATASET=4x2G
    bench vs-fio --rw read --threads 4 --files 4 --size 2G --bs 1M --modes buffered,direct --runs 8 --vs-fio
}

machine
what=${1:-all}
case $what in
erofs) erofs ;;
stability) stability ;;
write) write_table ;;
fio) fio_check ;;
all)
    erofs
    fio_check
    write_table
    stability
    ;;
*)
    echo "usage: $0 [erofs|stability|write|fio|all]" >&2
    exit 2
    ;;
esac
