// cuda/select/dynamic_attention.cu - DynamicAttention (dynamic_attention.hpp):
// the selector, the work items of the forward kernel built on the device from
// the selected row counts, and one forward launch per batch element on the
// selector's slots.
#include "cuda/select/dynamic_attention.hpp"

#include "cuda/common/cuda_check.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/plan/device_plan.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kItemThreads = 256;

struct ItemArgs {
  const int32_t* counts = nullptr;  // the selector's row counts, (B, mask_heads * num_q_blocks)
  WorkItem* items = nullptr;        // (B, mask_heads * num_q_tiles)
  int64_t batch = 0, mask_heads = 0, num_q_tiles = 0, num_q_blocks = 0, tiles_per_block = 1, capacity = 0;
};

// Item n of a batch element covers query tile num_q_tiles - 1 - n / mask_heads
// of mask head n % mask_heads (the last tiles, the longest causal rows,
// first): the used slots of the mask row that holds the tile.
__global__ void __launch_bounds__(kItemThreads) items_kernel(const ItemArgs a) {
  const int64_t per_batch = a.mask_heads * a.num_q_tiles;
  const int64_t id = static_cast<int64_t>(blockIdx.x) * kItemThreads + threadIdx.x;
  if (id >= a.batch * per_batch) return;
  const int64_t b = id / per_batch, n = id % per_batch;
  const int64_t head = n % a.mask_heads, tile = a.num_q_tiles - 1 - n / a.mask_heads;
  const int64_t mask_row = head * a.num_q_blocks + tile / a.tiles_per_block;
  WorkItem w;
  w.begin = mask_row * a.capacity;
  w.end = w.begin + a.counts[b * a.mask_heads * a.num_q_blocks + mask_row];
  w.row = static_cast<int32_t>(head * a.num_q_tiles + tile);
  w.slot = -1;
  a.items[id] = w;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether the attention of the dynamic path runs on the Hopper kernel: the
// library's kernel choice (cuda_kernel()), where the device, the build, the
// head dim and the block sizes allow it. Forcing it where they do not throws.
bool use_sm90(const SelectConfig& config, int64_t head_dim) {
  const bool fits = config.block_q % kSm90Tile.rows == 0 && config.block_k % kSm90Tile.cols == 0;
  return choose_sm90("CUDA dynamic attention", head_dim, fits, [&] {
    fail("CUDA dynamic attention: the sm90 kernel (SPATTN_CUDA_KERNEL=sm90) needs block_q and block_k multiples of ",
         kSm90Tile.cols, "; got block_q ", config.block_q, ", block_k ", config.block_k);
  });
}

}  // namespace

struct DynamicAttention::Items {
  WorkItem* data = nullptr;
  ~Items() {
    if (data) cudaFree(data);  // errors at teardown are ignored on purpose
  }
};

DynamicAttention::DynamicAttention(const SelectConfig& config, const SelectShape& shape)
    : shape_(shape), sm90_(use_sm90(config, shape.head_dim)), tile_(sm90_ ? kSm90Tile : kSm80Tile) {
  require(config.block_q % tile_.rows == 0, "CUDA dynamic attention: block_q must be a multiple of ", tile_.rows,
          ", got ", config.block_q);
  require(config.block_k % tile_.cols == 0, "CUDA dynamic attention: block_k must be a multiple of ", tile_.cols,
          ", got ", config.block_k);
  if (!sm90_) check_fwd_sm80_head_dim(shape.head_dim);
  selector_ = std::make_unique<BlockSelector>(config, shape);
  shape_mask_ = BlockMask::build(Pattern::dense(config.causal),
                                 MaskShape{shape.q_len, shape.k_len, config.block_q, config.block_k, 1});
  predicate_ = device_mask(shape_mask_, nullptr);
  predicate_.blocks = BlockMaskView{};  // only the expressions are used
  num_q_tiles_ = ceil_div(shape.q_len, tile_.rows);
  num_k_tiles_ = ceil_div(shape.k_len, tile_.cols);
  items_ = std::make_unique<Items>();
  const int64_t count = shape.batch * selector_->mask_heads() * num_q_tiles_;
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&items_->data), sizeof(WorkItem) * count),
             "cudaMalloc(work items)");
}

DynamicAttention::~DynamicAttention() = default;

void DynamicAttention::select(const TensorView& q, const TensorView& k, cudaStream_t stream) {
  pool(q, k, stream);
  score_select(stream);
  make_items(stream);
}

void DynamicAttention::make_items(cudaStream_t stream) {
  ItemArgs a;
  a.counts = selector_->counts();
  a.items = items_->data;
  a.batch = shape_.batch;
  a.mask_heads = selector_->mask_heads();
  a.num_q_tiles = num_q_tiles_;
  a.num_q_blocks = shape_mask_.num_q_blocks();
  a.tiles_per_block = shape_mask_.block_q() / tile_.rows;
  a.capacity = selector_->capacity();
  const int64_t count = a.batch * a.mask_heads * a.num_q_tiles;
  items_kernel<<<static_cast<unsigned>(ceil_div(count, kItemThreads)), kItemThreads, 0, stream>>>(a);
  check_launch("items_kernel");
}

BlockMask DynamicAttention::mask(int64_t b) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before packing the mask");  // any stream's selection
  selector_->pack(nullptr);
  return selector_->download(b);
}

void DynamicAttention::attend(const FwdParams& batch_params, DType dtype, cudaStream_t stream) const {
  const int64_t items_per_batch = selector_->mask_heads() * num_q_tiles_;
  const int64_t rows = selector_->mask_heads() * shape_mask_.num_q_blocks();
  for (int64_t b = 0; b < shape_.batch; ++b) {
    FwdParams p = batch_params;
    const auto shift = [b](TensorArg t, int64_t elem_bytes) {
      t.data = static_cast<char*>(t.data) + b * t.stride_b * elem_bytes;
      return t;
    };
    const int64_t in_bytes = dtype_size(dtype), out_bytes = p.out_f32 ? 4 : in_bytes;
    p.q = shift(p.q, in_bytes);
    p.k = shift(p.k, in_bytes);
    p.v = shift(p.v, in_bytes);
    p.out = shift(p.out, out_bytes);
    if (p.lse) p.lse += b * p.lse_stride_b;
    p.batch = 1;
    p.mask = predicate_;
    p.mask.blocks = selector_->view(b);  // the shape; the entries are the slots
    const int64_t first_slot = b * rows * selector_->capacity();
    p.mask.blocks.row_offsets = nullptr;  // rows are reached through the items only
    p.mask.blocks.kv_indices = selector_->slots() + first_slot;
    p.mask.blocks.kv_full = selector_->slot_full() + first_slot;
    p.plan = DeviceTilePlanView{};
    p.plan.blocks = p.mask.blocks;
    p.plan.items = items_->data + b * items_per_batch;
    p.plan.num_items = items_per_batch;
    p.plan.num_q_tiles = num_q_tiles_;
    p.plan.num_k_tiles = num_k_tiles_;
    if (sm90_)
      run_fwd_sm90(p, dtype, stream);
    else
      run_fwd_sm80(p, dtype, stream);
  }
}

}  // namespace spattn::cuda_detail
