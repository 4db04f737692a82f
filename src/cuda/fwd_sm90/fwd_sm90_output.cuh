// cuda/fwd_sm90/fwd_sm90_output.cuh - the end of a work unit in the Hopper
// forward kernel (fwd_sm90_kernel.cuh): a consumer warpgroup's rows (O / l
// and the LSE) written out, merged into a dilated split's rest pass, kept as
// a split row's partial result, or staged in shared memory for the output
// warp, which stores them with the TMA.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90_pipeline.cuh"
#include "cuda/fwd_sm90/fwd_sm90_products.cuh"
#include "cuda/fwd_sm90/tensor_maps.hpp"

namespace spattn::cuda_detail {

// Output through the TMA (Tr::kTmaOutput, where the call has an output map:
// Sm90TensorMaps::has_o). A consumer warpgroup writes its 64 rows of O / l,
// rounded, with stmatrix straight into the 128-byte-swizzled layout the TMA
// reads (Q's); a warp of the producer warpgroup, the output warp
// (store_outputs), which takes the same units from the unit ring, stores
// the box, and the TMA clips rows past q_len. The consumers so have neither
// write_output's quad transposes nor its per-row addresses and stores,
// which short rows pay for in every unit (a same-run bound: without any
// epilogue window 512 ran 12% faster), nor the copy's tensor-map address,
// whose register their tile loop would miss. Two named barriers per group,
// of its 128 threads and the output warp: "output full" (the group arrives
// once its rows are written; the output warp waits) and "output free" (the
// output warp arrives once the TMA has read them, and once at the start; the
// group waits before it writes, and once at the end).
template <typename Tr>
struct OutputBarriers {
  static constexpr int kThreads = 128 + 32;
  __device__ __forceinline__ static int full(int group) {
    return IssueOrder<Tr::kConsumerGroups>::kFirstBarrier + Tr::kConsumerGroups + 2 * group;
  }
  __device__ __forceinline__ static int free(int group) { return full(group) + 1; }
};

// Consumer warpgroup `warp / 4`: its rows of a unit (O / l) to the output
// warp, and their LSE.
template <typename Tr>
__device__ __forceinline__ void post_output(const FwdParams& p, const Sm90Smem<Tr>& sm,
                                            const float (&o)[1][Tr::kDAtoms][4], const float (&m)[1][2],
                                            const float (&l)[1][2], const SequenceSpan& seq, int64_t h, int64_t q0,
                                            int warp, int lane) {
  using T = typename Tr::T;
  const int group = warp / 4;
  const RowEnd end[2] = {finish_row<Tr>(m, l, 0, 0), finish_row<Tr>(m, l, 0, 1)};
  named_barrier_sync(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);
  // Lane 8 j + i addresses row i of matrix j: rows 8 (j % 2) on, atom j / 2 of the pair.
  const int matrix = lane / 8, row = warp * Tr::kWarpRows + lane % 8 + 8 * (matrix % 2);
#pragma unroll
  for (int d = 0; d < Tr::kDAtoms; d += 2) {
    const uint32_t x[4] = {pack2<T>(o[0][d][0] * end[0].inv, o[0][d][1] * end[0].inv),
                           pack2<T>(o[0][d][2] * end[1].inv, o[0][d][3] * end[1].inv),
                           pack2<T>(o[0][d + 1][0] * end[0].inv, o[0][d + 1][1] * end[0].inv),
                           pack2<T>(o[0][d + 1][2] * end[1].inv, o[0][d + 1][3] * end[1].inv)};
    const int atom = d + matrix / 2, chunk = atom % 8;  // 8 atoms of 16 bytes to a 128-byte panel row
    stmatrix_x4(sm.o() + atom / 8 * Tr::kQPanelBytes + row * 128 + ((chunk ^ (row % 8)) << 4), x);
  }
  fence_async_proxy_shared();
  named_barrier_arrive(OutputBarriers<Tr>::full(group), OutputBarriers<Tr>::kThreads);
  if (p.lse == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t q = q0 + warp * Tr::kWarpRows + (lane >> 2) + half * 8;
    if (seq.has_row(q)) *p.lse_at(seq.batch, h, q) = end[half].lse;
  }
}

// The output warp: takes each unit from the unit ring as the consumers do,
// and for a unit they post (one not split: split rows write partial
// results), the rows of each consumer group in turn, once posted, to out
// with a TMA copy issued by lane 0, freeing them once it has read them.
template <typename Tr>
__device__ __forceinline__ void store_outputs(const FwdParams& p, const CUtensorMap& out_map,
                                              const Sm90Smem<Tr>& sm, const WorkUnits& units, int lane) {
#pragma unroll
  for (int group = 0; group < Tr::kConsumerGroups; ++group)
    named_barrier_arrive(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);  // the buffer starts free
  UnitRing<Tr> ring;
  WorkItem slot_item;
  for (UnitPlace place = ring.take(sm, slot_item); place.item != kNoItem; place = ring.take(sm, slot_item)) {
    const Sm90Work w = Sm90Work::at(units, place, UnitRing<Tr>::item_of(p.plan, place, slot_item), Tr::kBlockM);
    if (w.item.slot >= 0) continue;
#pragma unroll
    for (int group = 0; group < Tr::kConsumerGroups; ++group) {
      named_barrier_sync(OutputBarriers<Tr>::full(group), OutputBarriers<Tr>::kThreads);
      if (lane == 0) {
#pragma unroll
        for (int panel = 0; panel < Tr::kPanels; ++panel)
          tma_store_5d(&out_map, sm.o() + panel * Tr::kQPanelBytes + group * Tr::kGroupRows * 128,
                       panel * Tr::kPanelCols, 0, static_cast<int32_t>(w.row0 + group * Tr::kGroupRows),
                       static_cast<int32_t>(w.h), static_cast<int32_t>(w.b));
        bulk_commit_group();
        bulk_wait_group_read_all();
      }
      __syncwarp();
      named_barrier_arrive(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);
    }
  }
}

// A unit's rows once its last tile is done: O / l and the LSE into out
// (through the TMA where the call has an output map; in a dilated split's
// permuted pass merged with the rows there), or a split row's piece into its
// partial-result slot.
template <typename Tr>
__device__ __forceinline__ void write_unit_result(const FwdParams& p, const Sm90TensorMaps& maps,
                                                  const Sm90Smem<Tr>& sm, float (&o)[1][Tr::kDAtoms][4],
                                                  float (&m)[1][2], float (&l)[1][2], const SequenceSpan& seq,
                                                  const Sm90Work& w, uint32_t copies, int64_t q0, int warp,
                                                  int lane) {
  if constexpr (Tr::kMergeIntoOut) {
    write_output<Tr, true>(p, o, m, l, seq, w.h, q0, warp, lane);
  } else if (w.item.slot >= 0) {
    const int64_t first_row = (w.item.slot * static_cast<int64_t>(copies) + w.copy) * Tr::kBlockM;
    write_partial<Tr>(p, o, m, l, seq, q0, first_row, warp, lane);
  } else if (Tr::kTmaOutput && maps.has_o) {
    post_output<Tr>(p, sm, o, m, l, seq, w.h, q0, warp, lane);
  } else {
    write_output<Tr>(p, o, m, l, seq, w.h, q0, warp, lane);
  }
}

}  // namespace spattn::cuda_detail
