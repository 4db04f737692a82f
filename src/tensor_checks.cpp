// tensor_checks.cpp - checks of one tensor view (tensor_checks.hpp).
#include "tensor_checks.hpp"

#include <limits>

#include "spattn/error.hpp"

namespace spattn {
namespace {
constexpr int64_t kMaxOffset = std::numeric_limits<int64_t>::max() / 4;
}  // namespace

void validate_tensor(const TensorView& t, const char* name) {
  static const char* axes[4] = {"batch", "heads", "seq_len", "head_dim"};
  for (int axis = 0; axis < 3; ++axis)
    require(t.shape[axis] >= 0, name, " ", axes[axis], " must be >= 0, got ", t.shape[axis]);
  require(t.shape[3] > 0, name, " head_dim must be > 0, got ", t.shape[3]);
  if (t.empty()) return;  // no element is addressed: any pointer and strides will do
  require(t.data != nullptr, name, " has a null data pointer");
  int64_t max_offset = 0;
  for (int axis = 0; axis < 4; ++axis) {
    const int64_t stride = t.stride[axis] < 0 ? -t.stride[axis] : t.stride[axis];
    require(stride <= kMaxOffset / t.shape[axis], name, " ", axes[axis], " (", t.shape[axis],
            ") times its stride (", t.stride[axis], ") overflows 64-bit offsets");
    require(max_offset <= kMaxOffset - (t.shape[axis] - 1) * stride, name,
            " spans more elements than 64-bit offsets can address");
    max_offset += (t.shape[axis] - 1) * stride;
  }
}

void require_same_shape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  require(a.shape == b.shape, a_name, " shape (", a.shape[0], ", ", a.shape[1], ", ", a.shape[2], ", ",
          a.shape[3], ") must equal ", b_name, " shape (", b.shape[0], ", ", b.shape[1], ", ", b.shape[2],
          ", ", b.shape[3], ")");
}

}  // namespace spattn
