// attention.cpp - the attention entry points: validation, the plan (given,
// or from the mask's cache) and the backend it names.
//
// validate_attention checks that q, k, v, out, lse and the mask describe one
// problem (shapes, dtypes, GQA head counts, mask lengths and heads, 64-bit
// offset ranges) before any backend touches memory.
#include "spattn/attention.hpp"

#include <cmath>
#include <limits>

#include "cpu/fast/forward_plan.hpp"
#include "plan/plan_cache.hpp"
#include "spattn/error.hpp"
#include "tensor_checks.hpp"

#if defined(SPATTN_WITH_CUDA)
#include "cuda/common/rows_without_keys.hpp"
#include "cuda/cuda_launch.hpp"
#include "spattn/cuda.hpp"
#endif

namespace spattn {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::Auto;
  if (name == "reference") return Backend::Reference;
  if (name == "cpu") return Backend::Cpu;
  if (name == "cuda") return Backend::Cuda;
  fail("backend must be one of auto, reference, cpu, cuda, got '", name, "'");
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Auto: return "auto";
    case Backend::Reference: return "reference";
    case Backend::Cpu: return "cpu";
    case Backend::Cuda: return "cuda";
  }
  return "?";
}

bool backend_available(Backend b) {
  switch (b) {
    case Backend::Auto: return true;
    case Backend::Reference: return true;
    case Backend::Cpu: return true;
    case Backend::Cuda:
#if defined(SPATTN_WITH_CUDA)
      return cuda_device_count() > 0;
#else
      return false;
#endif
  }
  return false;
}

Backend best_backend() {
  if (backend_available(Backend::Cuda)) return Backend::Cuda;
  if (backend_available(Backend::Cpu)) return Backend::Cpu;
  return Backend::Reference;
}

Backend resolve_backend(Backend requested, const void* q_data) {
  Backend backend = requested == Backend::Auto ? best_backend() : requested;
#if defined(SPATTN_WITH_CUDA)
  // Auto keeps host tensors on the host.
  if (requested == Backend::Auto && backend == Backend::Cuda && !cuda_is_device_pointer(q_data))
    backend = backend_available(Backend::Cpu) ? Backend::Cpu : Backend::Reference;
#else
  (void)q_data;
#endif
  require(backend_available(backend), "backend '", backend_name(backend),
          "' is not available in this build or on this machine");
  return backend;
}

double resolve_scale(const AttentionOptions& options, int64_t head_dim) {
  if (!options.scale) return 1.0 / std::sqrt(static_cast<double>(head_dim));
  require(std::isfinite(*options.scale), "scale must be finite, got ", *options.scale);
  return *options.scale;
}

namespace {

// q, k, v, out and lse describe one problem (everything but the mask).
void validate_tensors(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                      const TensorView* lse) {
  validate_tensor(q, "q");
  validate_tensor(k, "k");
  validate_tensor(v, "v");
  validate_tensor(out, "out");
  require(k.dtype == q.dtype, "k dtype (", dtype_name(k.dtype), ") must equal q dtype (",
          dtype_name(q.dtype), ")");
  require(v.dtype == q.dtype, "v dtype (", dtype_name(v.dtype), ") must equal q dtype (",
          dtype_name(q.dtype), ")");
  require(k.batch() == q.batch(), "k batch (", k.batch(), ") must equal q batch (", q.batch(), ")");
  require(v.batch() == q.batch(), "v batch (", v.batch(), ") must equal q batch (", q.batch(), ")");
  require(v.heads() == k.heads(), "v heads (", v.heads(), ") must equal k heads (", k.heads(), ")");
  require(k.heads() > 0, "k heads must be > 0, got 0");
  require(q.heads() % k.heads() == 0, "q heads (", q.heads(), ") must be a multiple of k heads (",
          k.heads(), ")");
  require(v.seq_len() == k.seq_len(), "v seq_len (", v.seq_len(), ") must equal k seq_len (",
          k.seq_len(), ")");
  require(k.head_dim() == q.head_dim(), "k head_dim (", k.head_dim(), ") must equal q head_dim (",
          q.head_dim(), ")");
  require(v.head_dim() == q.head_dim(), "v head_dim (", v.head_dim(), ") must equal q head_dim (",
          q.head_dim(), ")");
  require_same_shape(out, "out", q, "q");
  if (lse) {
    validate_tensor(*lse, "lse");
    require(lse->dtype == DType::F32, "lse dtype must be fp32, got ", dtype_name(lse->dtype));
    require(lse->shape[0] == q.batch() && lse->shape[1] == q.heads() && lse->shape[2] == q.seq_len() &&
                lse->shape[3] == 1,
            "lse shape must be (", q.batch(), ", ", q.heads(), ", ", q.seq_len(), "), got (",
            lse->shape[0], ", ", lse->shape[1], ", ", lse->shape[2], ") with last dim ", lse->shape[3]);
  }
}

}  // namespace

