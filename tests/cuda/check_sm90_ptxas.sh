#!/usr/bin/env bash
# tests/cuda/check_sm90_ptxas.sh - compiles every Hopper kernel instantiation
# (src/cuda/instantiations/fwd_sm90_*.cu) as the build does, with ptxas's
# report, and fails where ptxas serialises a kernel's wgmma products: its
# "Potential Performance Loss: wgmma.mma_async instructions are serialized"
# notes (C7510-C7515: too few registers, accumulators touched while a
# product may run, calls, ...), which cost the kernel 10-30% and are
# otherwise only an info line in a build log. Prints each kernel's stack
# frame and spills. Needs nvcc, no GPU (CTest label cpu, which passes the
# build's own flags for the sm90 object library).
#
#   tests/cuda/check_sm90_ptxas.sh NVCC SOURCE_ROOT [NVCC_FLAG...] -- INSTANTIATION.cu...
set -uo pipefail
usage="usage: check_sm90_ptxas.sh NVCC SOURCE_ROOT [NVCC_FLAG...] -- INSTANTIATION.cu..."
[ $# -ge 4 ] || { echo "$usage" >&2; exit 2; }
nvcc=$1 root=$2
shift 2
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  flags+=("$1")
  shift
done
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

compile() {  # compile SOURCE: ptxas's report of one instantiation into $work/NAME.ptxas
  local name
  name=$(basename "$1" .cu)
  "$nvcc" "${flags[@]}" -I"$root/include" -I"$root/src" -Xptxas -v -c "$1" -o "$work/$name.o" \
    > "$work/$name.ptxas" 2>&1 || echo "compile failed" >> "$work/$name.ptxas"
}
jobs=$(nproc 2>/dev/null || echo 2)
for source in "$@"; do
  compile "$source" &
  while [ "$(jobs -r | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait

status=0
for source in "$@"; do
  name=$(basename "$source" .cu)
  report=$work/$name.ptxas
  # One line per kernel: its traits (fwd_sm90_traits.cuh), then its stack frame and spills.
  kernel=""
  while IFS= read -r line; do
    if [[ $line =~ Compiling\ entry\ function.*fwd_sm90_kernel.*Li([0-9]+)ELi([0-9]+)ELi([0-9]+)ELb([01])E ]]; then
      kernel="D ${BASH_REMATCH[1]}, ${BASH_REMATCH[2]} consumer groups, ${BASH_REMATCH[3]}-key tiles"
      [ "${BASH_REMATCH[4]}" = 1 ] && kernel+=", merge into out"
    elif [[ -n $kernel && $line =~ ([0-9]+)\ bytes\ stack\ frame,\ ([0-9]+)\ bytes\ spill\ stores,\ ([0-9]+)\ bytes\ spill\ loads ]]; then
      printf '%-30s %-56s stack %4s, spill stores %4s, loads %4s\n' "$name" "$kernel" "${BASH_REMATCH[1]}" \
        "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
      kernel=""
    fi
  done < "$report"
  if grep -q "compile failed" "$report"; then
    echo "FAIL $name: does not compile"
    tail -n 20 "$report"
    status=1
  fi
  if grep -q "wgmma.mma_async instructions are serialized" "$report"; then
    echo "FAIL $name: ptxas serialises its wgmma products:"
    grep "wgmma.mma_async instructions are serialized" "$report" | sed 's/^/  /' | cut -c1-240
    status=1
  fi
done
[ $status -eq 0 ] && echo "check_sm90_ptxas: $# instantiations, no wgmma serialised"
exit $status
