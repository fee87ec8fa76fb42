# shellcheck shell=bash
# Shell helpers shared by the scripts in bench/ (source it): the order of the commands compared in each
# round, and the wait before a cold trial starts.

# rotate ROUND ITEM...: prints the ITEMs, one per line, in the order of round ROUND (from 1) of a balanced
# Latin square (Williams design), the orders `cacheless bench` uses (crates/bench/src/schedule.rs; a test
# there checks that both agree). Over N rounds (N items) each item runs in each position once, and over N
# rounds (2N when N is odd) right after each other item equally often, so that no command always pays for
# the one before it. Round 1 keeps the given order. Items must not contain spaces.
rotate() {
    local r=$(($1 - 1))
    shift
    local n=$# j s
    local -a items=("$@") first=() relabel=() row=()
    for ((j = 0; j < n; j++)); do
        if ((j == 0)); then
            s=0
        elif ((j % 2 == 1)); then
            s=$(((j + 1) / 2))
        else
            s=$((n - j / 2))
        fi
        first[j]=$s
        relabel[s]=$j
    done
    for ((j = 0; j < n; j++)); do
        row[j]=${relabel[(first[j] + r % n) % n]}
    done
    if ((n % 2 == 1 && (r / n) % 2 == 1)); then
        for ((j = n - 1; j >= 0; j--)); do echo "${items[row[j]]}"; done
    else
        for ((j = 0; j < n; j++)); do echo "${items[row[j]]}"; done
    fi
}

# CPU ticks (user + system) used so far by the kswapd threads.
kswapd_ticks() {
    local p t=0 f
    for p in $(pgrep '^kswapd' || true); do
        f=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)
        t=$((t + f))
    done
    echo "$t"
}

# settle: after sync and drop_caches, waits (at most 10 s) until Dirty + Writeback is at most 16 MiB (syncing
# again while it is over) and kswapd has used no CPU for two 50 ms polls. A buffered run fills the page cache and leaves reclaim and
# writeback behind; a run started while they go on shares the disk and a CPU with them and pays for the run
# before it.
settle() {
    local i quiet=0 prev now dirty
    prev=$(kswapd_ticks)
    for ((i = 0; i < 200; i++)); do
        dirty=$(awk '/^(Dirty|Writeback):/ {s += $2} END {print s + 0}' /proc/meminfo)
        if ((dirty <= 16384 && quiet >= 2)); then
            return 0
        fi
        # Too much dirty: write it back now (sync waits for it) rather than wait for the flusher's timer.
        if ((dirty > 16384)); then sync; fi
        sleep 0.05
        now=$(kswapd_ticks)
        if ((now > prev)); then quiet=0; else quiet=$((quiet + 1)); fi
        prev=$now
    done
    echo "settle: writeback ($dirty KiB) or kswapd still busy after 10 s; starting anyway" >&2
}

# Page-cache size now (Cached in /proc/meminfo), KiB.
cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }

# timed TOOL CMD: runs CMD under bash with GNU time and prints "wall_s,user_s,sys_s,cache_growth_kib"; stops the
# script, showing CMD's stderr, if it fails. Needs WORK (where its output and times go).
timed() {
    local tool=$1 cmd=$2 before after t
    before=$(cached_kib)
    /usr/bin/time -f "%e %U %S" -o "$WORK/time.txt" bash -c "$cmd" >/dev/null 2>"$WORK/stderr-$tool.txt" \
        || { echo "$tool failed:" >&2; cat "$WORK/stderr-$tool.txt" >&2; exit 1; }
    t=$(tail -1 "$WORK/time.txt")
    after=$(cached_kib)
    echo "${t// /,},$((after - before))"
}

