#!/usr/bin/env bash
# Sleep's device-to-host side on the GPU machine (issue 14): bench/gpu/sleep_out_probe.py (the
# ways of preparing the host buffer, beside the pinned copy), then `isohost bench sleep` with
# the host buffer faulted in ahead by no thread (the default) and by 4, one archive back.
#   OUT=... bench/gpu/sleep_out.sh      (after bench/gpu/prepare.sh; about 6 minutes at worst)
set -uo pipefail
cd "$(dirname "$0")/../.."
o=$(realpath -m "${OUT:-bench/results/gpu}")/sleep-out
mkdir -p "$o"
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r; } > "$o/machine.txt" 2>&1
timeout 280 python3 bench/gpu/sleep_out_probe.py .gpu/python > "$o/probe.txt" 2>&1
for threads in 0 4; do
  ISOHOST_SLEEP_POPULATE_THREADS=$threads timeout 130 .gpu/isohost bench sleep > "$o/bench-sleep-threads-$threads.txt" 2>&1
done
tail -n 200 "$o"/*.txt
if [ -n "${OUT:-}" ]; then tar -C "$o" -cf "$OUT/sleep-out.tar" . && rm -rf "$o"; fi
