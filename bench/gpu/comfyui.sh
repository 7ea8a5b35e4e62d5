#!/usr/bin/env bash
# The ComfyUI side on the GPU machine: tests/gpu/check_comfyui_gpu.py (CUDA tensors crossing,
# ComfyUI's memory manager and admission making room for each other) and `isohost bench
# comfyui` (on this machine's quiet cores). ComfyUI's packages that the machine lacks travel as
# wheels in .whl/ (docs/comfyui.md, "On the GPU"); the fixtures and the isohost package built for
# its python3 under .gpu/ (bench/gpu/prepare.sh). Usage: bench/gpu/comfyui.sh BINARY OUT_DIR [bench]
# (bench: the benchmark alone, about 3 minutes; node-ab: bench/gpu/copy_probe.py,
# bench/comfyui/omp_wait_probe.py and bench/gpu/node_ab.py, about 4 minutes; COPY_PROBE=0 leaves
# the first out, OMP_PROBE_POLICIES adds policies to the second, NODE_AB_SETTINGS and
# NODE_AB_ROUNDS set the third's)
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$1 out=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/isohost-site .whl/*.whl || exit 1
export ISOHOST_COMFY_PYTHON=python3 ISOHOST_PACK_PYTHON=python3 ISOHOST_COMFY_DEVICE=gpu \
  ISOHOST_COMFY_PYTHONPATH=/tmp/isohost-site ISOHOST_BUILD_PYTHON=$PWD/.gpu/python \
  ISOHOST_COMFYUI_FIXTURES=$PWD/.gpu/comfyui ISOHOST_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
if [ "${3:-}" = node-ab ]; then
  [ "${COPY_PROBE:-1}" = 0 ] || python3 bench/gpu/copy_probe.py 2>&1 | tee "$out/copy-probe.txt"
  # shellcheck disable=SC2086 # one word per policy
  timeout 90 python3 bench/comfyui/omp_wait_probe.py 400 ${OMP_PROBE_POLICIES:-} 2>&1 |
    tee "$out/omp-wait-probe.txt"
  ISOHOST_COMFY_DEVICE=cpu PYTHONPATH=/tmp/isohost-site timeout 420 python3 bench/gpu/node_ab.py \
    ${NODE_AB_ROUNDS:-3} 300 ${NODE_AB_SETTINGS:-one-thread=ISOHOST_COPY_THREADS=1 default=} 2>&1 | tee "$out/node-ab.txt"
  exit 0
fi
if [ "${3:-}" != bench ]; then
  PYTHONPATH=/tmp/isohost-site timeout 330 python3 tests/gpu/check_comfyui_gpu.py 2>&1 |
    tee "$out/comfyui-checks.txt"
fi
ISOHOST_COMFY_DEVICE=cpu PYTHONPATH=/tmp/isohost-site timeout 150 "$bin" bench comfyui \
  --python python3 --rounds 1000 2>"$out/bench-comfyui.log" | tee "$out/bench-comfyui.txt"
