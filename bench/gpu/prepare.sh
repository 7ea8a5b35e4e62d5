#!/usr/bin/env bash
# Puts a stripped build/isohost and the worker runtime under .gpu/ (ignored by git) so that
# they travel to the GPU machine with the working tree (carry: [".gpu"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu && mkdir -p .gpu
strip -o .gpu/isohost build/isohost
# The worker runtime and the ComfyUI adapter's worker side. The Python host package only as
# built for the GPU machine's python3 (3.12), by bench/gpu/comfyui_wheels.sh (build-py312).
mkdir -p .gpu/python && cp -r build/python/isohost_worker build/python/isohost_comfy_worker .gpu/python/
cp build/python/libisohost_copy.so .gpu/python/  # their copy threads (no Python ABI)
if [ -d build-py312/python/isohost ]; then
  cp -r build-py312/python/isohost .gpu/python/
  strip --strip-unneeded .gpu/python/isohost/_isohost.*.so
fi
# The ComfyUI fixtures (../shared does not travel).
mkdir -p .gpu/comfyui/packs
cp ../shared/comfyui/ComfyUI-0.3.64.tar.gz .gpu/comfyui/
cp ../shared/comfyui/packs/ComfyUI-post-processing-nodes.tar.gz .gpu/comfyui/packs/
ldd .gpu/isohost .gpu/python/libisohost_copy.so
