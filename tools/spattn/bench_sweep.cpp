// tools/spattn/bench_sweep.cpp - the attention timing presets of `spattn bench`
// (see bench_presets.hpp): the default sweep and the seed programs' tables.
//
// One AttentionJob (fresh N(0, 1) inputs) per sequence length is shared by
// every pattern, so all patterns of a length read the same data. The dense
// pattern is timed once per length, on the same backend, as the reference
// point of every speedup.
#include <iostream>
#include <map>
#include <memory>
#include <utility>

#include "bench_presets.hpp"
#include "text_table.hpp"

namespace spattn::cli {

namespace {

// Jobs and dense timings per sequence length, made on first use.
class LengthCache {
 public:
  explicit LengthCache(const BenchConfig& c) : config_(c) {}

  AttentionJob& job(int64_t seq) {
    std::unique_ptr<AttentionJob>& slot = jobs_[seq];
    if (!slot) {
      ProblemShape s = config_.shape;
      s.q_len = s.k_len = seq;
      slot = std::make_unique<AttentionJob>(s, config_.backend, config_.seed);
    }
    return *slot;
  }
  const BlockMask& dense_mask(int64_t seq) {
    auto it = dense_masks_.find(seq);
    if (it == dense_masks_.end())
      it = dense_masks_.emplace(seq, BlockMask::build(Pattern::dense(), shape(seq, 128))).first;
    return it->second;
  }
  double dense_time(int64_t seq) {
    auto it = dense_times_.find(seq);
    if (it == dense_times_.end()) {
      AttentionJob& j = job(seq);
      const BlockMask& mask = dense_mask(seq);
      it = dense_times_.emplace(seq, time(j, mask)).first;
    }
    return it->second;
  }
  double naive_dense_time(int64_t seq) {
    auto it = naive_times_.find(seq);
    if (it == naive_times_.end()) {
      AttentionJob& j = job(seq);
      const BlockMask& mask = dense_mask(seq);
      it = naive_times_.emplace(seq, time_naive(j, mask)).first;
    }
    return it->second;
  }
  MaskShape shape(int64_t seq, int64_t block) const {
    return MaskShape{seq, seq, block, block, config_.shape.heads};
  }
  double time(AttentionJob& j, const BlockMask& mask) const {
    return time_median([&] { j.run(mask); }, config_.repeats, config_.budget_s).median_s;
  }
  double time_naive(AttentionJob& j, const BlockMask& mask) const {
    return time_median([&] { j.run_naive(mask); }, config_.repeats, config_.budget_s).median_s;
  }

