// tools/spattn/host_tensor.cpp - owning host tensors (see host_tensor.hpp).
#include "host_tensor.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <new>

#include "spattn/error.hpp"

namespace spattn::cli {
namespace {

constexpr uintptr_t kAlignment = 64;  // bytes

}  // namespace

Layout parse_layout(const std::string& name) {
  if (name == "bhld") return Layout::BHLD;
  if (name == "blhd") return Layout::BLHD;
  fail("layout must be bhld or blhd, got '", name, "'");
}

const char* layout_name(Layout layout) { return layout == Layout::BHLD ? "bhld" : "blhd"; }

HostTensor::HostTensor(const std::string& what, DType dtype, int64_t B, int64_t H, int64_t L,
                       int64_t D, Layout layout) {
  const int64_t dims[4] = {B, H, L, D};
  int64_t count = 1;
  for (int64_t d : dims) {
    require(d >= 0, what, ": every dimension must be >= 0, got (", B, ", ", H, ", ", L, ", ", D, ")");
    require(d == 0 || count <= std::numeric_limits<int64_t>::max() / d / 8, what, ": (", B, ", ", H, ", ",
            L, ", ", D, ") elements overflow 64 bits");
    count *= d;
  }
  const int64_t size = count * dtype_size(dtype);
  try {
    bytes_.resize(static_cast<size_t>(size) + kAlignment - 1);
  } catch (const std::bad_alloc&) {
    fail(what, ": cannot allocate ", static_cast<double>(size) / (1 << 30), " GiB of host memory");
  }
  size_ = size;
  const uintptr_t misaligned = reinterpret_cast<uintptr_t>(bytes_.data()) % kAlignment;
  unsigned char* data = bytes_.data() + (misaligned == 0 ? 0 : kAlignment - misaligned);
  view_ = layout == Layout::BHLD ? make_bhld(data, dtype, B, H, L, D) : make_blhd(data, dtype, B, L, H, D);
}

void HostTensor::fill_normal(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t n = view_.numel();
  for (int64_t at = 0; at < n; ++at) store_from_double(view_.data, view_.dtype, at, normal(rng));
}

void HostTensor::poison() {
  const int64_t n = view_.numel();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t at = 0; at < n; ++at) store_from_double(view_.data, view_.dtype, at, nan);
}

double relative_error(const TensorView& a, const TensorView& b) {
  require(a.shape == b.shape, "relative_error: shapes differ: (", a.shape[0], ", ", a.shape[1], ", ",
          a.shape[2], ", ", a.shape[3], ") vs (", b.shape[0], ", ", b.shape[1], ", ", b.shape[2], ", ",
          b.shape[3], ")");
  double diff = 0.0, norm_a = 0.0, norm_b = 0.0;
  for (int64_t n = 0; n < a.shape[0]; ++n)
    for (int64_t h = 0; h < a.shape[1]; ++h)
      for (int64_t l = 0; l < a.shape[2]; ++l)
        for (int64_t d = 0; d < a.shape[3]; ++d) {
          const double x = a.load(n, h, l, d), y = b.load(n, h, l, d);
          diff += (x - y) * (x - y);
          norm_a += x * x;
          norm_b += y * y;
        }
  return norm_b > 0.0 ? std::sqrt(diff / norm_b) : std::sqrt(norm_a);
}

}  // namespace spattn::cli
