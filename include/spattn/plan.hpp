// spattn/plan.hpp - the plan of an attention call: every decision about a
// call's work, made once, held by the caller.
//
// make_plan(mask, shape, options) decides, in one place per backend, how
// calls of `shape` on `mask` run: the backend, and on CUDA the kernel, its
// tile, the query heads packed into a tile's rows, the split of long rows,
// the dilated split of a pattern, and every table the kernels read, uploaded
// to the device the plan is for and owned by the plan. attention(q, k, v,
// out, plan) then checks the tensors against the plan and launches: no
// allocation but stream-ordered scratch, no copy, no host synchronisation, so
// a call can be captured in a CUDA graph. A plan stays valid for every call
// of its shape (FlashInfer's plan/run split; FlashAttention-3's scheduler
// metadata).
//
// attention(q, k, v, out, mask) takes its plan from a small cache owned by
// the mask (BlockMask::plan_cache): the first call of a shape makes it,
// later ones find it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "spattn/block_mask.hpp"
#include "spattn/dtype.hpp"

namespace spattn {

enum class Backend {
  Auto,       // the fastest backend built and usable for these inputs
  Reference,  // exact fp64 oracle, one row at a time
  Cpu,        // fused block-sparse CPU kernel
  Cuda,       // fused CUDA kernels (device pointers)
};

Backend parse_backend(const std::string& name);
const char* backend_name(Backend b);

// The shape of the calls a plan serves. A varlen plan (attention_varlen)
// serves packed batches of `batch` sequences of up to the mask's lengths:
// q_len and k_len are then the mask's lengths.
struct CallShape {
  int64_t batch = 1, q_heads = 1, kv_heads = 1, q_len = 0, k_len = 0, head_dim = 0;
  DType dtype = DType::BF16;
  bool varlen = false;

  bool operator==(const CallShape& o) const {
    return batch == o.batch && q_heads == o.q_heads && kv_heads == o.kv_heads && q_len == o.q_len &&
           k_len == o.k_len && head_dim == o.head_dim && dtype == o.dtype && varlen == o.varlen;
  }
  bool operator!=(const CallShape& o) const { return !(*this == o); }
  std::string describe() const;
};

struct PlanOptions {
  // Auto: Cuda for a device plan (device >= 0), else Cpu.
  Backend backend = Backend::Auto;
  // The CUDA device the tensors live on; -1 for host tensors.
  int device = -1;
  // Also the transposed lists attention_backward reads (key-major: for each
  // key block the query blocks that keep it). Memory proportional to the
  // kept blocks.
  bool backward = false;
  // The stream the plan's device work is queued on (a cudaStream_t; null =
  // the default stream); make_plan waits for it before it returns.
  void* stream = nullptr;
};

namespace detail {
struct PlanState;  // what a backend decided (src/plan/plan_state.hpp)
}

class Plan {
 public:
  Plan() = default;
  Plan(BlockMask mask, CallShape shape, std::shared_ptr<const detail::PlanState> state);

  const BlockMask& mask() const { return mask_; }
  const CallShape& shape() const { return shape_; }
  Backend backend() const;
  int device() const;  // -1 for a host plan
  bool has_backward() const;
  // One line: backend, kernel and tile, packing, splits (for logs and tests).
  std::string describe() const;
  const detail::PlanState& state() const;
  bool empty() const { return state_ == nullptr; }

 private:
  BlockMask mask_;
  CallShape shape_;
  std::shared_ptr<const detail::PlanState> state_;
};

// Throws spattn::Error naming the field unless `shape` fits `mask` (lengths,
// heads, a head-dependent pattern's heads) and is well formed.
void validate_call_shape(const BlockMask& mask, const CallShape& shape);

// The plan of calls of `shape` on `mask` (validated), made now: on a CUDA
// device its tables are uploaded before it returns.
Plan make_plan(const BlockMask& mask, const CallShape& shape, const PlanOptions& options = {});

// The backend `requested` resolves to for a plan on `device` (-1: host):
// Auto gives Cuda on a device, Cpu on the host. Throws spattn::Error if it is
// not available in this build, on this machine, or for tensors there.
Backend plan_backend(Backend requested, int device);

}  // namespace spattn
