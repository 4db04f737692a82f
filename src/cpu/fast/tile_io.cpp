// tile_io.cpp - aligned buffers, value panels, query-tile packing and output
// stores for the fast CPU backend (see tile_io.hpp).
#include "cpu/fast/tile_io.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cpu/fast/element_access.hpp"

namespace spattn::cpu_fast {
namespace {

constexpr double kLn2 = 0.69314718055994530942;

}  // namespace

AlignedFloats::AlignedFloats(int64_t count) {
  constexpr size_t kHugePage = size_t{2} << 20;
  size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(float);
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  bytes = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, bytes);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__)
  if (alignment == kHugePage) madvise(p, bytes, MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
  data_.reset(static_cast<float*>(p));
}

void AlignedFloats::Free::operator()(float* p) const { std::free(p); }

std::vector<std::pair<int64_t, int64_t>> value_panels(int64_t head_dim, int64_t widest) {
  std::vector<std::pair<int64_t, int64_t>> panels;
  int64_t d = 0;
  for (int64_t w = widest; w > 0;) {
    for (; d + w <= head_dim; d += w) panels.emplace_back(d, w);
    int64_t next = 1;  // the largest power of two below w, as the kernels do
    while (next * 2 < w) next *= 2;
    w = w == 1 ? 0 : next;
  }
  return panels;
}

void pack_query_tile(const TensorView& q, int64_t b, int64_t h, int64_t row0, int64_t rows,
                     const float* dim_factors, int64_t tile_rows, TransposeFn transpose,
                     float* row_buffer, float* q_t) {
  const int64_t D = q.head_dim();
  if (q.dtype == DType::F32 && q.stride[3] == 1) {
    transpose(static_cast<const float*>(q.data) + q.offset(b, h, row0, 0), q.stride[2], rows, D,
              dim_factors, q_t, tile_rows);
  } else {
    with_loader(q, [&](auto load) {
      for (int64_t i = 0; i < rows; ++i) {
        const float* row = row_as_float(q, load, b, h, row0 + i, row_buffer);
        for (int64_t d = 0; d < D; ++d) q_t[d * tile_rows + i] = row[d] * dim_factors[d];
      }
    });
  }
  for (int64_t d = 0; d < D; ++d)
    for (int64_t i = rows; i < tile_rows; ++i) q_t[d * tile_rows + i] = 0.0f;
}

void store_output_tile(const TensorView& out, const TensorView* lse, int64_t b, int64_t h,
                       int64_t row0, int64_t rows, int64_t tile_rows, const float* acc_t,
                       const float* row_max, const float* row_sum, TransposeFn transpose,
                       float* inverse) {
  const int64_t D = out.head_dim(), sd = out.stride[3];
  for (int64_t i = 0; i < rows; ++i) inverse[i] = row_sum[i] == 0.0f ? 0.0f : 1.0f / row_sum[i];
  if (out.dtype == DType::F32 && sd == 1) {
    transpose(acc_t, tile_rows, D, rows, inverse, static_cast<float*>(out.data) + out.offset(b, h, row0, 0),
              out.stride[2]);
  } else {
    with_storer(out, [&](auto store) {
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t base = out.offset(b, h, row0 + i, 0);
        for (int64_t d = 0; d < D; ++d) store(base + d * sd, acc_t[d * tile_rows + i] * inverse[i]);
      }
    });
  }
  if (!lse) return;
  for (int64_t i = 0; i < rows; ++i)
    lse->store(b, h, row0 + i, 0,
               row_sum[i] == 0.0f
                   ? -std::numeric_limits<double>::infinity()
                   : (static_cast<double>(row_max[i]) + std::log2(static_cast<double>(row_sum[i]))) * kLn2);
}

}  // namespace spattn::cpu_fast
