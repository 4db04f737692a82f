// cuda/common/head_dim_list.hpp - the head dims a kernel family is built for:
// each dispatcher lists them (from its build's SPATTN_CUDA_*HDIM_<d> macros)
// in a constexpr array ended by 0, and asks these two questions of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace spattn::cuda_detail {

template <std::size_t N>
constexpr bool head_dim_in(const int (&dims)[N], int64_t head_dim) {
  for (const int d : dims)
    if (d != 0 && d == head_dim) return true;
  return false;
}

// "64, 128": for error messages.
template <std::size_t N>
std::string head_dim_names(const int (&dims)[N]) {
  std::string s;
  for (const int d : dims)
    if (d != 0) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

}  // namespace spattn::cuda_detail
