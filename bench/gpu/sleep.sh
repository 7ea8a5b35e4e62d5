#!/usr/bin/env bash
# Sleep on the GPU machine (issue 14): tests/gpu/check_sleep_gpu.py against nvidia-smi,
# `isohost bench sleep`, `isohost bench switch`, and the footprint with its asleep and woken
# stages. Each part bounded (about 10 minutes in all at worst: 180 + 180 +
# 220 + 40 s), its output tee'd into OUT_DIR.
#   bench/gpu/sleep.sh BINARY OUT_DIR
# BINARY is a stripped isohost with its python/ beside it (bench/gpu/prepare.sh makes .gpu/).
set -uo pipefail
bin=$(realpath "$1")
out=$(realpath -m "${2:-bench/results/gpu}")
mkdir -p "$out"
cd "$(dirname "$0")/../.."
# run.sh wrote the machine's description; what the card holds before the checks goes beside it.
nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>&1 | tee "$out/sleep-card-before.txt"
timeout 180 python3 tests/gpu/check_sleep_gpu.py "$bin" 2>&1 | tee "$out/sleep-checks.txt"
timeout 180 "$bin" bench sleep 2>&1 | tee "$out/bench-sleep.txt"
# The host's log at info: each admission's choice (sleep, hibernate, reap) and its arithmetic.
timeout 220 "$bin" --log-level info bench switch 2>"$out/bench-switch.log" | tee "$out/bench-switch.txt"
grep -E "^(isohost|bench switch):" "$out/bench-switch.log"
timeout 40 "$bin" footprint --stages bare,torch,cuda,tensor,asleep,woken 2>&1 \
  | tee "$out/footprint-sleep.txt"
