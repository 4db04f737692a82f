// tensor_checks.hpp - checks of one tensor view shared by the entry points'
// validation (attention.cpp, attention_backward.cpp).
#pragma once

#include "spattn/tensor.hpp"

namespace spattn {

// A view with batch, heads and seq_len >= 0 and head_dim > 0; unless it is
// empty (an axis of 0), a non-null one whose offsets fit in 64 bits. Errors
// name `name`.
void validate_tensor(const TensorView& t, const char* name);

// a has the shape of b; the error names both.
void require_same_shape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name);

}  // namespace spattn
