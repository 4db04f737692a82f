// tools/spattn/cmd_bench.cpp - `spattn bench`: benchmark presets, tables, JSON.
//
// Reads the flags into a BenchConfig (preset defaults first, flags override),
// runs the preset's loop (bench_presets.hpp; `--pattern topk` runs the
// dynamic-selection table instead of a preset), writes one JSON document with the
// machine, the backend, the shapes and every number to --out, and, with
// --plot-dir, runs bench/plot.py on it (see plot_python for the interpreter).
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "bench_presets.hpp"
#include "commands.hpp"
#include "dynamic_pattern.hpp"
#include "memory_checks.hpp"
#include "output_file.hpp"
#include "spattn/error.hpp"

#ifndef SPATTN_SOURCE_DIR
#error "SPATTN_SOURCE_DIR must be defined by the build"
#endif

extern char** environ;

namespace spattn::cli {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  return "unknown";
}

// Each preset has its own results file, so no preset overwrites another's.
std::string default_out_path(const std::string& preset) {
  return preset == "default" ? "results/bench.json" : "results/bench_" + preset + ".json";
}

std::vector<int64_t> powers_of_two(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t n = first; n <= last; n *= 2) out.push_back(n);
  return out;
}

void write_machine(JsonWriter& json, Backend backend) {
  json.key("machine").begin_object();
  json.field("cpu", cpu_model());
  json.field("logical_cores", static_cast<int64_t>(std::thread::hardware_concurrency()));
  if (backend == Backend::Cuda) json.field("gpu", cuda_device_name());
  json.end_object();
}

// The interpreter for bench/plot.py: $SPATTN_PYTHON, else the project's
// .venv (scripts/setup.sh makes it), else python3 from PATH.
std::string plot_python() {
  const char* env = std::getenv("SPATTN_PYTHON");
  if (env && *env) return env;
  const std::string venv = std::string(SPATTN_SOURCE_DIR) + "/.venv/bin/python";
  return std::filesystem::exists(venv) ? venv : "python3";
}

// Runs `python bench/plot.py json_path --out-dir plot_dir` and waits.
void run_plot_script(const std::string& json_path, const std::string& plot_dir) {
  const std::string python = plot_python();
  const std::string script = std::string(SPATTN_SOURCE_DIR) + "/bench/plot.py";
  require(std::filesystem::exists(script), "--plot-dir: plot script not found at '", script, "'");
  std::vector<std::string> words = {python, script, json_path, "--out-dir", plot_dir};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  require(spawned == 0, "--plot-dir: cannot start '", python, "': ", std::strerror(spawned));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    require(errno == EINTR, "--plot-dir: waiting for the plot script failed: ", std::strerror(errno));
  require(WIFEXITED(status) && WEXITSTATUS(status) == 0, "--plot-dir: '", python, " ", script,
          "' failed (exit status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")");
}

// The longest L the naive dense baseline takes (L x L scores at most kNaiveDenseMaxScores).
int64_t naive_max_length() {
  int64_t n = 1;
  while ((n + 1) <= kNaiveDenseMaxScores / (n + 1)) ++n;
  return n;
}

// Refuses at once, before any work, what the preset could not finish here:
// the naive baseline past its limit, and more memory than is available for
// the inputs and dense masks the sweeps keep for every length (the presets
// `cpu` and `topk` hold one length at a time). Each pattern's mask is checked
// again right before it is built (build_checked).
void check_bench_sizes(const BenchConfig& c, const std::string& preset, const SelectConfig& select,
                       int64_t quality_rows) {
  const bool attention_preset = preset == "default" || preset == "seeds" || preset == "cpu";
  if (!attention_preset && preset != "topk") return;
  for (const int64_t seq : c.seqs)
    require(!attention_preset || seq > c.naive_max_seq || seq <= kNaiveDenseMaxScores / seq, "--seqs ", seq,
            ": the naive dense baseline materialises L x L scores, at most ", kNaiveDenseMaxScores, " (L <= ",
            naive_max_length(), "); lower --naive-up-to (now ", c.naive_max_seq, ")");
  MemoryEstimate need(c.request);
  int64_t inputs = 0, masks = 0, naive = 0;
  for (const int64_t seq : c.seqs) {
    ProblemShape s = c.shape;
    s.q_len = s.k_len = seq;
    if (preset == "topk") {
      DynamicMeasureOptions options;
      options.vs_dense = true;
      options.quality_rows = quality_rows;
      const MemoryEstimate one = dynamic_memory(c.request, s, select, options);
      inputs = std::max(inputs, one.total());
      continue;
    }
    const int64_t in = input_bytes(s);
    const int64_t dense = BlockMask::build_bytes(Pattern::dense(), bench_dense_shape(c, seq));
    const bool kept = preset != "cpu";  // the sweeps keep every length's job and dense mask
    inputs = kept ? add_bytes(inputs, in) : std::max(inputs, in);
    masks = kept ? add_bytes(masks, dense) : std::max(masks, dense);
    if (seq <= c.naive_max_seq) naive = std::max(naive, naive_scratch_bytes(seq, seq));
  }
  if (preset == "cpu" && c.long_seq > 0) {
    ProblemShape s;
    s.q_len = s.k_len = c.long_seq;
    s.dtype = c.shape.dtype;
    inputs = std::max(inputs, input_bytes(s));
  }
  need.add(preset == "topk" ? "inputs, selection and masks" : "inputs", inputs);
  need.add("dense masks", masks).add("naive dense scores", naive);
  need.check();
}

