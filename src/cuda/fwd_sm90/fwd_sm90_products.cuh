// cuda/fwd_sm90/fwd_sm90_products.cuh - the matrix products of a consumer
// warpgroup of the Hopper forward kernel (fwd_sm90_kernel.cuh): the turns
// the warpgroups take to issue them (IssueOrder, ping-pong), the wgmma
// descriptors, S = Q K^T and O += P V, and a unit's first and last product.
#pragma once

#include <cstdint>

#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/fwd_sm90/fwd_sm90_pipeline.cuh"

namespace spattn::cuda_detail {

// The order in which the consumer warpgroups issue their products: in turns
// (group 0, 1, 0, 1, ... or 0, 1, 2, 0, ...), so that one warpgroup's softmax
// runs while the others' products occupy the tensor cores (ping-pong). Each
// group waits on its own named barrier, which the group before it completes
// with pass_turn (and, once, the last group's start completes group 0's);
// every group issues the same number of times, since they walk the same tiles.
// A single group (the 64 x 64 tile) has no turns to take.
template <int kGroups>
struct IssueOrder {
  int group;
  __device__ __forceinline__ void start() const {
    if constexpr (kGroups > 1)
      if (group == kGroups - 1) named_barrier_arrive(kFirstBarrier, 256);
  }
  __device__ __forceinline__ void wait_turn() const {
    if constexpr (kGroups > 1) named_barrier_sync(kFirstBarrier + group, 256);
  }
  __device__ __forceinline__ void pass_turn() const {
    if constexpr (kGroups > 1) named_barrier_arrive(kFirstBarrier + next_group(), 256);
  }
  __device__ __forceinline__ int next_group() const {
    if constexpr (kGroups == 2) return 1 - group;
    return group + 1 == kGroups ? 0 : group + 1;
  }
  static constexpr int kFirstBarrier = 1;  // barrier 0 is __syncthreads
};

// The wgmma descriptors of one consumer warpgroup, built once: its 64 rows
// of Q, and K and V of ring stage 0 (a stage is a fixed byte offset further).
// Every operand address of a tile is then the stage's base plus compile-time
// offsets.
template <typename Tr>
struct Sm90Descriptors {
  uint64_t q, k0, v0;
  __device__ __forceinline__ Sm90Descriptors(const Sm90Smem<Tr>& sm, int group)
      : q(smem_descriptor(sm.q() + group * Tr::kGroupRows * 128, 16, 1024)),
        k0(smem_descriptor(sm.k(0), 16, 1024)),
        v0(smem_descriptor(sm.v(0), Tr::kKVPanelBytes, 1024)) {}
  __device__ __forceinline__ uint64_t k(int stage) const { return smem_descriptor_plus(k0, stage * Tr::kKVBytes); }
  __device__ __forceinline__ uint64_t v(int stage) const { return smem_descriptor_plus(v0, stage * Tr::kKVBytes); }
};

// Issues s = Q(rows of this warpgroup) K^T over the whole head dim as one
// wgmma group (not waited for).
template <typename Tr>
__device__ __forceinline__ void issue_qk(float (&s)[1][Tr::kNAtoms][4], uint64_t q_desc, uint64_t k_desc) {
  using T = typename Tr::T;
  wgmma_fence_operands(s);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::kHeadDim / 16; ++ks) {
    const uint32_t panel = ks / 4, step = (ks % 4) * 32;  // 16 elements = 32 bytes along the 128-byte row
    wgmma_ss<T, Tr::kBlockN>(s, smem_descriptor_plus(q_desc, panel * Tr::kQPanelBytes + step),
                             smem_descriptor_plus(k_desc, panel * Tr::kKVPanelBytes + step), ks > 0);
  }
  wgmma_commit();
}

// P (s, already exponentiated) rounded to T as the A fragments of the 16-key
// steps of P V.
template <typename Tr>
__device__ __forceinline__ void pack_p(const float (&s)[1][Tr::kNAtoms][4], uint32_t (&pa)[Tr::kBlockN / 16][4]) {
  using T = typename Tr::T;
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
    pa[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
    pa[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
    pa[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    pa[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

// Issues o += P V as one wgmma group (not waited for): V read transposed from
// shared memory, 16 keys (16 rows of 128 bytes) per step.
template <typename Tr>
__device__ __forceinline__ void issue_pv(float (&o)[1][Tr::kDAtoms][4], const uint32_t (&pa)[Tr::kBlockN / 16][4],
                                         uint64_t v_desc) {
  using T = typename Tr::T;
  wgmma_fence_operands(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
    wgmma_rs<T, Tr::kHeadDim>(o, pa[kk], smem_descriptor_plus(v_desc, kk * 16 * 128));
  wgmma_commit();
}

// A unit's first S = Q K^T into `s`, issued in this warpgroup's turn once
// the unit's Q and the first K have arrived (not waited for).
template <typename Tr>
__device__ __forceinline__ void issue_first_qk(const Sm90Smem<Tr>& sm, const Sm90Descriptors<Tr>& desc,
                                               const IssueOrder<Tr::kConsumerGroups>& schedule,
                                               const RingSlot<Tr::kStages>& slot, uint32_t& q_parity,
                                               float (&s)[1][Tr::kNAtoms][4]) {
  mbarrier_wait(sm.q_full(), q_parity);
  q_parity ^= 1u;
  mbarrier_wait(sm.k_full(slot.stage), slot.parity);
  schedule.wait_turn();
  issue_qk<Tr>(s, desc.q, desc.k(slot.stage));
  schedule.pass_turn();
}

// O = 0 before a unit's first product.
template <typename Tr>
__device__ __forceinline__ void clear_output(float (&o)[1][Tr::kDAtoms][4]) {
#pragma unroll
  for (int d = 0; d < Tr::kDAtoms; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[0][d][c] = 0.0f;
}

// A unit's last product, O += P V with V in `stage`, in this warpgroup's
// turn, waited for; then the stage's V is free.
template <typename Tr>
__device__ __forceinline__ void last_pv(const Sm90Smem<Tr>& sm, const Sm90Descriptors<Tr>& desc,
                                        const IssueOrder<Tr::kConsumerGroups>& schedule,
                                        const RingSlot<Tr::kStages>& stage,
                                        float (&o)[1][Tr::kDAtoms][4], const uint32_t (&pa)[Tr::kBlockN / 16][4]) {
  mbarrier_wait(sm.v_full(stage.stage), stage.parity);
  schedule.wait_turn();
  issue_pv<Tr>(o, pa, desc.v(stage.stage));
  schedule.pass_turn();
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  mbarrier_arrive(sm.v_free(stage.stage));
}

}  // namespace spattn::cuda_detail
