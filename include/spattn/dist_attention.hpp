// spattn/dist_attention.hpp - context-parallel attention in C++: one
// sequence's attention over the ranks of a group, each rank holding its shard
// of q, k and v (the layout's chunks, concatenated), forward and backward.
//
// A rank sends the key and value rows its peers' queries keep (and only
// those: ContextParallelPlan, spattn/dist.hpp), receives the rows its own
// queries keep, attends to its own rows while the first two stages travel and
// to each stage's rows as they arrive (one attention() call per query chunk
// and key stretch, the pattern framed at their places in the sequence), and
// merges the partial results by their LSE in fp32 into one accumulator. The
// result is exactly this rank's rows of one attention() call over the whole
// sequence. A rank holds two stages' rows at a time, not every peer's.
//
// The backward exchanges the same K/V rows again (nothing is kept between the
// passes), computes each call's gradients from the merged output and LSE (the
// softmax of a call's pairs under the whole row's LSE is their share of the
// row), accumulates dQ locally, and sends each stage's received rows'
// gradients (summed in fp32, sent in the inputs' dtype) back to their owner
// once the stage's calls are done; owners add them in stage order into fp32
// sums: the same sums run after run. Bytes per backward: twice the forward's
// (K/V there, their gradients back).
//
// Host tensors run on the host backends, device tensors on the CUDA backend
// (options.backend as for attention()); the transport must take the tensors'
// memory (InProcessGroup: both; NCCL: device). Every rank of the group calls
// with the same plan. Work is queued on options.stream; a call allocates its
// buffers with cudaMalloc and frees them on return (cudaFree waits for the
// device), and InProcessGroup synchronises the stream at each exchange.
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/backward.hpp"
#include "spattn/dist.hpp"
#include "spattn/dist_transport.hpp"

namespace spattn::dist {

// One rank's part of a ContextParallelPlan, ready to run. The exchange runs
// in stages d = 1 .. P-1: at stage d the rank sends to stage_to(d) = rank + d
// and receives from stage_from(d) = rank - d (mod P), two stages in flight, so
// a rank holds at most two stages' rows at a time.
class RankPlan {
 public:
  struct Call {
    CallSpec spec;
    BlockMask mask;  // the pattern framed at the call, q_len x k_len, blocks block_q x the layout's block
    int64_t stage;   // 0: over the rank's own rows; d: over the rows of stage d
  };

  // Builds the masks of `rank`'s calls (those that keep some pair), with
  // query blocks of block_q rows.
  RankPlan(const ContextParallelPlan& plan, int64_t rank, int64_t block_q = 128);

  int64_t rank() const { return rank_; }
  const ShardLayout& layout() const { return layout_; }
  int64_t num_heads() const { return num_heads_; }
  int64_t local_len() const { return layout_.local_len(rank_); }
  // The calls in stage order.
  const std::vector<Call>& calls() const { return calls_; }
  int64_t num_stages() const { return layout_.world_size() - 1; }
  int64_t stage_to(int64_t stage) const;
  int64_t stage_from(int64_t stage) const;
  // What this rank sends to `peer`: rows [source, source + length) of its
  // shard to rows [offset, offset + length) of the peer's buffer.
  const std::vector<KeyRun>& sends(int64_t peer) const;
  int64_t rows_to(int64_t peer) const;
  int64_t rows_from(int64_t peer) const;
  // The most rows of one stage, sent and received; the longest query chunk
  // and key stretch of a call.
  int64_t max_rows_to() const { return max_rows_to_; }
  int64_t max_rows_from() const { return max_rows_from_; }
  int64_t max_q_len() const { return max_q_len_; }
  int64_t max_k_len() const { return max_k_len_; }

 private:
  int64_t rank_;
  ShardLayout layout_;
  int64_t num_heads_;
  std::vector<Call> calls_;
  std::vector<std::vector<KeyRun>> sends_;
  std::vector<int64_t> rows_to_, rows_from_;
  int64_t max_rows_to_ = 0, max_rows_from_ = 0, max_q_len_ = 0, max_k_len_ = 0;
};

// This rank's shard of attention(q_all, k_all, v_all, out_all, mask) over the
// whole sequence: q (B, Hq, L_rank, D), k and v (B, Hkv, L_rank, D), out like
// q (any dtype), optional lse (B, Hq, L_rank) fp32; Hq is the plan's
// num_heads and L_rank the rank's local length. Throws spattn::Error naming
// the parameter for tensors that do not fit the plan.
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const RankPlan& plan, Transport& transport, const AttentionOptions& options = {},
               const TensorView* lse = nullptr);

// The gradients of this rank's q, k and v shards for a loss whose gradient
// with respect to this rank's out is d_out (and, if not null, with respect to
// its lse is d_lse, fp32 (B, Hq, L_rank)), given the forward's out and lse.
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                        const RankPlan& plan, Transport& transport, const AttentionOptions& options = {},
                        const TensorView* d_lse = nullptr);

}  // namespace spattn::dist
