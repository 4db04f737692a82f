// python/csrc/tensor_bridge.cpp - PyTorch tensors <-> spattn views and masks
// (see tensor_bridge.hpp).
#include "tensor_bridge.hpp"


#include "spattn/error.hpp"
#include "spattn/pattern_codec.hpp"

namespace spattn::torch_bridge {

DType dtype_of(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kDouble: return DType::F64;
    default: break;
  }
  TORCH_CHECK_TYPE(false, name, " dtype must be float16, bfloat16, float32 or float64, got ",
                   t.scalar_type());
  return DType::F32;
}

TensorView view_of(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 4, name, " must be 4-D (batch, heads, seq_len, head_dim), got ",
                    t.dim(), "-D shape ", t.sizes());
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = dtype_of(t, name);
  for (int axis = 0; axis < 4; ++axis) {
    v.shape[axis] = t.size(axis);
    v.stride[axis] = t.stride(axis);
  }
  return v;
}

TensorView lse_view_of(const at::Tensor& lse) {
  return make_lse(lse.data_ptr<float>(), lse.size(0), lse.size(1), lse.size(2));
}

at::Tensor cpu_contiguous(const at::Tensor& t, at::ScalarType dtype, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, " must be on the CPU here, got ", t.device());
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, name, " dtype must be ", dtype, ", got ", t.scalar_type());
  return t.contiguous();
}

namespace {

template <typename T>
std::vector<T> to_vector(const at::Tensor& t, at::ScalarType dtype, const char* name) {
  const at::Tensor c = cpu_contiguous(t, dtype, name);
  const T* data = c.data_ptr<T>();
  return std::vector<T>(data, data + c.numel());
}

template <typename T>
at::Tensor to_tensor(const std::vector<T>& v, at::ScalarType dtype) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(dtype));
  std::copy(v.begin(), v.end(), t.data_ptr<T>());
  return t;
}

}  // namespace

std::shared_ptr<const Pattern> pattern_of(const int64_t* code, int64_t code_size,
                                          const at::Tensor& table_i32, const at::Tensor& table_i64) {
  if (code_size == 0) return nullptr;
  const at::Tensor i32 = cpu_contiguous(table_i32, at::kInt, "table_i32");
  const at::Tensor i64 = cpu_contiguous(table_i64, at::kLong, "table_i64");
  return std::make_shared<const Pattern>(decode_pattern(code, code_size, i32.data_ptr<int32_t>(),
                                                        i32.numel(), i64.data_ptr<int64_t>(),
                                                        i64.numel()));
}

BlockMask host_block_mask(const MaskTensors& m) {
  const int64_t q_len = m.q_len, k_len = m.k_len;
  require(q_len >= 0 && k_len >= 0, "mask lengths must be >= 0, got Lq=", q_len, " Lk=", k_len);
  std::shared_ptr<const Pattern> pattern =
      pattern_of(m.code.data(), static_cast<int64_t>(m.code.size()), m.table_i32, m.table_i64);
  if (m.row_offsets.numel() == 0) {
    require(m.kv_indices.numel() == 0 && m.kv_full.numel() == 0,
            "row_offsets is empty (a dense mask) but kv_indices or kv_full is not");
    return BlockMask::build(pattern ? *pattern : Pattern::dense(),
                            MaskShape{q_len, k_len, m.block_q, m.block_k, 1});
  }
  require(m.block_q > 0 && m.block_k > 0, "mask block sizes must be > 0, got ", m.block_q, " x ",
          m.block_k);
  const int64_t num_q_blocks = (q_len + m.block_q - 1) / m.block_q;
  const int64_t rows = m.row_offsets.numel() - 1;
  require(num_q_blocks == 0 ? rows == 0 : rows > 0 && rows % num_q_blocks == 0, "row_offsets has ",
          m.row_offsets.numel(), " entries, which is not heads * ", num_q_blocks, " query blocks + 1 for Lq=",
          q_len, " and block_q=", m.block_q);
  // Without query blocks there is no row to count the heads by; the pattern's own count fits it.
  const int64_t heads = num_q_blocks == 0 ? (pattern ? pattern->num_exprs() : 1) : rows / num_q_blocks;
  return BlockMask(q_len, k_len, m.block_q, m.block_k, heads,
                   to_vector<int64_t>(m.row_offsets, at::kLong, "row_offsets"),
                   to_vector<int32_t>(m.kv_indices, at::kInt, "kv_indices"),
                   to_vector<uint8_t>(m.kv_full, at::kByte, "kv_full"), std::move(pattern));
}

PatternTensors pattern_tensors(const Pattern& pattern) {
  const EncodedPattern e = encode_pattern(pattern);
  return {tensor_of(e.code), tensor_of(e.table_i32), tensor_of(e.table_i64)};
}

at::Tensor tensor_of(const std::vector<int64_t>& values) { return to_tensor(values, at::kLong); }
at::Tensor tensor_of(const std::vector<int32_t>& values) { return to_tensor(values, at::kInt); }
at::Tensor tensor_of(const std::vector<uint8_t>& values) { return to_tensor(values, at::kByte); }

}  // namespace spattn::torch_bridge
