// spattn/attention.hpp - the attention entry point and its backends.
//
// attention(q, k, v, out, mask) computes, for every (batch, query head, row),
// the softmax over the keys the mask allows of q.k * scale, times v:
//   q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D), Hq % Hkv == 0 (query head h reads
//   kv head h / (Hq / Hkv)), out (B, Hq, Lq, D), optional lse (B, Hq, Lq) fp32.
// A row with no allowed key gets output 0 and LSE -inf. Inputs share one dtype;
// out may be any dtype. Inputs are validated and bad ones rejected with
// spattn::Error naming the parameter.
//
// Empty shapes: B, Hq, Lq and Lk may be 0 (Hkv and D must be > 0; an empty
// view's data pointer may be null). Nothing is written when out is empty;
// with Lk == 0 every row has no allowed key, so out is 0 and LSE -inf.
//
// Non-finite inputs, the same on every backend: only the scores of allowed
// pairs are computed (masked pairs are never read, as in FlexAttention). A
// NaN or +inf score makes its row's output and LSE NaN (as SDPA); a -inf
// score weighs 0, like a masked key, so a row whose allowed scores are all
// -inf gives 0 and LSE -inf (as SDPA's math backend and FlexAttention). A
// non-finite value v_j at a key its row weighs above 0 makes that row's
// output non-finite; at a key of weight 0 what it gives is not specified.
#pragma once

#include <optional>
#include <string>

#include "spattn/block_mask.hpp"
#include "spattn/plan.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

// Is the backend compiled in and usable on this machine (a GPU present for Cuda)?
bool backend_available(Backend b);
// What Auto resolves to here.
Backend best_backend();
// The backend a call whose q data lies at `q_data` runs on: Auto keeps host
// tensors on the host. Throws spattn::Error if it is not available.
Backend resolve_backend(Backend requested, const void* q_data);

struct AttentionOptions {
  std::optional<double> scale;  // default 1 / sqrt(D)
  // With a mask: the backend of the plan taken from the mask's cache. With a
  // plan: Auto, or the plan's backend.
  Backend backend = Backend::Auto;
  // Where CUDA work is queued (a cudaStream_t; null = the default stream).
  void* stream = nullptr;
};

// Throws spattn::Error if the tensors, the mask and the options do not fit together.
void validate_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const BlockMask& mask, const TensorView* lse);

// The shape of a call on these tensors (validated against each other).
CallShape call_shape(const TensorView& q, const TensorView& k);

// The call as `plan` decided it; the tensors must have the plan's shape.
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const Plan& plan, const AttentionOptions& options = {}, const TensorView* lse = nullptr);

// The same with the plan of the call's shape from the mask's cache (made on
// the shape's first call).
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const BlockMask& mask, const AttentionOptions& options = {},
               const TensorView* lse = nullptr);

double resolve_scale(const AttentionOptions& options, int64_t head_dim);

// ---- variable-length batches (FlashAttention's varlen convention) ----
//
// num_seqs sequences packed along the rows of batch-1 tensors: sequence b owns
// query rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q, out and lse, and
// key rows [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v. A (total, H, D)
// buffer is make_blhd(data, dtype, 1, total, H, D); lse is (1, Hq, total_q)
// (FlashAttention's (Hq, total_q)). Each sequence attends only to itself, with
// the mask's pattern applied to its own lengths, bottom-right aligned as in
// attention(): with Lq(b) < Lk(b) (a chunk of queries after cached keys) its
// query i sits at position i + Lk(b) - Lq(b). Sequences may be empty, and so
// may the batch (num_seqs == 0, cu_seqlens = {0}, no rows).
// Longformer global tokens at or beyond a sequence's length do not exist in
// that sequence (Pattern::within_length).
//
// The mask is built once for the longest key sequence (varlen_mask), one row
// per position, and each sequence reads the rows of its queries' positions,
// which is exact because its pattern is prefix stable
// (Pattern::is_prefix_stable) and Lq(b) <= Lk(b).
// The host backends read cu_seqlens (host memory) and check them: they start
// at 0, never decrease, end at the tensors' row counts, give lengths of at most
// max_seqlen_q / max_seqlen_k, and Lq(b) <= Lk(b). The CUDA backend reads them
// on the device without a host synchronisation and checks only what the host
// sees; that they satisfy the above is the caller's contract (as for
// FlashAttention).
struct VarlenBatch {
  const int32_t* cu_seqlens_q = nullptr;  // num_seqs + 1 prefix sums of the query lengths
  const int32_t* cu_seqlens_k = nullptr;  // num_seqs + 1 prefix sums of the key lengths
  int64_t num_seqs = 0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // bounds of the lengths; at most the mask's
};

// The mask of `pattern` for varlen batches of sequences of up to max_seqlen
// keys (a max_seqlen x max_seqlen plan, one row per position; pass
// max_seqlen_k). Throws unless the pattern is prefix stable.
BlockMask varlen_mask(const Pattern& pattern, int64_t max_seqlen, int64_t block_q = 128,
                      int64_t block_k = 128, int64_t num_heads = 1);

// The shape of a varlen call on these packed tensors with a mask of
// `mask_len` positions (CallShape::varlen: batch is num_seqs, the lengths
// are the mask's).
CallShape varlen_call_shape(const TensorView& q, const TensorView& k, const VarlenBatch& batch, int64_t mask_len);

// Checks what can be checked without reading cu_seqlens: shapes, dtypes, the
// mask (from a prefix-stable pattern, square, covering max_seqlen_q/k).
void validate_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const VarlenBatch& batch, const BlockMask& mask,
                               const TensorView* lse);

// Reads host cu_seqlens and checks them against the row counts (see above).
void check_cu_seqlens(const VarlenBatch& batch, int64_t total_q, int64_t total_k);

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const VarlenBatch& batch, const BlockMask& mask,
                      const AttentionOptions& options = {}, const TensorView* lse = nullptr);

// The same as `plan` (a varlen plan: make_plan with varlen_call_shape)
// decided it. The host backends run each sequence on its own and take only
// the plan's mask and backend.
void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const VarlenBatch& batch, const Plan& plan,
                      const AttentionOptions& options = {}, const TensorView* lse = nullptr);

// ---- backends (called by attention() after validation) ----

// Exact oracle: fp64 accumulation, streamed one row at a time through the block iterator.
void reference_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const BlockMask& mask, double scale,
                         const TensorView* lse);

// Fast CPU backend (docs/design_cpu.md): fused block-sparse FlashAttention-style
// kernel, OpenMP over runs of query tiles of each (batch, head), AVX-512 / AVX2
// / portable SIMD chosen at run time. fp32 accumulation for fp32, fp16 and bf16
// inputs; any out dtype. Same result for any thread count.
void cpu_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const BlockMask& mask, double scale,
                   const TensorView* lse);

// Naive dense baseline of the seed programs: materialises the Lq x Lk scores of
// each (batch, head) in fp32 and computes every pair, applying the mask
// afterwards. For small L: Lq * Lk must be <= kNaiveDenseMaxScores.
constexpr int64_t kNaiveDenseMaxScores = int64_t{1} << 28;
void naive_dense_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const BlockMask& mask, double scale,
                           const TensorView* lse);

}  // namespace spattn
