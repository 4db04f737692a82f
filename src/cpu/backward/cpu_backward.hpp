// cpu/backward/cpu_backward.hpp - the fast CPU backward pass on the
// transposed lists of a plan (cpu_backward.cpp; the public entry is
// cpu_attention_backward in spattn/backward.hpp).
#pragma once

#include "pattern/key_major_plan.hpp"
#include "spattn/backward.hpp"

namespace spattn::cpu_backward {

// A call validated against `mask`, with `cols` its key-major lists (a
// plan's, PlanOptions::backward).
void run_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads, const BlockMask& mask,
                  const KeyMajorPlan& cols, double scale, const TensorView* d_lse);

}  // namespace spattn::cpu_backward
