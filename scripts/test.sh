#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs every test:
# C++ through CTest, then the Python package through pytest. GPU tests (CTest
# label `gpu`, pytest marker `gpu`) skip themselves where no CUDA device is
# present; this script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test: no CUDA device on this machine: GPU tests (label gpu) will be skipped"
fi
ctest --test-dir build --output-on-failure -j"$(nproc)"
# The Python package, built against .venv's torch, and its tests (marker gpu
# skips itself without CUDA).
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-deps .
.venv/bin/python -m pytest tests/python
