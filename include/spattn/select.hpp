// spattn/select.hpp - dynamic block-sparse attention: key blocks chosen from q and k.
//
// select_blocks estimates how much softmax mass each (query block, key block)
// pair carries, cheaply, and keeps per query block the key blocks that carry
// most of it (DESIGN.md section 4, docs/dynamic.md):
//   1. scores: mean-pooled q of the query block . mean-pooled k of the key
//      block * scale (MInference); or, with stride S > 0, the log of the mean
//      of exp(q_i . k_j * scale) over the block's antidiagonal samples
//      (pairs with (i - first row) + (j - first key) = S - 1 mod S, XAttention);
//   2. per query head, a softmax over the row's allowed key blocks (causal:
//      blocks holding at least one pair with j <= p, p = i + Lk - Lq);
//      one selection per kv head averages the probabilities of its query heads;
//   3. kept: the forced blocks (the first sink_blocks key blocks and the
//      local_blocks blocks ending at the block of the row's last position),
//      then the others in descending probability, ties to the lower index,
//      until the row holds topk blocks, or until the kept mass reaches tau;
//      then at least min_blocks and at most max_blocks.
// The result is a BlockMask (full blocks, and causal-cut blocks marked partial
// with the causal predicate) that any backend runs through spattn::attention.
// Selection reads each batch element on its own: select_blocks takes B == 1,
// select_blocks_batched returns one mask per batch element.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

struct SelectConfig {
  int64_t block_q = 128;
  int64_t block_k = 128;
  // Exactly one of topk (blocks kept per query block, forced ones included)
  // and tau (probability mass to reach, in (0, 1]; 1 keeps every allowed block).
  std::optional<int64_t> topk;
  std::optional<double> tau;
  int64_t min_blocks = 0;    // keep at least this many (as many as are allowed)
  int64_t max_blocks = 0;    // keep at most this many; 0 = no limit
  int64_t sink_blocks = 1;   // first key blocks, always kept where allowed
  int64_t local_blocks = 2;  // blocks ending at the diagonal, always kept where allowed
  bool causal = false;
  int64_t stride = 0;           // 0 = mean pooling; S >= 1 = antidiagonal sampling
  bool per_query_head = false;  // false: one selection per kv head (GQA group)
  std::optional<double> scale;  // default 1 / sqrt(D)
};

// Throws spattn::Error naming the first bad parameter and its value.
void validate_select_config(const SelectConfig& config);

// Wall time of the selection phases, in seconds, summed over calls that
// received the same breakdown.
struct SelectBreakdown {
  double pooling_s = 0.0;    // mean pooling of q and k (0 with antidiagonal sampling)
  double scoring_s = 0.0;    // block scores and row softmax
  double selection_s = 0.0;  // ordering, thresholds, budgets, mask assembly
  double total_s() const { return pooling_s + scoring_s + selection_s; }
};

// The mask chosen for q (1, Hq, Lq, D) and k (1, Hkv, Lk, D) on the host. Its
// heads are Hkv (or Hq with per_query_head); query head h uses mask head
// h / (Hq / heads). Inputs in any dtype and layout.
BlockMask select_blocks(const TensorView& q, const TensorView& k, const SelectConfig& config,
                        SelectBreakdown* breakdown = nullptr);

// An upper bound of the host memory select_blocks_batched takes for q (batch,
// q_heads, q_len, head_dim) and k (batch, kv_heads, k_len, head_dim): the block
// probabilities and pooled inputs of one element, and every element's mask.
// select_blocks_batched refuses (spattn::Error) when it exceeds the memory
// available (spattn/memory.hpp).
int64_t select_blocks_bytes(const SelectConfig& config, int64_t batch, int64_t q_heads, int64_t kv_heads,
                            int64_t q_len, int64_t k_len, int64_t head_dim);

// One mask per batch element for q (B, Hq, Lq, D) and k (B, Hkv, Lk, D).
std::vector<BlockMask> select_blocks_batched(const TensorView& q, const TensorView& k,
                                             const SelectConfig& config,
                                             SelectBreakdown* breakdown = nullptr);

// Selects per batch element, then runs spattn::attention with each mask on
// that element. When config.scale is unset the selection uses the attention's
// scale. Returns the masks used. Host tensors (the CPU-side selection).
std::vector<BlockMask> attention_dynamic(const TensorView& q, const TensorView& k, const TensorView& v,
                                         const TensorView& out, const SelectConfig& config,
                                         const AttentionOptions& options = {},
                                         const TensorView* lse = nullptr,
                                         SelectBreakdown* breakdown = nullptr);

// ---- quality of a selection ---------------------------------------------------

struct SelectionQuality {
  double recall_mean = 0.0;   // dense softmax mass on the kept pairs, mean over sampled rows
  double recall_min = 0.0;    // the same, worst sampled row
  double output_error = 0.0;  // ||out - dense|| / ||dense|| over the sampled rows
  int64_t rows = 0;           // sampled (batch, head, row) triples with at least one key
};

// Compares `out` (attention run with masks[b] on batch element b) with exact
// dense attention (causal when `causal`) in fp64 on rows_per_head evenly
// spaced rows of every (batch, query head). Host tensors.
SelectionQuality selection_quality(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const std::vector<BlockMask>& masks, bool causal,
                                   double scale, int64_t rows_per_head);

// ---- inputs that behave like real attention ---------------------------------

// make_structured_qk writes q (B, Hq, Lq, D) and k (B, Hkv, Lk, D) whose
// logits q_i . k_j / sqrt(D) (p = i + Lk - Lq) add up, approximately:
//   locality:  local_strength * (mean of cos(w_f (p - j)) over frequencies w_f
//              spread geometrically between pi / local_width and pi / (4 Lk));
//   sinks:     + sink_strength for j < sink_tokens;
//   verticals: + vertical_strength for vertical_keys random keys per kv head;
//   topics:    + topic_strength when positions p and j lie in segments of the
//              same topic: the positions are cut into segments of random
//              length in [topic_span / 2, 2 topic_span), each given one of
//              `topics` topics at random (per batch element), so a query also
//              attends to distant segments that share its topic;
//   noise:     + a content term with standard deviation noise.
// Every term is scaled per query head by a factor drawn in [0.5, 1.5], and
// local_width per kv head within [local_width / 2, 2 local_width]. All draws
// come from splitmix64 seeded by `seed`, so data are the same everywhere.
// Needs D >= 4; small D get fewer frequencies and topics (see
// structured_qk.cpp for the split of D). Any dtype and layout.
struct StructuredQKConfig {
  uint64_t seed = 0;
  double local_strength = 3.0;
  double local_width = 64.0;  // tokens
  int64_t sink_tokens = 4;
  double sink_strength = 6.0;
  int64_t vertical_keys = 8;
  double vertical_strength = 5.0;
  int64_t topics = 8;
  double topic_span = 256.0;  // tokens
  double topic_strength = 5.0;
  double noise = 1.0;
};

void make_structured_qk(const TensorView& q, const TensorView& k, const StructuredQKConfig& config = {});

}  // namespace spattn
