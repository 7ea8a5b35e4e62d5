#!/usr/bin/env bash
# Hibernation on the GPU machine: tests/gpu/check_hibernate_gpu.py against nvidia-smi, the
# footprint with its hibernated and woken stages, and `isohost bench hibernate`.
#   bench/gpu/hibernate.sh BINARY OUT_DIR
# BINARY is a stripped isohost with its python/ beside it (bench/gpu/prepare.sh makes .gpu/).
set -uo pipefail
bin=$(realpath "$1")
out=$(realpath -m "${2:-bench/results/gpu}")
mkdir -p "$out"
cd "$(dirname "$0")/../.."
{
  echo "# machine"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
} 2>&1 | tee "$out/hibernate-machine.txt"
timeout 420 python3 tests/gpu/check_hibernate_gpu.py "$bin" 2>&1 | tee "$out/hibernate-checks.txt"
timeout 120 "$bin" footprint --stages bare,torch,cuda,tensor,hibernated,woken,release 2>&1 \
  | tee "$out/footprint-hibernate.txt"
timeout 400 "$bin" bench hibernate --rounds 1200 2>&1 | tee "$out/bench-hibernate.txt"
