// tools/spattn/host_tensor.hpp - owning host tensors for the spattn tool.
//
// A HostTensor is a byte buffer plus a TensorView on it, in either the
// (B, H, L, D) or the (B, L, H, D) layout, filled with N(0, 1) values rounded
// to its dtype. Sizes are checked for overflow before allocating. The data
// starts on a 64-byte boundary, as tensor allocators (PyTorch's included) give.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn::cli {

enum class Layout { BHLD, BLHD };

Layout parse_layout(const std::string& name);
const char* layout_name(Layout layout);

class HostTensor {
 public:
  // `what` names the tensor in errors (e.g. "q").
  HostTensor(const std::string& what, DType dtype, int64_t B, int64_t H, int64_t L, int64_t D,
             Layout layout);

  const TensorView& view() const { return view_; }
  int64_t bytes() const { return size_; }

  // Every element N(0, 1), rounded to the dtype.
  void fill_normal(std::mt19937_64& rng);
  // Every element NaN (quiet NaN in the 16-bit formats), so unwritten output shows.
  void poison();

 private:
  std::vector<unsigned char> bytes_;  // size_ bytes from the first 64-byte boundary
  int64_t size_ = 0;
  TensorView view_;
};

// ||a - b|| / ||b|| over the logical elements of two views of one shape;
// ||a|| when b is all zeros. NaN in a gives NaN.
double relative_error(const TensorView& a, const TensorView& b);

}  // namespace spattn::cli
