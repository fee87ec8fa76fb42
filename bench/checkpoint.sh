#!/usr/bin/env bash
# bench/checkpoint.sh: cacheless.checkpoint's Writer and Reader against torch.distributed.checkpoint's
# FileSystemWriter (thread_count 1 and 4, sync_files on; torch.save and safetensors formats),
# FileSystemReader and, with --s3, FsspecWriter/FsspecReader through s3fs to SeaweedFS; fio's best
# direct write and read of the same bytes as the device's limit. See bench/checkpoint_bench.py;
# arguments are passed to it:
#   bench/checkpoint.sh                               # 4 GiB over 2 ranks, 5 rotated cold runs
#   bench/checkpoint.sh --s3                          # and SeaweedFS (started here, stopped at the end)
#   bench/checkpoint.sh --size 512M --runs 1          # a quick check that everything runs
# Needs root (drop_caches). Python: $PYTHON, else target/python-venv (scripts/test makes it, with
# torch and cacheless); s3fs is installed into it when --s3 is given and it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-target/python-venv/bin/python}
[ -x "$PY" ] || { echo "bench/checkpoint.sh: no $PY (run scripts/test, or set PYTHON)" >&2; exit 2; }
"$PY" -c 'import cacheless.checkpoint' || { echo "bench/checkpoint.sh: $PY cannot import cacheless.checkpoint" >&2; exit 2; }
if ! command -v fio >/dev/null && [ "$(id -u)" = 0 ]; then apt-get install -y -q fio >/dev/null || true; fi
if [[ " $* " == *" --s3 "* ]]; then
  "$PY" -c 'import s3fs' 2>/dev/null || "$PY" -m pip install -q s3fs
  servers=$(mktemp -d "${TMPDIR:-/tmp}/cacheless-bench-servers.XXXXXX")
  trap 'scripts/test-servers stop "$servers"; rm -rf "$servers"' EXIT
  venv=$(dirname "$PY")
  scripts/test-servers start "$servers" "$venv/weed" "$venv/moto_server" >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$servers/env"
  set +a
  export AWS_ENDPOINT_URL=$CACHELESS_TEST_S3 AWS_ACCESS_KEY_ID=$CACHELESS_TEST_S3_KEY AWS_SECRET_ACCESS_KEY=$CACHELESS_TEST_S3_SECRET AWS_REGION=us-east-1
  export CACHELESS_BENCH_BUCKET=$CACHELESS_TEST_S3_BUCKET
fi
"$PY" bench/checkpoint_bench.py "$@"
