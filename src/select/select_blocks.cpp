// select/select_blocks.cpp - host dynamic block selection (phase 3) and the
// public entry points select_blocks, select_blocks_batched, attention_dynamic.
//
// Per (mask head, query block) row: the forced blocks first, then the other
// allowed blocks in descending probability (ties to the lower index); topk
// asks for topk blocks in all, tau for the shortest prefix whose mass, forced
// blocks included, reaches tau (every block when tau = 1); select_rules.hpp's
// kept_count applies min_blocks / max_blocks. The kept blocks are written in
// ascending order into a BlockMask; causal-cut blocks are partial and tested
// with the causal predicate of the mask's pattern. Before a selection starts,
// its scratch and masks (select_blocks_bytes, an upper bound) are checked
// against the memory available.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "select/block_scores.hpp"
#include "select/select_config.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"
#include "spattn/select.hpp"

namespace spattn {
namespace {

using select_detail::BlockProbs;
using select_detail::SelectParams;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The kept key blocks of one row, ascending. `order` is scratch.
void choose_row(const double* probs, const SelectParams& p, int64_t qb, std::vector<int32_t>& order,
                std::vector<uint8_t>& kept, std::vector<int32_t>& out) {
  const int64_t n = select_detail::allowed_blocks(p, qb);
  const int64_t forced = select_detail::forced_count(p, qb, n);
  order.clear();
  kept.assign(static_cast<size_t>(n), 0);
  double forced_mass = 0.0;
  for (int32_t c = 0; c < n; ++c) {
    if (select_detail::is_forced(p, qb, c)) {
      kept[c] = 1;
      forced_mass += probs[c];
    } else {
      order.push_back(c);
    }
  }
  auto before = [probs](int32_t a, int32_t b) {
    return select_detail::ranks_before(probs[a], a, probs[b], b);
  };
  // topk only needs its leading blocks in order; tau walks the whole order.
  int64_t wanted = p.topk;
  if (!p.use_tau) {
    const int64_t take = select_detail::kept_count(p, wanted, forced, n) - forced;
    std::partial_sort(order.begin(), order.begin() + take, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
    double mass = forced_mass;
    int64_t taken = 0;
    while ((p.tau >= 1.0 || mass < p.tau) && taken < static_cast<int64_t>(order.size()))
      mass += probs[order[taken++]];
    wanted = forced + taken;
  }
  const int64_t take = select_detail::kept_count(p, wanted, forced, n) - forced;
  for (int64_t t = 0; t < take; ++t) kept[order[t]] = 1;
  out.clear();
  for (int32_t c = 0; c < n; ++c)
    if (kept[c]) out.push_back(c);
}

BlockMask assemble_mask(const BlockProbs& probs, const SelectParams& p) {
  const int64_t rows = probs.num_heads * p.num_q_blocks;
  std::vector<std::vector<int32_t>> chosen(static_cast<size_t>(rows));
#pragma omp parallel if (rows * p.num_k_blocks >= select_detail::kMinParallelWork)
  {
    std::vector<int32_t> order;
    std::vector<uint8_t> kept;
#pragma omp for schedule(dynamic, 16)
    for (int64_t row = 0; row < rows; ++row)
      choose_row(probs.probs.data() + row * p.num_k_blocks, p, row % p.num_q_blocks, order, kept,
                 chosen[row]);
  }
  std::vector<int64_t> offsets(static_cast<size_t>(rows + 1), 0);
  for (int64_t row = 0; row < rows; ++row)
    offsets[row + 1] = offsets[row] + static_cast<int64_t>(chosen[row].size());
  std::vector<int32_t> indices(static_cast<size_t>(offsets[rows]));
  std::vector<uint8_t> full(static_cast<size_t>(offsets[rows]));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t qb = row % p.num_q_blocks;
    int64_t at = offsets[row];
    for (int32_t c : chosen[row]) {
      indices[at] = c;
      full[at] = select_detail::block_is_cut(p, qb, c) ? 0 : 1;
      ++at;
    }
  }
  auto pattern = std::make_shared<const Pattern>(p.causal ? Pattern::causal() : Pattern::dense());
  return BlockMask(p.q_len, p.k_len, p.block_q, p.block_k, probs.num_heads, std::move(offsets),
                   std::move(indices), std::move(full), std::move(pattern));
}

BlockMask select_one(const TensorView& q, const TensorView& k, int64_t b, const SelectParams& p,
                     bool per_query_head, SelectBreakdown* breakdown) {
  SelectBreakdown local;
  BlockProbs probs;
  if (p.stride == 0) {
    Clock::time_point start = Clock::now();
    const std::vector<double> pooled_q = select_detail::pool_blocks(q, b, p.block_q);
    const std::vector<double> pooled_k = select_detail::pool_blocks(k, b, p.block_k);
    local.pooling_s = seconds_since(start);
    start = Clock::now();
    probs = select_detail::mean_pooled_probs(pooled_q, pooled_k, p, q.heads(), k.heads(), q.head_dim(),
                                             per_query_head);
    local.scoring_s = seconds_since(start);
  } else {
    const Clock::time_point start = Clock::now();
    probs = select_detail::antidiagonal_probs(q, k, b, p, per_query_head);
    local.scoring_s = seconds_since(start);
  }
  const Clock::time_point start = Clock::now();
  BlockMask mask = assemble_mask(probs, p);
  local.selection_s = seconds_since(start);
  if (breakdown) {
    breakdown->pooling_s += local.pooling_s;
    breakdown->scoring_s += local.scoring_s;
    breakdown->selection_s += local.selection_s;
  }
  return mask;
}

}  // namespace

int64_t select_blocks_bytes(const SelectConfig& config, int64_t batch, int64_t q_heads, int64_t kv_heads,
                            int64_t q_len, int64_t k_len, int64_t head_dim) {
  const SelectParams p = select_detail::resolve_select_params(config, q_len, k_len, head_dim);
  const int64_t nqb = p.num_q_blocks, nkb = p.num_k_blocks;
  const int64_t rows = bytes_for(config.per_query_head ? q_heads : kv_heads, nqb);
  int64_t per_row = config.topk ? std::max({*config.topk, config.sink_blocks + config.local_blocks,
                                            config.min_blocks})
                                : nkb;
  if (config.max_blocks > 0) per_row = std::min(per_row, config.max_blocks);
  per_row = std::min(per_row, nkb);
  // Chosen lists (a vector per row) and the mask arrays, for every element.
  const int64_t mask = add_bytes(bytes_for(rows, sizeof(std::vector<int32_t>) + 2 * sizeof(int64_t)),
                                 bytes_for(bytes_for(rows, per_row), 2 * sizeof(int32_t) + sizeof(uint8_t)));
  // One element's scratch: block probabilities, and pooled or copied q and k.
  const int64_t probs = bytes_for(bytes_for(rows, nkb), sizeof(double));
  const int64_t inputs =
      p.stride == 0 ? bytes_for(add_bytes(bytes_for(q_heads, nqb), bytes_for(kv_heads, nkb)), head_dim * 8)
                    : bytes_for(add_bytes(bytes_for(q_heads, q_len), bytes_for(kv_heads, k_len)), head_dim * 4);
  return add_bytes(bytes_for(mask, batch), add_bytes(probs, inputs));
}

std::vector<BlockMask> select_blocks_batched(const TensorView& q, const TensorView& k,
                                             const SelectConfig& config, SelectBreakdown* breakdown) {
  select_detail::validate_select_inputs(q, k);
  const SelectParams p = select_detail::resolve_select_params(config, q.seq_len(), k.seq_len(), q.head_dim());
  MemoryEstimate("block selection for q " + std::to_string(q.seq_len()) + " x k " + std::to_string(k.seq_len()) +
                 " with blocks " + std::to_string(p.block_q) + "x" + std::to_string(p.block_k))
      .add("scores and masks", select_blocks_bytes(config, q.batch(), q.heads(), k.heads(), q.seq_len(),
                                                    k.seq_len(), q.head_dim()))
      .check();
  std::vector<BlockMask> masks;
  masks.reserve(static_cast<size_t>(q.batch()));
  for (int64_t b = 0; b < q.batch(); ++b)
    masks.push_back(select_one(q, k, b, p, config.per_query_head, breakdown));
  return masks;
}

BlockMask select_blocks(const TensorView& q, const TensorView& k, const SelectConfig& config,
                        SelectBreakdown* breakdown) {
  require(q.batch() == 1, "select_blocks selects for one batch element: q batch must be 1, got ", q.batch(),
          " (use select_blocks_batched for one mask per element)");
  return std::move(select_blocks_batched(q, k, config, breakdown).front());
}

std::vector<BlockMask> attention_dynamic(const TensorView& q, const TensorView& k, const TensorView& v,
                                         const TensorView& out, const SelectConfig& config,
                                         const AttentionOptions& options, const TensorView* lse,
                                         SelectBreakdown* breakdown) {
  require(v.batch() == q.batch(), "v batch (", v.batch(), ") must equal q batch (", q.batch(), ")");
  require(out.batch() == q.batch(), "out batch (", out.batch(), ") must equal q batch (", q.batch(), ")");
  if (lse)
    require(lse->batch() == q.batch(), "lse batch (", lse->batch(), ") must equal q batch (", q.batch(), ")");
  AttentionOptions attend = options;
  require(options.backend != Backend::Cuda,
          "attention_dynamic selects on the host and reads host tensors; backend 'cuda' needs the "
          "device selector");
  if (attend.backend == Backend::Auto)
    attend.backend = backend_available(Backend::Cpu) ? Backend::Cpu : Backend::Reference;
  SelectConfig chosen = config;
  if (!chosen.scale) chosen.scale = resolve_scale(options, q.head_dim());
  std::vector<BlockMask> masks = select_blocks_batched(q, k, chosen, breakdown);
  for (int64_t b = 0; b < q.batch(); ++b) {
    const TensorView lse_b = lse ? batch_slice(*lse, b) : TensorView{};
    attention(batch_slice(q, b), batch_slice(k, b), batch_slice(v, b), batch_slice(out, b), masks[b], attend,
              lse ? &lse_b : nullptr);
  }
  return masks;
}

}  // namespace spattn
