// tools/spattn/cmd_run.cpp - `spattn run`: one attention on fresh random inputs.
//
// Builds the pattern's BlockMask, fills q, k, v with N(0, 1), times the chosen
// backend (timing.hpp: median, min and max of at least --repeats calls after a
// warm-up) and reports density and effective throughput, 4 * kept_pairs * D
// per second, where kept_pairs counts every (batch, head, query, key) the mask
// allows. --check compares the
// output with the fp64 reference and fails (exit 1) above the dtype's tolerance.
// Zero lengths and batches run as the library runs them (an empty problem:
// no pair kept, nothing timed but the call itself).
// What it will allocate is checked against the memory available first.
#include <chrono>
#include <iostream>
#include <limits>
#include <optional>

#include "attention_job.hpp"
#include "commands.hpp"
#include "dynamic_pattern.hpp"
#include "json_writer.hpp"
#include "memory_checks.hpp"
#include "pattern_flags.hpp"
#include "progress.hpp"
#include "spattn/error.hpp"
#include "text_table.hpp"

namespace spattn::cli {

namespace {

struct RunResult {
  double build_s = 0.0;
  Timing timing;
  int64_t kept_pairs = 0;
  double density = 0.0;
  double gflops = 0.0;
  CheckResult check;
};

void print_table(const ProblemShape& s, Backend backend, const PatternSetup& setup,
                 const BlockMask& mask, const RunResult& r) {
  std::ostream& os = std::cout;
  print_problem(os, s, backend);
  os << "pattern     " << setup.label << ": " << setup.pattern.describe() << "\n";
  os << "mask        blocks " << mask.block_q() << "x" << mask.block_k() << ", "
     << format_count(mask.num_blocks()) << " kept (" << format_count(mask.num_full_blocks())
     << " full), built in " << format_seconds(r.build_s) << "\n";
  os << "density     " << format_general(r.density, 4) << " (" << format_count(r.kept_pairs)
     << " pairs kept)\n";
  os << "time        " << format_seconds(r.timing.median_s) << " (median of " << r.timing.samples
     << " after a warm-up; min " << format_seconds(r.timing.min_s) << ", max " << format_seconds(r.timing.max_s)
     << ")\n";
  os << "throughput  " << format_flops(r.gflops * 1e9) << " effective\n";
  print_check(os, r.check, "reference");
}

void print_json(const ProblemShape& s, Backend backend, const PatternSetup& setup,
                const BlockMask& mask, const RunResult& r) {
  JsonWriter j(std::cout);
  j.begin_object();
  j.field("backend", backend_name(backend));
  j.field("pattern", setup.label).field("describe", setup.pattern.describe());
  write_problem_json(j, s);
  j.field("block_q", mask.block_q()).field("block_k", mask.block_k());
  j.field("blocks_kept", mask.num_blocks()).field("full_blocks", mask.num_full_blocks());
  j.field("mask_build_ms", r.build_s * 1e3);
  j.field("kept_pairs", r.kept_pairs).field("density", r.density);
  write_timing_json(j, "time", r.timing);
  j.field("gflops", r.gflops);
  write_check_json(j, r.check);
  j.end_object();
}

int run_main(const Args& args) {
  ProblemShape s;
  const std::optional<int64_t> seq = args.find_int("seq", 0);
  require(seq.has_value(), "spattn run needs --seq L");
  s.q_len = *seq;
  s.k_len = args.get_int("seq-k", s.q_len, 0);
  s.batch = args.get_int("batch", 1, 0);
  s.heads = args.get_int("heads", 1, 1);
  s.kv_heads = args.get_int("kv-heads", s.heads, 1);
  require(s.heads % s.kv_heads == 0, "--heads (", s.heads, ") must be a multiple of --kv-heads (",
          s.kv_heads, ")");
  s.head_dim = args.get_int("head-dim", 64, 1);
  s.dtype = parse_dtype(args.get_choice("dtype", "fp32", {"fp32", "fp16", "bf16"}), "--dtype");
  s.layout = parse_layout(args.get_choice("layout", "bhld", {"bhld", "blhd"}));
  const Backend requested =
      parse_backend(args.get_choice("backend", "auto", {"auto", "reference", "cpu", "cuda"}));
  const int64_t repeats = args.get_int("repeats", 5, 1, 1000000);
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  const bool check = args.flag("check");
  const bool json = args.flag("json");
  if (is_dynamic_pattern(args)) {
    require(s.batch > 0 && s.q_len > 0 && s.k_len > 0, "--pattern topk selects blocks from the inputs and needs ",
            "--batch, --seq and --seq-k >= 1, got --batch ", s.batch, " --seq ", s.q_len, " --seq-k ", s.k_len);
    return run_dynamic(args, s, requested, repeats, seed, check, json);
  }
  const PatternSetup setup = pattern_from_flags(args, s.q_len, s.k_len, s.heads);
  args.require_all_used("to --pattern " + setup.label);
  const Backend backend = resolve_backend(requested);
  MemoryEstimate need(size_request(args));
  need.add("q, k, v and out", input_bytes(s));
  need.add("block mask", BlockMask::build_bytes(setup.pattern, setup.shape));
  if (check) need.add("fp64 reference output", reference_bytes(s));
  need.check();
  check_device_memory(size_request(args), backend, input_bytes(s));

  progress_line("making the inputs");
  AttentionJob job(s, backend, seed);
  RunResult r;
  progress_line("building the mask");
  const auto start = std::chrono::steady_clock::now();
  const BlockMask mask = BlockMask::build(setup.pattern, setup.shape);
  r.build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  r.timing = time_median([&] { job.run(mask); }, repeats, std::numeric_limits<double>::infinity());
  r.kept_pairs = mask.kept_pairs(s.heads) * s.batch;
  r.density = mask.density(s.heads);
  const double flops = 4.0 * static_cast<double>(r.kept_pairs) * static_cast<double>(s.head_dim);
  r.gflops = flops > 0.0 ? flops / r.timing.median_s / 1e9 : 0.0;  // an empty problem does no work
  if (check) {
    progress_line("checking against the fp64 reference");
    r.check = judge_error(job.error_against_reference(mask), s.dtype);
  }
  progress_done();
  if (json) {
    print_json(s, backend, setup, mask, r);
  } else {
    print_table(s, backend, setup, mask, r);
  }
  return r.check.passed ? 0 : 1;
}

}  // namespace

Command run_command() {
  using K = FlagKind;
  std::vector<FlagSpec> flags = {
      {"seq", K::Value, "L", "query length, 0 or more (required)"},
      {"seq-k", K::Value, "L", "key length, 0 or more (default --seq; queries are bottom-right aligned)"},
      {"batch", K::Value, "B", "batch size, 0 or more (default 1)"},
      {"heads", K::Value, "H", "query heads (default 1)"},
      {"kv-heads", K::Value, "H", "key/value heads, divides --heads (default --heads)"},
      {"head-dim", K::Value, "D", "head dimension (default 64)"},
      {"dtype", K::Value, "T", "fp32 | fp16 | bf16 (default fp32)"},
      {"backend", K::Value, "NAME", "auto | reference | cpu | cuda (default auto)"},
      {"layout", K::Value, "L", "bhld | blhd (default bhld)"},
      {"repeats", K::Value, "N", "at least N timed runs after a warm-up; median, min, max reported (default 5)"},
      {"check", K::Switch, "", "compare with the fp64 reference; exit 1 above tolerance"},
      {"json", K::Switch, "", "print one JSON object instead of the table"},
  };
  for (FlagSpec& f : pattern_flag_specs()) flags.push_back(std::move(f));
  for (FlagSpec& f : dynamic_flag_specs(true)) flags.push_back(std::move(f));
  return Command{"run", "one attention on random inputs: time, density, throughput, error",
                 "usage: spattn run --pattern NAME [pattern flags] --seq L [options]\n"
                 "  e.g. spattn run --pattern streaming --seq 1024 --window 64 --sink 16 --check\n" +
                     pattern_usage(),
                 std::move(flags), run_main};
}

}  // namespace spattn::cli
