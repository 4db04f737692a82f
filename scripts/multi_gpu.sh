#!/usr/bin/env bash
# scripts/multi_gpu.sh - context parallelism on one machine with several GPUs,
# in one go: installs the Python package built with CUDA (where it is not
# importable already), checks spattn.distributed over NCCL against one call at
# 2, 4 and 8 ranks (tests/python/cp_nccl_check.py) and the C++ library's
# spattn::dist over its own NCCL transport the same way (the example
# examples/cpp/context_parallel.cpp built against the installed C++ package,
# launched with torchrun --no-python), then times it next to an
# all-gather of K/V and PyTorch's context-parallel SDPA (bench/cp_scaling.py)
# at 1, 2, 4 and 8 GPUs: strong scaling (the same lengths at every GPU count)
# and weak scaling (the length proportional to the GPU count). World sizes
# above the number of GPUs `nvidia-smi -L` lists are left out.
#
#   scripts/multi_gpu.sh [install] [check] [cpp] [strong] [weak]   (default: all)
#
# Results go to $OUT (default bench/results/cuda-<gpu>/):
# cp_scaling_strong_p<P>.json, cp_scaling_weak_p<P>.json and the logs packed in
# multi_gpu_logs.tgz; the tables are printed as each run ends.
#
# Environment: PYTHON (default python3), WORLDS (GPU counts of the benchmark,
# default "1 2 4 8"), CHECK_WORLDS (of the check, default "2 4 8"),
# STRONG_LENGTHS (default 262144; 262144,1048576 adds a length whose causal
# forward + backward takes tens of seconds an iteration on one GPU),
# WEAK_LENGTH (sequence length per GPU, default 131072), PATTERNS (default
# causal,window,streaming,dilated,random), PASSES (default fwd,fwdbwd), HEADS,
# KV_HEADS, HEAD_DIM (default 16, 16, 128), WARMUP, ITERS (default 2, 5),
# TORCH_ROTATE (torch CP's K/V exchange, alltoall or allgather, default
# alltoall), CUDA_ARCHS and HEAD_DIMS of the package build (default 90 and
# 128; the C++ build of the cpp stage, in build-multi-gpu/, takes head dim 64), WHEELS (folder of the Python build backend's wheels for machines
# without PyPI, default .whl).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and its peers, below).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHON=${PYTHON:-python3}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -lt 1 ]; then
  echo "multi_gpu.sh: nvidia-smi lists no GPU" >&2
  exit 1
fi
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
slug=$(echo "$card" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')
OUT=${OUT:-$PWD/bench/results/cuda-$slug}
LOG=$OUT/multi_gpu_logs
mkdir -p "$LOG"
trap 'tar -czf "$OUT/multi_gpu_logs.tgz" -C "$OUT" multi_gpu_logs && rm -rf "$LOG"' EXIT
default_stages=(install check cpp strong weak)
# shellcheck source=scripts/stages.sh
source scripts/stages.sh "$@"
fits() { [ "$1" -le "$gpus" ]; }  # a world size this machine has GPUs for
launch() {  # launch P SCRIPT ARGS...: one process per GPU
  local procs=$1; shift
  "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$procs" "$@"
}

echo "$gpus x $card"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$LOG/cards.txt"
nvidia-smi topo -m > "$LOG/topology.txt" 2>&1

if want install; then
  if ! "$PYTHON" -c "import spattn, sys; sys.exit(0 if spattn.built_with_cuda() else 1)" 2>/dev/null; then
    if ! "$PYTHON" -c "import scikit_build_core" 2>/dev/null; then
      "$PYTHON" -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/scikit_build_core-*.whl \
        "${WHEELS:-.whl}"/pathspec-*.whl > "$LOG/wheels.log" 2>&1
    fi
    CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90} -DSPATTN_CUDA_HEAD_DIMS=${HEAD_DIMS:-128}" \
      CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) SPATTN_CUDA=ON \
      step pip_install pip_install.log "$PYTHON" -m pip install --no-build-isolation --no-deps . || exit 1
  fi
fi

if want check; then
  for p in ${CHECK_WORLDS:-2 4 8}; do
    fits "$p" || continue
    step "NCCL check, $p GPUs" "check_p$p.log" launch "$p" tests/python/cp_nccl_check.py
    grep -E "^(PASS|FAIL)|cases passed|^    " "$LOG/check_p$p.log"
  done
fi

if want cpp; then
  build=build-multi-gpu
  step "C++ package with NCCL" cpp_build.log bash -c "
    cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90} \
      -DSPATTN_CUDA_HEAD_DIMS=64 -DSPATTN_NCCL=ON -DSPATTN_BUILD_TESTS=OFF -DSPATTN_BUILD_TOOLS=OFF &&
    cmake --build $build -j$(nproc) && cmake --install $build --prefix $build/prefix &&
    cmake -S examples/cpp -B $build/examples -DCMAKE_PREFIX_PATH=$PWD/$build/prefix &&
    cmake --build $build/examples -j$(nproc) --target context_parallel"
  for p in ${CHECK_WORLDS:-2 4 8}; do
    fits "$p" || continue
    step "C++ NCCL check, $p GPUs" "cpp_check_p$p.log" launch "$p" --no-python "$build/examples/context_parallel" --nccl
    grep -E "rank|context_parallel" "$LOG/cpp_check_p$p.log"
  done
fi

bench() {  # bench KIND P LENGTHS
  local kind=$1 p=$2 lengths=$3
  PYTHONUNBUFFERED=1 step "$kind scaling, $p GPUs, L=$lengths" "${kind}_p$p.log" launch "$p" bench/cp_scaling.py \
    --patterns "${PATTERNS:-causal,window,streaming,dilated,random}" --lengths "$lengths" \
    --passes "${PASSES:-fwd,fwdbwd}" --heads "${HEADS:-16}" --kv-heads "${KV_HEADS:-16}" \
    --head-dim "${HEAD_DIM:-128}" --warmup "${WARMUP:-2}" --iters "${ITERS:-5}" \
    --torch-rotate "${TORCH_ROTATE:-alltoall}" --out "$OUT/cp_scaling_${kind}_p$p.json"
  sed -n '/^|/p' "$LOG/${kind}_p$p.log"
}
if want strong; then
  for p in ${WORLDS:-1 2 4 8}; do
    fits "$p" && bench strong "$p" "${STRONG_LENGTHS:-262144}"
  done
fi
if want weak; then
  for p in ${WORLDS:-1 2 4 8}; do
    fits "$p" && bench weak "$p" $(( ${WEAK_LENGTH:-131072} * p ))
  done
fi
exit $status
