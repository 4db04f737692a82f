// tools/spattn/bench_presets.hpp - the measurement loops behind `spattn bench`.
//
//  - sweep (preset `default`): for every entry and sequence length, the fused
//    backend's time against the dense pattern on the same backend, density,
//    effective GFLOP/s, and the naive dense baseline for short sequences;
//  - seeds (preset `seeds`): the seed programs' tables, naive dense baseline,
//    fused dense and fused sparse side by side;
//  - mask build (preset `mask-build`): BlockMask::build time and blocks kept at
//    a million tokens;
//  - cpu (preset `cpu`): the CPU backend's GFLOP/s and share of the measured
//    fp32 FMA peak, time vs density x dense time, a million-token window;
//  - dynamic (`--pattern topk`): the selection's phases, the attention on the
//    chosen blocks, the same masks run as static masks and dense attention,
//    with recall and output error against dense.
// Each prints one table per pattern to stdout and writes its "results" array
// into the open JSON object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention_job.hpp"
#include "bench_catalogue.hpp"
#include "json_writer.hpp"
#include "spattn/select.hpp"

namespace spattn::cli {

struct BenchConfig {
  Backend backend = Backend::Reference;  // resolved, never Auto
  ProblemShape shape;                    // everything but the lengths
  std::vector<int64_t> seqs;
  std::vector<BenchEntry> entries;
  int64_t repeats = 3;
  double budget_s = 2.0;         // most seconds of timed repeats per measurement
  int64_t naive_max_seq = 4096;  // naive baseline only up to this length
  uint64_t seed = 0;
  int64_t long_seq = 0;  // preset cpu: length of the long sliding-window row (0: none)
  std::string request;   // the size flags as typed, named in memory errors (memory_checks.hpp)
};

// The block size of the dense reference mask, and its shape at length `seq`.
constexpr int64_t kBenchDenseBlock = 128;
MaskShape bench_dense_shape(const BenchConfig& config, int64_t seq);

void run_sweep(const BenchConfig& config, JsonWriter& json);
void run_seeds(const BenchConfig& config, JsonWriter& json);
void run_mask_build(const BenchConfig& config, JsonWriter& json);

// Preset `cpu` (bench_cpu.cpp): the CPU backend against the measured fp32 FMA
// peak and against density x dense time, plus one long sliding-window row.
std::vector<BenchEntry> cpu_catalogue();
void run_cpu(const BenchConfig& config, JsonWriter& json);

// `--pattern topk` (bench_dynamic.cpp): one row per length of config.seqs,
// measured by measure_dynamic (dynamic_pattern.hpp); config.entries unused.
void run_dynamic_bench(const BenchConfig& config, const SelectConfig& select, int64_t quality_rows,
                       JsonWriter& json);

}  // namespace spattn::cli
