// cuda/fwd_sm90/fwd_sm90_kernel.cuh - the Hopper-native fused block-sparse
// attention forward kernel (sm_90a): TMA copies on mbarriers, wgmma, and warp
// specialisation (FlashAttention-3 structure, one consumer warpgroup per 64
// query rows: two, three on the 192-row tile at head dims up to 64, or one on
// the 64 x 64 tile, two CTAs to a multiprocessor).
//
// Persistent grid: CTA c runs work unit c, then units drawn from a counter
// (UnitRing), of the plan's items (longest first, tile_plan.hpp) times
// (batch, head in the mask head), in the order the launch chooses
// (common/work_units.hpp: item-major, copy-major, or copy-major in length bands).
// Per work unit both roles walk the same kept key tiles (tile_walk.cuh):
//   producer (one thread): for each kept tile, into the next free stage of
//     the ring: K(n) on "K full", V(n) on "V full"; only kept tiles are ever
//     loaded. Q (once per unit, when the consumers have freed it) follows the
//     unit's first K and V.
//   consumers (one to three warpgroups, 64 rows each), per tile:
//     wait K(n); S = Q K(n)^T            (wgmma, both from shared memory)
//     mask S: nothing on full tiles, key bounds on a ragged last tile, the
//             sub-block bits and the pattern predicate on partial tiles; in
//             the passes of a dilated split, the other pass's pairs
//             (DilatedExclusion in fwd_params.hpp) (tile_mask.cuh, the same
//             code as the sm80 kernel)
//     online softmax in fp32 with exp2   (online_softmax.cuh)
//     wait V(n); O += P V(n)             (wgmma, P from registers, V read
//                                         transposed from shared memory)
//     free stage n
//   with P(n-1) V(n-1) running on the tensor cores during the softmax of
//   tile n (consume_unit); at head dims up to 64, a unit of at least two
//   tiles, all full (outside varlen batches and dilated splits), also has
//   S(n+1) running then (consume_unit_two_scores).
//   then O / l and the LSE (or a split row's partial result) are written;
//   in the permuted pass of a dilated split (FwdParams::merge_into_out; a
//   kernel of its own, Sm90Traits::kMergeIntoOut), merged into the rest
//   pass's rows of out and the LSE; where the call allows it
//   (Sm90Traits::kTmaOutput, Sm90TensorMaps::has_o), O / l goes to shared
//   memory for the output warp (post_output).
//   output warp (warp 1 of the producer warpgroup, where O goes through
//     shared memory): takes the same units, and stores each group's rows to
//     out with the TMA (store_outputs).
// Rows past q_len and keys past k_len arrive as zeros (TMA fills outside the
// tensor); key bounds are masked in registers, rows past q_len never written.
// In a packed varlen batch (sequence_span.hpp) the maps cover the packed
// rows: a unit's tile of mask rows (positions) holds query rows from
// row0 - mask_row_offset on, which may start before the sequence's first query
// (rows of the previous sequence, or TMA zeros before the tensor, never
// written) and K, V from k_first on; keys past the sequence's end (the next
// sequence's) are masked against its k_len and rows past it never written, as
// above; tiles without a query row of the sequence are skipped by producer and
// consumers alike, and the key walk stops at its last key tile.
//
// The code by role: fwd_sm90_pipeline.cuh (what the roles share),
// fwd_sm90_producer.cuh, fwd_sm90_consumer.cuh with fwd_sm90_products.cuh
// (the products and their turns) and fwd_sm90_output.cuh (a unit's rows,
// and the output warp); this file launches them.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90_consumer.cuh"
#include "cuda/fwd_sm90/fwd_sm90_output.cuh"
#include "cuda/fwd_sm90/fwd_sm90_pipeline.cuh"
#include "cuda/fwd_sm90/fwd_sm90_producer.cuh"
#include "cuda/fwd_sm90/tensor_maps.hpp"

namespace spattn::cuda_detail {

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kCtasPerSm)
    fwd_sm90_kernel(const FwdParams p, const __grid_constant__ Sm90TensorMaps maps, const Sm90Schedule schedule) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const Sm90Smem<Tr> sm{(smem_address(smem) + 1023u) & ~1023u};
  const WorkUnits units(p, schedule.order);
  allow_dependent_launch();  // the merge of split rows may launch now and wait for this grid

  if (threadIdx.x == 0) {
    mbarrier_init(sm.q_full(), 1);
    mbarrier_init(sm.q_free(), Tr::kConsumerThreads);
    for (int stage = 0; stage < Tr::kStages; ++stage) {
      mbarrier_init(sm.k_full(stage), 1);
      mbarrier_init(sm.v_full(stage), 1);
      mbarrier_init(sm.k_free(stage), Tr::kConsumerThreads);
      mbarrier_init(sm.v_free(stage), Tr::kConsumerThreads);
    }
    for (int slot = 0; slot < Tr::kUnitSlots; ++slot) {
      mbarrier_init(sm.unit_full(slot), 1);
      // Freed by every consumer thread, and by the output warp where it runs.
      mbarrier_init(sm.unit_free(slot), Tr::kConsumerThreads + (Tr::kTmaOutput && maps.has_o ? 32 : 0));
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    warpgroup_release_registers<Tr::kProducerRegisters>();
    if (threadIdx.x == 0) produce<Tr>(p, maps, sm, units, schedule.counter);
    if constexpr (Tr::kTmaOutput)
      if (maps.has_o && threadIdx.x / 32 == 1) store_outputs(p, maps.o, sm, units, static_cast<int>(threadIdx.x % 32));
  } else {
    warpgroup_claim_registers<Tr::kConsumerRegisters>();
    consume<Tr>(p, maps, sm, units);
  }
}

}  // namespace spattn::cuda_detail
