// select/select_config.hpp - checks shared by the host and CUDA selectors:
// the tensors a selection reads, and SelectConfig resolved for one shape.
#pragma once

#include <cstdint>

#include "select/select_rules.hpp"
#include "spattn/select.hpp"

namespace spattn::select_detail {

// q (B, Hq, Lq, D) and k (B, Hkv, Lk, D): same dtype, batch and D, Hq % Hkv == 0.
void validate_select_inputs(const TensorView& q, const TensorView& k);

// Validates `config` and fills the parameters for (Lq, Lk, D).
SelectParams resolve_select_params(const SelectConfig& config, int64_t q_len, int64_t k_len,
                                   int64_t head_dim);

}  // namespace spattn::select_detail
