// python/csrc/pattern_ops.cpp - operators that build patterns and block masks
// for the Python package (host-side set-up, run eagerly, not traced).
//
// Every pattern crosses as its encoding (spattn/pattern_codec.hpp) in three CPU
// tensors (code int64, table_i32, table_i64): the builders return it, the
// composition operators take and return it, and block_mask_build turns it
// into a packed mask (packed_mask.hpp) with BlockMask::build;
// block_mask_pack packs a mask's arrays made elsewhere (FlexAttention masks,
// dynamic selections) on their device. The queries of a mask (kept pairs,
// the dense token mask) read the packed tensor.
// Builder errors keep the library's wording and arrive as ValueError; so does
// a mask too large for the memory available (its arrays exist twice while
// they are copied into tensors, and the check counts both).
#include <torch/library.h>

#include <string>
#include <vector>

#include "mask_registry.hpp"
#include "packed_mask.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"
#include "spattn/pattern.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

Pattern decode(const at::Tensor& code, const at::Tensor& table_i32, const at::Tensor& table_i64) {
  const at::Tensor c = cpu_contiguous(code, at::kLong, "code");
  require(c.numel() > 0, "code is empty: no pattern");
  return *pattern_of(c.data_ptr<int64_t>(), c.numel(), table_i32, table_i64);
}

template <typename Build>
PatternTensors encoded(Build&& build) {
  return run_with_value_errors([&] { return pattern_tensors(build()); });
}

std::vector<int64_t> to_vector(at::IntArrayRef list) { return std::vector<int64_t>(list.begin(), list.end()); }

PatternTensors pattern_dense(bool causal) {
  return encoded([&] { return Pattern::dense(causal); });
}
PatternTensors pattern_block_diagonal(int64_t block, bool causal) {
  return encoded([&] { return Pattern::block_diagonal(block, causal); });
}
PatternTensors pattern_sliding_window(int64_t left, int64_t right, bool causal) {
  return encoded([&] { return Pattern::sliding_window(left, right, causal); });
}
PatternTensors pattern_streaming(int64_t sink, int64_t window) {
  return encoded([&] { return Pattern::streaming(sink, window); });
}
PatternTensors pattern_strided(int64_t stride) {
  return encoded([&] { return Pattern::strided(stride); });
}
PatternTensors pattern_fixed(int64_t stride, int64_t summary) {
  return encoded([&] { return Pattern::fixed(stride, summary); });
}
PatternTensors pattern_dilated(at::IntArrayRef segments, at::IntArrayRef rates, bool causal) {
  return encoded([&] { return Pattern::dilated(to_vector(segments), to_vector(rates), causal); });
}
PatternTensors pattern_bigbird(int64_t seq_len_k, int64_t block, int64_t window_blocks,
                               int64_t global_blocks, int64_t random_blocks, int64_t seed,
                               bool causal) {
  return encoded([&] {
    require(seed >= 0, "seed must be >= 0, got ", seed);
    return Pattern::bigbird(seq_len_k, block, window_blocks, global_blocks, random_blocks,
                            static_cast<uint64_t>(seed), causal);
  });
}
PatternTensors pattern_longformer(int64_t window, at::IntArrayRef global_tokens, bool causal) {
  return encoded([&] { return Pattern::longformer(window, to_vector(global_tokens), causal); });
}

// blocks: (heads, rows, cols) bool or uint8.
PatternTensors pattern_custom(const at::Tensor& blocks, int64_t block_q, int64_t block_k, bool causal) {
  TORCH_CHECK_VALUE(blocks.dim() == 3, "blocks must be 3-D (heads, rows, cols), got shape ",
                    blocks.sizes());
  const at::Tensor b = cpu_contiguous(blocks.to(at::kByte), at::kByte, "blocks");
  const uint8_t* data = b.data_ptr<uint8_t>();
  const std::vector<uint8_t> values(data, data + b.numel());
  return encoded([&] {
    return Pattern::custom(values, b.size(0), b.size(1), b.size(2), block_q, block_k, causal);
  });
}

// BSR form of a custom pattern: offsets (heads * rows + 1) int64, indices int32.
PatternTensors pattern_custom_bsr(const at::Tensor& offsets, const at::Tensor& indices, int64_t heads,
                                  int64_t rows, int64_t cols, int64_t block_q, int64_t block_k,
                                  bool causal) {
  const at::Tensor o = cpu_contiguous(offsets, at::kLong, "offsets");
  const at::Tensor i = cpu_contiguous(indices, at::kInt, "indices");
  std::vector<int64_t> o_values(o.data_ptr<int64_t>(), o.data_ptr<int64_t>() + o.numel());
  std::vector<int32_t> i_values(i.data_ptr<int32_t>(), i.data_ptr<int32_t>() + i.numel());
  return encoded([&] {
    return Pattern::custom_bsr(std::move(o_values), std::move(i_values), heads, rows, cols, block_q,
                               block_k, causal);
  });
}

