// cuda/common/packed_rows.cu - the copies between grouped query heads and
// their packed rows (packed_rows.hpp): one thread per 32-bit word of a row
// (a pair of fp16 / bf16 elements, or one fp32), over one grid.
#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/packed_rows.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kThreads = 256;

// Strides in 32-bit words.
struct WordStrides {
  int64_t b, h, l;
};

__global__ void __launch_bounds__(kThreads)
    packed_rows_kernel(const uint32_t* src, uint32_t* dst, WordStrides heads, WordStrides packed,
                       PackedRowsShape shape, int64_t row_words, bool to_packed, int64_t words) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= words) return;
  const int64_t w = index % row_words;
  int64_t rest = index / row_words;
  const int64_t l = rest % shape.positions;
  rest /= shape.positions;
  const int64_t h = rest % shape.q_heads;
  const int64_t b = rest / shape.q_heads;
  const int64_t at_heads = b * heads.b + h * heads.h + l * heads.l + w;
  const int64_t at_packed =
      b * packed.b + (h / shape.group) * packed.h + (l * shape.group + h % shape.group) * packed.l + w;
  if (to_packed)
    dst[at_packed] = src[at_heads];
  else
    dst[at_heads] = src[at_packed];
}

WordStrides word_strides(const TensorArg& t, int64_t elem_bytes, const char* name) {
  const int64_t bytes[3] = {t.stride_b * elem_bytes, t.stride_h * elem_bytes, t.stride_l * elem_bytes};
  for (int64_t s : bytes)
    require(s % 4 == 0, "CUDA backend: packing query heads needs ", name, " strides of whole 4-byte words, got ",
            s, " bytes");
  require(reinterpret_cast<uintptr_t>(t.data) % 4 == 0, "CUDA backend: packing query heads needs ", name,
          " 4-byte aligned");
  return {bytes[0] / 4, bytes[1] / 4, bytes[2] / 4};
}

}  // namespace

void launch_packed_rows(const TensorArg& heads, const TensorArg& packed, const PackedRowsShape& shape,
                        PackDirection direction, cudaStream_t stream) {
  require(shape.group >= 1 && shape.q_heads % shape.group == 0, "CUDA backend: packing ", shape.q_heads,
          " query heads needs a group dividing them, got ", shape.group);
  const int64_t row_bytes = shape.cols * shape.elem_bytes;
  require(row_bytes % 4 == 0, "CUDA backend: packing query heads needs rows of whole 4-byte words, got ",
          row_bytes, " bytes");
  const int64_t row_words = row_bytes / 4;
  const int64_t words = shape.batch * shape.q_heads * shape.positions * row_words;
  if (words == 0) return;
  const WordStrides h = word_strides(heads, shape.elem_bytes, "the caller's tensor");
  const WordStrides p = word_strides(packed, shape.elem_bytes, "the packed tensor");
  const bool to_packed = direction == PackDirection::ToPacked;
  const auto* src = static_cast<const uint32_t*>(to_packed ? heads.data : packed.data);
  auto* dst = static_cast<uint32_t*>(to_packed ? packed.data : heads.data);
  const int64_t ctas = (words + kThreads - 1) / kThreads;
  require(ctas <= 0x7fffffff, "CUDA backend: packing ", words, " words needs more CTAs than the grid limit");
  packed_rows_kernel<<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(src, dst, h, p, shape, row_words,
                                                                          to_packed, words);
  check_launch("packed rows kernel launch");
}

}  // namespace spattn::cuda_detail
