// dist/cp_plan.cpp - ShardLayout and ContextParallelPlan (spattn/dist.hpp).
#include <algorithm>

#include "spattn/block_mask.hpp"
#include "spattn/dist.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

ShardLayout::ShardLayout(LayoutKind kind, int64_t seq_len, int64_t world_size, int64_t block)
    : kind_(kind), seq_len_(seq_len), world_size_(world_size), block_(block) {
  require(seq_len >= 1, "seq_len must be >= 1, got ", seq_len);
  require(world_size >= 1, "world_size must be >= 1, got ", world_size);
  require(block >= 1, "block must be >= 1, got ", block);
  const int64_t chunks = world_size * (kind == LayoutKind::Zigzag ? 2 : 1);
  const int64_t blocks = (seq_len + block - 1) / block;
  require(blocks >= chunks, "seq_len ", seq_len, " has ", blocks, " blocks of ", block, ", fewer than the ", chunks,
          " chunks of a ", kind == LayoutKind::Zigzag ? "zigzag" : "contiguous", " layout over ", world_size,
          " ranks; use a smaller block or fewer ranks");
  for (int64_t c = 0; c <= chunks; ++c) bounds_.push_back(std::min(seq_len, c * blocks / chunks * block));
}

std::vector<Chunk> ShardLayout::pieces(int64_t rank) const {
  require(rank >= 0 && rank < world_size_, "rank must be in [0, ", world_size_, "), got ", rank);
  const auto& b = bounds_;
  if (kind_ == LayoutKind::Contiguous) return {Chunk{b[rank], b[rank + 1]}};
  const int64_t last = 2 * world_size_ - 1 - rank;
  return {Chunk{b[rank], b[rank + 1]}, Chunk{b[last], b[last + 1]}};
}

int64_t ShardLayout::local_len(int64_t rank) const {
  int64_t n = 0;
  for (const Chunk& c : pieces(rank)) n += c.end - c.start;
  return n;
}

namespace {

// Query rows per block of the mask that finds the needed key blocks, in key
// blocks: one block for the whole chunk would classify each candidate key
// block over every row of the chunk (row by row where the closed forms cannot
// decide, as for unions of dilated branches); blocks of this many rows keep
// the candidates near the rows while a causal mask's lists stay short.
constexpr int64_t kRowsPerQueryBlock = 64;

}  // namespace

std::vector<int64_t> needed_blocks(const Pattern& pattern, int64_t first_row, int64_t end_row, int64_t seq_len,
                                   int64_t block, int64_t num_heads) {
  const int64_t rows = end_row - first_row;
  if (rows <= 0) return {};
  const Pattern framed = pattern.framed(first_row, 0, seq_len, seq_len);
  const int64_t block_q = std::min(rows, kRowsPerQueryBlock * block);
  const BlockMask coarse = BlockMask::build(framed, MaskShape{rows, seq_len, block_q, block, num_heads});
  std::vector<int64_t> kept(coarse.kv_indices().begin(), coarse.kv_indices().end());
  std::sort(kept.begin(), kept.end());
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  return kept;
}

ContextParallelPlan::ContextParallelPlan(const Pattern& pattern, const ShardLayout& layout, int64_t num_heads)
    : pattern_(pattern), layout_(layout), num_heads_(num_heads) {
  require(num_heads >= 1, "num_heads must be >= 1, got ", num_heads);
  for (int64_t r = 0; r < layout.world_size(); ++r) {
    std::vector<int64_t> wanted;
    for (const Chunk& c : layout.pieces(r)) {
      const std::vector<int64_t> some =
          dist::needed_blocks(pattern, c.start, c.end, layout.seq_len(), layout.block(), num_heads);
      wanted.insert(wanted.end(), some.begin(), some.end());
    }
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    needed_.push_back(std::move(wanted));
  }
}

const std::vector<int64_t>& ContextParallelPlan::needed_blocks(int64_t rank) const {
  require(rank >= 0 && rank < layout_.world_size(), "rank must be in [0, ", layout_.world_size(), "), got ", rank);
  return needed_[static_cast<size_t>(rank)];
}

std::vector<KeyRun> ContextParallelPlan::runs(int64_t receiver, int64_t sender) const {
  require(receiver != sender, "a rank receives nothing from itself (receiver = sender = ", sender, ")");
  const std::vector<int64_t>& wanted = needed_blocks(receiver);
  const int64_t block = layout_.block();
  std::vector<KeyRun> out;
  int64_t offset = 0, source = 0;
  for (const Chunk& c : layout_.pieces(sender)) {  // chunks start on block boundaries
    auto kb = std::lower_bound(wanted.begin(), wanted.end(), c.start / block);
    for (; kb != wanted.end() && *kb * block < c.end; ++kb) {
      const int64_t lo = *kb * block, hi = std::min(c.end, lo + block);
      const bool follows = !out.empty() && out.back().start + out.back().length == lo;  // offsets follow too
      if (follows) {
        out.back().length += hi - lo;
      } else {
        out.push_back(KeyRun{lo, hi - lo, offset, source + lo - c.start});
      }
      offset += hi - lo;
    }
    source += c.end - c.start;
  }
  return out;
}

int64_t ContextParallelPlan::rows_received(int64_t receiver, int64_t sender) const {
  int64_t n = 0;
  for (const KeyRun& run : runs(receiver, sender)) n += run.length;
  return n;
}

std::vector<CallSpec> ContextParallelPlan::calls(int64_t rank) const {
  const std::vector<Chunk> mine = layout_.pieces(rank);
  CallSpec stretch;  // the key side of a call
  std::vector<CallSpec> stretches;
  for (const Chunk& c : mine) {
    stretch.k_len = c.end - c.start;
    stretch.k_start = c.start;
    stretches.push_back(stretch);
    stretch.k_offset += stretch.k_len;
  }
  for (int64_t peer = 0; peer < layout_.world_size(); ++peer) {
    if (peer == rank) continue;
    for (const KeyRun& run : runs(rank, peer)) {
      stretch.peer = peer;
      stretch.k_offset = run.offset;
      stretch.k_len = run.length;
      stretch.k_start = run.start;
      stretches.push_back(stretch);
    }
  }
  std::vector<CallSpec> out;
  int64_t q_offset = 0;
  for (size_t a = 0; a < mine.size(); ++a) {
    for (CallSpec call : stretches) {
      call.piece = static_cast<int64_t>(a);
      call.q_offset = q_offset;
      call.q_len = mine[a].end - mine[a].start;
      call.q_start = mine[a].start;
      out.push_back(call);
    }
    q_offset += mine[a].end - mine[a].start;
  }
  return out;
}

}  // namespace spattn::dist
