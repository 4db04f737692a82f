// dist/rank_plan.cpp - one rank's part of a context-parallel plan
// (spattn/dist_attention.hpp): its calls' masks in stage order, what it sends
// to and receives from each peer, and the largest stage and call.
#include <algorithm>

#include "spattn/dist_attention.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

RankPlan::RankPlan(const ContextParallelPlan& plan, int64_t rank, int64_t block_q)
    : rank_(rank), layout_(plan.layout()), num_heads_(plan.num_heads()) {
  const int64_t world = layout_.world_size();
  require(rank >= 0 && rank < world, "rank must be in [0, ", world, "), got ", rank);
  require(block_q >= 1, "block_q must be >= 1, got ", block_q);
  sends_.resize(static_cast<size_t>(world));
  rows_to_.assign(static_cast<size_t>(world), 0);
  rows_from_.assign(static_cast<size_t>(world), 0);
  for (int64_t p = 0; p < world; ++p) {
    if (p == rank) continue;
    sends_[static_cast<size_t>(p)] = plan.runs(p, rank);
    rows_to_[static_cast<size_t>(p)] = plan.rows_received(p, rank);
    rows_from_[static_cast<size_t>(p)] = plan.rows_received(rank, p);
    max_rows_to_ = std::max(max_rows_to_, rows_to_[static_cast<size_t>(p)]);
    max_rows_from_ = std::max(max_rows_from_, rows_from_[static_cast<size_t>(p)]);
  }
  const int64_t L = layout_.seq_len();
  for (const CallSpec& s : plan.calls(rank)) {
    const Pattern framed = plan.pattern().framed(s.q_start, s.k_start, L, L);
    BlockMask mask = BlockMask::build(framed, MaskShape{s.q_len, s.k_len, block_q, layout_.block(), num_heads_});
    if (mask.num_blocks() == 0) continue;
    max_q_len_ = std::max(max_q_len_, s.q_len);
    max_k_len_ = std::max(max_k_len_, s.k_len);
    const int64_t stage = s.peer < 0 ? 0 : ((rank - s.peer) % world + world) % world;  // stage_from(stage) == peer
    calls_.push_back(Call{s, std::move(mask), stage});
  }
  std::stable_sort(calls_.begin(), calls_.end(), [](const Call& a, const Call& b) { return a.stage < b.stage; });
}

int64_t RankPlan::stage_to(int64_t stage) const {
  require(stage >= 1 && stage <= num_stages(), "stage must be in [1, ", num_stages(), "], got ", stage);
  return (rank_ + stage) % layout_.world_size();
}

int64_t RankPlan::stage_from(int64_t stage) const {
  require(stage >= 1 && stage <= num_stages(), "stage must be in [1, ", num_stages(), "], got ", stage);
  return (rank_ - stage + layout_.world_size()) % layout_.world_size();
}

const std::vector<KeyRun>& RankPlan::sends(int64_t peer) const {
  require(peer >= 0 && peer < layout_.world_size(), "peer must be in [0, ", layout_.world_size(), "), got ", peer);
  return sends_[static_cast<size_t>(peer)];
}

int64_t RankPlan::rows_to(int64_t peer) const {
  sends(peer);  // checks the peer
  return rows_to_[static_cast<size_t>(peer)];
}

int64_t RankPlan::rows_from(int64_t peer) const {
  sends(peer);
  return rows_from_[static_cast<size_t>(peer)];
}

}  // namespace spattn::dist
