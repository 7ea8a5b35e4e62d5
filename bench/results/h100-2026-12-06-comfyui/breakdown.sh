#!/usr/bin/env bash
# On the GPU machine: cpu-2026-12-05-node-breakdown's stamps and scripts, run there (hops from a
# plain Python host, then where each node's time goes in a real ComfyUI), under three OpenMP
# wait policies: libgomp's default in every process ("spin": OMP_WAIT_POLICY set empty, which
# libgomp reports invalid and ignores, and which keeps the adapter from setting its own),
# the adapter's default (PASSIVE in the workers only) and PASSIVE everywhere; then bench comfyui
# under the first two. Applies stamps.patch to the device's copy of the tree only.
# Usage: OUT=$OUT bench/results/h100-2026-12-06-comfyui/breakdown.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
here=bench/results/cpu-2026-12-05-node-breakdown
out=${OUT:?}
bin=.gpu/isohost
mkdir -p "$out/bench-spin" "$out/bench-workers-passive"
bench/gpu/comfyui.sh "$bin" "$out/bench-workers-passive" bench >/dev/null
OMP_WAIT_POLICY= bench/gpu/comfyui.sh "$bin" "$out/bench-spin" bench >/dev/null
patch -p1 -s < $here/stamps.patch || exit 1
cp -r python/isohost_worker python/isohost_comfy_worker .gpu/python/
cp python/isohost/__init__.py .gpu/python/isohost/
mkdir -p build && ln -sfn "$PWD/.gpu/python" build/python
sed -i "s|/usr/bin/python3|$(command -v python3)|" $here/hops.py
export ISOHOST_COMFY_PYTHON=python3 ISOHOST_PACK_PYTHON=python3 ISOHOST_COMFY_DEVICE=cpu \
  ISOHOST_COMFY_PYTHONPATH=/tmp/isohost-site ISOHOST_BUILD_PYTHON=$PWD/.gpu/python \
  ISOHOST_COMFYUI_FIXTURES=$PWD/.gpu/comfyui ISOHOST_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
run() {  # NAME [VAR=VALUE...]
  local name=$1; shift
  echo "## $name"
  for mode in none spin sleep; do env "$@" timeout 60 python3 $here/hops.py $mode 2>/dev/null; done
  env "$@" PYTHONPATH=/tmp/isohost-site timeout 200 python3 $here/breakdown.py 40 \
    2>"$out/breakdown-$name.log"
}
{
  run spin OMP_WAIT_POLICY=
  run workers-passive
  run all-passive OMP_WAIT_POLICY=PASSIVE
} | tee "$out/breakdown.txt"
cat "$out"/bench-*/bench-comfyui.txt
