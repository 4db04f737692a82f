// examples/cpp/varlen_attention.cpp - a batch of variable-length sequences.
//
// Packs three sequences (300, 1000 and 77 tokens) along the rows of batch-1
// (total, H, D) tensors, FlashAttention's varlen convention, and attends each
// causally to itself with one mask built for the longest sequence. Checks
// every sequence against a separate call on that sequence alone.
#include <cstdio>
#include <vector>

#include "example_data.hpp"
#include "spattn/spattn.hpp"

int main() {
  const int64_t H = 2, D = 32, max_seqlen = 1000;
  const std::vector<int32_t> cu_seqlens = {0, 300, 1300, 1377};  // prefix sums of the lengths
  const int64_t total = cu_seqlens.back(), num_seqs = static_cast<int64_t>(cu_seqlens.size()) - 1;
  const spattn::Pattern pattern = spattn::Pattern::causal();
  const spattn::BlockMask mask = spattn::varlen_mask(pattern, max_seqlen, /*block_q=*/64, /*block_k=*/64, H);

  const size_t n = static_cast<size_t>(total * H * D);
  std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
  std::vector<float> out(n), alone(n);
  using spattn::DType;
  const auto packed = [&](std::vector<float>& data) {  // (total, H, D) as a (1, H, total, D) view
    return spattn::make_blhd(data.data(), DType::F32, 1, total, H, D);
  };
  const spattn::VarlenBatch batch{cu_seqlens.data(), cu_seqlens.data(), num_seqs, max_seqlen, max_seqlen};
  spattn::attention_varlen(packed(q), packed(k), packed(v), packed(out), batch, mask);

  // The same sequences one call each: views of their rows, each with its own mask.
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t first = cu_seqlens[s], len = cu_seqlens[s + 1] - first;
    const spattn::BlockMask own = spattn::BlockMask::build(pattern, spattn::MaskShape{len, len, 64, 64, H});
    spattn::attention(spattn::seq_slice(packed(q), first, len), spattn::seq_slice(packed(k), first, len),
                      spattn::seq_slice(packed(v), first, len), spattn::seq_slice(packed(alone), first, len), own);
  }
  const double err = max_abs_diff(out, alone);
  std::printf("varlen causal, %lld sequences, %lld rows: max |packed - one by one| = %.2e\n",
              static_cast<long long>(num_seqs), static_cast<long long>(total), err);
  return err < 1e-5 ? 0 : 1;
}
