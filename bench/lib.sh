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
