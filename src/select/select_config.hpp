// select/select_config.hpp - checks shared by the host and CUDA selectors
// (and the structured q, k generator): the tensors a selection reads, and
// SelectConfig resolved for one shape.
#pragma once

#include <cstdint>

#include "select/select_rules.hpp"
#include "spattn/select.hpp"

namespace spattn::select_detail {

// q (B, Hq, Lq, D) and k (B, Hkv, Lk, D): data set, every axis > 0, same
// batch and D, Hq % Hkv == 0, and the same dtype when `same_dtype`.
void validate_qk_pair(const TensorView& q, const TensorView& k, bool same_dtype);

// validate_qk_pair with the same dtype: the tensors a selection reads.
void validate_select_inputs(const TensorView& q, const TensorView& k);

// Validates `config` and fills the parameters for (Lq, Lk, D).
SelectParams resolve_select_params(const SelectConfig& config, int64_t q_len, int64_t k_len,
                                   int64_t head_dim);

}  // namespace spattn::select_detail
