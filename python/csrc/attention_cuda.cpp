// python/csrc/attention_cuda.cpp - the CUDA kernels of the spattn::attention
// and spattn::attention_varlen operators (compiled when the library is built
// with CUDA, SPATTN_WITH_CUDA).
//
// The CUDA backend (spattn/cuda.hpp) reads a host BlockMask whose device copy
// it caches inside the mask, so the operator keeps one host BlockMask per
// distinct mask: the first call with a mask copies its arrays from the device
// (one synchronisation), rebuilds it and prepares its device plan; later calls
// find it by the identity and version counter of the mask tensors (held by
// the cache, so their storage cannot be reused meanwhile), the code and the
// lengths, and only launch kernels on PyTorch's current stream. A CUDA graph
// can therefore capture any call after the first with the same mask; a first
// use inside a capture raises a ValueError saying so.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention_op.hpp"
#include "attention_varlen_op.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

constexpr size_t kMaxCachedMasks = 64;

// What identifies a mask: its tensors (by identity and version), code and geometry.
struct MaskKey {
  std::vector<const void*> tensors;
  std::vector<int64_t> versions;
  std::vector<int64_t> code;
  std::vector<int64_t> geometry;  // q_len, k_len, block_q, block_k, device

  bool operator==(const MaskKey& o) const {
    return tensors == o.tensors && versions == o.versions && code == o.code && geometry == o.geometry;
  }
};

struct CachedMask {
  MaskKey key;
  std::vector<at::Tensor> keep_alive;
  std::shared_ptr<const BlockMask> mask;
};

// Inference tensors keep no version counter; they cannot change outside inference mode.
int64_t version_of(const at::Tensor& t) { return t.is_inference() ? -1 : static_cast<int64_t>(t._version()); }

class DeviceMaskCache {
 public:
  std::shared_ptr<const BlockMask> find_or_make(const MaskTensors& m, const at::Device& device,
                                                cudaStream_t stream) {
    const std::vector<at::Tensor> tensors = {m.row_offsets, m.kv_indices, m.kv_full, m.table_i32,
                                             m.table_i64};
    MaskKey key;
    for (const at::Tensor& t : tensors) {
      key.tensors.push_back(t.unsafeGetTensorImpl());
      key.versions.push_back(version_of(t));
    }
    key.code.assign(m.code.begin(), m.code.end());
    key.geometry = {m.q_len, m.k_len, m.block_q, m.block_k, device.index()};

    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return it->mask;
      }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    require(cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
                capture == cudaStreamCaptureStatusNone,
            "this mask is used for the first time while a CUDA graph is being captured; run the "
            "attention once with it before the capture so its device plan exists");
    MaskTensors host = m;
    host.row_offsets = m.row_offsets.cpu();
    host.kv_indices = m.kv_indices.cpu();
    host.kv_full = m.kv_full.cpu();
    host.table_i32 = m.table_i32.cpu();
    host.table_i64 = m.table_i64.cpu();
    auto mask = std::make_shared<const BlockMask>(host_block_mask(host));
    cuda_prepare_mask(*mask);
    entries_.push_front(CachedMask{std::move(key), tensors, mask});
    if (entries_.size() > kMaxCachedMasks) entries_.pop_back();
    return mask;
  }

 private:
  std::mutex mutex_;
  std::list<CachedMask> entries_;  // most recently used first
};

DeviceMaskCache& mask_cache() {
  static DeviceMaskCache cache;
  return cache;
}

// Raises unless `backend` may run CUDA tensors ("auto" or "cuda").
void require_cuda_backend(c10::string_view backend) {
  const Backend requested = parse_backend(std::string(backend));
  require(requested == Backend::Auto || requested == Backend::Cuda, "backend '", backend_name(requested),
          "' needs CPU tensors, got CUDA tensors");
}

// The cached host BlockMask of mask arrays that must lie on `device` (that of q).
std::shared_ptr<const BlockMask> device_mask(const MaskTensors& m, const at::Device& device,
                                             cudaStream_t stream) {
  for (const at::Tensor* t : {&m.row_offsets, &m.kv_indices, &m.kv_full, &m.table_i32, &m.table_i64})
    TORCH_CHECK_VALUE(t->device() == device, "the mask's arrays must be on ", device, " like q, got ",
                      t->device());
  return mask_cache().find_or_make(m, device, stream);
}

std::tuple<at::Tensor, at::Tensor> attention_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t mask_q_len,
    int64_t mask_k_len, int64_t block_q, int64_t block_k, const at::Tensor& row_offsets,
    const at::Tensor& kv_indices, const at::Tensor& kv_full, at::IntArrayRef code,
    const at::Tensor& table_i32, const at::Tensor& table_i64, std::optional<double> scale,
    c10::string_view backend) {
  return run_with_value_errors([&] {
    require_cuda_backend(backend);
    const c10::cuda::CUDAGuard guard(q.device());
    AttentionCall call(q, k, v, scale);
    if (call.empty()) return call.result();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    const MaskTensors mask_tensors{mask_q_len, mask_k_len, block_q, block_k,   row_offsets,
                                   kv_indices, kv_full,    code,    table_i32, table_i64};
    const std::shared_ptr<const BlockMask> mask = device_mask(mask_tensors, q.device(), stream);
    const TensorView out = view_of(call.out_tensor, "out");
    const TensorView lse = lse_view_of(call.lse_tensor);
    cuda_attention(call.q, call.k, call.v, out, *mask, resolve_scale(call.options, q.size(3)), &lse,
                   stream);
    return call.result();
  });
}

std::tuple<at::Tensor, at::Tensor> attention_varlen_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t mask_q_len,
    int64_t mask_k_len, int64_t block_q, int64_t block_k, const at::Tensor& row_offsets,
    const at::Tensor& kv_indices, const at::Tensor& kv_full, at::IntArrayRef code, const at::Tensor& table_i32,
    const at::Tensor& table_i64, std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    require_cuda_backend(backend);
    const c10::cuda::CUDAGuard guard(q.device());
    VarlenCall call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale);
    if (call.empty()) return call.result();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    const MaskTensors mask_tensors{mask_q_len, mask_k_len, block_q, block_k,   row_offsets,
                                   kv_indices, kv_full,    code,    table_i32, table_i64};
    const std::shared_ptr<const BlockMask> mask = device_mask(mask_tensors, q.device(), stream);
    cuda_attention_varlen(call.q, call.k, call.v, call.out, call.batch, *mask,
                          resolve_scale(call.options, q.size(2)), &call.lse, stream);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, CUDA, m) {
  m.impl("attention", &spattn::torch_bridge::attention_cuda);
  m.impl("attention_varlen", &spattn::torch_bridge::attention_varlen_cuda);
}
