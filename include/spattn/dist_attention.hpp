// spattn/dist_attention.hpp - context-parallel attention in C++: one
// sequence's attention over the ranks of a group, each rank holding its shard
// of q, k and v (the layout's chunks, concatenated), forward and backward.
//
// A rank sends the key and value rows its peers' queries keep (and only
// those: ContextParallelPlan, spattn/dist.hpp), receives the rows its own
// queries keep, attends to its own rows while the others travel and to each
// peer's rows as that stage arrives (one attention() call per query chunk and
// key stretch, the pattern framed at their places in the sequence), and merges
// the partial results by their LSE in fp32. The result is exactly this rank's
// rows of one attention() call over the whole sequence.
//
// The backward exchanges the same K/V rows again (nothing is kept between the
// passes), computes each call's gradients from the merged output and LSE (the
// softmax of a call's pairs under the whole row's LSE is their share of the
// row), accumulates dQ locally and the gradients of received rows per peer,
// sends those back to their owners, which add them in rank order: fp32
// accumulation, the same sums run after run. Bytes per backward: twice the
// forward's (K/V there, their gradients back).
//
// Host tensors run on the host backends, device tensors on the CUDA backend
// (options.backend as for attention()); the transport must take the tensors'
// memory (InProcessGroup: both; NCCL: device). Every rank of the group calls
// with the same plan; the calls do not synchronise the host on device memory
// except where a transport must (InProcessGroup).
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/backward.hpp"
#include "spattn/dist.hpp"
#include "spattn/dist_transport.hpp"

namespace spattn::dist {

// One rank's part of a ContextParallelPlan, ready to run.
class RankPlan {
 public:
  struct Call {
    CallSpec spec;
    BlockMask mask;  // the pattern framed at the call, q_len x k_len, blocks block_q x the layout's block
  };

  // Builds the masks of `rank`'s calls (those that keep some pair), with
  // query blocks of block_q rows.
  RankPlan(const ContextParallelPlan& plan, int64_t rank, int64_t block_q = 128);

  int64_t rank() const { return rank_; }
  const ShardLayout& layout() const { return layout_; }
  int64_t num_heads() const { return num_heads_; }
  int64_t local_len() const { return layout_.local_len(rank_); }
  // The calls, those over the rank's own rows first, then by exchange stage.
  const std::vector<Call>& calls() const { return calls_; }
  // What this rank sends to `peer`: rows [source, source + length) of its
  // shard to rows [offset, offset + length) of the peer's buffer.
  const std::vector<KeyRun>& sends(int64_t peer) const;
  int64_t rows_to(int64_t peer) const;
  int64_t rows_from(int64_t peer) const;
  // The longest query chunk and key stretch of a call.
  int64_t max_q_len() const { return max_q_len_; }
  int64_t max_k_len() const { return max_k_len_; }

 private:
  int64_t rank_;
  ShardLayout layout_;
  int64_t num_heads_;
  std::vector<Call> calls_;
  std::vector<std::vector<KeyRun>> sends_;
  std::vector<int64_t> rows_to_, rows_from_;
  int64_t max_q_len_ = 0, max_k_len_ = 0;
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
// with respect to this rank's out is d_out, given the forward's out and lse.
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                        const RankPlan& plan, Transport& transport, const AttentionOptions& options = {});

}  // namespace spattn::dist
