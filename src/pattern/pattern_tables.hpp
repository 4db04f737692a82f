// pattern_tables.hpp - storage behind the table pointers of pattern terms.
//
// Terms are plain structs with raw pointers (so they work on the GPU); the
// vectors they point into live here, shared by every copy of a Pattern.
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/pattern.hpp"

namespace spattn {

struct Pattern::Tables {
  std::vector<int32_t> indices;  // BigBird random blocks or custom CSR columns
  std::vector<int64_t> offsets;  // custom CSR row offsets
  std::vector<int64_t> tokens;   // Longformer global tokens
};

}  // namespace spattn
