// attention_varlen.cpp - attention over a packed batch of variable-length
// sequences (spattn/attention.hpp, "variable-length batches").
//
// The host backends check cu_seqlens and run each sequence on its own, as a
// batch-1 view of its rows with a mask built for its own lengths, so they do
// not depend on the prefix property the CUDA backend relies on; the tests
// compare the two. Longformer global tokens beyond a sequence's length do
// not exist in it (Pattern::within_length). Empty sequences are skipped, and
// so is a batch without query rows.
#include <algorithm>

#include "plan/plan_state.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "varlen_sequences.hpp"

#if defined(SPATTN_WITH_CUDA)
#include "cuda/cuda_launch.hpp"
#include "spattn/cuda.hpp"
#endif

namespace spattn {
namespace {

// Checks one cu_seqlens array against its row count and length bound.
void check_prefix_sums(const int32_t* cu, int64_t num_seqs, int64_t total, int64_t max_seqlen,
                       const char* name, const char* max_name) {
  require(cu[0] == 0, "varlen: ", name, "[0] must be 0, got ", cu[0]);
  for (int64_t b = 0; b < num_seqs; ++b) {
    const int64_t len = static_cast<int64_t>(cu[b + 1]) - cu[b];
    require(len >= 0, "varlen: ", name, " must not decrease, got ", name, "[", b, "]=", cu[b], " > ", name, "[",
            b + 1, "]=", cu[b + 1]);
    require(len <= max_seqlen, "varlen: sequence ", b, " has length ", len, " (", name, ") but ", max_name, "=",
            max_seqlen);
  }
  require(cu[num_seqs] == total, "varlen: ", name, "[", num_seqs, "] must equal the number of rows (", total,
          "), got ", cu[num_seqs]);
}

}  // namespace

BlockMask varlen_mask(const Pattern& pattern, int64_t max_seqlen, int64_t block_q, int64_t block_k,
                      int64_t num_heads) {
  require(pattern.is_prefix_stable(), "varlen: the pattern ", pattern.describe(),
          " depends on the sequence lengths (BigBird, custom masks), so one mask cannot serve every sequence");
  require(max_seqlen >= 0, "varlen: max_seqlen must be >= 0, got ", max_seqlen);
  MaskShape shape;
  shape.q_len = shape.k_len = max_seqlen;
  shape.block_q = block_q;
  shape.block_k = block_k;
  shape.num_heads = num_heads;
  return BlockMask::build(pattern, shape);
}

void check_cu_seqlens(const VarlenBatch& batch, int64_t total_q, int64_t total_k) {
  check_prefix_sums(batch.cu_seqlens_q, batch.num_seqs, total_q, batch.max_seqlen_q, "cu_seqlens_q",
                    "max_seqlen_q");
  check_prefix_sums(batch.cu_seqlens_k, batch.num_seqs, total_k, batch.max_seqlen_k, "cu_seqlens_k",
                    "max_seqlen_k");
  for (int64_t b = 0; b < batch.num_seqs; ++b) {
    const int64_t lq = batch.cu_seqlens_q[b + 1] - batch.cu_seqlens_q[b];
    const int64_t lk = batch.cu_seqlens_k[b + 1] - batch.cu_seqlens_k[b];
    require(lq <= lk, "varlen: sequence ", b, " has ", lq, " queries but ", lk,
            " keys; each sequence needs Lq <= Lk (its queries are its last Lq positions)");
  }
}

CallShape varlen_call_shape(const TensorView& q, const TensorView& k, const VarlenBatch& batch,
                            int64_t mask_len) {
  CallShape shape = call_shape(q, k);
  shape.batch = batch.num_seqs;
  shape.q_len = shape.k_len = mask_len;
  shape.varlen = true;
  return shape;
}

namespace detail {

VarlenSequence varlen_sequence(const VarlenBatch& batch, int64_t b) {
  VarlenSequence s;
  s.q_first = batch.cu_seqlens_q[b];
  s.q_len = batch.cu_seqlens_q[b + 1] - s.q_first;
  s.k_first = batch.cu_seqlens_k[b];
  s.k_len = batch.cu_seqlens_k[b + 1] - s.k_first;
  return s;
}

BlockMask sequence_mask(const BlockMask& mask, const VarlenSequence& s, int64_t num_heads) {
  MaskShape shape;
  shape.q_len = s.q_len;
  shape.k_len = s.k_len;
  shape.block_q = mask.block_q();
  shape.block_k = mask.block_k();
  shape.num_heads = num_heads;
  return BlockMask::build(mask.pattern()->within_length(s.k_len), shape);
}

}  // namespace detail

namespace {

// A call validated against the mask, on the host backend `backend`: each
// sequence on its own, with the mask of its own lengths.
void host_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                 const VarlenBatch& batch, const BlockMask& mask, Backend backend, double scale,
                 const TensorView* lse) {
  require(backend == Backend::Reference || backend == Backend::Cpu, "varlen: backend '", backend_name(backend),
          "' has no varlen implementation");
  check_cu_seqlens(batch, q.seq_len(), k.seq_len());
  if (out.empty()) return;  // no query rows, or no query heads
  for (int64_t b = 0; b < batch.num_seqs; ++b) {
    const detail::VarlenSequence s = detail::varlen_sequence(batch, b);
    if (s.q_len == 0) continue;
    const BlockMask own = detail::sequence_mask(mask, s, q.heads());
    const TensorView qs = seq_slice(q, s.q_first, s.q_len), ks = seq_slice(k, s.k_first, s.k_len),
                     vs = seq_slice(v, s.k_first, s.k_len), outs = seq_slice(out, s.q_first, s.q_len);
    const TensorView lses = lse ? seq_slice(*lse, s.q_first, s.q_len) : TensorView{};
    const TensorView* lse_b = lse ? &lses : nullptr;
    if (backend == Backend::Reference)
      reference_attention(qs, ks, vs, outs, own, scale, lse_b);
    else
      cpu_attention(qs, ks, vs, outs, own, scale, lse_b);
  }
}

}  // namespace

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                      const VarlenBatch& batch, const BlockMask& mask, const AttentionOptions& options,
                      const TensorView* lse) {
  validate_attention_varlen(q, k, v, out, batch, mask, lse);
  const double scale = resolve_scale(options, q.head_dim());
  const Backend backend = resolve_backend(options.backend, q.data);
  if (backend != Backend::Cuda) return host_varlen(q, k, v, out, batch, mask, backend, scale, lse);
#if defined(SPATTN_WITH_CUDA)
  if (out.empty()) return;  // no query rows, or no query heads
  const Plan plan = detail::cached_plan(mask, varlen_call_shape(q, k, batch, mask.q_len()), backend, q.data, false,
                                        options.stream);
  cuda_detail::launch_varlen_plan(q, k, v, out, batch, *plan.state().cuda, scale, lse, options.stream);
#endif
}

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                      const VarlenBatch& batch, const Plan& plan, const AttentionOptions& options,
                      const TensorView* lse) {
  const Backend backend =
      detail::check_call_on_plan(plan, varlen_call_shape(q, k, batch, plan.mask().q_len()), options.backend);
  validate_attention_varlen(q, k, v, out, batch, plan.mask(), lse);
  const double scale = resolve_scale(options, q.head_dim());
  if (backend != Backend::Cuda) return host_varlen(q, k, v, out, batch, plan.mask(), backend, scale, lse);
#if defined(SPATTN_WITH_CUDA)
  if (!out.empty()) cuda_detail::launch_varlen_plan(q, k, v, out, batch, *plan.state().cuda, scale, lse, options.stream);
#endif
}

}  // namespace spattn
