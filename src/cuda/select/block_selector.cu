// cuda/select/block_selector.cu - BlockSelector: buffers, checks and the
// launches of the selection kernels (see block_selector.hpp and
// select_kernels.cuh).
#include "cuda/select/block_selector.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/select/sample_kernel.cuh"
#include "cuda/select/select_kernels.cuh"
#include "select/select_config.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"

namespace spattn::cuda_detail {
namespace {

namespace sk = select_kernels;

// Shared memory a score_select_kernel CTA may take before it scores fewer
// query blocks (two CTAs per SM on sm_90 at this size).
constexpr size_t kTileSharedBytes = 100 * 1024;

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Can the input be read with 16-byte loads (pool_kernel_vec)?
bool vector_loadable(const TensorView& t) {
  const int64_t vec = 16 / dtype_size(t.dtype);
  if (t.stride[3] != 1 || t.head_dim() % vec != 0 || t.head_dim() / vec > sk::kPoolThreads) return false;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int axis = 0; axis < 3; ++axis)
    if (t.stride[axis] % vec != 0) return false;
  return true;
}

template <typename T>
void launch_pool(const sk::PoolArgs& args, int64_t ctas, bool vectorized, cudaStream_t stream) {
  if (vectorized)
    sk::pool_kernel_vec<T><<<static_cast<unsigned>(ctas), sk::kPoolThreads, 0, stream>>>(args);
  else
    sk::pool_kernel<T><<<static_cast<unsigned>(ctas), sk::kPoolThreads, 0, stream>>>(args);
  check_launch("pool_kernel");
}

sk::PoolInput pool_input(const TensorView& t, int64_t block, int64_t num_blocks, float* pooled) {
  sk::PoolInput in;
  in.data = t.data;
  in.stride_b = t.stride[0];
  in.stride_h = t.stride[1];
  in.stride_l = t.stride[2];
  in.stride_d = t.stride[3];
  in.heads = t.heads();
  in.len = t.seq_len();
  in.block = block;
  in.num_blocks = num_blocks;
  in.pooled = pooled;
  return in;
}

// Checks that a (q block, k block) pair of rows fits the device's shared
// memory and lets the sampling kernels use it.
void set_sample_smem_limit(const select_detail::SelectParams& p, int64_t head_dim, int optin) {
  const size_t bytes = sk::sample_smem_bytes(p.block_q, p.block_k, head_dim);
  require(bytes <= static_cast<size_t>(optin) - 1024, "CUDA selector: antidiagonal sampling (stride ", p.stride,
          ") keeps a query and a key block in shared memory, (block_q + block_k) * (head_dim + 1) * 4 = ", bytes,
          " bytes, the device has ", optin, "; use smaller blocks");
  const auto limit = static_cast<int>(bytes);
  check_cuda(cudaFuncSetAttribute(sk::sample_scores_kernel<float>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
             "cudaFuncSetAttribute(sample_scores_kernel)");
  check_cuda(cudaFuncSetAttribute(sk::sample_scores_kernel<__half>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
             "cudaFuncSetAttribute(sample_scores_kernel)");
  check_cuda(cudaFuncSetAttribute(sk::sample_scores_kernel<__nv_bfloat16>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
             "cudaFuncSetAttribute(sample_scores_kernel)");
}

}  // namespace

struct BlockSelector::Buffers {
  DevicePtr pooled_q, pooled_k, sampled, counts, slots, slot_full, row_offsets, kv_indices, kv_full;
};

BlockSelector::BlockSelector(const SelectConfig& config, const SelectShape& shape)
    : shape_(shape), per_query_head_(config.per_query_head) {
  const char* names[6] = {"batch", "q_heads", "kv_heads", "q_len", "k_len", "head_dim"};
  const int64_t values[6] = {shape.batch, shape.q_heads, shape.kv_heads,
                             shape.q_len, shape.k_len,   shape.head_dim};
  for (int t = 0; t < 6; ++t)
    require(values[t] > 0, "CUDA selector: ", names[t], " must be > 0, got ", values[t]);
  require(shape.q_heads % shape.kv_heads == 0, "CUDA selector: q_heads (", shape.q_heads,
          ") must be a multiple of kv_heads (", shape.kv_heads, ")");
  params_ = select_detail::resolve_select_params(config, shape.q_len, shape.k_len, shape.head_dim);

  const int64_t nqb = params_.num_q_blocks, nkb = params_.num_k_blocks;
  mask_heads_ = per_query_head_ ? shape.q_heads : shape.kv_heads;
  if (params_.max_blocks > 0)
    capacity_ = std::min(params_.max_blocks, nkb);
  else if (!params_.use_tau)
    capacity_ = std::min(
        std::max({params_.topk, params_.sink_blocks + params_.local_blocks, params_.min_blocks}), nkb);
  else
    capacity_ = nkb;
  const int64_t rows = mask_heads_ * nqb;
  require(shape.batch * rows <= std::numeric_limits<int32_t>::max(),
          "CUDA selector: batch * mask heads * query blocks must fit in 32 bits, got ", shape.batch * rows);
  require(shape.batch <= std::numeric_limits<int32_t>::max() / 2 &&
              shape.batch * shape.q_heads * nqb + shape.batch * shape.kv_heads * nkb <=
                  std::numeric_limits<int32_t>::max(),
          "CUDA selector: too many (batch, head, block) triples to pool in one launch");

  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  row_stride_ = next_pow2(nkb);
  tile_rows_ = sk::kMaxTileRows;
  while (tile_rows_ > 1 && sk::select_smem_bytes(tile_rows_, row_stride_, shape.head_dim) > kTileSharedBytes)
    tile_rows_ /= 2;
  select_smem_bytes_ = sk::select_smem_bytes(tile_rows_, row_stride_, shape.head_dim);
  cudaFuncAttributes kernel{};
  check_cuda(cudaFuncGetAttributes(&kernel, sk::score_select_kernel),
             "cudaFuncGetAttributes(score_select_kernel)");
  require(select_smem_bytes_ + kernel.sharedSizeBytes <= static_cast<size_t>(optin), "CUDA selector: ", nkb,
          " key blocks need ", select_smem_bytes_ + kernel.sharedSizeBytes,
          " bytes of shared memory for one query block, the device has ", optin, "; use a larger block_k");
  // The device's whole allowance, so that no selector lowers another's.
  check_cuda(cudaFuncSetAttribute(sk::score_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  optin - static_cast<int>(kernel.sharedSizeBytes)),
             "cudaFuncSetAttribute(score_select_kernel)");
  if (params_.stride > 0) set_sample_smem_limit(params_, shape.head_dim, optin);

  // Sizes in saturating arithmetic (spattn/memory.hpp): the checks above
  // bound the (batch, head, block) counts, not their products with nkb or D.
  const int64_t B = shape.batch, D = shape.head_dim, entries = B * rows * capacity_;
  const int64_t pooled_rows = B * shape.q_heads * nqb, pooled_cols = B * shape.kv_heads * nkb;
  const int64_t sampled_bytes = params_.stride > 0 ? bytes_for(bytes_for(pooled_rows, nkb), sizeof(float)) : 0;
  const int64_t pooled_q_bytes = params_.stride > 0 ? 0 : bytes_for(bytes_for(pooled_rows, D), sizeof(float));
  const int64_t pooled_k_bytes = params_.stride > 0 ? 0 : bytes_for(bytes_for(pooled_cols, D), sizeof(float));
  const int64_t list_bytes = bytes_for(entries, 2 * (sizeof(int32_t) + sizeof(uint8_t)));
  const int64_t row_bytes = add_bytes(bytes_for(B * rows, sizeof(int32_t)), bytes_for(B * (rows + 1), sizeof(int64_t)));
  MemoryEstimate need(select_request("CUDA selector", config, shape));
  need.add("sampled scores", sampled_bytes).add("pooled q", pooled_q_bytes).add("pooled k", pooled_k_bytes);
  need.add("block lists", list_bytes).add("row counts and offsets", row_bytes);
  cuda_check_memory(need);

  buffers_ = std::make_unique<Buffers>();
  if (params_.stride > 0) {
    buffers_->sampled = device_alloc(static_cast<size_t>(sampled_bytes), "cudaMalloc(sampled scores)");
  } else {
    buffers_->pooled_q = device_alloc(static_cast<size_t>(pooled_q_bytes), "cudaMalloc(pooled q)");
    buffers_->pooled_k = device_alloc(static_cast<size_t>(pooled_k_bytes), "cudaMalloc(pooled k)");
  }
  buffers_->counts = device_alloc(sizeof(int32_t) * B * rows, "cudaMalloc(row counts)");
  buffers_->slots = device_alloc(sizeof(int32_t) * entries, "cudaMalloc(row slots)");
  buffers_->slot_full = device_alloc(sizeof(uint8_t) * entries, "cudaMalloc(slot full flags)");
  buffers_->row_offsets = device_alloc(sizeof(int64_t) * B * (rows + 1), "cudaMalloc(row offsets)");
  buffers_->kv_indices = device_alloc(sizeof(int32_t) * entries, "cudaMalloc(kv indices)");
  buffers_->kv_full = device_alloc(sizeof(uint8_t) * entries, "cudaMalloc(kv full)");
}

std::string select_request(const char* what, const SelectConfig& config, const SelectShape& shape) {
  std::ostringstream os;
  os << what << " (batch=" << shape.batch << ", q_heads=" << shape.q_heads << ", kv_heads=" << shape.kv_heads
     << ", q_len=" << shape.q_len << ", k_len=" << shape.k_len << ", head_dim=" << shape.head_dim
     << ", block_q=" << config.block_q << ", block_k=" << config.block_k << ")";
  return os.str();
}

BlockSelector::~BlockSelector() = default;

void BlockSelector::run(const TensorView& q, const TensorView& k, cudaStream_t stream) {
  pool(q, k, stream);
  score_select(stream);
  pack(stream);
}

void BlockSelector::pool(const TensorView& q, const TensorView& k, cudaStream_t stream) {
  select_detail::validate_select_inputs(q, k);
  const std::array<int64_t, 4> q_shape{shape_.batch, shape_.q_heads, shape_.q_len, shape_.head_dim};
  const std::array<int64_t, 4> k_shape{shape_.batch, shape_.kv_heads, shape_.k_len, shape_.head_dim};
  require(q.shape == q_shape && k.shape == k_shape, "CUDA selector: q (", q.shape[0], ", ", q.shape[1], ", ",
          q.shape[2], ", ", q.shape[3], ") and k (", k.shape[0], ", ", k.shape[1], ", ", k.shape[2], ", ",
          k.shape[3], ") differ from the shape the selector was made for");
  require(q.dtype != DType::F64, "CUDA selector: q dtype must be fp32, fp16 or bf16, got fp64");
  require(cuda_is_device_pointer(q.data), "CUDA selector: q must point to device memory");
  require(cuda_is_device_pointer(k.data), "CUDA selector: k must point to device memory");

  const int64_t nqb = params_.num_q_blocks, nkb = params_.num_k_blocks, B = shape_.batch;
  if (params_.stride > 0) {
    sample(q, k, stream);
    return;
  }
  sk::PoolArgs pool;
  pool.q = pool_input(q, params_.block_q, nqb, static_cast<float*>(buffers_->pooled_q.get()));
  pool.k = pool_input(k, params_.block_k, nkb, static_cast<float*>(buffers_->pooled_k.get()));
  pool.batch = B;
  pool.head_dim = shape_.head_dim;
  const int64_t pool_ctas = B * shape_.q_heads * nqb + B * shape_.kv_heads * nkb;
  const bool vectorized = vector_loadable(q) && vector_loadable(k);
  switch (q.dtype) {
    case DType::F32:
      launch_pool<float>(pool, pool_ctas, vectorized, stream);
      break;
    case DType::F16:
      launch_pool<__half>(pool, pool_ctas, vectorized, stream);
      break;
    case DType::BF16:
      launch_pool<__nv_bfloat16>(pool, pool_ctas, vectorized, stream);
      break;
    case DType::F64:
      break;
  }
}

void BlockSelector::sample(const TensorView& q, const TensorView& k, cudaStream_t stream) {
  sk::SampleArgs args;
  args.p = params_;
  args.q = q.data;
  args.k = k.data;
  for (int axis = 0; axis < 4; ++axis) {
    args.q_stride[axis] = q.stride[axis];
    args.k_stride[axis] = k.stride[axis];
  }
  args.batch = shape_.batch;
  args.q_heads = shape_.q_heads;
  args.kv_heads = shape_.kv_heads;
  args.head_dim = shape_.head_dim;
  args.scores = static_cast<float*>(buffers_->sampled.get());
  const auto ctas = static_cast<unsigned>(shape_.batch * shape_.q_heads * params_.num_q_blocks);
  const size_t smem = sk::sample_smem_bytes(params_.block_q, params_.block_k, shape_.head_dim);
  switch (q.dtype) {
    case DType::F32:
      sk::sample_scores_kernel<float><<<ctas, sk::kSampleThreads, smem, stream>>>(args);
      break;
    case DType::F16:
      sk::sample_scores_kernel<__half><<<ctas, sk::kSampleThreads, smem, stream>>>(args);
      break;
    case DType::BF16:
      sk::sample_scores_kernel<__nv_bfloat16><<<ctas, sk::kSampleThreads, smem, stream>>>(args);
      break;
    case DType::F64:
      break;
  }
  check_launch("sample_scores_kernel");
}

void BlockSelector::score_select(cudaStream_t stream) {
  const int64_t B = shape_.batch;
  sk::SelectArgs select;
  select.p = params_;
  select.pooled_q = static_cast<const float*>(buffers_->pooled_q.get());
  select.pooled_k = static_cast<const float*>(buffers_->pooled_k.get());
  select.sampled = static_cast<const float*>(buffers_->sampled.get());
  select.batch = B;
  select.q_heads = shape_.q_heads;
  select.kv_heads = shape_.kv_heads;
  select.head_dim = shape_.head_dim;
  select.mask_heads = mask_heads_;
  select.per_query_head = per_query_head_ ? 1 : 0;
  select.tile_rows = tile_rows_;
  select.row_stride = row_stride_;
  select.capacity = capacity_;
  select.counts = static_cast<int32_t*>(buffers_->counts.get());
  select.slots = static_cast<int32_t*>(buffers_->slots.get());
  select.slot_full = static_cast<uint8_t*>(buffers_->slot_full.get());
  const int64_t tiles = (params_.num_q_blocks + tile_rows_ - 1) / tile_rows_;
  const auto ctas = static_cast<unsigned>(B * mask_heads_ * tiles);
  sk::score_select_kernel<<<ctas, sk::kSelectThreads, select_smem_bytes_, stream>>>(select);
  check_launch("score_select_kernel");
}

void BlockSelector::pack(cudaStream_t stream) {
  sk::PackArgs pack;
  pack.p = params_;
  pack.rows = mask_heads_ * params_.num_q_blocks;
  pack.capacity = capacity_;
  pack.counts = counts();
  pack.slots = slots();
  pack.slot_full = slot_full();
  pack.row_offsets = static_cast<int64_t*>(buffers_->row_offsets.get());
  pack.kv_indices = static_cast<int32_t*>(buffers_->kv_indices.get());
  pack.kv_full = static_cast<uint8_t*>(buffers_->kv_full.get());
  sk::pack_kernel<<<static_cast<unsigned>(shape_.batch), sk::kPackThreads, 0, stream>>>(pack);
  check_launch("pack_kernel");
}

const float* BlockSelector::sampled_scores() const { return static_cast<const float*>(buffers_->sampled.get()); }
const int32_t* BlockSelector::counts() const { return static_cast<const int32_t*>(buffers_->counts.get()); }
const int32_t* BlockSelector::slots() const { return static_cast<const int32_t*>(buffers_->slots.get()); }
const uint8_t* BlockSelector::slot_full() const {
  return static_cast<const uint8_t*>(buffers_->slot_full.get());
}

BlockMaskView BlockSelector::view(int64_t b) const {
  require(b >= 0 && b < shape_.batch, "CUDA selector: batch index must be in [0, ", shape_.batch, "), got ",
          b);
  const int64_t rows = mask_heads_ * params_.num_q_blocks;
  BlockMaskView v;
  v.q_len = params_.q_len;
  v.k_len = params_.k_len;
  v.block_q = params_.block_q;
  v.block_k = params_.block_k;
  v.num_q_blocks = params_.num_q_blocks;
  v.num_k_blocks = params_.num_k_blocks;
  v.num_heads = mask_heads_;
  v.row_offsets = static_cast<const int64_t*>(buffers_->row_offsets.get()) + b * (rows + 1);
  v.kv_indices = static_cast<const int32_t*>(buffers_->kv_indices.get()) + b * rows * capacity_;
  v.kv_full = static_cast<const uint8_t*>(buffers_->kv_full.get()) + b * rows * capacity_;
  return v;
}

BlockMask BlockSelector::download(int64_t b) const {
  const BlockMaskView v = view(b);
  const int64_t rows = mask_heads_ * params_.num_q_blocks;
  std::vector<int64_t> offsets(static_cast<size_t>(rows + 1));
  check_cuda(
      cudaMemcpy(offsets.data(), v.row_offsets, sizeof(int64_t) * offsets.size(), cudaMemcpyDeviceToHost),
      "cudaMemcpy(row offsets)");
  std::vector<int32_t> indices(static_cast<size_t>(offsets.back()));
  std::vector<uint8_t> full(static_cast<size_t>(offsets.back()));
  check_cuda(
      cudaMemcpy(indices.data(), v.kv_indices, sizeof(int32_t) * indices.size(), cudaMemcpyDeviceToHost),
      "cudaMemcpy(kv indices)");
  check_cuda(cudaMemcpy(full.data(), v.kv_full, full.size(), cudaMemcpyDeviceToHost), "cudaMemcpy(kv full)");
  auto pattern = std::make_shared<const Pattern>(params_.causal ? Pattern::causal() : Pattern::dense());
  return BlockMask(params_.q_len, params_.k_len, params_.block_q, params_.block_k, mask_heads_,
                   std::move(offsets), std::move(indices), std::move(full), std::move(pattern));
}

}  // namespace spattn::cuda_detail

namespace spattn {

CudaSelector::CudaSelector(const SelectConfig& config, int64_t batch, int64_t q_heads, int64_t kv_heads,
                           int64_t q_len, int64_t k_len, int64_t head_dim)
    : impl_(std::make_unique<cuda_detail::BlockSelector>(
          config, cuda_detail::SelectShape{batch, q_heads, kv_heads, q_len, k_len, head_dim})) {
  rows_ = impl_->view(0).num_heads * impl_->view(0).num_q_blocks;
}

CudaSelector::~CudaSelector() = default;

void CudaSelector::run(const TensorView& q, const TensorView& k, void* stream) {
  impl_->run(q, k, static_cast<cudaStream_t>(stream));
}

BlockMaskView CudaSelector::view(int64_t b) const { return impl_->view(b); }
int64_t CudaSelector::mask_heads() const { return impl_->mask_heads(); }
int64_t CudaSelector::rows() const { return rows_; }
int64_t CudaSelector::capacity() const { return impl_->capacity(); }

}  // namespace spattn
