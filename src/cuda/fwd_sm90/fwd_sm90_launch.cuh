// cuda/fwd_sm90/fwd_sm90_launch.cuh - the launch of one instantiation of the
// Hopper forward kernel: the tensor maps of q, k and v (over the packed rows
// of a varlen batch) and of out where the output goes through the TMA, the
// dynamic shared-memory limit, a persistent grid of one CTA per multiprocessor (two
// for the 64 x 64 tile; fewer when there is less work) with its zeroed work
// counter (or a static stride over units of equal length), then the merge
// of split rows. A dilated split's permuted pass runs a kernel of its own
// (Sm90Traits::kMergeIntoOut). Also the plan's table of keep bits for the
// instantiation's tile (keep_bits_table.cuh), made when the plan is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/keep_bits_table.cuh"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/common/split_combine.hpp"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/fwd_sm90/fwd_sm90_kernel.cuh"
#include "cuda/fwd_sm90/tensor_maps.hpp"

namespace spattn::cuda_detail {

// The persistent grid of kernel Tr over p's work units (tensor maps made).
template <typename Tr>
void launch_grid(const FwdParams& p, const Sm90TensorMaps& maps, cudaStream_t stream) {
  const auto kernel = fwd_sm90_kernel<Tr>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Tr::kSmemBytes, "fwd_sm90");
  const DeviceInfo& device = current_device_info();
  const int64_t units = p.plan.num_items * launch_copies(p);
  require(units <= INT32_MAX, "CUDA sm90 kernel: ", units,
          " work units (plan items x batch x query heads per mask head) exceed 2^31 - 1");
  const int64_t ctas = std::min<int64_t>(units, device.sms * Tr::kCtasPerSm);
  if (ctas == 0) return;
  // The units drawn after each CTA's first, from a zeroed counter; none
  // where a static stride serves as well (items_of_equal_length).
  const bool drawn = !items_of_equal_length(p);
  ScopedScratch unit_counter(drawn ? sizeof(uint32_t) : 0, stream);
  if (drawn)
    check_cuda(cudaMemsetAsync(unit_counter.get(), 0, sizeof(uint32_t), stream), "cudaMemsetAsync(unit counter)");
  const Sm90Schedule schedule{static_cast<uint32_t*>(unit_counter.get()),
                              launch_unit_order(p, device, ctas, Tr::kHeadDim, sizeof(typename Tr::T))};
  kernel<<<static_cast<unsigned>(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(p, maps, schedule);
  check_launch("fwd_sm90 kernel launch");
}

template <typename T, int kHeadDim, int kTileRows, int kTileCols>
void launch_fwd_sm90(const FwdParams& p, cudaStream_t stream) {
  using Tr = Sm90Traits<T, kHeadDim, kTileRows / 64, kTileCols>;
  static_assert(Tr::kBlockM == kTileRows, "64 query rows per consumer warpgroup");
  require(p.plan.tile_rows == kTileRows && p.plan.tile_cols == kTileCols, "CUDA sm90 kernel: a plan of ",
          p.plan.tile_rows, " x ", p.plan.tile_cols, " tiles given to the kernel of ", kTileRows, " x ",
          kTileCols, " tiles");
  const DType dtype = std::is_same_v<T, __nv_bfloat16> ? DType::BF16 : DType::F16;
  // A packed varlen batch is one batch of total_q (total_k) rows; its work units address their sequences' rows.
  const bool packed = p.varlen.cu_seqlens_q != nullptr;
  const int64_t map_batch = packed ? 1 : p.batch;
  const int64_t q_rows = packed ? p.varlen.total_q : p.q_len, k_rows = packed ? p.varlen.total_k : p.k_len;
  Sm90TensorMaps maps;
  const int64_t rate = p.residue_rate;
  maps.q = make_tile_tensor_map(p.q, dtype, map_batch, p.q_heads, q_rows, rate, kHeadDim, Tr::kBlockM);
  maps.k = make_tile_tensor_map(p.k, dtype, map_batch, p.kv_heads, k_rows, rate, kHeadDim, Tr::kBlockN);
  maps.v = make_tile_tensor_map(p.v, dtype, map_batch, p.kv_heads, k_rows, rate, kHeadDim, Tr::kBlockN);
  // Output through the TMA (post_output, store_outputs) where out is a plain
  // tensor of the input type: not in varlen batches (a tile's rows may belong to the
  // next sequence), nor with query heads packed into rows or a dilated
  // split's permuted pass.
  maps.has_o = Tr::kTmaOutput && !p.out_f32 && !packed && !p.packed.any() && !p.merge_into_out && rate == 1 &&
               out_tensor_map_usable(p.out, p.batch, p.q_heads, p.q_len);
  if (maps.has_o)
    maps.o = make_tile_tensor_map(p.out, dtype, p.batch, p.q_heads, p.q_len, 1, kHeadDim, Tr::kGroupRows);

  if (p.merge_into_out) {
    // Dilated splits are made for the head dim's own tile (call_tile), so
    // only that tile has a permuted-pass kernel.
    constexpr TileShape kOwnTile = sm90_tile(kHeadDim);
    if constexpr (kTileRows == kOwnTile.rows && kTileCols == kOwnTile.cols) {
      return launch_grid<Sm90Traits<T, kHeadDim, kTileRows / 64, kTileCols, true>>(p, maps, stream);
    } else {
      fail("CUDA sm90 kernel: the permuted pass of a dilated split runs on the ", kOwnTile.rows, " x ",
           kOwnTile.cols, " tile at head dim ", kHeadDim, ", not on ", kTileRows, " x ", kTileCols);
    }
  }
  launch_grid<Tr>(p, maps, stream);
  if (p.plan.num_split_rows > 0) launch_split_combine<T>(p, Tr::kBlockM, stream);
}

template <typename T, int kHeadDim, int kTileRows, int kTileCols>
DevicePtr make_fwd_sm90_keep_bits(FwdParams& p, cudaStream_t stream) {
  using Tr = Sm90Traits<T, kHeadDim, kTileRows / 64, kTileCols>;
  return make_keep_bits_table<Tr, Tr::kConsumerThreads>(p, stream);
}

}  // namespace spattn::cuda_detail
