#!/usr/bin/env bash
# Build the wheel directory that `bench/gpu_check.sh --wheels DIR` installs on the GPU machine
# (which has its own CUDA torch, numpy and pytest, and no network): deepspeed 0.19.8, built here
# from its sdist into a pure-Python wheel (its CUDA ops are JIT-built there, on first use, which
# is part of what T1 checks), and deepspeed's other dependencies, as wheels for the GPU
# machine's Python version.
#
#   bench/gpu_wheels.sh [--python-version 3.11] [OUTDIR]      (OUTDIR: bench/wheels)
#
# Needs the package registry (pip download) on this machine; a few MB in all.
set -eu
cd "$(dirname "$0")/.."
PYV=""
OUT=bench/wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYV=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) OUT=$1; shift ;;
  esac
done
PIP=${PIP:-.venv/bin/pip}
mkdir -p "$OUT"
# pure-Python: any Python 3
"$PIP" download -q --no-deps -d "$OUT" hjson py-cpuinfo einops tqdm packaging annotated-types \
  typing-extensions typing-inspection "pydantic==2.*" nvidia-ml-py
# binary: for the target Python (default: this one)
target=()
if [ -n "$PYV" ]; then
  target=(--only-binary=:all: --python-version "$PYV" --platform manylinux2014_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
fi
"$PIP" download -q --no-deps -d "$OUT" ${target[@]+"${target[@]}"} msgpack psutil ninja \
  "pydantic-core==$("$PIP" download -q --no-deps -d /tmp/ct-gpu-wheels-probe "pydantic==2.*" >/dev/null 2>&1; \
     unzip -p /tmp/ct-gpu-wheels-probe/pydantic-2*.whl 'pydantic-*.dist-info/METADATA' | \
     sed -n 's/^Requires-Dist: pydantic-core==\([0-9.]*\).*/\1/p' | head -1)"
# deepspeed: sdist on PyPI -> a wheel built here (DS_BUILD_OPS unset: no op is prebuilt)
"$PIP" download -q --no-deps --no-binary=deepspeed -d /tmp/ct-gpu-wheels-probe deepspeed==0.19.8
"$PIP" wheel -q --no-deps --no-build-isolation -w "$OUT" /tmp/ct-gpu-wheels-probe/deepspeed-0.19.8.tar.gz
ls -la "$OUT"
du -sh "$OUT"
