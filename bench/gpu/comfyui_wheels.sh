#!/usr/bin/env bash
# What bench/gpu/comfyui.sh needs beyond bench/gpu/prepare.sh, made here (the GPU machine has no
# network): the isohost package built for its python3 (3.12) in build-py312, and in .whl/ the
# wheels of ComfyUI's packages that its image lacks (the device tool's KINDS.md lists what it
# has), at the versions tests/comfyui/requirements-comfyui.txt pins. Only what ComfyUI 0.3.64
# cannot start without: not the frontend (the test servers get --front-end-root), nor what it
# only misses in its log (the embedded docs, the workflow templates, its database: alembic and
# SQLAlchemy; kornia, for two nodes of comfy_extras), so that everything travels in one call's
# 64 MiB (av alone is 34 MiB). Checks that each wheel's own requirements are on that image or
# among the wheels.
# Usage: bench/gpu/comfyui_wheels.sh [PYTHON3.12]   (default: pyenv's 3.12, else python3.12)
set -euo pipefail
cd "$(dirname "$0")/../.."
python312=${1:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
python312=${python312:-python3.12}
"$python312" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' ||
  { echo "$python312 is not a Python 3.12" >&2; exit 1; }

cmake -S . -B build-py312 -G Ninja -DISOHOST_PYTHON="$python312" >/dev/null
cmake --build build-py312 --target _isohost

# Missing from the GPU machine's image, with what they need that it lacks too.
missing=(av pydantic pydantic_core pydantic-settings python-dotenv annotated-types
  typing-inspection spandrel torchsde trampoline websocket-client)
pins=tests/comfyui/requirements-comfyui.txt
wanted=()
for name in "${missing[@]}"; do
  pin=$(grep -i -m1 "^${name//[-_]/[-_]}==" "$pins") ||
    { echo "no pin for $name in $pins" >&2; exit 1; }
  wanted+=("$pin")
done
rm -rf .whl && mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl "${wanted[@]}" 2> >(grep -v "is ignored" >&2)
python3 bench/gpu/wheel_closure.py .whl
du -sh .whl
