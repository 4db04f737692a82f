#!/usr/bin/env bash
# tools/make_pattern_pictures.sh - regenerates the mask pictures of
# docs/patterns.md and docs/dynamic.md (docs/img/*.png) with `spattn mask`.
#
# usage: tools/make_pattern_pictures.sh [SPATTN_BINARY]   (default build/tools/spattn)
set -euo pipefail
cd "$(dirname "$0")/.."
spattn=${1:-build/tools/spattn}
out=docs/img

picture() {  # picture NAME spattn-mask-flags...
  local name=$1
  shift
  "$spattn" mask "$@" --size 512 --out "$out/$name.png" >/dev/null
  echo "$out/$name.png: spattn mask $* --size 512"
}

picture dense            --pattern dense --seq 256 --block 32
picture causal           --pattern causal --seq 256 --block 32
picture block_diagonal   --pattern block-diagonal --diagonal-block 40 --seq 256 --block 16
picture sliding_window   --pattern sliding-window --window 40 --seq 256 --block 16
picture sliding_window_2 --pattern sliding-window --window-left 24 --window-right 8 --seq 256 --block 16
picture streaming        --pattern streaming --sink 16 --window 64 --seq 256 --block 16
picture strided          --pattern strided --stride 32 --seq 256 --block 16
picture fixed            --pattern fixed --stride 32 --summary 4 --seq 256 --block 16
picture dilated_h0       --pattern dilated --segments 16,32 --rates 2,4 --seq 64 --block 8 --heads 4 --head 0
picture dilated_h1       --pattern dilated --segments 16,32 --rates 2,4 --seq 64 --block 8 --heads 4 --head 1
picture bigbird          --pattern bigbird --seq 512 --block 32
picture longformer       --pattern longformer --window 32 --global-tokens 0,100 --seq 256 --block 16
picture custom           --pattern custom --mask-file docs/masks/example.txt --seq 256 --block 32
picture random           --pattern random --density 0.1 --seed 1 --seq 512 --block 32
picture dilated_window   --pattern dilated+sliding-window --segments 64 --rates 4 --window 8 --causal --seq 128 --block 16
picture heads_mix_h0     --heads-pattern streaming,dilated --sink 4 --window 16 --segments 64 --rates 2 --heads 2 --seq 128 --block 16 --head 0
picture heads_mix_h1     --heads-pattern streaming,dilated --sink 4 --window 16 --segments 64 --rates 2 --heads 2 --seq 128 --block 16 --head 1
picture causal_rect      --pattern causal --seq 96 --seq-k 256 --block 16
picture topk_tau90          --pattern topk --tau 0.9 --causal --seq 8192 --block 128 --heads 2
picture topk_tau90_stride8  --pattern topk --tau 0.9 --stride 8 --causal --seq 8192 --block 128 --heads 2
picture topk_small          --pattern topk --tau 0.9 --causal --seq 2048 --block 64 --heads 2
