// spattn/cuda.hpp - the CUDA backend's own entry points (builds with
// SPATTN_WITH_CUDA only).
//
// Tensors hold device pointers (fp16 or bf16 inputs; out in the input type or
// fp32; head dims 32, 64, 96, 128, 256; unit stride along D, other strides and
// base pointers 16-byte aligned). Work is queued on `stream` (a cudaStream_t;
// null = the default stream) and nothing waits for it. A call's plan
// (spattn/plan.hpp) is made by its shape's first call (from the mask's plan
// cache) or by make_plan: making one uploads the mask and the plan's tables
// and waits for the device, so a call to be captured in a CUDA graph needs
// its plan first; later calls of the shape only launch.
#pragma once

#include <memory>

#include "spattn/attention.hpp"
#include "spattn/backward.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/memory.hpp"
#include "spattn/select.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

namespace cuda_detail {
class BlockSelector;
class DynamicAttention;
}

// CUDA devices visible to this process; 0 without a device or a driver.
int cuda_device_count();

// Free memory of the current device in bytes (cudaMemGetInfo).
int64_t cuda_free_memory_bytes();
// Throws spattn::Error unless `estimate` fits the current device's free memory
// (MemoryEstimate::check against cuda_free_memory_bytes(), as "device
// memory"). Buffers sized by a call's arguments are checked with it before
// they are allocated, so a request too large for the GPU is refused naming
// its parameters and the bytes it needs.
void cuda_check_memory(const MemoryEstimate& estimate);

// Does p point into device (or managed) memory?
bool cuda_is_device_pointer(const void* p);
// The device whose memory p points into; -1 for host (or unknown) memory.
int cuda_pointer_device(const void* p);

// The fused kernels cuda_attention chooses from: Auto takes the Hopper kernel
// (sm_90a: TMA, wgmma) on a device of compute capability 9.0 when the build
// has its code and it supports the call (fp16/bf16, its head dims, no dilated
// split), else the portable sm80 kernel; Sm80 and Sm90 force one (Sm90 throws
// spattn::Error where it cannot run). The initial choice comes from the
// environment variable SPATTN_CUDA_KERNEL (auto, sm80 or sm90; unset = auto),
// read once.
enum class CudaKernel { Auto, Sm80, Sm90 };
void cuda_set_kernel(CudaKernel kernel);
CudaKernel cuda_kernel();
// Can the current device run the Hopper kernel with this build?
bool cuda_sm90_kernel_available();

// Builds the plan of `pattern` for `shape` on the current device: the same
// arrays as BlockMask::build, block for block, made by kernels
// (docs/design_cuda_plans.md). The returned mask already holds its device
// copy, so its plans upload no mask arrays for it; its host arrays are a
// copy of the device ones, so every other use of a BlockMask works too. Work
// is queued on `stream`; the call waits twice, for the number of kept blocks
// (to size the arrays) and for the copy back to the host, so it cannot be
// captured in a CUDA graph. Every pattern is supported. Throws spattn::Error
// naming the parameter, as BlockMask::build does. A zero length gives a plan
// without blocks, built on the host (its device copy is made on first use).
BlockMask cuda_build_mask(const Pattern& pattern, const MaskShape& shape, void* stream = nullptr);

// The fused block-sparse kernel (validates like attention()), on the plan of
// the call's shape from the mask's cache.
void cuda_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const BlockMask& mask, double scale, const TensorView* lse = nullptr,
                    void* stream = nullptr);

