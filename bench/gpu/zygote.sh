#!/usr/bin/env bash
# The zygote's figures on the GPU machine: bench pss without and with a CUDA context opened in
# each worker after it starts (after the fork for pss.zygote_cuda), and bench start with
# start.torch_zygote. Usage: bench/gpu/zygote.sh .gpu/isohost "$OUT"   (bench/gpu/prepare.sh
# puts the stripped binary and the worker runtime under .gpu/). Logs go beside the figures, so
# a refused zygote (CUDA initialised, threads left after preloading) says why.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-.gpu/isohost}
out=${2:-bench/results/gpu}
mkdir -p "$out"
{
  echo "# zygote run"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import os, sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"threads after import torch:", len(os.listdir("/proc/self/task")), "cuda initialised:", torch.cuda.is_initialized())'
  nproc
} > "$out/zygote-machine.txt" 2>&1
cat "$out/zygote-machine.txt"
{
  echo "# bench pss (no CUDA context)"
  $bin bench pss 2>>"$out/bench-pss-gpu.log"
  echo
  echo "# bench pss --cuda (each worker opens a context after it starts; the zygote never does)"
  $bin bench pss --cuda 2>>"$out/bench-pss-gpu.log"
} | tee "$out/bench-pss-gpu.txt"
$bin bench start --rounds 500 2>"$out/bench-start-zygote-gpu.log" | tee "$out/bench-start-zygote-gpu.txt"
