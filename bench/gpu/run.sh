#!/usr/bin/env bash
# Everything GPU-side in one run on the GPU machine: the footprint tables (lazy and eager, and
# four workers with contexts), the GPU checks against nvidia-smi, and the benchmarks.
# Expects the stripped binary and the worker runtime under .gpu/ (bench/gpu/prepare.sh makes
# them) and writes everything under $OUT (or bench/results/gpu when run by hand).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench/results/gpu}
mkdir -p "$out"
bin=.gpu/isohost
{
  echo "# machine"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  nproc; uname -r
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
$bin footprint --module-loading both --json > "$out/footprint.json"
$bin footprint --module-loading both --svg "$out/footprint.svg" | tee "$out/footprint.txt"
$bin footprint --stages bare,torch,cuda --workers 4 | tee "$out/footprint-workers4.txt"
python3 tests/gpu/check_footprint_gpu.py "$bin" "$out/footprint.json" | tee "$out/gpu-checks.txt"
$bin bench rtt | tee "$out/bench-rtt.txt"
$bin bench start --rounds 500 | tee "$out/bench-start.txt"