// The backward pass of cuda_attention (spattn/backward.hpp has the formulas
// and the semantics): dq, dk and dv, overwritten, from the forward's q, k, v,
// out and lse (fp32, natural log, -inf for rows without an allowed key), the
// output gradient d_out and, optionally, the LSE gradient d_lse (fp32, the
// shape of lse). q, k, v and d_out fp16 or bf16 (one type); out in that type
// or fp32; the three gradients all in that type or all fp32. Head dims 64
// and 128 (SPATTN_CUDA_HEAD_DIMS selects what is compiled). Mask blocks
// multiples of 64 or powers of two (16 and 32 run as 64 x 64 tiles with
// sub-block bits), every pattern, per-head masks, GQA, Lq != Lk. Layouts:
// unit stride along D; q, k, v and d_out with 16-byte aligned bases and
// strides (multiples of 8 elements), out and the gradients 2-element
// aligned. Deterministic by construction: no atomics, every sum taken in a
// fixed order, so the same call gives bitwise the same gradients.
// The plan of the call's shape with its backward lists (the mask's lists at
// 64 x 64 tiles, query-major and key-major) comes from the mask's cache,
// made on the shape's first backward call; later calls only queue the
// kernels on `stream` (row scratch is stream-ordered), so they can be
// captured in a CUDA graph.
void cuda_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const TensorView& lse, const TensorView& d_out,
                             const AttentionGrads& grads, const BlockMask& mask, double scale,
                             const TensorView* d_lse = nullptr, void* stream = nullptr);

// The fused kernel over a packed batch of variable-length sequences
// (attention_varlen in spattn/attention.hpp): cu_seqlens in device memory,
// read by the kernel (no host synchronisation; their validity is the caller's
// contract). Dilated patterns run without the token permutation here.
void cuda_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const VarlenBatch& batch, const BlockMask& mask,
                           double scale, const TensorView* lse = nullptr, void* stream = nullptr);

// The naive baseline: one thread per query row, fp32 online softmax.
void cuda_naive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const BlockMask& mask, double scale,
                          const TensorView* lse = nullptr, void* stream = nullptr);

// select_blocks_batched on the device (docs/dynamic.md): mean pooling or
// antidiagonal sampling, fp32 scores. Made once per (config, shape): the
// constructor allocates everything; run() only queues kernels on `stream` (no
// allocation, copy or host synchronisation) and view(b) is then batch element
// b's mask as device arrays: row_offsets (rows() + 1), kv_indices and kv_full
// (the first row_offsets[rows()] of capacity() * rows() entries), with
// mask_heads() heads and Pattern::causal() (or dense) deciding partial blocks.
// q and k: fp32, fp16 or bf16 device tensors of the constructor's shape.
class CudaSelector {
 public:
  CudaSelector(const SelectConfig& config, int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t q_len,
               int64_t k_len, int64_t head_dim);
  ~CudaSelector();
  CudaSelector(const CudaSelector&) = delete;
  CudaSelector& operator=(const CudaSelector&) = delete;

  void run(const TensorView& q, const TensorView& k, void* stream = nullptr);
  BlockMaskView view(int64_t b) const;
  int64_t mask_heads() const;
  int64_t rows() const;      // mask_heads() * query blocks
  int64_t capacity() const;  // entries per row in kv_indices' storage

 private:
  std::unique_ptr<cuda_detail::BlockSelector> impl_;
  int64_t rows_ = 0;
};

// Dynamic block-sparse attention on the device (docs/dynamic.md): select_blocks
// (mean pooling or antidiagonal sampling) then the fused kernel on the selected blocks, with no host
// synchronisation. Made once per (config, shape): the constructor allocates
// everything (the masks hold at most max_blocks blocks per row when set);
// run() only queues kernels and can be captured in a CUDA graph. block_q must
// be a multiple of 128 and block_k of 64; config.scale unset means `scale`.
class CudaDynamicAttention {
 public:
  CudaDynamicAttention(const SelectConfig& config, int64_t batch, int64_t q_heads, int64_t kv_heads,
                       int64_t q_len, int64_t k_len, int64_t head_dim, double scale);
  ~CudaDynamicAttention();
  CudaDynamicAttention(const CudaDynamicAttention&) = delete;
  CudaDynamicAttention& operator=(const CudaDynamicAttention&) = delete;

  // Selects on q and k, then attends (validates like cuda_attention).
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const TensorView* lse = nullptr, void* stream = nullptr);
  // The two halves of run(), for timing them apart.
  void select(const TensorView& q, const TensorView& k, void* stream = nullptr);
  void attend(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
              const TensorView* lse = nullptr, void* stream = nullptr);
  // The last selection's mask of batch element b, copied to the host (waits for the device).
  BlockMask mask(int64_t b) const;

 private:
  std::unique_ptr<cuda_detail::DynamicAttention> impl_;
  double scale_;
};

}  // namespace spattn
