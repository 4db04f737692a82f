#!/usr/bin/env bash
# The real-model demo (docs/demo.md): SmolLM2-135M on spattn, generating and
# scored on three books. Sets up .venv (scripts/setup.sh: requirements.txt pins
# transformers, gguf and accelerate), installs the spattn package into it, then
# runs python -m spattn.integrations.smollm, which fetches the model and texts
# into its cache ($SPATTN_DEMO_CACHE, default ~/.cache/spattn/demo) and writes
# bench/results/<cpu|cuda>-<machine>/demo.json and PNGs. Runs on CUDA when
# PyTorch sees a GPU, else on CPU; arguments go to the demo (--help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-deps .
exec .venv/bin/python -m spattn.integrations.smollm "$@"
