#!/usr/bin/env bash
# Puts a stripped build/isohost and the worker runtime under .gpu/ (ignored by git) so that
# they travel to the GPU machine with the working tree (carry: [".gpu"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu && mkdir -p .gpu
strip -o .gpu/isohost build/isohost
# The worker runtime only: the Python host extension is built for this machine's python3.
mkdir -p .gpu/python && cp -r build/python/isohost_worker .gpu/python/
ldd .gpu/isohost
