#!/usr/bin/env bash
# bench/safetensors.sh: cacheless.safetensors against the safetensors package (mmap and pread),
# fastsafetensors, runai-model-streamer, transformers' from_pretrained and fio's best direct read;
# numpy and torch CPU targets, cold and warm loads, saves, sharded checkpoints. See
# bench/safetensors_bench.py for what is measured and how; arguments are passed to it:
#   bench/safetensors.sh                                   # everything: 4 GiB files, 8 x 1 GiB shards,
#                                                          # a 4 GiB Llama; 5 rotated runs per method
#   bench/safetensors.sh --only torch                      # the torch CPU comparison only
#   bench/safetensors.sh --size 256M --runs 2 --shard-size 32M --model-size 256M --model-shard-size 100MB
#                                                          # a quick check that everything runs
# Python: $PYTHON when set (it must have the packages below), else the virtualenv target/bench-venv,
# created here when missing and kept apart from the test virtualenv (target/python-venv): the
# peers' pinned versions, torch among them, and cacheless (the tree's build, as `maturin develop`
# leaves it in bindings/python/py_src when scripts/test has built it; else pip builds
# ./bindings/python). fio comes from apt when missing (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
PINS=(numpy ml_dtypes safetensors==0.8.0 torch==2.15.0 transformers==5.24.0 fastsafetensors==0.5.0 runai-model-streamer==0.17.0)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  VENV=target/bench-venv
  if [ ! -x "$VENV/bin/python" ]; then
    echo "bench/safetensors.sh: creating $VENV" >&2
    python3 -m venv "$VENV"
  fi
  PY=$VENV/bin/python
  # Install only what is missing or at another version (no index access when all is in place).
  if ! "$PY" - "${PINS[@]}" <<'EOF'
import importlib.metadata as md, sys
for pin in sys.argv[1:]:
    name, _, want = pin.partition("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if want and have != want:
        sys.exit(1)
EOF
  then
    echo "bench/safetensors.sh: installing ${PINS[*]} into $VENV" >&2
    "$PY" -m pip install -q "${PINS[@]}"
  fi
  if ! "$PY" -c "import cacheless" 2>/dev/null; then
    if ls bindings/python/py_src/cacheless/_native*.so >/dev/null 2>&1; then
      # The native module scripts/test built into the source tree: point the venv at it, as
      # `maturin develop` does, so the benchmark measures this tree without another build.
      SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      echo "$PWD/bindings/python/py_src" >"$SITE/cacheless.pth"
    else
      "$PY" -m pip install -q ./bindings/python
    fi
  fi
fi
if ! command -v fio >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q fio >/dev/null || echo "bench/safetensors.sh: apt-get install fio failed" >&2
  fi
  command -v fio >/dev/null || echo "bench/safetensors.sh: fio not found (apt install fio): the device-limit rows will be missing" >&2
fi
exec "$PY" bench/safetensors_bench.py "$@"
