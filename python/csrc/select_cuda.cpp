// python/csrc/select_cuda.cpp - the CUDA kernel of the spattn::select_blocks_device
// operator: select_blocks_batched on the device (spattn::CudaSelector).
//
// Takes CUDA tensors q (B, Hq, Lq, D) and k (B, Hkv, Lk, D), fp32, fp16 or
// bf16, any strides, and the fields of spattn::SelectConfig in the schema
// order of spattn::select_blocks. The selector is made once per
// configuration and shape and kept (device_object_cache.hpp); a call queues
// the selection and three device-to-device copies of its arrays into fresh
// tensors on PyTorch's current stream, and waits for nothing. Returns
// row_offsets (B, rows + 1) int64, kv_indices (B, rows * capacity) int32 and
// kv_full (same) uint8 on q's device, of which batch element b uses the first
// row_offsets[b, -1] entries, and the masks' pattern (causal or dense)
// encoded as in pattern_ops.cpp. The tensors are checked against the free
// device memory before they are allocated (cuda_check_memory).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "device_object_cache.hpp"
#include "select_op_args.hpp"
#include "spattn/cuda.hpp"
#include "spattn/pattern.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

using DeviceMasks = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

DeviceObjectCache<CudaSelector>& selector_cache() {
  static DeviceObjectCache<CudaSelector> cache("select_blocks");
  return cache;
}

std::string shape_text(const TensorView& t) {
  return "(" + std::to_string(t.batch()) + ", " + std::to_string(t.heads()) + ", " + std::to_string(t.seq_len()) +
         ", " + std::to_string(t.head_dim()) + ")";
}

void copy_on_stream(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what) {
  check_stream_call(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), what);
}

DeviceMasks select_blocks_device(const at::Tensor& q, const at::Tensor& k, int64_t block_q, int64_t block_k,
                                 std::optional<int64_t> topk, std::optional<double> tau, int64_t min_blocks,
                                 int64_t max_blocks, int64_t sink_blocks, int64_t local_blocks, bool causal,
                                 int64_t stride, bool per_query_head, std::optional<double> scale) {
  TORCH_CHECK_VALUE(q.is_cuda() && k.is_cuda(), "select_blocks_device reads CUDA tensors, got q on ", q.device(),
                    " and k on ", k.device());
  return run_with_value_errors([&] {
    const c10::cuda::CUDAGuard guard(q.device());
    const SelectConfig config = select_config_of(block_q, block_k, topk, tau, min_blocks, max_blocks,
                                                 sink_blocks, local_blocks, causal, stride, per_query_head,
                                                 scale);
    const TensorView qv = view_of(q, "q"), kv = view_of(k, "k");
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    at::Tensor offsets, indices, full;
    selector_cache().run(
        selector_key(config, qv, kv, 0.0, q.device().index()), stream,
        [&] {
          return std::make_unique<CudaSelector>(config, qv.batch(), qv.heads(), kv.heads(), qv.seq_len(),
                                                kv.seq_len(), qv.head_dim());
        },
        [&](CudaSelector& selector) {
          selector.run(qv, kv, stream);
          const int64_t B = qv.batch(), rows = selector.rows(), entries = rows * selector.capacity();
          cuda_check_memory(MemoryEstimate("the masks of select_blocks_batched for q " + shape_text(qv) + ", k " +
                                           shape_text(kv) + ", block_size=(" + std::to_string(block_q) + ", " +
                                           std::to_string(block_k) + ")")
                                .add("row offsets", bytes_for(B * (rows + 1), sizeof(int64_t)))
                                .add("block lists", bytes_for(B * entries, sizeof(int32_t) + sizeof(uint8_t))));
          offsets = at::empty({B, rows + 1}, q.options().dtype(at::kLong));
          indices = at::empty({B, entries}, q.options().dtype(at::kInt));
          full = at::empty({B, entries}, q.options().dtype(at::kByte));
          const BlockMaskView v = selector.view(0);  // batch element 0 starts each array
          copy_on_stream(offsets.data_ptr(), v.row_offsets, sizeof(int64_t) * B * (rows + 1), stream,
                         "cudaMemcpyAsync(row offsets)");
          copy_on_stream(indices.data_ptr(), v.kv_indices, sizeof(int32_t) * B * entries, stream,
                         "cudaMemcpyAsync(kv indices)");
          copy_on_stream(full.data_ptr(), v.kv_full, B * entries, stream, "cudaMemcpyAsync(kv full)");
        });
    const auto [code, table_i32, table_i64] = pattern_tensors(causal ? Pattern::causal() : Pattern::dense());
    return DeviceMasks{offsets, indices, full, code, table_i32, table_i64};
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, CUDA, m) {
  m.impl("select_blocks_device", &spattn::torch_bridge::select_blocks_device);
}
