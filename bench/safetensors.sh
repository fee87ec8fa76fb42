#!/usr/bin/env bash
# bench/safetensors.sh: cacheless.safetensors against the safetensors package, fastsafetensors and
# fio's best direct read; cold and warm loads, saves, a sharded checkpoint. See
# bench/safetensors_bench.py for what is measured and how; arguments are passed to it:
#   bench/safetensors.sh                       # 4 GiB, 5 rotated runs per method
#   bench/safetensors.sh --size 256M --runs 2  # a quick check that everything runs
# Python: $PYTHON, else the virtualenv scripts/test builds (target/python-venv), else python3;
# it needs the cacheless package, numpy and safetensors (installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x target/python-venv/bin/python ]; then PY=target/python-venv/bin/python; else PY=python3; fi
fi
"$PY" -c "import cacheless" 2>/dev/null || "$PY" -m pip install -q ./bindings/python
"$PY" -c "import safetensors.numpy" 2>/dev/null || "$PY" -m pip install -q safetensors
command -v fio >/dev/null || echo "bench/safetensors.sh: fio not found (apt install fio): the device-limit column will be missing" >&2
exec "$PY" bench/safetensors_bench.py "$@"