void validate_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const BlockMask& mask, const TensorView* lse) {
  validate_tensors(q, k, v, out, lse);
  validate_call_shape(mask, call_shape(q, k));
}

void validate_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const VarlenBatch& batch, const BlockMask& mask,
                               const TensorView* lse) {
  validate_tensors(q, k, v, out, lse);
  require(q.batch() == 1, "varlen: q must hold the packed sequences in batch 1, got batch ", q.batch());
  require(batch.num_seqs >= 0, "varlen: num_seqs must be >= 0, got ", batch.num_seqs);
  require(batch.num_seqs > 0 || (q.seq_len() == 0 && k.seq_len() == 0),
          "varlen: a batch of no sequences (num_seqs=0) has no rows, got total_q=", q.seq_len(),
          " total_k=", k.seq_len());
  require(batch.num_seqs < std::numeric_limits<int32_t>::max(), "varlen: num_seqs must fit in int32, got ",
          batch.num_seqs);
  require(batch.cu_seqlens_q != nullptr, "varlen: cu_seqlens_q is a null pointer");
  require(batch.cu_seqlens_k != nullptr, "varlen: cu_seqlens_k is a null pointer");
  require(q.seq_len() <= std::numeric_limits<int32_t>::max(), "varlen: total_q (", q.seq_len(),
          ") must fit the int32 cu_seqlens_q");
  require(k.seq_len() <= std::numeric_limits<int32_t>::max(), "varlen: total_k (", k.seq_len(),
          ") must fit the int32 cu_seqlens_k");
  require(batch.max_seqlen_q >= 0, "varlen: max_seqlen_q must be >= 0, got ", batch.max_seqlen_q);
  require(batch.max_seqlen_k >= 0, "varlen: max_seqlen_k must be >= 0, got ", batch.max_seqlen_k);
  validate_call_shape(mask, varlen_call_shape(q, k, batch, mask.q_len()));
  require(batch.max_seqlen_q <= mask.q_len() && batch.max_seqlen_k <= mask.k_len(),
          "varlen: the mask was built for sequences up to ", mask.q_len(), " but max_seqlen_q=",
          batch.max_seqlen_q, " max_seqlen_k=", batch.max_seqlen_k);
}

CallShape call_shape(const TensorView& q, const TensorView& k) {
  CallShape shape;
  shape.batch = q.batch();
  shape.q_heads = q.heads();
  shape.kv_heads = k.heads();
  shape.q_len = q.seq_len();
  shape.k_len = k.seq_len();
  shape.head_dim = q.head_dim();
  shape.dtype = q.dtype;
  return shape;
}

namespace {

// A call validated against plan.mask(), on the plan's backend.
void run_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
              const Plan& plan, double scale, const TensorView* lse, void* stream) {
  const detail::PlanState& state = plan.state();
  if (out.empty()) return;  // B, Hq or Lq is 0: no row to write
  switch (state.backend) {
    case Backend::Reference: reference_attention(q, k, v, out, plan.mask(), scale, lse); return;
    case Backend::Cpu: cpu_fast::run_forward(q, k, v, out, plan.mask(), *state.cpu, scale, lse); return;
    case Backend::Cuda:
#if defined(SPATTN_WITH_CUDA)
      if (k.empty())  // no key to read: every row is 0 with LSE -inf
        return cuda_detail::write_rows_without_keys(out, lse, static_cast<cudaStream_t>(stream));
      cuda_detail::launch_plan(q, k, v, out, *state.cuda, scale, lse, stream);
      return;
#endif
    case Backend::Auto: break;
  }
  (void)stream;
  fail("backend '", backend_name(state.backend), "' has no implementation");
}

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const Plan& plan, const AttentionOptions& options, const TensorView* lse) {
  const Backend backend = detail::check_call_on_plan(plan, call_shape(q, k), options.backend);
  validate_attention(q, k, v, out, plan.mask(), lse);
  if (backend != Backend::Cuda)
    require(detail::tensor_device(q.data) < 0, "backend '", backend_name(backend),
            "' runs host tensors, but q points to CUDA device memory");
  run_plan(q, k, v, out, plan, resolve_scale(options, q.head_dim()), lse, options.stream);
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const BlockMask& mask, const AttentionOptions& options, const TensorView* lse) {
  validate_attention(q, k, v, out, mask, lse);
  const double scale = resolve_scale(options, q.head_dim());
  const Plan plan = detail::cached_plan(mask, call_shape(q, k), options.backend, q.data, false, options.stream);
  run_plan(q, k, v, out, plan, scale, lse, options.stream);
}

}  // namespace spattn
