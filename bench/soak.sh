#!/usr/bin/env bash
# Soak: copy, extract and load in a loop for a while (default 10 minutes) with random modes,
# backends, sizes and filesystems (ext4, xfs, btrfs, tmpfs images on loop devices with direct
# I/O, and the current disk), checking every output against the input's sha256. Prints each
# failure as it happens, then iterations, bytes moved and failures. Needs root for the loop
# images (without root it soaks the current disk only). Not a CI test: run it by hand.
#
#   bench/soak.sh [SECONDS]          # default 600; SOAK_SEED=N repeats a run's choices
#   CACHELESS=path/to/cacheless bench/soak.sh 60
#
# "load" reads a file back through the Python package (PYTHON, default the test virtualenv
# target/python-venv, else python3, where `import cacheless` works): every other time
# cacheless.read_file hashed, else a safetensors checkpoint of the same bytes saved and loaded
# with cacheless.safetensors, checked against the safetensors package's own load; without the
# package, `cacheless cat` into sha256sum.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-600}
bin=${CACHELESS:-target/release/cacheless}
[ -x "$bin" ] || { echo "soak: $bin not built (cargo build --release)" >&2; exit 2; }
bin=$(realpath "$bin")
RANDOM=${SOAK_SEED:-$$}

work=$(mktemp -d "${TMPDIR:-/var/tmp}/cacheless-soak.XXXXXX")
mounts=()
loops=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" 2>/dev/null || true; done
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Filesystems: name=path.
declare -A fs=([disk]="$work/disk")
mkdir -p "$work/disk"
if [ "$(id -u)" = 0 ]; then
    for kind in ext4 xfs btrfs tmpfs; do
        grep -qw "$kind" /proc/filesystems || modprobe -q "$kind" 2>/dev/null || true
        grep -qw "$kind" /proc/filesystems || { echo "soak: kernel has no $kind, skipped" >&2; continue; }
        m="$work/mnt-$kind"
        mkdir -p "$m"
        if [ "$kind" = tmpfs ]; then
            mount -t tmpfs -o size=256m tmpfs "$m"
        else
            img="$work/$kind.img"
            truncate -s 256M "$img"
            case $kind in
                ext4) mkfs.ext4 -q -F "$img" ;;
                # Under 300 MB mkfs.xfs wants to be run from fstests, which it knows by these.
                xfs) TEST_DIR=$work TEST_DEV=$img QA_CHECK_FS=1 mkfs.xfs -q -f "$img" ;;
                btrfs) mkfs.btrfs -q -f "$img" >/dev/null ;;
            esac
            l=$(losetup --direct-io=on -f --show "$img")
            loops+=("$l")
            mount "$l" "$m"
        fi
        mounts+=("$m")
        fs[$kind]=$m
    done
fi
names=("${!fs[@]}")
modes=(auto direct dontcache writebehind buffered)
backends=(auto uring threads)
sizes=(0 1 4095 4096 4097 65537 1048576 3145735 16777216 50331651)
py=0 st=0
PY=${PYTHON:-target/python-venv/bin/python}
[ -x "$PY" ] || PY=python3
"$PY" -c 'import cacheless' 2>/dev/null && py=1
((py)) && "$PY" -c 'import safetensors.numpy' 2>/dev/null && st=1

pick() { local -n a=$1; echo "${a[RANDOM % ${#a[@]}]}"; }

iterations=0 bytes=0 failures=0 refused=0 st_loads=0
declare -A ops=()
start=$(date +%s)
fail() {
    failures=$((failures + 1))
    echo "FAIL #$iterations $*" >&2
}
# run ARGS...: the command, whose refusal of a forced mode (exit 1, "unavailable") is no failure.
run() {
    local err
    if err=$("$bin" "$@" 2>&1 >/dev/null); then return 0; fi
    if grep -q "unavailable" <<<"$err"; then refused=$((refused + 1)); return 2; fi
    fail "$* :: $err"
    return 1
}

