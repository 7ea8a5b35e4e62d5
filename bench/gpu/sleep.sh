#!/usr/bin/env bash
# Sleep on the GPU machine (issue 14): tests/gpu/check_sleep_gpu.py against nvidia-smi,
# `isohost bench sleep`, `isohost bench switch`, and the footprint with its asleep and woken
# stages where the footprint has them. Each part bounded (8 minutes in all at worst: 180 + 120 +
# 140 + 40 s), its output tee'd into OUT_DIR.
#   bench/gpu/sleep.sh BINARY OUT_DIR
# BINARY is a stripped isohost with its python/ beside it (bench/gpu/prepare.sh makes .gpu/).
set -uo pipefail
bin=$(realpath "$1")
out=$(realpath -m "${2:-bench/results/gpu}")
mkdir -p "$out"
cd "$(dirname "$0")/../.."
{
  echo "# machine"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  free -g | head -2
} 2>&1 | tee "$out/sleep-machine.txt"
timeout 180 python3 tests/gpu/check_sleep_gpu.py "$bin" 2>&1 | tee "$out/sleep-checks.txt"
timeout 120 "$bin" bench sleep 2>&1 | tee "$out/bench-sleep.txt"
# The host's log at info: each admission's choice (sleep, hibernate, reap) and its arithmetic.
timeout 220 "$bin" --log-level info bench switch 2>"$out/bench-switch.log" | tee "$out/bench-switch.txt"
grep -E "^(isohost|bench switch):" "$out/bench-switch.log"
if "$bin" footprint --help 2>/dev/null | grep -q asleep; then
  timeout 40 "$bin" footprint --stages bare,torch,cuda,tensor,asleep,woken 2>&1 \
    | tee "$out/footprint-sleep.txt"
else
  echo "footprint has no asleep stage: footprint-sleep.txt not made" | tee "$out/footprint-sleep.txt"
fi