# syscall_counts LABEL PREP CMD: the system calls CMD makes, from two more runs of it under bash,
# neither timed, each after PREP (a shell function: make the run cold and its output absent).
# - Under `perf stat` with the tracepoints raw_syscalls:sys_enter (every system call of every
#   thread and child), syscalls:sys_enter_futex, syscalls:sys_enter_io_uring_enter and
#   io_uring:io_uring_submit_req (the requests submitted through io_uring, which are no system
#   calls: one io_uring_enter may submit many, a SQPOLL ring none). The counters cost little,
#   so the threads' timing, and with it how often they contend on a lock (futex), stays as in a
#   timed run. Needs tracefs (mount -t tracefs nodev /sys/kernel/tracing).
# - Under `strace -f -c`, for the table of which calls were made (WORK/strace-LABEL.txt).
#   strace stops every thread at every call: that run is several times slower, and its futex
#   count (threads waiting on each other) is inflated; the other calls it counts exactly.
# Prints "syscalls,futex,io_uring_enter,uring_ops,strace_syscalls,strace_futex" ("-" for what
# could not be counted: perf or the tracepoints missing, strace missing). SYSCALLS=0 skips both
# runs. Needs WORK.
syscall_counts() {
    local label=$1 prep=$2 cmd=$3 st=$WORK/strace-$1.txt pf=$WORK/perf-$1.txt
    local calls=- futex=- enters=- ops=- scalls=- sfutex=-
    local events=raw_syscalls:sys_enter,syscalls:sys_enter_futex,syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req
    if [ "${SYSCALLS:-1}" = 0 ]; then
        echo "-,-,-,-,-,-"
        return 0
    fi
    if command -v perf >/dev/null && perf stat -x, -e "$events" -o /dev/null true 2>/dev/null; then
        "$prep"
        perf stat -x, -e "$events" -o "$pf" -- bash -c "$cmd" >/dev/null 2>"$WORK/stderr-perf-$label.txt" \
            || { echo "$label failed under perf stat:" >&2; cat "$WORK/stderr-perf-$label.txt" >&2; exit 1; }
        # perf stat -x, rows: count, unit, event, ...
        calls=$(awk -F, '$3 == "raw_syscalls:sys_enter" {print $1}' "$pf")
        futex=$(awk -F, '$3 == "syscalls:sys_enter_futex" {print $1}' "$pf")
        enters=$(awk -F, '$3 == "syscalls:sys_enter_io_uring_enter" {print $1}' "$pf")
        ops=$(awk -F, '$3 == "io_uring:io_uring_submit_req" {print $1}' "$pf")
    fi
    if command -v strace >/dev/null; then
        "$prep"
        strace -f -c -o "$st" bash -c "$cmd" >/dev/null 2>"$WORK/stderr-strace-$label.txt" \
            || { echo "$label failed under strace:" >&2; cat "$WORK/stderr-strace-$label.txt" >&2; exit 1; }
        # strace -c rows: % time, seconds, usecs/call, calls, [errors], syscall.
        scalls=$(awk '$NF == "total" {print $4}' "$st")
        sfutex=$(awk '$NF == "futex" {print $4}' "$st")
    fi
    echo "${calls:--},${futex:--},${enters:--},${ops:--},${scalls:--},${sfutex:-0}"
}

# fresh_fs MNT: where FRESH_FS names a filesystem (ext4 or xfs), mounts at MNT a new one of that kind,
# made on a loop device (--direct-io=on, so the image file is not cached) over WORK/fresh.img of
# FRESH_GIB GiB (sparse), with at least FRESH_INODES inodes (ext4, whose inode tables are written
# at once, not by a lazy thread during the trial), and unmounts and frees the one made before.
# A trial on a filesystem made for it does not pay for the allocator state earlier trials left:
# on a long-used journal-less ext4 each inode allocation grows slower (docs/BENCHMARKS.md).
# Without FRESH_FS it does nothing.
fresh_fs() {
    local mnt=$1 img=$WORK/fresh.img dev
    [ -n "${FRESH_FS:-}" ] || return 0
    fresh_fs_release "$mnt"
    rm -f "$img"
    truncate -s "${FRESH_GIB:?}G" "$img"
    dev=$(losetup --direct-io=on -f --show "$img")
    case $FRESH_FS in
        ext4) mkfs.ext4 -q -F -N "${FRESH_INODES:?}" -E lazy_itable_init=0,lazy_journal_init=0 "$dev" ;;
        xfs) mkfs.xfs -q -f "$dev" ;;
        *) echo "FRESH_FS=$FRESH_FS: ext4 or xfs" >&2; exit 2 ;;
    esac
    mkdir -p "$mnt"
    mount "$dev" "$mnt"
}

# fresh_fs_release MNT: unmounts the filesystem fresh_fs mounted at MNT and frees its loop device
# and image.
fresh_fs_release() {
    local dev
    if mountpoint -q "$1"; then
        dev=$(findmnt -no SOURCE "$1")
        umount "$1"
        losetup -d "$dev" 2>/dev/null || true
    fi
    rm -f "$WORK/fresh.img"
}

# fresh_fs_size BYTES FILES: sets FRESH_GIB and FRESH_INODES (unless given) for a tree of BYTES in
# FILES files: room for it three times over and 2 GiB, and a fifth more inodes than files.
fresh_fs_size() {
    FRESH_GIB=${FRESH_GIB:-$((($1 * 3 >> 30) + 2))}
    FRESH_INODES=${FRESH_INODES:-$(($2 * 6 / 5 + 20000))}
}