int bench_main(const Args& args) {
  const std::optional<std::string> pattern = args.find_string("pattern");
  require(!pattern || *pattern == "topk", "--pattern: spattn bench runs only 'topk' (dynamic block ",
          "selection; fixed patterns go in --patterns), got '", pattern.value_or(""), "'");
  const std::string preset =
      pattern ? "topk" : args.get_choice("preset", "default", {"default", "seeds", "mask-build", "cpu"});
  const bool attention_preset = preset != "mask-build";

  BenchConfig c;
  std::vector<BenchEntry> catalogue;
  std::vector<std::string> labels;
  if (preset == "default") {
    c.seqs = {1024, 2048, 4096};
    c.shape.heads = 4;
    catalogue = sweep_catalogue();
    labels = default_sweep_labels();
  } else if (preset == "cpu") {
    c.seqs = {4096, 8192};
    c.shape.heads = 4;
    catalogue = cpu_catalogue();
  } else if (preset == "topk") {
    c.seqs = {4096, 8192};
    c.shape.heads = 4;
  } else if (preset == "seeds") {
    c.seqs = powers_of_two(128, 4096);
    c.shape.heads = 1;
    catalogue = seed_entries();
  } else {
    c.seqs = {int64_t{1} << 20};
    c.shape.heads = 1;
    catalogue = mask_build_catalogue();
  }
  if (labels.empty())
    for (const BenchEntry& e : catalogue) labels.push_back(e.label);
  if (preset != "topk") c.entries = select_entries(catalogue, args.find_list("patterns").value_or(labels));
  c.seqs = args.find_int_list("seqs", 1).value_or(c.seqs);
  c.shape.heads = args.get_int("heads", c.shape.heads, 1);
  c.repeats = args.get_int("repeats", 3, 1, 1000000);
  c.budget_s = args.get_double("budget", 2.0, 0.0, 1e6);
  if (attention_preset) {
    c.shape.batch = args.get_int("batch", 1, 1);
    c.shape.kv_heads = args.get_int("kv-heads", c.shape.heads, 1);
    require(c.shape.heads % c.shape.kv_heads == 0, "--heads (", c.shape.heads,
            ") must be a multiple of --kv-heads (", c.shape.kv_heads, ")");
    c.shape.head_dim = args.get_int("head-dim", preset == "cpu" || preset == "topk" ? 128 : 64, 1);
    c.shape.dtype = parse_dtype(args.get_choice("dtype", "fp32", {"fp32", "fp16", "bf16"}), "--dtype");
    c.backend = resolve_backend(parse_backend(args.get_choice(
        "backend", preset == "cpu" ? "cpu" : "auto", {"auto", "reference", "cpu", "cuda"})));
    if (preset != "topk")
      c.naive_max_seq = args.get_int("naive-up-to", preset == "seeds" ? naive_max_length() : 4096, 0);
    c.seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  }
  if (preset == "cpu") c.long_seq = args.get_int("long-seq", int64_t{1} << 20, 0);
  const SelectConfig select = preset == "topk" ? select_config_from_flags(args) : SelectConfig{};
  const int64_t quality_rows =
      preset == "topk" ? args.get_int("quality-rows", DynamicMeasureOptions{}.quality_rows, 1) : 0;
  const std::string out_path = args.get_string("out", default_out_path(preset));
  const std::optional<std::string> plot_dir = args.find_string("plot-dir");
  args.require_all_used(preset == "topk" ? "to --pattern topk" : "to --preset " + preset);
  check_output("--out", out_path);
  if (plot_dir) check_output("--plot-dir", (std::filesystem::path(*plot_dir) / "plot.png").string());
  c.request = size_request(args);
  check_bench_sizes(c, preset, select, quality_rows);

  std::cout << "spattn bench, " << (preset == "topk" ? "pattern topk" : "preset " + preset) << ", CPU "
            << cpu_model();
  if (attention_preset) {
    const ProblemShape& s = c.shape;
    std::cout << "\nbackend " << backend_name(c.backend) << ", " << dtype_name(s.dtype) << ", B=" << s.batch
              << " Hq=" << s.heads << " Hkv=" << s.kv_heads << " D=" << s.head_dim << ", median of at least "
              << c.repeats << " runs after a warm-up, min-max beside it (at most " << c.budget_s
              << " s per measurement)";
  }
  std::cout << "\n";

  std::ostringstream text;
  JsonWriter json(text);
  json.begin_object();
  json.field("tool", "spattn bench").field("version", SPATTN_VERSION_STRING).field("preset", preset);
  write_machine(json, attention_preset ? c.backend : Backend::Reference);
  if (attention_preset) {
    json.field("backend", backend_name(c.backend)).field("dtype", dtype_name(c.shape.dtype));
    json.field("batch", c.shape.batch).field("heads", c.shape.heads).field("kv_heads", c.shape.kv_heads);
    json.field("head_dim", c.shape.head_dim);
  }
  json.field("repeats", c.repeats).field("budget_s", c.budget_s);
  if (preset == "default") run_sweep(c, json);
  if (preset == "seeds") run_seeds(c, json);
  if (preset == "mask-build") run_mask_build(c, json);
  if (preset == "cpu") run_cpu(c, json);
  if (preset == "topk") run_dynamic_bench(c, select, quality_rows, json);
  json.end_object();

  write_text_file(out_path, text.str());
  std::cout << "\nwrote " << out_path << "\n";
  if (plot_dir) run_plot_script(out_path, *plot_dir);
  return 0;
}

}  // namespace

