#!/usr/bin/env bash
# What one NVIDIA GPU proves about cluster_tests' NCCL path, in one run of at most 8 minutes
# (issue 17). Without a GPU it prints a 'no GPU' line and exits 0.
#
#   bench/gpu_check.sh [--wheels DIR] [--out DIR] [--budget S] [--sizes LIST] [--skip-train]
#
# --wheels DIR: wheels to install first (pip --no-index --no-deps, into DIR/../gpu-check-site,
# on PYTHONPATH), for what the GPU machine lacks: deepspeed and its pure-Python dependencies,
# paramiko... Its own torch (CUDA) is used as it is. How to build DIR: bench/README.md.
# The rest goes to bench/gpu_check.py (see its docstring); PYTHON picks the interpreter.
set -u
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
WHEELS=""
BUDGET=420
PASS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) [ $# -ge 2 ] || { echo "gpu_check: --wheels needs a directory" >&2; exit 2; }
              WHEELS=$2; shift 2 ;;
    --budget) [ $# -ge 2 ] || { echo "gpu_check: --budget needs seconds" >&2; exit 2; }
              BUDGET=$2; PASS+=("--budget" "$2"); shift 2 ;;
    --out|--sizes|--iters|--warmup)
              [ $# -ge 2 ] || { echo "gpu_check: $1 needs a value" >&2; exit 2; }
              PASS+=("$1" "$2"); shift 2 ;;
    --skip-train) PASS+=("$1"); shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$BUDGET" in
  ''|*[!0-9.]*) echo "gpu_check: --budget must be a number of seconds" >&2; exit 2 ;;
esac
if [ -n "$WHEELS" ] && [ ! -d "$WHEELS" ]; then
  echo "gpu_check: --wheels $WHEELS is not a directory" >&2; exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no GPU (nvidia-smi is not on PATH): skipped"; exit 0
fi
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no GPU (nvidia-smi -L lists none): skipped"; exit 0
fi
if [ -n "$WHEELS" ]; then
  SITE="$(cd "$WHEELS/.." && pwd)/gpu-check-site"
  shopt -s nullglob
  whls=("$WHEELS"/*.whl)
  if [ ${#whls[@]} -eq 0 ]; then echo "gpu_check: no .whl in $WHEELS" >&2; exit 2; fi
  "$PY" -m pip install -q --no-index --no-deps --disable-pip-version-check --target "$SITE" \
    "${whls[@]}" || { echo "gpu_check: installing the wheels failed" >&2; exit 2; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$SITE/bin:$PATH"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the whole run, killed 30 s past its budget (the script itself stops its steps in time)
LIMIT=$(( $(printf '%.0f' "$BUDGET") + 30 ))
exec timeout -k 5 "$LIMIT" "$PY" bench/gpu_check.py ${PASS[@]+"${PASS[@]}"}
