// cuda/common/rows_without_keys.cu - out 0 and LSE -inf for every row of a call
// with no key (rows_without_keys.hpp): one grid-stride loop over the rows,
// each thread clearing one row element by element through its strides (a
// zero is all-zero bytes in fp16, bf16 and fp32 alike).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/rows_without_keys.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxCtas = 4096;  // the grid-stride loop covers any number of rows

struct RowsArgs {
  char* out = nullptr;
  int64_t elem_bytes = 0;
  int64_t out_b = 0, out_h = 0, out_l = 0, out_d = 0;  // strides in elements
  float* lse = nullptr;
  int64_t lse_b = 0, lse_h = 0, lse_l = 0;
  int64_t batch = 0, heads = 0, rows = 0, head_dim = 0;
};

__global__ void __launch_bounds__(kThreads) rows_without_keys_kernel(RowsArgs a) {
  const int64_t count = a.batch * a.heads * a.rows;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < count;
       r += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t l = r % a.rows, h = (r / a.rows) % a.heads, b = r / (a.rows * a.heads);
    char* row = a.out + (b * a.out_b + h * a.out_h + l * a.out_l) * a.elem_bytes;
    for (int64_t d = 0; d < a.head_dim; ++d)
      for (int64_t byte = 0; byte < a.elem_bytes; ++byte) row[d * a.out_d * a.elem_bytes + byte] = 0;
    if (a.lse) a.lse[b * a.lse_b + h * a.lse_h + l * a.lse_l] = -INFINITY;
  }
}

}  // namespace

void write_rows_without_keys(const TensorView& out, const TensorView* lse, cudaStream_t stream) {
  if (out.empty()) return;
  require(cuda_is_device_pointer(out.data), "CUDA backend: out must point to device memory");
  require(!lse || cuda_is_device_pointer(lse->data), "CUDA backend: lse must point to device memory");
  RowsArgs a;
  a.out = static_cast<char*>(out.data);
  a.elem_bytes = dtype_size(out.dtype);
  a.out_b = out.stride[0];
  a.out_h = out.stride[1];
  a.out_l = out.stride[2];
  a.out_d = out.stride[3];
  if (lse) {
    a.lse = static_cast<float*>(lse->data);
    a.lse_b = lse->stride[0];
    a.lse_h = lse->stride[1];
    a.lse_l = lse->stride[2];
  }
  a.batch = out.batch();
  a.heads = out.heads();
  a.rows = out.seq_len();
  a.head_dim = out.head_dim();
  const int64_t ctas = std::min<int64_t>((a.batch * a.heads * a.rows + kThreads - 1) / kThreads, kMaxCtas);
  rows_without_keys_kernel<<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(a);
  check_launch("rows without keys kernel launch");
}

}  // namespace spattn::cuda_detail
