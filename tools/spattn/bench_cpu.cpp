// tools/spattn/bench_cpu.cpp - `spattn bench --preset cpu`: the fast CPU
// backend against the machine's own limits (see bench_presets.hpp).
//
// For each sequence length (default 4096 and 8192, D = 128) every entry of
// cpu_catalogue() is timed on the CPU backend next to the dense pattern on the
// same inputs, and reported as effective GFLOP/s (4 * kept_pairs * D / time),
// the fraction of the fp32 FMA peak measured in the same run (before and after
// the sweep; the higher one is used) and time / (density x dense time), which
// is 1 when skipped work costs nothing. The dense time of that ratio is
// measured again right before each pattern (each one warmed up and repeated
// back to back), so a change of load on a shared machine between rows does
// not skew the ratio. The naive dense baseline is timed for short lengths.
// Last, one long sliding-window row (H = 1, D = 64, window 512, default a
// million tokens) shows that long contexts fit in memory.
#include <algorithm>
#include <iostream>
#include <memory>
#include <vector>

#include "bench_presets.hpp"
#include "memory_checks.hpp"
#include "progress.hpp"
#include "spattn/cpu_info.hpp"
#include "spattn/error.hpp"
#include "text_table.hpp"

namespace spattn::cli {

namespace {

constexpr double kPeakSeconds = 0.5;

double effective_gflops(int64_t kept_pairs, int64_t batch, int64_t head_dim, double seconds) {
  return 4.0 * static_cast<double>(kept_pairs) * static_cast<double>(batch) *
         static_cast<double>(head_dim) / seconds / 1e9;
}

void write_cpu(JsonWriter& json, const CpuInfo& info, double peak_before) {
  json.key("cpu").begin_object();
  json.field("model", info.model).field("kernel", info.kernel).field("features", info.features);
  json.field("logical_cpus", info.logical_cpus).field("threads", info.threads);
  json.field("fma_peak_gflops_before", peak_before);
  json.end_object();
}

// The long-context row: sliding window over `seq` tokens, H = 1, D = 64.
void run_long_window(const BenchConfig& config, double peak, JsonWriter& json) {
  ProblemShape s;
  s.batch = 1;
  s.heads = s.kv_heads = 1;
  s.head_dim = 64;
  s.dtype = config.shape.dtype;
  s.q_len = s.k_len = config.long_seq;
  const BenchEntry entry{"sliding-window", {"--pattern", "sliding-window", "--window", "512"}};
  const PatternSetup setup = entry_pattern(entry, s.q_len, s.k_len, s.heads);
  progress_line("bench: long context L=" + std::to_string(s.q_len), true);
  AttentionJob job(s, config.backend, config.seed);
  const BlockMask mask = build_checked(setup, config.request);
  const Timing t = time_median([&] { job.run(mask); }, config.repeats, config.budget_s);
  const int64_t kept = mask.kept_pairs(s.heads);
  const double gflops = effective_gflops(kept, s.batch, s.head_dim, t.median_s);
  std::cout << "\nlong context: " << entry.label << " (" << flags_text(entry) << "), L=" << s.q_len
            << " H=1 D=64 " << dtype_name(s.dtype) << "\n";
  TextTable table({"L", "ms", "min-max", "GFLOP/s", "of peak", "density"});
  table.add_row({std::to_string(s.q_len), format_ms(t.median_s), format_range_ms(t), format_general(gflops),
                 format_general(gflops / peak), format_general(mask.density(s.heads))});
  table.print(std::cout);
  json.key("long_context").begin_object();
  json.field("pattern", entry.label).field("flags", flags_text(entry)).field("seq", s.q_len);
  json.field("heads", s.heads).field("head_dim", s.head_dim);
  json.field("kept_pairs", kept).field("density", mask.density(s.heads));
  write_timing_json(json, "time", t);
  json.field("gflops", gflops).field("fraction_of_peak", gflops / peak);
  json.end_object();
}

}  // namespace

std::vector<BenchEntry> cpu_catalogue() {
  return {
      {"dense", {"--pattern", "dense"}},
      {"causal", {"--pattern", "causal"}},
      {"sliding-window", {"--pattern", "sliding-window", "--window", "1024"}},
      {"streaming", {"--pattern", "streaming", "--sink", "128", "--window", "1024"}},
      {"bigbird", {"--pattern", "bigbird"}},
      {"random", {"--pattern", "random", "--density", "0.1", "--seed", "0"}},
  };
}

void run_cpu(const BenchConfig& config, JsonWriter& json) {
  require(config.backend == Backend::Cpu, "--preset cpu measures the cpu backend, got --backend ",
          backend_name(config.backend));
  const ProblemShape& s = config.shape;
  const CpuInfo info = cpu_info();
  const double peak_before = measure_cpu_fma_peak_gflops(info.threads, kPeakSeconds);
  std::cout << "CPU kernel " << info.kernel << " (" << info.features << "), " << info.threads
            << " threads, fp32 FMA peak " << format_general(peak_before) << " GFLOP/s (measured now)\n";
  write_cpu(json, info, peak_before);

  struct Row {
    std::string label, flags;
    int64_t seq, kept;
    double density;
    Timing time, dense;
    bool with_naive;
    Timing naive;
  };
  std::vector<Row> rows;
  const int64_t cases = static_cast<int64_t>(config.seqs.size() * config.entries.size());
  for (const int64_t seq : config.seqs) {
    ProblemShape shape = s;
    shape.q_len = shape.k_len = seq;
    AttentionJob job(shape, config.backend, config.seed);
    const BlockMask dense = BlockMask::build(Pattern::dense(), bench_dense_shape(config, seq));
    const bool with_naive = seq <= config.naive_max_seq;
    const Timing naive =
        with_naive ? time_median([&] { job.run_naive(dense); }, config.repeats, config.budget_s) : Timing{};
    for (const BenchEntry& entry : config.entries) {
      progress_line("bench " + std::to_string(rows.size() + 1) + "/" + std::to_string(cases) + ": " +
                    entry.label + " L=" + std::to_string(seq), true);
      const PatternSetup setup = entry_pattern(entry, seq, seq, s.heads);
      const BlockMask mask = build_checked(setup, config.request);
      const Timing dense_t = time_median([&] { job.run(dense); }, config.repeats, config.budget_s);
      const Timing t = time_median([&] { job.run(mask); }, config.repeats, config.budget_s);
      rows.push_back(Row{entry.label, flags_text(entry), seq, mask.kept_pairs(s.heads),
                         mask.density(s.heads), t, dense_t, with_naive, naive});
    }
  }
  const double peak_after = measure_cpu_fma_peak_gflops(info.threads, kPeakSeconds);
  const double peak = std::max(peak_before, peak_after);
  std::cout << "fp32 FMA peak after the sweep " << format_general(peak_after)
            << " GFLOP/s; fractions below use " << format_general(peak) << "\n\n";

  TextTable table({"pattern", "L", "ms", "min-max", "GFLOP/s", "of peak", "density", "vs density x dense",
                   "naive dense ms"});
  json.field("fma_peak_gflops_after", peak_after).field("fma_peak_gflops", peak);
  json.key("results").begin_array();
  for (const Row& r : rows) {
    const double gflops = effective_gflops(r.kept, s.batch, s.head_dim, r.time.median_s);
    const double vs_density = r.time.median_s / (r.density * r.dense.median_s);
    table.add_row({r.label, std::to_string(r.seq), format_ms(r.time.median_s), format_range_ms(r.time),
                   format_general(gflops), format_general(gflops / peak), format_general(r.density),
                   format_ratio(vs_density), r.with_naive ? format_ms(r.naive.median_s) : "-"});
    json.begin_object();
    json.field("pattern", r.label).field("flags", r.flags).field("seq", r.seq);
    json.field("kept_pairs", r.kept * s.batch).field("density", r.density);
    write_timing_json(json, "time", r.time);
    write_timing_json(json, "dense_time", r.dense);
    json.field("gflops", gflops).field("fraction_of_peak", gflops / peak);
    json.field("time_over_density_dense", vs_density);
    if (r.with_naive) {
      write_timing_json(json, "naive_dense_time", r.naive);
    } else {
      json.key("naive_dense_time_ms").null();
    }
    json.end_object();
  }
  json.end_array();
  table.print(std::cout);
  if (config.long_seq > 0) run_long_window(config, peak, json);
}

}  // namespace spattn::cli
