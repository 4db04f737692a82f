// cpu/fast/forward_plan.hpp - the fast CPU backend's plan of a call shape:
// the instruction set whose kernel runs it, the query tiles of that kernel
// and the work items over them (work_plan.hpp), or the decode path for few
// query rows per kv head (decode_rows.hpp), decided once per shape
// (spattn/plan.hpp) instead of at every call.
#pragma once

#include <cstdint>
#include <string>

#include "cpu/fast/isa.hpp"
#include "cpu/fast/work_plan.hpp"
#include "spattn/attention.hpp"

namespace spattn::cpu_fast {

struct ForwardPlan {
  CpuIsa isa;
  TileLayout layout;
  WorkPlan work;
  int64_t max_chunks = 0;    // max_item_chunks of the layout at the kernel's chunk size
  bool decode_rows = false;  // few rows per kv head: the decode path (decode_rows.hpp) instead of tiles
};

// The plan of calls of `shape` on `mask` with the active instruction set.
ForwardPlan make_forward_plan(const BlockMask& mask, const CallShape& shape);

std::string describe(const ForwardPlan& plan);

// Runs a call validated against `mask` as `plan` (made for its shape) says.
void run_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                 const BlockMask& mask, const ForwardPlan& plan, double scale, const TensorView* lse);

}  // namespace spattn::cpu_fast
