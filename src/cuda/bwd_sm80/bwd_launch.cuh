// cuda/bwd_sm80/bwd_launch.cuh - the launch of one instantiation of the two
// backward gradient kernels: raises their dynamic shared-memory limits and
// starts the dK/dV kernel (a CTA per batch x kv head x key tile) and the dQ
// kernel (a CTA per batch x query head x query tile) on the stream. Both read
// the row statistics the delta kernel wrote before them on the same stream;
// they are independent of each other.
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_dkdv_kernel.cuh"
#include "cuda/bwd_sm80/bwd_dq_kernel.cuh"
#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "cuda/bwd_sm80/bwd_traits.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {

template <typename T, int kHeadDim>
void launch_bwd_sm80(const BwdParams& p, const BwdPlanView& plan, cudaStream_t stream) {
  using Tr = BwdTraits<T, kHeadDim>;
  const auto dkdv = bwd_dkdv_kernel<Tr>;
  const auto dq = bwd_dq_kernel<Tr>;
  allow_dynamic_smem(reinterpret_cast<const void*>(dkdv), Tr::kDkvSmemBytes, "bwd_sm80 dK/dV");
  allow_dynamic_smem(reinterpret_cast<const void*>(dq), Tr::kDqSmemBytes, "bwd_sm80 dQ");
  const int64_t dkdv_ctas = p.shape.batch * p.shape.kv_heads * plan.num_k_tiles;
  const int64_t dq_ctas = p.shape.batch * p.shape.q_heads * plan.num_q_tiles;
  require(dkdv_ctas <= 0x7fffffff && dq_ctas <= 0x7fffffff, "CUDA backward: ", dkdv_ctas, " key tiles and ",
          dq_ctas, " query tiles (batch x heads x tiles) must each fit the grid limit of 2^31 - 1 CTAs");
  if (dkdv_ctas > 0) {
    dkdv<<<static_cast<unsigned>(dkdv_ctas), Tr::kThreads, Tr::kDkvSmemBytes, stream>>>(p, plan);
    check_launch("bwd_sm80 dK/dV kernel launch");
  }
  if (dq_ctas > 0) {
    dq<<<static_cast<unsigned>(dq_ctas), Tr::kThreads, Tr::kDqSmemBytes, stream>>>(p, plan);
    check_launch("bwd_sm80 dQ kernel launch");
  }
}

}  // namespace spattn::cuda_detail