 private:
  const BenchConfig& config_;
  std::map<int64_t, std::unique_ptr<AttentionJob>> jobs_;
  std::map<int64_t, BlockMask> dense_masks_;
  std::map<int64_t, double> dense_times_, naive_times_;
};

double effective_gflops(int64_t kept_pairs, int64_t batch, int64_t head_dim, double seconds) {
  return 4.0 * static_cast<double>(kept_pairs) * static_cast<double>(batch) *
         static_cast<double>(head_dim) / seconds / 1e9;
}

// GPUs report TFLOP/s, CPUs GFLOP/s: (column header, divisor of GFLOP/s).
std::pair<std::string, double> throughput_unit(Backend backend) {
  return backend == Backend::Cuda ? std::make_pair(std::string("TFLOP/s"), 1e3)
                                  : std::make_pair(std::string("GFLOP/s"), 1.0);
}

void print_entry_header(const BenchEntry& entry, const PatternSetup& setup) {
  std::cout << "\n" << entry.label << "  (" << flags_text(entry) << ")\n  "
            << setup.pattern.describe() << "\n";
}

}  // namespace

void run_sweep(const BenchConfig& config, JsonWriter& json) {
  LengthCache cache(config);
  const ProblemShape& s = config.shape;
  const auto [unit, per_unit] = throughput_unit(config.backend);
  json.key("results").begin_array();
  for (const BenchEntry& entry : config.entries) {
    TextTable table({"L", "dense ms", "sparse ms", "speedup", "density", unit, "naive ms"});
    for (const int64_t seq : config.seqs) {
      const PatternSetup setup = entry_pattern(entry, seq, seq, s.heads);
      if (seq == config.seqs.front()) print_entry_header(entry, setup);
      const BlockMask mask = BlockMask::build(setup.pattern, setup.shape);
      AttentionJob& job = cache.job(seq);
      const double dense_s = cache.dense_time(seq);
      const Timing t = time_median([&] { job.run(mask); }, config.repeats, config.budget_s);
      const bool with_naive = seq <= config.naive_max_seq;
      const double naive_s = with_naive ? cache.time_naive(job, mask) : 0.0;
      const int64_t kept = mask.kept_pairs(s.heads);
      const double density = mask.density(s.heads);
      const double gflops = effective_gflops(kept, s.batch, s.head_dim, t.median_s);
      table.add_row({std::to_string(seq), format_ms(dense_s), format_ms(t.median_s),
                     format_ratio(dense_s / t.median_s), format_general(density),
                     format_general(gflops / per_unit),
                     with_naive ? format_ms(naive_s) : "-"});
      json.begin_object();
      json.field("pattern", entry.label).field("flags", flags_text(entry));
      json.field("describe", setup.pattern.describe()).field("seq", seq);
      json.field("block_q", mask.block_q()).field("block_k", mask.block_k());
      json.field("blocks_kept", mask.num_blocks()).field("full_blocks", mask.num_full_blocks());
      json.field("kept_pairs", kept * s.batch).field("density", density);
      json.field("time_ms", t.median_s * 1e3).field("samples", t.samples);
      json.field("dense_time_ms", dense_s * 1e3).field("speedup", dense_s / t.median_s);
      json.field("gflops", gflops);
      json.key("naive_time_ms");
      if (with_naive) json.value(naive_s * 1e3); else json.null();
      json.end_object();
    }
    table.print(std::cout);
  }
  json.end_array();
}

void run_seeds(const BenchConfig& config, JsonWriter& json) {
  LengthCache cache(config);
  const ProblemShape& s = config.shape;
  json.key("results").begin_array();
  for (const BenchEntry& entry : config.entries) {
    TextTable table({"T", "naive dense ms", "fused dense ms", "fused sparse ms", "vs naive",
                     "vs fused dense", "density"});
    for (const int64_t seq : config.seqs) {
      const PatternSetup setup = entry_pattern(entry, seq, seq, s.heads);
      if (seq == config.seqs.front()) print_entry_header(entry, setup);
      const BlockMask mask = BlockMask::build(setup.pattern, setup.shape);
      AttentionJob& job = cache.job(seq);
      const double naive_s = cache.naive_dense_time(seq);
      const double dense_s = cache.dense_time(seq);
      const Timing t = time_median([&] { job.run(mask); }, config.repeats, config.budget_s);
      const int64_t kept = mask.kept_pairs(s.heads);
      const double density = mask.density(s.heads);
      table.add_row({std::to_string(seq), format_ms(naive_s), format_ms(dense_s), format_ms(t.median_s),
                     format_ratio(naive_s / t.median_s), format_ratio(dense_s / t.median_s),
                     format_general(density)});
      json.begin_object();
      json.field("pattern", entry.label).field("flags", flags_text(entry));
      json.field("describe", setup.pattern.describe()).field("seq", seq);
      json.field("kept_pairs", kept * s.batch).field("density", density);
      json.field("naive_dense_time_ms", naive_s * 1e3).field("dense_time_ms", dense_s * 1e3);
      json.field("time_ms", t.median_s * 1e3).field("samples", t.samples);
      json.field("gflops", effective_gflops(kept, s.batch, s.head_dim, t.median_s));
      json.end_object();
    }
    table.print(std::cout);
  }
  json.end_array();
}

}  // namespace spattn::cli
