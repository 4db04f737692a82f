// python/csrc/packed_mask.cpp - packing and unpacking the one-tensor form of
// a BlockMask (see packed_mask.hpp).
#include "packed_mask.hpp"

#include <vector>

#include "spattn/error.hpp"

namespace spattn::torch_bridge {
namespace {

int64_t words_of(int64_t count, int64_t element_bytes) { return (count * element_bytes + 7) / 8; }

// `t` (1-D) as `dtype`, zero-padded to whole int64 words and viewed as them.
at::Tensor as_words(const at::Tensor& t, at::ScalarType dtype) {
  const at::Tensor typed = t.reshape({-1}).to(dtype).contiguous();
  const int64_t per_word = 8 / static_cast<int64_t>(typed.element_size());
  const int64_t padding = (-typed.numel() % per_word + per_word) % per_word;
  return at::cat({typed, at::zeros({padding}, typed.options())}).view(at::kLong);
}

}  // namespace

int64_t PackedHeader::num_rows() const { return num_heads * ((q_len + block_q - 1) / block_q); }

PackedHeader::Sections PackedHeader::sections() const {
  Sections s{};
  s.row_offsets = kHeaderWords;
  s.kv_indices = s.row_offsets + num_rows() + 1;
  s.kv_full = s.kv_indices + words_of(num_blocks, 4);
  s.code = s.kv_full + words_of(num_blocks, 1);
  s.table_i32 = s.code + code_words;
  s.table_i64 = s.table_i32 + words_of(table_i32, 4);
  s.end = s.table_i64 + table_i64;
  return s;
}

at::Tensor pack_mask(const PackedHeader& h, const at::Tensor& row_offsets, const at::Tensor& kv_indices,
                     const at::Tensor& kv_full, const PatternTensors& pattern) {
  const auto& [code, table_i32, table_i64] = pattern;
  const at::TensorOptions on = row_offsets.options().dtype(at::kLong);
  const at::Tensor header = at::tensor({kPackedVersion, h.q_len, h.k_len, h.block_q, h.block_k, h.num_heads,
                                        h.num_blocks, h.code_words, h.table_i32, h.table_i64},
                                       at::TensorOptions().dtype(at::kLong))
                                .to(on.device());
  at::Tensor packed = at::cat({header, row_offsets.reshape({-1}).to(at::kLong), as_words(kv_indices, at::kInt),
                               as_words(kv_full, at::kByte), code.to(on), as_words(table_i32.to(on.device()), at::kInt),
                               table_i64.to(on)});
  TORCH_CHECK(packed.numel() == h.sections().end, "packed mask of ", packed.numel(), " words, expected ",
              h.sections().end);
  return packed;
}

at::Tensor pack_mask(const BlockMask& mask, const PatternTensors& pattern) {
  PackedHeader h;
  h.q_len = mask.q_len();
  h.k_len = mask.k_len();
  h.block_q = mask.block_q();
  h.block_k = mask.block_k();
  h.num_heads = mask.num_heads();
  h.num_blocks = mask.num_blocks();
  h.code_words = std::get<0>(pattern).numel();
  h.table_i32 = std::get<1>(pattern).numel();
  h.table_i64 = std::get<2>(pattern).numel();
  return pack_mask(h, tensor_of(mask.row_offsets()), tensor_of(mask.kv_indices()), tensor_of(mask.kv_full()),
                   pattern);
}

BlockMask unpack_mask(const at::Tensor& packed_in) {
  const at::Tensor packed = cpu_contiguous(packed_in, at::kLong, "mask");
  const int64_t* w = packed.data_ptr<int64_t>();
  require(packed.dim() == 1 && packed.numel() >= kHeaderWords && w[0] == kPackedVersion,
          "mask: not a packed spattn mask (make masks with spattn.patterns or spattn.BlockMask)");
  PackedHeader h;
  h.q_len = w[1];
  h.k_len = w[2];
  h.block_q = w[3];
  h.block_k = w[4];
  h.num_heads = w[5];
  h.num_blocks = w[6];
  h.code_words = w[7];
  h.table_i32 = w[8];
  h.table_i64 = w[9];
  require(h.q_len >= 0 && h.k_len >= 0 && h.block_q > 0 && h.block_k > 0 && h.num_heads > 0 && h.num_blocks >= 0 &&
              h.code_words >= 0 && h.table_i32 >= 0 && h.table_i64 >= 0,
          "mask: its header is corrupt (Lq=", h.q_len, ", Lk=", h.k_len, ", blocks ", h.block_q, " x ", h.block_k,
          ", heads ", h.num_heads, ")");
  const PackedHeader::Sections s = h.sections();
  require(packed.numel() == s.end, "mask: the packed tensor has ", packed.numel(), " words but its header needs ",
          s.end);
  const auto bytes = [&](int64_t word) { return reinterpret_cast<const unsigned char*>(w + word); };
  const int64_t rows = h.num_rows();
  std::vector<int64_t> row_offsets(w + s.row_offsets, w + s.row_offsets + rows + 1);
  const auto* indices = reinterpret_cast<const int32_t*>(bytes(s.kv_indices));
  std::vector<int32_t> kv_indices(indices, indices + h.num_blocks);
  std::vector<uint8_t> kv_full(bytes(s.kv_full), bytes(s.kv_full) + h.num_blocks);
  const at::Tensor table_i32 = packed.slice(0, s.table_i32, s.table_i64).view(at::kInt).slice(0, 0, h.table_i32);
  const at::Tensor table_i64 = packed.slice(0, s.table_i64, s.end);
  return BlockMask(h.q_len, h.k_len, h.block_q, h.block_k, h.num_heads, std::move(row_offsets),
                   std::move(kv_indices), std::move(kv_full),
                   pattern_of(w + s.code, h.code_words, table_i32.contiguous(), table_i64.contiguous()));
}

}  // namespace spattn::torch_bridge
