// tools/spattn/dynamic_pattern.hpp - `--pattern topk`: key blocks chosen at
// run time from q and k (spattn/select.hpp) for `spattn run` and `spattn mask`.
//
// The inputs are the structured generator's q and k (make_structured_qk,
// seeded by --seed) and N(0, 1) values, so the selection sees attention with
// sinks, a local band and vertical keys. `run` times the selection (with its
// phases on the host), the attention on the chosen blocks and, with
// --vs-dense, dense (or causal) attention on the same backend; it reports the
// recall and output error against dense attention on sampled rows. `mask`
// draws the chosen blocks of one head. measure_dynamic is the measurement
// itself, which `spattn bench --pattern topk` (bench_dynamic.cpp) repeats
// over sequence lengths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"
#include "attention_job.hpp"
#include "json_writer.hpp"
#include "spattn/memory.hpp"
#include "spattn/select.hpp"

namespace spattn::cli {

// Flags of --pattern topk for run and mask (--stride, --block*, --causal and
// --seed come from the pattern flags).
std::vector<FlagSpec> dynamic_flag_specs(bool for_run);

// Flags of `spattn bench --pattern topk`: those of dynamic_flag_specs(false),
// --quality-rows, and the block, causal and stride flags that `spattn run`
// takes from the pattern flags.
std::vector<FlagSpec> dynamic_bench_flag_specs();

// Was --pattern topk given?
bool is_dynamic_pattern(const Args& args);

// The selection the flags ask for; throws spattn::Error naming the flag.
SelectConfig select_config_from_flags(const Args& args);

// "topk 8, sink 1, local 2, mean pooling, per kv head, causal".
std::string describe_select_config(const SelectConfig& config);

// What measure_dynamic times besides the selection and its attention.
struct DynamicMeasureOptions {
  int64_t repeats = 5;        // timed runs after one warm-up; medians are kept
  uint64_t seed = 0;          // of the structured q, k and the N(0, 1) v
  bool vs_dense = false;      // also time dense (causal with config.causal) attention
  int64_t quality_rows = 32;  // sampled rows per (batch, head) for recall and error
  bool check = false;         // compare the output with the fp64 reference on the chosen blocks
};

// The numbers of one --pattern topk problem, shared by `spattn run` and
// `spattn bench`. Times are medians in seconds, per call.
struct DynamicMeasurement {
  std::vector<BlockMask> masks;  // per batch element
  bool phases_known = false;
  SelectBreakdown phases;            // pooling, scoring, selection
  Timing selection;                  // the whole selection
  Timing attention;                  // the chosen masks run as static masks
  Timing dense;                      // with vs_dense
  bool dense_timed = false;
  Timing fused_attention, fused;     // CUDA: attention on the device-built arrays, and select then attend
  bool fused_timed = false;
  SelectionQuality quality;
  CheckResult check;
  int64_t kept_pairs = 0;  // allowed (batch, query head, query, key) pairs
  double density = 0.0;    // kept_pairs / (B * Hq * Lq * Lk)

  // The attention half of dynamic attention: on the device-built arrays where
  // the fused path ran, else the static run of the chosen masks.
  double dynamic_attention_s() const { return fused_timed ? fused_attention.median_s : attention.median_s; }
  // Select then attend: end to end where the fused path ran, else the sum.
  double dynamic_total_s() const {
    return fused_timed ? fused.median_s : selection.median_s + attention.median_s;
  }
};

// What measure_dynamic allocates for these arguments, items named; `request`
// names the sizes in the caller's flags.
MemoryEstimate dynamic_memory(const std::string& request, const ProblemShape& s, const SelectConfig& config,
                              const DynamicMeasureOptions& options);

// Generates the structured inputs for shape `s`, selects with `config` and
// attends on `backend` (resolved, not Auto), timing each phase.
DynamicMeasurement measure_dynamic(const ProblemShape& s, Backend backend, const SelectConfig& config,
                                   const DynamicMeasureOptions& options);

// The measurement's fields (density, times in ms, quality) into the open JSON object.
void write_dynamic_json(JsonWriter& json, const DynamicMeasurement& r);

// `spattn run --pattern topk`: exit code as run_command's.
int run_dynamic(const Args& args, const ProblemShape& shape, Backend requested, int64_t repeats,
                uint64_t seed, bool check, bool json);

// `spattn mask --pattern topk`: draws head `head` of the mask chosen for the
// structured input of `heads` query heads.
int mask_dynamic(const Args& args, int64_t q_len, int64_t k_len, int64_t heads, int64_t head,
                 int64_t max_side, const std::string& out);

}  // namespace spattn::cli