Command bench_command() {
  using K = FlagKind;
  std::vector<FlagSpec> flags = {
      {"preset", K::Value, "NAME", "default | seeds | mask-build | cpu (default: default)"},
      {"pattern", K::Value, "topk", "dynamic block selection instead of a preset (needs --topk or --tau)"},
      {"patterns", K::Value, "A,B,..", "benchmark entries to run (default: the preset's)"},
      {"seqs", K::Value, "L1,L2,..", "sequence lengths (default: the preset's)"},
      {"backend", K::Value, "NAME", "auto | reference | cpu | cuda (default auto)"},
      {"batch", K::Value, "B", "batch size (default 1)"},
      {"heads", K::Value, "H", "query heads (default 4; seeds and mask-build: 1)"},
      {"kv-heads", K::Value, "H", "key/value heads (default --heads)"},
      {"head-dim", K::Value, "D", "head dimension (default 64; cpu and topk: 128)"},
      {"dtype", K::Value, "T", "fp32 | fp16 | bf16 (default fp32)"},
      {"repeats", K::Value, "N", "timed runs per measurement after a warm-up (default 3)"},
      {"budget", K::Value, "S", "at most about S seconds of timed runs per measurement (default 2)"},
      {"naive-up-to", K::Value, "L", "naive dense baseline for L <= this (default 4096; seeds: 16384, its limit)"},
      {"seed", K::Value, "S", "seed of the random inputs (default 0)"},
      {"out", K::Value, "FILE", "JSON results (default results/bench.json; other presets bench_PRESET.json)"},
      {"plot-dir", K::Value, "DIR", "also run bench/plot.py to write PNG plots into DIR"},
      {"long-seq", K::Value, "L", "cpu: tokens of the long sliding-window row (default 1048576, 0: none)"},
  };
  for (FlagSpec& f : dynamic_bench_flag_specs()) flags.push_back(std::move(f));
  return Command{"bench", "benchmark presets: tables on stdout, JSON results, optional plots",
                 "usage: spattn bench [--preset default|seeds|mask-build|cpu] [options]\n"
                 "       spattn bench --pattern topk --topk K | --tau T [selection flags] [options]\n"
                 "  default:    every pattern vs dense on the best backend, L = 1024..4096\n"
                 "  seeds:      the seed programs' tables (streaming 16+64, block-diagonal 16),\n"
                 "              T = 128..4096, naive dense vs fused dense vs fused sparse\n"
                 "  mask-build: BlockMask::build time and blocks kept at L = 1,048,576\n"
                 "  cpu:        CPU backend vs the measured fp32 FMA peak and density x dense,\n"
                 "              D = 128, L = 4096, 8192, plus a 1M-token sliding window\n"
                 "  topk:       dynamic selection phases, attention, total, the same mask as a\n"
                 "              static pattern and dense, recall and error; D = 128, H = 4,\n"
                 "              L = 4096, 8192 (on a GPU: --seqs 8192,32768,131072 --heads 16 --dtype bf16)",
                 std::move(flags), bench_main};
}

}  // namespace spattn::cli
