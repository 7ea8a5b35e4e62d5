#!/usr/bin/env bash
# Everything GPU-side in one run on the GPU machine, each part bounded so one that hangs cannot
# take the others' results with it: the footprint, admission against nvidia-smi, the zygote's
# figures, and the hibernation checks. Expects the stripped binary and the worker runtime under
# .gpu/ (bench/gpu/prepare.sh makes them) and writes everything under $OUT (or
# bench/results/gpu when run by hand). `bench/gpu/run.sh comfyui` runs only the ComfyUI checks
# and bench comfyui (bench/gpu/comfyui.sh, about 8 minutes at worst; carry .whl too, made by
# bench/gpu/comfyui_wheels.sh), `comfyui-bench` bench comfyui alone (3 minutes), `node-ab` an
# isolated node's copies on one thread and on several (4 minutes), `sleep` only
# sleep's checks and benchmarks (bench/gpu/sleep.sh, about 8 minutes), so that each fits in one
# run; `all` runs everything, the longer benchmarks too (bench rtt, bench start, bench
# hibernate).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${OUT:-bench/results/gpu}")
mkdir -p "$out"
bin=.gpu/isohost
{
  echo "# machine"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  nproc; uname -r; free -g | head -2
  lscpu | grep -E '^(Model name|Model|L2 cache|L3 cache):'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
if [ "${1:-}" != sleep ] && [ "${1:-}" != comfyui ] && [ "${1:-}" != comfyui-bench ] &&
  [ "${1:-}" != node-ab ]; then
  timeout 60 $bin footprint | tee "$out/footprint.txt"
  timeout 200 python3 tests/gpu/check_admission_gpu.py "$bin" 2>&1 | tee "$out/admission-checks.txt"
  timeout 200 bench/gpu/zygote.sh "$bin" "$out"
  timeout 150 python3 tests/gpu/check_hibernate_gpu.py "$(realpath $bin)" 2>&1 | tee "$out/hibernate-checks.txt"
fi
if [ "${1:-}" = comfyui ] || [ "${1:-}" = all ]; then
  bench/gpu/comfyui.sh "$bin" "$out"
elif [ "${1:-}" = comfyui-bench ]; then
  bench/gpu/comfyui.sh "$bin" "$out" bench
elif [ "${1:-}" = node-ab ]; then
  bench/gpu/comfyui.sh "$bin" "$out" node-ab
fi
if [ "${1:-}" = all ]; then
  $bin bench rtt | tee "$out/bench-rtt.txt"
  $bin bench start --rounds 500 | tee "$out/bench-start.txt"
  bench/gpu/hibernate.sh "$bin" "$out"
fi
if [ "${1:-}" = sleep ] || [ "${1:-}" = all ]; then
  bench/gpu/sleep.sh "$bin" "$out"
fi
# The device tool brings back at most 8 files from $OUT: hand it one archive instead.
if [ -n "${OUT:-}" ]; then
  tar -C "$out" -cf "$out.tar" . && rm -rf "${out:?}"/* && mv "$out.tar" "$out/results.tar"
fi
