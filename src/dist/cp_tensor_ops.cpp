// dist/cp_tensor_ops.cpp - the elementwise steps of context-parallel
// attention on host memory, and the dispatch to their device versions
// (cp_tensor_ops.cu) for device memory.
#include "dist/cp_tensor_ops.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "dist/lse_merge.hpp"
#include "spattn/error.hpp"
#if defined(SPATTN_WITH_CUDA)
#include "spattn/cuda.hpp"
#endif

namespace spattn::dist::detail {

namespace {

// Calls fn(b, h, l, d) for every element of a view of `shape`.
template <typename Fn>
void for_each_element(const std::array<int64_t, 4>& shape, Fn&& fn) {
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t h = 0; h < shape[1]; ++h)
      for (int64_t l = 0; l < shape[2]; ++l)
        for (int64_t d = 0; d < shape[3]; ++d) fn(b, h, l, d);
}

void require_same_shape(const TensorView& a, const TensorView& b, const char* what) {
  require(a.shape == b.shape, what, ": shapes differ (", a.shape[0], ", ", a.shape[1], ", ", a.shape[2], ", ",
          a.shape[3], ") and (", b.shape[0], ", ", b.shape[1], ", ", b.shape[2], ", ", b.shape[3], ")");
}

float* f32_at(const TensorView& t, int64_t b, int64_t h, int64_t l, int64_t d) {
  return static_cast<float*>(t.data) + t.offset(b, h, l, d);
}

}  // namespace

bool on_device(const void* p) {
#if defined(SPATTN_WITH_CUDA)
  return p != nullptr && cuda_is_device_pointer(p);
#else
  (void)p;
  return false;
#endif
}

std::shared_ptr<void> allocate(int64_t bytes, bool device) {
  require(bytes >= 0, "context parallelism: a buffer of ", bytes, " bytes");
  if (device) return device_allocate(bytes);
  void* p = std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1));
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<void>(p, std::free);
}

void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  if (on_device(dst) || on_device(src)) return device_copy_bytes(dst, src, bytes);
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void synchronize(void* stream, bool device) {
  if (device) device_synchronize(stream);
}

int current_device() {
#if defined(SPATTN_WITH_CUDA)
  return device_current();
#else
  return -1;
#endif
}

void use_device(int device) {
  if (device >= 0) device_use(device);
}

void convert(const TensorView& dst, const TensorView& src, void* stream) {
  require_same_shape(dst, src, "context parallelism: convert");
  if (dst.empty()) return;
  if (on_device(dst.data)) return device_convert(dst, src, stream);
  for_each_element(dst.shape, [&](int64_t b, int64_t h, int64_t l, int64_t d) {
    dst.store(b, h, l, d, src.load(b, h, l, d));
  });
}

void fill(const TensorView& t, double value, void* stream) {
  if (t.empty()) return;
  if (on_device(t.data)) return device_fill(t, value, stream);
  for_each_element(t.shape, [&](int64_t b, int64_t h, int64_t l, int64_t d) { t.store(b, h, l, d, value); });
}

void add_into(const TensorView& acc, const TensorView& part, void* stream) {
  require_same_shape(acc, part, "context parallelism: add_into");
  require(acc.dtype == DType::F32, "context parallelism: add_into accumulates in fp32");
  if (acc.empty()) return;
  if (on_device(acc.data)) return device_add_into(acc, part, stream);
  for_each_element(acc.shape, [&](int64_t b, int64_t h, int64_t l, int64_t d) {
    *f32_at(acc, b, h, l, d) += static_cast<float>(part.load(b, h, l, d));
  });
}

void merge_into(const TensorView& acc_out, const TensorView& acc_lse, const TensorView& part_out,
                const TensorView& part_lse, void* stream) {
  require_same_shape(acc_out, part_out, "context parallelism: merge_into");
  require_same_shape(acc_lse, part_lse, "context parallelism: merge_into (lse)");
  for (const TensorView* t : {&acc_out, &acc_lse, &part_out, &part_lse})
    require(t->dtype == DType::F32, "context parallelism: merge_into merges fp32 results");
  if (acc_out.empty()) return;
  if (on_device(acc_out.data)) return device_merge_into(acc_out, acc_lse, part_out, part_lse, stream);
  const auto& s = acc_out.shape;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t l = 0; l < s[2]; ++l) {
        float* lse = f32_at(acc_lse, b, h, l, 0);
        const LseMerge m = LseMerge::of(*lse, *f32_at(part_lse, b, h, l, 0));
        *lse = m.lse;
        for (int64_t d = 0; d < s[3]; ++d) {
          float* o = f32_at(acc_out, b, h, l, d);
          const float p = *f32_at(part_out, b, h, l, d);
          // A weight of 0 drops its side even where that side holds no value yet.
          *o = (m.w_a != 0.0f ? m.w_a * *o : 0.0f) + (m.w_b != 0.0f ? m.w_b * p : 0.0f);
        }
      }
}

#if !defined(SPATTN_WITH_CUDA)
namespace {
[[noreturn]] void no_cuda() { fail("context parallelism: device memory in a build without CUDA"); }
}  // namespace
void device_convert(const TensorView&, const TensorView&, void*) { no_cuda(); }
void device_fill(const TensorView&, double, void*) { no_cuda(); }
void device_add_into(const TensorView&, const TensorView&, void*) { no_cuda(); }
void device_merge_into(const TensorView&, const TensorView&, const TensorView&, const TensorView&, void*) {
  no_cuda();
}
std::shared_ptr<void> device_allocate(int64_t) { no_cuda(); }
void device_copy_bytes(void*, const void*, int64_t) { no_cuda(); }
void device_synchronize(void*) { no_cuda(); }
int device_current() { no_cuda(); }
void device_use(int) { no_cuda(); }
#endif

}  // namespace spattn::dist::detail