PatternTensors pattern_combine(const at::Tensor& a_code, const at::Tensor& a_i32,
                               const at::Tensor& a_i64, const at::Tensor& b_code,
                               const at::Tensor& b_i32, const at::Tensor& b_i64, bool intersect) {
  return encoded([&] {
    const Pattern a = decode(a_code, a_i32, a_i64), b = decode(b_code, b_i32, b_i64);
    return intersect ? Pattern::intersect(a, b) : Pattern::unite(a, b);
  });
}

PatternTensors pattern_per_head(at::TensorList codes, at::TensorList i32s, at::TensorList i64s) {
  TORCH_CHECK_VALUE(codes.size() == i32s.size() && codes.size() == i64s.size(),
                    "per_head needs one code and two tables per head");
  return encoded([&] {
    std::vector<Pattern> heads;
    for (size_t h = 0; h < codes.size(); ++h) heads.push_back(decode(codes[h], i32s[h], i64s[h]));
    return Pattern::per_head(heads);
  });
}

PatternTensors pattern_with_causal(const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64) {
  return encoded([&] { return decode(code, i32, i64).with_causal(); });
}

PatternTensors pattern_framed(const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64,
                              int64_t first_row, int64_t first_key, int64_t q_len, int64_t k_len) {
  return encoded([&] { return decode(code, i32, i64).framed(first_row, first_key, q_len, k_len); });
}

// The description as UTF-8 bytes (uint8 tensor), decoded by the Python side.
at::Tensor pattern_describe(const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64) {
  return run_with_value_errors([&] {
    const std::string text = decode(code, i32, i64).describe();
    return tensor_of(std::vector<uint8_t>(text.begin(), text.end()));
  });
}

bool pattern_head_dependent(const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64) {
  return run_with_value_errors([&] { return decode(code, i32, i64).head_dependent(); });
}

at::Tensor block_mask_build(const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64, int64_t q_len,
                            int64_t k_len, int64_t block_q, int64_t block_k, int64_t num_heads) {
  return run_with_value_errors([&] {
    const Pattern pattern = decode(code, i32, i64);
    const MaskShape shape{q_len, k_len, block_q, block_k, num_heads};
    const int64_t bytes = BlockMask::build_bytes(pattern, shape);
    // The arrays exist three times at the peak: the mask, its tensors, the packed tensor.
    MemoryEstimate("a block mask for seq_len=" + std::to_string(q_len) + ", seq_len_k=" + std::to_string(k_len) +
                   ", block_size=(" + std::to_string(block_q) + ", " + std::to_string(block_k) +
                   "), num_heads=" + std::to_string(num_heads))
        .add("the mask (estimated)", bytes)
        .add("its tensors", 2 * bytes)
        .check();
    return pack_mask(BlockMask::build(pattern, shape), PatternTensors{code, i32, i64});
  });
}

// A mask's arrays (row_offsets int64, kv_indices int32, kv_full uint8, on one
// device) and its pattern's encoding, packed on that device. Checked when the
// mask is first used.
at::Tensor block_mask_pack(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t num_heads,
                           const at::Tensor& row_offsets, const at::Tensor& kv_indices, const at::Tensor& kv_full,
                           const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64) {
  return run_with_value_errors([&] {
    TORCH_CHECK_VALUE(kv_indices.device() == row_offsets.device() && kv_full.device() == row_offsets.device(),
                      "row_offsets, kv_indices and kv_full must be on one device, got ", row_offsets.device(), ", ",
                      kv_indices.device(), " and ", kv_full.device());
    PackedHeader h;
    h.q_len = q_len;
    h.k_len = k_len;
    h.block_q = block_q;
    h.block_k = block_k;
    h.num_heads = num_heads;
    h.num_blocks = kv_indices.numel();
    h.code_words = code.numel();
    h.table_i32 = i32.numel();
    h.table_i64 = i64.numel();
    require(row_offsets.numel() == h.num_rows() + 1, "row_offsets has ", row_offsets.numel(),
            " entries, but num_heads * query blocks + 1 = ", h.num_rows() + 1);
    require(kv_full.numel() == h.num_blocks, "kv_full has ", kv_full.numel(), " entries but kv_indices has ",
            h.num_blocks);
    return pack_mask(h, row_offsets, kv_indices, kv_full, PatternTensors{code, i32, i64});
  });
}

int64_t block_mask_kept_pairs(const at::Tensor& mask, int64_t query_heads) {
  return run_with_value_errors([&] { return registered_mask(mask, 0, 0)->kept_pairs(query_heads); });
}

