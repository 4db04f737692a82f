// spattn/attention.hpp - the attention entry point and its backends.
//
// attention(q, k, v, out, mask) computes, for every (batch, query head, row),
// the softmax over the keys the mask allows of q.k * scale, times v:
//   q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D), Hq % Hkv == 0 (query head h reads
//   kv head h / (Hq / Hkv)), out (B, Hq, Lq, D), optional lse (B, Hq, Lq) fp32.
// A row with no allowed key gets output 0 and LSE -inf. Inputs share one dtype;
// out may be any dtype. Inputs are validated and bad ones rejected with
// spattn::Error naming the parameter.
#pragma once

#include <optional>
#include <string>

#include "spattn/block_mask.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

enum class Backend {
  Auto,       // the fastest backend built and usable for these inputs
  Reference,  // exact fp64 oracle, one row at a time
  Cpu,        // fused block-sparse CPU kernel
  Cuda,       // fused CUDA kernels (device pointers)
};

Backend parse_backend(const std::string& name);
const char* backend_name(Backend b);
// Is the backend compiled in and usable on this machine (a GPU present for Cuda)?
bool backend_available(Backend b);
// What Auto resolves to here.
Backend best_backend();

struct AttentionOptions {
  std::optional<double> scale;  // default 1 / sqrt(D)
  Backend backend = Backend::Auto;
};

// Throws spattn::Error if the tensors, the mask and the options do not fit together.
void validate_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const BlockMask& mask, const TensorView* lse);

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const BlockMask& mask, const AttentionOptions& options = {},
               const TensorView* lse = nullptr);

double resolve_scale(const AttentionOptions& options, int64_t head_dim);

// ---- backends (called by attention() after validation) ----

// Exact oracle: fp64 accumulation, streamed one row at a time through the block iterator.
void reference_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const BlockMask& mask, double scale,
                         const TensorView* lse);

// Fast CPU backend (docs/cpu.md): fused block-sparse FlashAttention-style
// kernel, OpenMP over runs of query tiles of each (batch, head), AVX-512 / AVX2
// / portable SIMD chosen at run time. fp32 accumulation for fp32, fp16 and bf16
// inputs; any out dtype. Same result for any thread count.
void cpu_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const BlockMask& mask, double scale,
                   const TensorView* lse);

// Naive dense baseline of the seed programs: materialises the Lk scores of each
// row in fp32 and computes every pair, applying the mask afterwards. For small L.
void naive_dense_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const BlockMask& mask, double scale,
                           const TensorView* lse);

}  // namespace spattn
