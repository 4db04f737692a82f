// tile_io.hpp - buffers and query/output tiles of the fast CPU backend.
//
// AlignedFloats are the backend's scratch buffers: 64-byte aligned, and backed
// by transparent huge pages when 2 MiB or larger (the kernels touch many pages
// per chunk; TLB misses were a measured cost, dev/notes/cpu-05-huge-pages-for-staged-k-v-micro.md). value_panels()
// gives the widths in which values are staged (kv_stage.hpp).
// pack_query_tile() writes one tile's queries transposed and pre-scaled;
// store_output_tile() normalises the kernel's accumulators into `out` (any
// dtype) and the optional LSE.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn::cpu_fast {

// fp32 buffer, uninitialised, aligned to 64 bytes; buffers of 2 MiB and more
// are aligned to 2 MiB and advised to use huge pages.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  explicit AlignedFloats(int64_t count);
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data_;
};

// (first head dim, width) of each value panel: `widest` while it fits in
// head_dim, then the largest power of two below the previous width while it
// fits, down to 1 (the order the kernels walk them).
std::vector<std::pair<int64_t, int64_t>> value_panels(int64_t head_dim, int64_t widest);

// The kernels' transpose: dst[c * dst_stride + r] = src[r * src_stride + c] * col_scale[c].
using TransposeFn = void (*)(const float* src, int64_t src_stride, int64_t rows, int64_t cols,
                             const float* col_scale, float* dst, int64_t dst_stride);

// q_t (D, tile_rows) = q[b, h, row0 + i, d] * dim_factors[d] for i < rows, 0
// beyond. fp32 rows with unit head-dim stride go through `transpose`; other
// layouts and dtypes are converted row by row through row_buffer (D floats).
void pack_query_tile(const TensorView& q, int64_t b, int64_t h, int64_t row0, int64_t rows,
                     const float* dim_factors, int64_t tile_rows, TransposeFn transpose,
                     float* row_buffer, float* q_t);

// out[b, h, row0 + i, :] = acc_t[:, i] / row_sum[i] (0 for rows with no allowed
// key) and lse = (row_max + log2(row_sum)) * ln 2 (-inf for those rows).
// fp32 outputs with unit head-dim stride go through `transpose`; `inverse`
// holds tile_rows floats of scratch.
void store_output_tile(const TensorView& out, const TensorView* lse, int64_t b, int64_t h,
                       int64_t row0, int64_t rows, int64_t tile_rows, const float* acc_t,
                       const float* row_max, const float* row_sum, TransposeFn transpose,
                       float* inverse);

}  // namespace spattn::cpu_fast
