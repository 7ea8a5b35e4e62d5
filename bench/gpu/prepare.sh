#!/usr/bin/env bash
# Puts a stripped build/isohost and the worker runtime under .gpu/ (ignored by git) so that
# they travel to the GPU machine with the working tree (carry: [".gpu"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu && mkdir -p .gpu
strip -o .gpu/isohost build/isohost
cp -r build/python .gpu/python
ldd .gpu/isohost
