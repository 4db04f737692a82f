#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs every test
# (C++ through CTest). GPU tests (label `gpu`) skip themselves where no CUDA
# device is present; this script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test: no CUDA device on this machine: GPU tests (label gpu) will be skipped"
fi
ctest --test-dir build --output-on-failure -j"$(nproc)"
