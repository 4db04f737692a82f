// tools/spattn/memory_checks.hpp - what the tool's commands allocate, so each
// checks it against the memory available (spattn/memory.hpp) before the work
// starts and refuses at once, naming the flags that set the sizes.
//
// The library checks its own allocations too (BlockMask::build, pattern
// tables, the selection), in its own terms; these estimates come first so the
// message names the flags the user typed and covers the tool's buffers.
#pragma once

#include <cstdint>
#include <string>

#include "args.hpp"
#include "attention_job.hpp"
#include "pattern_flags.hpp"
#include "spattn/memory.hpp"

namespace spattn::cli {

// The flags that size a problem (lengths, heads, batch, head dim, blocks,
// dtype), as the user typed them: the request named in memory errors.
std::string size_request(const Args& args);

// q, k, v and out of an AttentionJob.
int64_t input_bytes(const ProblemShape& s);
// The fp64 output of the reference that --check compares with.
int64_t reference_bytes(const ProblemShape& s);
// The naive dense baseline's score matrices (one per thread).
int64_t naive_scratch_bytes(int64_t q_len, int64_t k_len);

// On the CUDA backend, `bytes` of device buffers (the device copies of q, k,
// v and out) against the GPU's free memory, named by `request`; nothing on
// the host backends.
void check_device_memory(const std::string& request, Backend backend, int64_t bytes);

// Checks the mask of `setup` against the memory available, then builds it.
BlockMask build_checked(const PatternSetup& setup, const std::string& request);

}  // namespace spattn::cli
