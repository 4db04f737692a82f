// spattn/cuda.hpp - the CUDA backend's own entry points (builds with
// SPATTN_WITH_CUDA only).
//
// Tensors hold device pointers (fp16 or bf16 inputs; out in the input type or
// fp32; head dims 32, 64, 96, 128, 256; unit stride along D, other strides and
// base pointers 16-byte aligned). Work is queued on `stream` (a cudaStream_t;
// null = the default stream) and nothing waits for it. The mask's device copy
// is made on first use and cached with the mask; call cuda_prepare_mask first
// when the attention call will be captured in a CUDA graph.
#pragma once

#include "spattn/block_mask.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

// CUDA devices visible to this process; 0 without a device or a driver.
int cuda_device_count();

// Does p point into device (or managed) memory?
bool cuda_is_device_pointer(const void* p);

// Copies the mask's plans for the kernels of this backend to the current
// device now (synchronously), so that later calls allocate and copy nothing.
void cuda_prepare_mask(const BlockMask& mask);

// The fused block-sparse kernel (validates like attention()).
void cuda_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const BlockMask& mask, double scale, const TensorView* lse = nullptr,
                    void* stream = nullptr);

// The naive baseline: one thread per query row, fp32 online softmax.
void cuda_naive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const BlockMask& mask, double scale,
                          const TensorView* lse = nullptr, void* stream = nullptr);

}  // namespace spattn