while (($(date +%s) - start < duration)); do
    iterations=$((iterations + 1))
    src_fs=$(pick names) dst_fs=$(pick names) mode=$(pick modes) backend=$(pick backends) size=$(pick sizes)
    case $((RANDOM % 3)) in 0) op=copy ;; 1) op=extract ;; *) op=load ;; esac
    ops[$op]=$((${ops[$op]:-0} + 1))
    dir="${fs[$src_fs]}/it$iterations" out="${fs[$dst_fs]}/out$iterations"
    mkdir -p "$dir" "$out"
    head -c "$size" /dev/urandom >"$dir/f"
    want=$(sha256sum <"$dir/f" | cut -d' ' -f1)
    flags=(--mode "$mode" --backend "$backend")
    case $op in
        copy)
            if run "${flags[@]}" cp "$dir/f" "$out/f"; then
                got=$(sha256sum <"$out/f" | cut -d' ' -f1)
                [ "$got" = "$want" ] || fail "cp $src_fs->$dst_fs $mode $backend $size B: sha256 differs"
                bytes=$((bytes + size))
            fi
            ;;
        extract)
            tar -cf "$dir/t.tar" -C "$dir" f
            if run "${flags[@]}" extract -C "$out" "$dir/t.tar"; then
                got=$(sha256sum <"$out/f" | cut -d' ' -f1)
                [ "$got" = "$want" ] || fail "extract $src_fs->$dst_fs $mode $backend $size B: sha256 differs"
                bytes=$((bytes + size))
            fi
            ;;
        load)
            if ((st)) && ((RANDOM % 2)); then
                # A checkpoint of the file's bytes (as one uint8 tensor and a float32 view of
                # its whole words) saved by cacheless, loaded by cacheless and by safetensors.
                st_loads=$((st_loads + 1))
                got=$("$PY" - "$dir/f" "$mode" "$dir/m.safetensors" <<'PYEOF' 2>&1
import hashlib, sys, numpy as np, cacheless, cacheless.safetensors as cst, safetensors.numpy as ref
src, mode, out = sys.argv[1:4]
raw = np.fromfile(src, dtype=np.uint8)
t = {"bytes": raw, "words": raw[: raw.size // 4 * 4].view(np.float32)}
cst.save_file(t, out, mode=mode)
mine, theirs = cst.load_file(out, mode=mode), ref.load_file(out)
assert set(mine) == set(theirs) == set(t)
for k in t:
    assert mine[k].dtype == theirs[k].dtype and mine[k].tobytes() == theirs[k].tobytes() == t[k].tobytes(), k
print(hashlib.sha256(mine["bytes"].tobytes()).hexdigest())
PYEOF
                ) || { grep -q unavailable <<<"$got" && refused=$((refused + 1)) || fail "load (safetensors) $src_fs $mode: $got"; got=$want; size=0; }
            elif ((py)); then
                got=$("$PY" -c 'import cacheless, hashlib, sys; print(hashlib.sha256(cacheless.read_file(sys.argv[1], mode=sys.argv[2])).hexdigest())' "$dir/f" "$mode" 2>&1) ||
                    { grep -q unavailable <<<"$got" && refused=$((refused + 1)) || fail "load $src_fs $mode: $got"; got=$want; size=0; }
            else
                # A refused forced mode fails the pipeline: the error file says so below.
                got=$("$bin" "${flags[@]}" cat "$dir/f" 2>"$work/err" | sha256sum | cut -d' ' -f1) || true
                if [ -s "$work/err" ]; then
                    if grep -q unavailable "$work/err"; then refused=$((refused + 1)); else fail "cat $src_fs $mode $backend: $(cat "$work/err")"; fi
                    got=$want size=0
                fi
            fi
            [ "$got" = "$want" ] || fail "load $src_fs $mode $backend $size B: sha256 differs"
            bytes=$((bytes + size))
            ;;
    esac
    rm -rf "$dir" "$out"
done

elapsed=$(($(date +%s) - start))
echo "soak: ${elapsed}s on ${names[*]}; iterations $iterations (copy ${ops[copy]:-0}, extract ${ops[extract]:-0}, load ${ops[load]:-0}, of them through safetensors $st_loads);" \
    "bytes checked $bytes ($((bytes >> 20)) MiB); forced modes refused $refused; failures $failures"
((failures == 0))
