#!/usr/bin/env bash
# The ComfyUI side on the GPU machine: tests/gpu/check_comfyui_gpu.py (CUDA tensors crossing,
# ComfyUI's memory manager and admission making room for each other) and `isohost bench
# comfyui` (on this machine's quiet cores). ComfyUI's packages that the machine lacks travel as
# wheels in .whl/ (docs/comfyui.md, "On the GPU"); the fixtures and the isohost package built for
# its python3 under .gpu/ (bench/gpu/prepare.sh). Usage: bench/gpu/comfyui.sh BINARY OUT_DIR [bench]
# (bench: the benchmark alone, about 3 minutes)
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$1 out=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/isohost-site .whl/*.whl || exit 1
export ISOHOST_COMFY_PYTHON=python3 ISOHOST_PACK_PYTHON=python3 ISOHOST_COMFY_DEVICE=gpu \
  ISOHOST_COMFY_PYTHONPATH=/tmp/isohost-site ISOHOST_BUILD_PYTHON=$PWD/.gpu/python \
  ISOHOST_COMFYUI_FIXTURES=$PWD/.gpu/comfyui ISOHOST_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
if [ "${3:-}" != bench ]; then
  PYTHONPATH=/tmp/isohost-site timeout 330 python3 tests/gpu/check_comfyui_gpu.py 2>&1 |
    tee "$out/comfyui-checks.txt"
fi
ISOHOST_COMFY_DEVICE=cpu PYTHONPATH=/tmp/isohost-site timeout 150 "$bin" bench comfyui \
  --python python3 --rounds 1000 2>"$out/bench-comfyui.log" | tee "$out/bench-comfyui.txt"
