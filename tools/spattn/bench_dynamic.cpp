// tools/spattn/bench_dynamic.cpp - `spattn bench --pattern topk`: the cost of
// choosing the blocks at run time, per sequence length (see bench_presets.hpp).
//
// Each length runs measure_dynamic (dynamic_pattern.hpp, the code behind
// `spattn run --pattern topk --vs-dense`) on the structured inputs: the
// selection's phases (pooling, scoring, then ordering and mask assembly; on
// CUDA the scoring kernel also orders and counts, and the last phase is the
// fused path's work items),
// the attention on the chosen blocks, select-then-attend in total, the same
// masks run as static masks, and dense (causal with --causal) attention on
// the same backend; then attention recall and relative output error against
// dense attention on sampled rows. On host backends the attention of the
// dynamic path is the static run of the chosen masks; on CUDA it is the fused
// kernel on the device-built arrays, and the total is measured end to end.
#include <iostream>

#include "bench_presets.hpp"
#include "dynamic_pattern.hpp"
#include "progress.hpp"
#include "text_table.hpp"

namespace spattn::cli {

void run_dynamic_bench(const BenchConfig& config, const SelectConfig& select, int64_t quality_rows,
                       JsonWriter& json) {
  DynamicMeasureOptions options;
  options.repeats = config.repeats;
  options.seed = config.seed;
  options.vs_dense = true;
  options.quality_rows = quality_rows;
  std::cout << "\ntopk  (" << describe_select_config(select) << ", blocks " << select.block_q << "x"
            << select.block_k << "; structured inputs)\n";
  TextTable table({"L", "pool ms", "score ms", "order ms", "attention ms", "total ms", "static ms",
                   "dense ms", "vs dense", "select %", "density", "recall", "worst recall", "rel error"});
  table.stream(std::cout);
  json.key("results").begin_array();
  int64_t done = 0;
  for (const int64_t seq : config.seqs) {
    progress_line("bench " + std::to_string(++done) + "/" + std::to_string(config.seqs.size()) + ": topk L=" +
                  std::to_string(seq), true);
    ProblemShape s = config.shape;
    s.q_len = s.k_len = seq;
    const DynamicMeasurement r = measure_dynamic(s, config.backend, select, options);
    const double total_s = r.dynamic_total_s();
    table.add_row({std::to_string(seq), format_ms(r.phases.pooling_s), format_ms(r.phases.scoring_s),
                   format_ms(r.phases.selection_s),
                   format_ms(r.dynamic_attention_s()), format_ms(total_s), format_ms(r.attention.median_s),
                   format_ms(r.dense.median_s), format_ratio(r.dense.median_s / total_s),
                   format_general(100.0 * r.selection.median_s / total_s), format_general(r.density),
                   format_general(r.quality.recall_mean, 4), format_general(r.quality.recall_min, 4),
                   format_general(r.quality.output_error)});
    json.begin_object();
    json.field("pattern", "topk").field("select", describe_select_config(select)).field("seq", seq);
    json.field("block_q", select.block_q).field("block_k", select.block_k);
    write_dynamic_json(json, r);
    json.field("dynamic_total_ms", total_s * 1e3).field("speedup", r.dense.median_s / total_s);
    json.end_object();
  }
  json.end_array();
}

}  // namespace spattn::cli