// (query_heads, Lq, Lk) bool: which pairs the mask allows, read through the plan.
at::Tensor block_mask_to_dense(const at::Tensor& packed, int64_t query_heads) {
  return run_with_value_errors([&] {
    const BlockMask& mask = *registered_mask(packed, 0, 0);
    const int64_t q_len = mask.q_len(), k_len = mask.k_len();
    require(query_heads > 0 && query_heads % mask.num_heads() == 0, "query_heads must be a positive ",
            "multiple of the mask's heads (", mask.num_heads(), "), got ", query_heads);
    at::Tensor dense = at::zeros({query_heads, q_len, k_len}, at::TensorOptions().dtype(at::kBool));
    bool* out = dense.data_ptr<bool>();
    const BlockMaskView view = mask.view();
    const int64_t offset = k_len - q_len;
    for (int64_t h = 0; h < query_heads; ++h) {
      const int64_t mh = view.mask_head(h, query_heads);
      // Null only when every block is full (BlockMask checks), so never read then.
      const PatternExpr* expr = mask.pattern() ? &mask.pattern()->expr_for_head(h, query_heads) : nullptr;
      for (int64_t qb = 0; qb < view.num_q_blocks; ++qb) {
        const int64_t r = view.row(mh, qb);
        for (int64_t at = view.row_begin(r); at < view.row_end(r); ++at) {
          const int64_t kb = view.kv_indices[at];
          const bool full = view.kv_full[at] != 0;
          for (int64_t i = view.q_first(qb); i < view.q_last(qb); ++i)
            for (int64_t j = view.k_first(kb); j < view.k_last(kb); ++j)
              out[(h * q_len + i) * k_len + j] = full || expr_allows(*expr, h, i, i + offset, j);
        }
      }
    }
    return dense;
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  using namespace spattn::torch_bridge;
  const std::string encoded = " -> (Tensor code, Tensor table_i32, Tensor table_i64)";
  const std::string pattern_args = "Tensor code, Tensor table_i32, Tensor table_i64";
  auto def = [&m](const std::string& schema, auto kernel) { m.def(schema.c_str(), kernel); };
  def("pattern_dense(bool causal)" + encoded, &pattern_dense);
  def("pattern_block_diagonal(int block, bool causal)" + encoded, &pattern_block_diagonal);
  def("pattern_sliding_window(int left, int right, bool causal)" + encoded, &pattern_sliding_window);
  def("pattern_streaming(int sink, int window)" + encoded, &pattern_streaming);
  def("pattern_strided(int stride)" + encoded, &pattern_strided);
  def("pattern_fixed(int stride, int summary)" + encoded, &pattern_fixed);
  def("pattern_dilated(int[] segments, int[] rates, bool causal)" + encoded, &pattern_dilated);
  def("pattern_bigbird(int seq_len_k, int block, int window_blocks, int global_blocks, "
      "int random_blocks, int seed, bool causal)" + encoded,
      &pattern_bigbird);
  def("pattern_longformer(int window, int[] global_tokens, bool causal)" + encoded, &pattern_longformer);
  def("pattern_custom(Tensor blocks, int block_q, int block_k, bool causal)" + encoded, &pattern_custom);
  def("pattern_custom_bsr(Tensor offsets, Tensor indices, int heads, int rows, int cols, "
      "int block_q, int block_k, bool causal)" + encoded,
      &pattern_custom_bsr);
  def("pattern_combine(Tensor a_code, Tensor a_table_i32, Tensor a_table_i64, Tensor b_code, "
      "Tensor b_table_i32, Tensor b_table_i64, bool intersect)" + encoded,
      &pattern_combine);
  def("pattern_per_head(Tensor[] codes, Tensor[] tables_i32, Tensor[] tables_i64)" + encoded,
      &pattern_per_head);
  def("pattern_with_causal(" + pattern_args + ")" + encoded, &pattern_with_causal);
  def("pattern_framed(" + pattern_args + ", int first_row, int first_key, int q_len, int k_len)" + encoded,
      &pattern_framed);
  def("pattern_describe(" + pattern_args + ") -> Tensor", &pattern_describe);
  def("pattern_head_dependent(" + pattern_args + ") -> bool", &pattern_head_dependent);
  def("block_mask_build(" + pattern_args + ", int q_len, int k_len, int block_q, int block_k, int num_heads) -> Tensor",
      &block_mask_build);
  def("block_mask_pack(int q_len, int k_len, int block_q, int block_k, int num_heads, Tensor row_offsets, "
      "Tensor kv_indices, Tensor kv_full, " + pattern_args + ") -> Tensor",
      &block_mask_pack);
  def("block_mask_kept_pairs(Tensor mask, int query_heads) -> int", &block_mask_kept_pairs);
  def("block_mask_to_dense(Tensor mask, int query_heads) -> Tensor", &block_mask_to_dense);
}
