// plan/plan_state.hpp - what make_plan decided for a call shape: the resolved
// backend and that backend's own plan (spattn/plan.hpp).
//
// The backends' plans are declared here only: the CPU backend's
// (cpu/fast/forward_plan.hpp), the CUDA backend's (cuda/plan/cuda_plan.hpp,
// CUDA builds only), and the transposed lists of the backward pass
// (pattern/key_major_plan.hpp). A PlanState never refers to the BlockMask it
// was made from, so the mask's plan cache can hold it without a cycle.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "spattn/plan.hpp"
#include "spattn/tensor.hpp"

namespace spattn {
struct KeyMajorPlan;
namespace cpu_fast {
struct ForwardPlan;
}
namespace cuda_detail {
struct CudaPlan;
}

namespace detail {

struct PlanState {
  Backend backend = Backend::Reference;
  int device = -1;                                      // CUDA device; -1 on the host
  std::shared_ptr<const cpu_fast::ForwardPlan> cpu;     // Backend::Cpu
  std::shared_ptr<const cuda_detail::CudaPlan> cuda;    // Backend::Cuda
  std::shared_ptr<const KeyMajorPlan> key_major;        // PlanOptions::backward, host backends
  std::string description;                              // Plan::describe
};

// The backend's plan of `shape` on `mask` (validated by the caller).
std::shared_ptr<const PlanState> make_plan_state(const BlockMask& mask, const CallShape& shape,
                                                 const PlanOptions& options);

// Throws spattn::Error unless a call of `shape` asking for backend `requested`
// (Auto: any) may run on `plan`; returns the plan's backend.
Backend check_call_on_plan(const Plan& plan, const CallShape& shape, Backend requested);

// The CUDA device whose memory `data` points to; -1 for host memory (and in
// builds without CUDA).
int tensor_device(const void* data);

// The backend of a call only the host backends run yet (attention_varlen_backward,
// the host branch of attention_with_kvcache): `requested` resolved as resolve_backend does, fp64
// host inputs on Auto taking the exact reference; any other backend is an error
// saying it has no `what` yet.
Backend host_only_backend(Backend requested, const TensorView& q, const char* what);

// The plan of backend `requested` (Auto: the tensors' place decides,
// plan_backend) for calls
// of `shape` (validated against `mask`) with tensors at `q_data`, from the
// mask's cache; with the backward pass's lists where `backward`.
Plan cached_plan(const BlockMask& mask, const CallShape& shape, Backend requested, const void* q_data,
                 bool backward, void* stream);

// Bumped whenever a process-wide switch that plans depend on changes (the
// CUDA kernel and tile choices, the CPU instruction set): cached plans made
// before it are made again.
uint64_t plan_generation();
void invalidate_cached_plans();

}  // namespace detail
}  // namespace spattn
