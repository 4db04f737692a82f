// tools/spattn/bench_sweep.cpp - the attention timing presets of `spattn bench`
// (see bench_presets.hpp): the default sweep and the seed programs' tables.
//
// One AttentionJob (fresh N(0, 1) inputs) per sequence length is shared by
// every pattern, so all patterns of a length read the same data. The dense
// pattern is timed once per length, on the same backend, as the reference
// point of every speedup. Each table row is printed as soon as it is measured
// and each case is announced on stderr (progress.hpp); the naive baseline
// runs for L <= --naive-up-to only.
#include <iostream>
#include <map>
#include <memory>
#include <utility>

#include "bench_presets.hpp"
#include "memory_checks.hpp"
#include "progress.hpp"
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
      it = dense_masks_.emplace(seq, BlockMask::build(Pattern::dense(), bench_dense_shape(config_, seq))).first;
    return it->second;
  }
  const Timing& dense_time(int64_t seq) {
    auto it = dense_times_.find(seq);
    if (it == dense_times_.end()) {
      AttentionJob& j = job(seq);
      const BlockMask& mask = dense_mask(seq);
      it = dense_times_.emplace(seq, time_median([&] { j.run(mask); }, config_.repeats, config_.budget_s)).first;
    }
    return it->second;
  }
  const Timing& naive_dense_time(int64_t seq) {
    auto it = naive_times_.find(seq);
    if (it == naive_times_.end()) {
      AttentionJob& j = job(seq);
      const BlockMask& mask = dense_mask(seq);
      it = naive_times_.emplace(seq, time_naive(j, mask)).first;
    }
    return it->second;
  }
  Timing time_naive(AttentionJob& j, const BlockMask& mask) const {
    return time_median([&] { j.run_naive(mask); }, config_.repeats, config_.budget_s);
  }

 private:
  const BenchConfig& config_;
  std::map<int64_t, std::unique_ptr<AttentionJob>> jobs_;
  std::map<int64_t, BlockMask> dense_masks_;
  std::map<int64_t, Timing> dense_times_, naive_times_;
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

// "[bench 3/18: streaming L=4096]" on stderr (progress.hpp).
void case_progress(int64_t& done, const BenchConfig& c, const std::string& label, int64_t seq) {
  const int64_t cases = static_cast<int64_t>(c.entries.size() * c.seqs.size());
  progress_line("bench " + std::to_string(++done) + "/" + std::to_string(cases) + ": " + label + " L=" +
                std::to_string(seq), true);
}

}  // namespace

MaskShape bench_dense_shape(const BenchConfig& c, int64_t seq) {
  return MaskShape{seq, seq, kBenchDenseBlock, kBenchDenseBlock, c.shape.heads};
}

void run_sweep(const BenchConfig& config, JsonWriter& json) {
  LengthCache cache(config);
  const ProblemShape& s = config.shape;
  const auto [unit, per_unit] = throughput_unit(config.backend);
  int64_t done = 0;
  json.key("results").begin_array();
  for (const BenchEntry& entry : config.entries) {
    TextTable table({"L", "dense ms", "min-max", "sparse ms", "min-max", "speedup", "density", unit, "naive ms"});
    for (const int64_t seq : config.seqs) {
      case_progress(done, config, entry.label, seq);
      const PatternSetup setup = entry_pattern(entry, seq, seq, s.heads);
      if (seq == config.seqs.front()) {
        print_entry_header(entry, setup);
        table.stream(std::cout);
      }
      const BlockMask mask = build_checked(setup, config.request);
      AttentionJob& job = cache.job(seq);
      const Timing dense = cache.dense_time(seq);
      const Timing t = time_median([&] { job.run(mask); }, config.repeats, config.budget_s);
      const bool with_naive = seq <= config.naive_max_seq;
      const Timing naive = with_naive ? cache.time_naive(job, mask) : Timing{};
      const int64_t kept = mask.kept_pairs(s.heads);
      const double density = mask.density(s.heads);
      const double gflops = effective_gflops(kept, s.batch, s.head_dim, t.median_s);
      table.add_row({std::to_string(seq), format_ms(dense.median_s), format_range_ms(dense), format_ms(t.median_s),
                     format_range_ms(t), format_ratio(dense.median_s / t.median_s), format_general(density),
                     format_general(gflops / per_unit), with_naive ? format_ms(naive.median_s) : "-"});
      json.begin_object();
      json.field("pattern", entry.label).field("flags", flags_text(entry));
      json.field("describe", setup.pattern.describe()).field("seq", seq);
      json.field("block_q", mask.block_q()).field("block_k", mask.block_k());
      json.field("blocks_kept", mask.num_blocks()).field("full_blocks", mask.num_full_blocks());
      json.field("kept_pairs", kept * s.batch).field("density", density);
      write_timing_json(json, "time", t);
      write_timing_json(json, "dense_time", dense);
      json.field("speedup", dense.median_s / t.median_s);
      json.field("gflops", gflops);
      if (with_naive) {
        write_timing_json(json, "naive_time", naive);
      } else {
        json.key("naive_time_ms").null();
      }
      json.end_object();
    }
  }
  json.end_array();
}

void run_seeds(const BenchConfig& config, JsonWriter& json) {
  LengthCache cache(config);
  const ProblemShape& s = config.shape;
  int64_t done = 0;
  json.key("results").begin_array();
  for (const BenchEntry& entry : config.entries) {
    TextTable table({"T", "naive dense ms", "fused dense ms", "min-max", "fused sparse ms", "min-max", "vs naive",
                     "vs fused dense", "density"});
    for (const int64_t seq : config.seqs) {
      case_progress(done, config, entry.label, seq);
      const PatternSetup setup = entry_pattern(entry, seq, seq, s.heads);
      if (seq == config.seqs.front()) {
        print_entry_header(entry, setup);
        table.stream(std::cout);
      }
      const BlockMask mask = build_checked(setup, config.request);
      cache.job(seq);
      const bool with_naive = seq <= config.naive_max_seq;
      const Timing naive = with_naive ? cache.naive_dense_time(seq) : Timing{};
      const Timing dense = cache.dense_time(seq);
      const Timing t = time_median([&] { cache.job(seq).run(mask); }, config.repeats, config.budget_s);
      const int64_t kept = mask.kept_pairs(s.heads);
      const double density = mask.density(s.heads);
      table.add_row({std::to_string(seq), with_naive ? format_ms(naive.median_s) : "-", format_ms(dense.median_s),
                     format_range_ms(dense), format_ms(t.median_s), format_range_ms(t),
                     with_naive ? format_ratio(naive.median_s / t.median_s) : "-",
                     format_ratio(dense.median_s / t.median_s), format_general(density)});
      json.begin_object();
      json.field("pattern", entry.label).field("flags", flags_text(entry));
      json.field("describe", setup.pattern.describe()).field("seq", seq);
      json.field("kept_pairs", kept * s.batch).field("density", density);
      if (with_naive) {
        write_timing_json(json, "naive_dense_time", naive);
      } else {
        json.key("naive_dense_time_ms").null();
      }
      write_timing_json(json, "dense_time", dense);
      write_timing_json(json, "time", t);
      json.field("gflops", effective_gflops(kept, s.batch, s.head_dim, t.median_s));
      json.end_object();
    }
  }
  json.end_array();
}

}  // namespace spattn::cli
