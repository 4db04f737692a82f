// cuda/plan/cuda_plan.hpp - the CUDA backend's plan of a call shape, made in
// one place (make_cuda_plan, the planner) and read by the launch
// (cuda_backend.cpp), which only adds the call's tensors.
//
// A plan holds one kernel pass, or two for a dilated split (dilated_split.hpp:
// the rest of the pattern, then block-diagonal attention over the permuted
// tokens merged into it). Each pass is what its kernel launch reads besides
// the tensors: the mask and tile plan on the device, the exclusion of a
// dilated split's pass, and the table of keep bits. The plan also says how
// the call's query heads are packed into the rows of a tile, and owns every
// device array it made; the mask's own device copy is shared with the
// mask's other plans.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/bwd_sm80/bwd_plan.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/plan.hpp"

namespace spattn::cuda_detail {

// What a kernel launch of the plan reads besides the call's tensors.
struct KernelPass {
  DeviceMaskView mask;
  DeviceTilePlanView plan;
  DilatedExclusion exclude;
  KeepBitsArg keep_bits;
};

// How the call's grouped query heads share a tile (PackedHeads in
// fwd_params.hpp): not at all; in place, through the strides of q, out and
// the LSE (one query position); or through packed copies (a few positions).
enum class HeadPacking { None, InPlace, Copies };

// The permuted pass of a dilated split: its rows are `length` tokens, read in
// place from the first regular position on, every `rate`-th row.
struct PermutedPass {
  int64_t rate = 1;
  int64_t first_position = 0;
  int64_t length = 0;
  bool rest_keeps_blocks = true;  // the rest pass's mask keeps some block
};

struct CudaPlan {
  int device = -1;
  bool sm90 = false;  // the Hopper kernel, else the portable one
  TileShape tile;
  HeadPacking packing = HeadPacking::None;
  int64_t pack = 1;  // query heads per tile row group (PackedHeads::heads)
  std::vector<KernelPass> passes;  // one, or the rest and permuted passes of a dilated split
  PermutedPass permuted;           // where passes has two
  std::vector<std::shared_ptr<const DeviceMaskCopy>> masks;  // the device masks the passes read
  std::vector<DevicePtr> arrays;                             // every table made for the plan
  // The backward pass's lists on the device (PlanOptions::backward); null without.
  std::unique_ptr<const BackwardPlan> backward;
};

// The plan of calls of `shape` (validated against `mask`) on CUDA device
// `device`, with the backward pass's lists where `backward`, its tables
// uploaded through `stream` (a cudaStream_t) before it returns. Throws
// spattn::Error if the stream is capturing a graph (a plan must be made
// before the capture) or no kernel runs the call.
std::shared_ptr<const CudaPlan> make_cuda_plan(const BlockMask& mask, const CallShape& shape, int device,
                                               void* stream, bool backward);

// One line: kernel, tile, packing, passes, split rows.
std::string describe(const CudaPlan& plan);

// The kernel arguments of a pass, `call` holding the call's tensors and
// lengths (as launched: query heads packed where the plan packs them).
FwdParams pass_params(const KernelPass& pass, FwdParams call);

// The arguments of a dilated split's permuted pass on the call's arguments
// `call`, `rest` those of its rest pass (whose LSE it merges into), with
// input and output elements of the given bytes.
FwdParams permuted_params(const CudaPlan& plan, const FwdParams& call, const FwdParams& rest, int64_t element_bytes,
                          int64_t out_element_bytes);

}  // namespace spattn::cuda_detail
