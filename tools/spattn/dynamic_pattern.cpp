// tools/spattn/dynamic_pattern.cpp - `--pattern topk` for run, mask and bench
// (see dynamic_pattern.hpp).
//
// measure_dynamic (behind run, and bench per length): on host backends the selection is select_blocks_batched (each phase
// time is the median over the timed calls; time_median, after one warm-up).
// On the CUDA backend every time is the median of CUDA-event intervals after
// one warm-up: the selector's phases (pooling, scoring with ordering), the
// selection that feeds the fused path (CudaDynamicAttention::select: pooling,
// scoring, work items), the attention on the selected blocks, the
// end-to-end select-then-attend, and the chosen masks copied back once and
// run as static masks. Recall and output error come from selection_quality
// on --quality-rows rows per (batch, head).
#include "dynamic_pattern.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <random>

#include <omp.h>

#include "device_buffers.hpp"
#include "host_tensor.hpp"
#include "json_writer.hpp"
#include "mask_figure.hpp"
#include "mask_image.hpp"
#include "memory_checks.hpp"
#include "spattn/error.hpp"
#include "text_table.hpp"

#if defined(SPATTN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/select/block_selector.hpp"
#include "spattn/cuda.hpp"
#endif

namespace spattn::cli {
namespace {

constexpr double kNoBudget = std::numeric_limits<double>::infinity();
constexpr int64_t kMaskHeadDim = 64;  // of the structured q and k that `spattn mask` selects from

FlagSpec quality_rows_flag() {
  return {"quality-rows", FlagKind::Value, "N",
          "topk: rows per (batch, head) for recall and error vs dense (default " +
              std::to_string(DynamicMeasureOptions{}.quality_rows) + ")"};
}

// attention() of every batch element with its own mask.
void attend_all(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const std::vector<BlockMask>& masks, const AttentionOptions& options) {
  for (int64_t b = 0; b < q.batch(); ++b)
    attention(batch_slice(q, b), batch_slice(k, b), batch_slice(v, b), batch_slice(out, b), masks[b],
              options);
}

struct Inputs {
  HostTensor q, k, v, out;
  Inputs(const ProblemShape& s, uint64_t seed)
      : q("q", s.dtype, s.batch, s.heads, s.q_len, s.head_dim, s.layout),
        k("k", s.dtype, s.batch, s.kv_heads, s.k_len, s.head_dim, s.layout),
        v("v", s.dtype, s.batch, s.kv_heads, s.k_len, s.head_dim, s.layout),
        out("out", s.dtype, s.batch, s.heads, s.q_len, s.head_dim, s.layout) {
    StructuredQKConfig structured;
    structured.seed = seed;
    make_structured_qk(q.view(), k.view(), structured);
    std::mt19937_64 rng(seed);
    v.fill_normal(rng);
    out.poison();
  }
};

// Median of one phase over the timed calls.
double median_of(const std::vector<SelectBreakdown>& calls, double SelectBreakdown::*phase) {
  std::vector<double> x;
  for (const SelectBreakdown& c : calls) x.push_back(c.*phase);
  std::sort(x.begin(), x.end());
  const size_t mid = x.size() / 2;
  return x.size() % 2 ? x[mid] : 0.5 * (x[mid - 1] + x[mid]);
}

std::vector<BlockMask> dense_masks(const ProblemShape& s, const SelectConfig& c) {
  const BlockMask dense =
      BlockMask::build(Pattern::dense(c.causal), MaskShape{s.q_len, s.k_len, c.block_q, c.block_k, s.heads});
  return std::vector<BlockMask>(static_cast<size_t>(s.batch), dense);
}

void run_on_host(const ProblemShape& s, Backend backend, const SelectConfig& c, int64_t repeats,
                 bool vs_dense, Inputs& in, DynamicMeasurement& r) {
  AttentionOptions options;
  options.backend = backend;
  const TensorView q = in.q.view(), k = in.k.view(), v = in.v.view(), out = in.out.view();
  if (vs_dense) {
    const std::vector<BlockMask> dense = dense_masks(s, c);
    r.dense = time_median([&] { attend_all(q, k, v, out, dense, options); }, repeats, kNoBudget);
    r.dense_timed = true;
  }
  std::vector<SelectBreakdown> calls;
  r.selection = time_median(
      [&] {
        calls.emplace_back();
        r.masks = select_blocks_batched(q, k, c, &calls.back());
      },
      repeats, kNoBudget);
  if (calls.size() > 1) calls.erase(calls.begin());  // the warm-up
  r.phases_known = true;
  r.phases.pooling_s = median_of(calls, &SelectBreakdown::pooling_s);
  r.phases.scoring_s = median_of(calls, &SelectBreakdown::scoring_s);
  r.phases.selection_s = median_of(calls, &SelectBreakdown::selection_s);
  r.attention = time_median([&] { attend_all(q, k, v, out, r.masks, options); }, repeats, kNoBudget);
}

#if defined(SPATTN_HAVE_CUDA)
// Median device time of each phase (queued in order on the default stream)
// over `repeats` rounds after one warm-up round, from CUDA events.
std::vector<double> device_phase_medians(const std::vector<std::function<void()>>& phases, int64_t repeats) {
  std::vector<cudaEvent_t> events(phases.size() + 1);
  for (cudaEvent_t& e : events) cudaEventCreate(&e);
  std::vector<std::vector<double>> samples(phases.size());
  for (int64_t round = 0; round <= repeats; ++round) {
    cudaEventRecord(events[0]);
    for (size_t n = 0; n < phases.size(); ++n) {
      phases[n]();
      cudaEventRecord(events[n + 1]);
    }
    require(cudaEventSynchronize(events.back()) == cudaSuccess, "CUDA error while timing: ",
            cudaGetErrorString(cudaGetLastError()));
    if (round == 0) continue;  // the warm-up
    for (size_t n = 0; n < phases.size(); ++n) {
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, events[n], events[n + 1]);
      samples[n].push_back(1e-3 * ms);
    }
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  std::vector<double> medians;
  for (std::vector<double>& x : samples) {
    std::sort(x.begin(), x.end());
    const size_t mid = x.size() / 2;
    medians.push_back(x.size() % 2 ? x[mid] : 0.5 * (x[mid - 1] + x[mid]));
  }
  return medians;
}
#endif

void run_on_device(const ProblemShape& s, const SelectConfig& c, int64_t repeats, bool vs_dense, Inputs& in,
                   DynamicMeasurement& r) {
#if defined(SPATTN_HAVE_CUDA)
  DeviceBuffers dev({&in.q, &in.k, &in.v, &in.out});
  AttentionOptions options;
  options.backend = Backend::Cuda;
  const TensorView q = dev.view(0), k = dev.view(1), v = dev.view(2), out = dev.view(3);
  if (vs_dense) {
    const std::vector<BlockMask> dense = dense_masks(s, c);
    r.dense.median_s = device_phase_medians({[&] { attend_all(q, k, v, out, dense, options); }}, repeats)[0];
    r.dense_timed = true;
  }
  cuda_detail::BlockSelector selector(
      c, cuda_detail::SelectShape{s.batch, s.heads, s.kv_heads, s.q_len, s.k_len, s.head_dim});
  const std::vector<double> phases = device_phase_medians(
      {[&] { selector.pool(q, k, nullptr); }, [&] { selector.score_select(nullptr); },
       [&] { selector.pack(nullptr); }},
      repeats);
  r.phases_known = true;
  // As on the host, sampled scores count as scoring and leave pooling at 0.
  r.phases.pooling_s = c.stride > 0 ? 0.0 : phases[0];
  r.phases.scoring_s = c.stride > 0 ? phases[0] + phases[1] : phases[1];
  r.phases.selection_s = phases[2];
  r.selection.median_s = phases[0] + phases[1] + phases[2];
  for (int64_t b = 0; b < s.batch; ++b) r.masks.push_back(selector.download(b));
  r.attention.median_s = device_phase_medians({[&] { attend_all(q, k, v, out, r.masks, options); }}, repeats)[0];
  if (c.block_q % 128 == 0 && c.block_k % 64 == 0) {  // the fused kernel's tile
    CudaDynamicAttention dynamic(c, s.batch, s.heads, s.kv_heads, s.q_len, s.k_len, s.head_dim,
                                 1.0 / std::sqrt(static_cast<double>(s.head_dim)));
    const std::vector<double> fused = device_phase_medians(
        {[&] { dynamic.select(q, k); }, [&] { dynamic.attend(q, k, v, out); }}, repeats);
    // The fused path's selection: pooling and scoring as above, then the work
    // items instead of the packing.
    r.phases.selection_s = std::max(0.0, fused[0] - phases[0] - phases[1]);
    r.selection.median_s = fused[0];
    r.fused_attention.median_s = fused[1];
    r.fused.median_s = device_phase_medians({[&] { dynamic.run(q, k, v, out); }}, repeats)[0];
    r.fused_timed = true;
  }
  dev.copy_to_host(3, in.out);
#else
  (void)s, (void)c, (void)repeats, (void)vs_dense, (void)in, (void)r;
  fail("backend cuda: this spattn was built without CUDA");
#endif
}

double check_against_reference(const ProblemShape& s, const Inputs& in, const DynamicMeasurement& r) {
  HostTensor ref("reference out", DType::F64, s.batch, s.heads, s.q_len, s.head_dim, Layout::BHLD);
  ref.poison();
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  for (int64_t b = 0; b < s.batch; ++b)
    reference_attention(batch_slice(in.q.view(), b), batch_slice(in.k.view(), b), batch_slice(in.v.view(), b),
                        batch_slice(ref.view(), b), r.masks[b], scale, nullptr);
  return relative_error(in.out.view(), ref.view());
}

int64_t kept_pairs(const ProblemShape& s, const std::vector<BlockMask>& masks) {
  int64_t total = 0;
  for (const BlockMask& m : masks) total += m.kept_pairs(s.heads);
  return total;
}

void print_table(const ProblemShape& s, Backend backend, const SelectConfig& c, const DynamicMeasurement& r) {
  std::ostream& os = std::cout;
  int64_t blocks = 0, full = 0;
  for (const BlockMask& m : r.masks) {
    blocks += m.num_blocks();
    full += m.num_full_blocks();
  }
  const double total_s = r.selection.median_s + r.attention.median_s;
  print_problem(os, s, backend);
  os << "pattern     topk: " << describe_select_config(c) << "; structured inputs\n";
  os << "mask        blocks " << c.block_q << "x" << c.block_k << ", " << format_count(blocks) << " kept ("
     << format_count(full) << " full), density " << format_general(r.density, 4) << "\n";
  os << "selection   " << format_seconds(r.selection.median_s);
  if (r.phases_known)
    os << " (pooling " << format_seconds(r.phases.pooling_s) << ", scoring "
       << format_seconds(r.phases.scoring_s) << ", selection " << format_seconds(r.phases.selection_s) << ")";
  os << ", " << format_general(100.0 * r.selection.median_s / r.dynamic_attention_s())
     << "% of the attention\n";
  os << "attention   " << format_seconds(r.attention.median_s) << " on the chosen blocks as static masks";
  if (r.fused_timed) os << ", " << format_seconds(r.fused_attention.median_s) << " on the device-built arrays";
  os << "\n";
  os << "total       " << format_seconds(total_s) << "\n";
  if (r.fused_timed)
    os << "end-to-end  " << format_seconds(r.fused.median_s)
       << " (select then attend on the device, no host synchronisation between)\n";
  if (r.dense_timed)
    os << "dense       " << format_seconds(r.dense.median_s) << " (" << (c.causal ? "causal" : "dense")
       << " attention; dynamic is "
       << format_ratio(r.dense.median_s / r.dynamic_total_s()) << " faster)\n";
  os << "quality     recall " << format_general(r.quality.recall_mean, 4) << " mean, "
     << format_general(r.quality.recall_min, 4) << " worst; output error "
     << format_general(r.quality.output_error) << " vs " << (c.causal ? "causal" : "dense") << " attention ("
     << r.quality.rows << " sampled rows)\n";
  print_check(os, r.check, "reference on the chosen blocks");
}

void print_json(const ProblemShape& s, Backend backend, const SelectConfig& c, const DynamicMeasurement& r) {
  JsonWriter j(std::cout);
  j.begin_object();
  j.field("backend", backend_name(backend)).field("pattern", "topk");
  j.field("select", describe_select_config(c));
  write_problem_json(j, s);
  j.field("block_q", c.block_q).field("block_k", c.block_k);
  write_dynamic_json(j, r);
  write_check_json(j, r.check);
  j.end_object();
}

}  // namespace

void write_dynamic_json(JsonWriter& j, const DynamicMeasurement& r) {
  j.field("kept_pairs", r.kept_pairs).field("density", r.density);
  write_timing_json(j, "selection", r.selection);
  if (r.phases_known) {
    j.field("pooling_ms", r.phases.pooling_s * 1e3).field("scoring_ms", r.phases.scoring_s * 1e3);
    j.field("ordering_ms", r.phases.selection_s * 1e3);
  }
  write_timing_json(j, "attention", r.attention);
  j.field("total_ms", (r.selection.median_s + r.attention.median_s) * 1e3);
  j.key("fused_attention_ms");
  if (r.fused_timed)
    j.value(r.fused_attention.median_s * 1e3);
  else
    j.null();
  j.key("end_to_end_ms");
  if (r.fused_timed)
    j.value(r.fused.median_s * 1e3);
  else
    j.null();
  if (r.dense_timed)
    write_timing_json(j, "dense", r.dense);
  else
    j.key("dense_ms").null();
  j.field("recall_mean", r.quality.recall_mean).field("recall_min", r.quality.recall_min);
  j.field("output_error", r.quality.output_error).field("quality_rows", r.quality.rows);
}

std::string describe_select_config(const SelectConfig& c) {
  std::string s = c.topk ? "topk " + std::to_string(*c.topk) : "tau " + format_general(*c.tau, 4);
  s += ", sink " + std::to_string(c.sink_blocks) + ", local " + std::to_string(c.local_blocks);
  if (c.min_blocks > 0) s += ", min " + std::to_string(c.min_blocks);
  if (c.max_blocks > 0) s += ", max " + std::to_string(c.max_blocks);
  s += c.stride > 0 ? ", antidiagonal stride " + std::to_string(c.stride) : ", mean pooling";
  s += c.per_query_head ? ", per query head" : ", per kv head";
  return s + (c.causal ? ", causal" : "");
}

MemoryEstimate dynamic_memory(const std::string& request, const ProblemShape& s, const SelectConfig& config,
                              const DynamicMeasureOptions& o) {
  MemoryEstimate need(request);
  need.add("q, k, v and out", input_bytes(s));
  need.add("selection", select_blocks_bytes(config, s.batch, s.heads, s.kv_heads, s.q_len, s.k_len, s.head_dim));
  if (o.vs_dense) {
    const MaskShape dense{s.q_len, s.k_len, config.block_q, config.block_k, s.heads};
    need.add("dense masks", bytes_for(BlockMask::build_bytes(Pattern::dense(config.causal), dense), s.batch));
  }
  // selection_quality: one fp64 copy of a head's keys and values per thread.
  need.add("quality rows", bytes_for(bytes_for(s.k_len, 2 * s.head_dim + 1),
                                     sizeof(double) * std::max(1, omp_get_max_threads())));
  if (o.check) need.add("fp64 reference output", reference_bytes(s));
  return need;
}

DynamicMeasurement measure_dynamic(const ProblemShape& s, Backend backend, const SelectConfig& config,
                                   const DynamicMeasureOptions& o) {
  Inputs in(s, o.seed);
  DynamicMeasurement r;
  if (backend == Backend::Cuda)
    run_on_device(s, config, o.repeats, o.vs_dense, in, r);
  else
    run_on_host(s, backend, config, o.repeats, o.vs_dense, in, r);
  r.kept_pairs = kept_pairs(s, r.masks);
  const double pairs =
      static_cast<double>(s.batch * s.heads) * static_cast<double>(s.q_len) * static_cast<double>(s.k_len);
  r.density = static_cast<double>(r.kept_pairs) / pairs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  r.quality = selection_quality(in.q.view(), in.k.view(), in.v.view(), in.out.view(), r.masks, config.causal,
                                scale, o.quality_rows);
  if (o.check) r.check = judge_error(check_against_reference(s, in, r), s.dtype);
  return r;
}

std::vector<FlagSpec> dynamic_flag_specs(bool for_run) {
  using K = FlagKind;
  std::vector<FlagSpec> flags = {
      {"topk", K::Value, "K", "topk: key blocks kept per query block, forced ones included"},
      {"tau", K::Value, "T", "topk: keep the fewest blocks whose score mass reaches T in (0, 1]"},
      {"sink-blocks", K::Value, "S", "topk: first key blocks always kept (default 1)"},
      {"local-blocks", K::Value, "L", "topk: blocks ending at the diagonal always kept (default 2)"},
      {"min-blocks", K::Value, "N", "topk: keep at least N blocks per query block (default 0)"},
      {"max-blocks", K::Value, "N", "topk: keep at most N blocks per query block (default 0 = no limit)"},
      {"per-query-head", K::Switch, "", "topk: one selection per query head (default: per kv head)"},
  };
  if (for_run) {
    flags.push_back(quality_rows_flag());
    flags.push_back({"vs-dense", K::Switch, "", "topk: also time dense (or causal) attention"});
  }
  return flags;
}

std::vector<FlagSpec> dynamic_bench_flag_specs() {
  using K = FlagKind;
  std::vector<FlagSpec> flags = dynamic_flag_specs(false);
  flags.push_back(quality_rows_flag());
  flags.push_back({"block", K::Value, "B", "topk: block size of queries and keys (default 128)"});
  flags.push_back({"block-q", K::Value, "B", "topk: query block size (default --block)"});
  flags.push_back({"block-k", K::Value, "B", "topk: key block size (default --block)"});
  flags.push_back({"causal", K::Switch, "", "topk: causal selection and attention"});
  flags.push_back({"stride", K::Value, "S", "topk: antidiagonal sampling stride (default 0 = mean pooling)"});
  return flags;
}

bool is_dynamic_pattern(const Args& args) { return args.find_string("pattern").value_or("") == "topk"; }

SelectConfig select_config_from_flags(const Args& args) {
  SelectConfig c;
  const int64_t block = args.get_int("block", 128, 1);
  c.block_q = args.get_int("block-q", block, 1);
  c.block_k = args.get_int("block-k", block, 1);
  c.causal = args.flag("causal");
  require(args.has("topk") != args.has("tau"), "--pattern topk needs exactly one of --topk K and --tau T");
  constexpr double kAny = std::numeric_limits<double>::infinity();  // validate_select_config checks --tau
  if (args.has("topk"))
    c.topk = args.get_int("topk", 1, 1);
  else
    c.tau = args.get_double("tau", 1.0, -kAny, kAny);
  c.sink_blocks = args.get_int("sink-blocks", 1, 0);
  c.local_blocks = args.get_int("local-blocks", 2, 0);
  c.min_blocks = args.get_int("min-blocks", 0, 0);
  c.max_blocks = args.get_int("max-blocks", 0, 0);
  c.stride = args.get_int("stride", 0, 0);
  c.per_query_head = args.flag("per-query-head");
  validate_select_config(c);
  return c;
}

int run_dynamic(const Args& args, const ProblemShape& s, Backend requested, int64_t repeats, uint64_t seed,
                bool check, bool json) {
  const SelectConfig config = select_config_from_flags(args);
  DynamicMeasureOptions options;
  options.repeats = repeats;
  options.seed = seed;
  options.vs_dense = args.flag("vs-dense");
  options.quality_rows = args.get_int("quality-rows", options.quality_rows, 1);
  options.check = check;
  args.require_all_used("to --pattern topk");
  const Backend backend = resolve_backend(requested);
  dynamic_memory(size_request(args), s, config, options).check();
  check_device_memory(size_request(args), backend, input_bytes(s));
  const DynamicMeasurement r = measure_dynamic(s, backend, config, options);
  if (json)
    print_json(s, backend, config, r);
  else
    print_table(s, backend, config, r);
  return r.check.passed ? 0 : 1;
}

int mask_dynamic(const Args& args, int64_t q_len, int64_t k_len, int64_t heads, int64_t head,
                 int64_t max_side, const std::string& out) {
  const SelectConfig config = select_config_from_flags(args);
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  args.require_all_used("to --pattern topk");
  MemoryEstimate need(size_request(args));
  need.add("q and k", bytes_for(bytes_for(bytes_for(heads, q_len + k_len), kMaskHeadDim), sizeof(float)));
  need.add("selection", select_blocks_bytes(config, 1, heads, heads, q_len, k_len, kMaskHeadDim));
  need.add("pictures", mask_pictures_bytes(q_len, k_len, config.block_q, config.block_k, max_side));
  need.check();
  HostTensor q("q", DType::F32, 1, heads, q_len, kMaskHeadDim, Layout::BHLD);
  HostTensor k("k", DType::F32, 1, heads, k_len, kMaskHeadDim, Layout::BHLD);
  StructuredQKConfig structured;
  structured.seed = seed;
  make_structured_qk(q.view(), k.view(), structured);
  SelectBreakdown phases;
  const BlockMask mask = select_blocks(q.view(), k.view(), config, &phases);

  const HeadBlocks counts = count_head_blocks(mask, head, heads);
  std::ostream& os = std::cout;
  const std::string title =
      "topk: " + describe_select_config(config) + "; structured inputs (seed " + std::to_string(seed) + ", D 64)";
  os << "pattern     " << title << "\n";
  os << "shape       Lq=" << q_len << " Lk=" << k_len << " heads=" << heads << ", blocks " << mask.block_q()
     << "x" << mask.block_k() << " (" << mask.num_q_blocks() << " x " << mask.num_k_blocks() << " grid)\n";
  os << "blocks      head " << head << ": " << format_count(counts.kept) << " kept of "
     << format_count(mask.num_q_blocks() * mask.num_k_blocks()) << " (" << format_count(counts.full)
     << " full, " << format_count(counts.kept - counts.full) << " partial)\n";
  os << "density     " << format_general(mask.density(heads), 4) << "\n";
  os << "selection   " << format_seconds(phases.total_s()) << "\n";
  write_mask_pictures(os, mask, head, heads, max_side, out, title);
  return 0;
}

}  // namespace spattn::cli
