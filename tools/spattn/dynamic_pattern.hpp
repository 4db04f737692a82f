// tools/spattn/dynamic_pattern.hpp - `--pattern topk`: key blocks chosen at
// run time from q and k (spattn/select.hpp) for `spattn run` and `spattn mask`.
//
// The inputs are the structured generator's q and k (make_structured_qk,
// seeded by --seed) and N(0, 1) values, so the selection sees attention with
// sinks, a local band and vertical keys. `run` times the selection (with its
// phases on the host), the attention on the chosen blocks and, with
// --vs-dense, dense (or causal) attention on the same backend; it reports the
// recall and output error against dense attention on sampled rows. `mask`
// draws the chosen blocks of one head.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"
#include "attention_job.hpp"
#include "spattn/select.hpp"

namespace spattn::cli {

// Flags of --pattern topk for run and mask (--stride, --block*, --causal and
// --seed come from the pattern flags).
std::vector<FlagSpec> dynamic_flag_specs(bool for_run);

// Was --pattern topk given?
bool is_dynamic_pattern(const Args& args);

// The selection the flags ask for; throws spattn::Error naming the flag.
SelectConfig select_config_from_flags(const Args& args);

// `spattn run --pattern topk`: exit code as run_command's.
int run_dynamic(const Args& args, const ProblemShape& shape, Backend requested, int64_t repeats,
                uint64_t seed, bool check, bool json);

// `spattn mask --pattern topk`: draws head `head` of the mask chosen for the
// structured input of `heads` query heads.
int mask_dynamic(const Args& args, int64_t q_len, int64_t k_len, int64_t heads, int64_t head,
                 int64_t max_side, const std::string& out);

}  // namespace spattn::cli
