// spattn/dist.hpp - context parallelism's plan: one sequence split over the
// ranks of a group, and the key rows each rank needs from each peer.
//
// A ShardLayout cuts a sequence into chunks at multiples of a block, as evenly
// as the blocks allow, and gives each rank its chunks: contiguous (P chunks,
// rank r holds chunk r) or zigzag (2P chunks, rank r holds chunks r and
// 2P-1-r, which balances causal masks). A rank's shard is its chunks
// concatenated in that order.
//
// ContextParallelPlan finds, for each rank, the key blocks that some query of
// its chunks keeps under the pattern: the pattern framed at each chunk
// (Pattern::framed) and its mask built with the chunk as one query block over
// the whole sequence lists them exactly. runs(receiver, sender) turns those of
// the sender's chunks into runs of consecutive rows: what travels, and nothing
// else. calls(rank) lists the attention calls a rank makes: each of its query
// chunks over each stretch of keys it holds or receives. spattn/dist_attention.hpp
// (C++) and the Python package's spattn.distributed move the rows and attend.
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/pattern.hpp"

namespace spattn::dist {

enum class LayoutKind { Contiguous, Zigzag };

struct Chunk {
  int64_t start = 0, end = 0;  // global positions [start, end)
};

class ShardLayout {
 public:
  // Throws spattn::Error naming the parameter when a length, world size or
  // block is out of range, or when the sequence has fewer blocks than chunks.
  ShardLayout(LayoutKind kind, int64_t seq_len, int64_t world_size, int64_t block);

  LayoutKind kind() const { return kind_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t world_size() const { return world_size_; }
  int64_t block() const { return block_; }
  // The chunks rank `rank` holds, in its shard's order.
  std::vector<Chunk> pieces(int64_t rank) const;
  int64_t local_len(int64_t rank) const;

 private:
  LayoutKind kind_;
  int64_t seq_len_, world_size_, block_;
  std::vector<int64_t> bounds_;  // the chunk boundaries, from 0 to seq_len
};

// Rows one rank receives from a peer: global keys [start, start + length),
// rows [offset, offset + length) of the receive buffer from that peer, rows
// [source, source + length) of the peer's shard.
struct KeyRun {
  int64_t start = 0, length = 0, offset = 0, source = 0;
};

// One attention call of a rank: its query chunk `piece` (rows [q_offset,
// q_offset + q_len) of its shard, global rows from q_start) over k_len keys
// from global key k_start, read from its own shard (peer == -1) or from the
// buffer received from `peer`, from row k_offset.
struct CallSpec {
  int64_t piece = 0, q_offset = 0, q_len = 0, q_start = 0;
  int64_t peer = -1, k_offset = 0, k_len = 0, k_start = 0;
};

class ContextParallelPlan {
 public:
  // `num_heads`: the query heads (patterns that read the head need them; the
  // union over heads decides a block). Builds every rank's needed blocks.
  ContextParallelPlan(const Pattern& pattern, const ShardLayout& layout, int64_t num_heads);

  const Pattern& pattern() const { return pattern_; }
  const ShardLayout& layout() const { return layout_; }
  int64_t num_heads() const { return num_heads_; }
  // Sorted indices of the blocks (of layout().block() keys, from key 0) that
  // some query of `rank`'s chunks keeps.
  const std::vector<int64_t>& needed_blocks(int64_t rank) const;
  // What `receiver` gets from `sender` (!= receiver), in receive-buffer order.
  std::vector<KeyRun> runs(int64_t receiver, int64_t sender) const;
  int64_t rows_received(int64_t receiver, int64_t sender) const;
  // Every (query chunk, key stretch) pair of `rank`: for each of its chunks,
  // its own chunks, then each peer's runs (peers in rank order). A call's
  // pattern is pattern().framed(q_start, k_start, L, L); calls whose framed
  // mask keeps nothing are listed too.
  std::vector<CallSpec> calls(int64_t rank) const;

 private:
  Pattern pattern_;
  ShardLayout layout_;
  int64_t num_heads_;
  std::vector<std::vector<int64_t>> needed_;
};

// The key blocks (of `block` keys, from key 0) holding a key that some query
// of global rows [first_row, end_row) keeps under `pattern`, over a sequence
// of seq_len positions (any of num_heads heads).
std::vector<int64_t> needed_blocks(const Pattern& pattern, int64_t first_row, int64_t end_row, int64_t seq_len,
                                   int64_t block, int64_t num_heads);

}  // namespace spattn::dist
