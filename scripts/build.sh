#!/usr/bin/env bash
# Configures and builds spattn (Release) into build/. CUDA targets are built
# when nvcc is found. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
