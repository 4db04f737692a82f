// bench/bench_fill.hpp - pseudo-random device fill for the benchmarks.
#pragma once

#include <cstdint>

namespace spattn::bench {

// Fills n fp16 (or bf16) elements at device address `data` with values in [-2, 2).
void fill_random(void* data, int64_t n, bool bf16, uint64_t seed);

}  // namespace spattn::bench
