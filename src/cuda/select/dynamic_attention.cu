// cuda/select/dynamic_attention.cu - DynamicAttention (dynamic_attention.hpp):
// the selector, the work items of the forward kernel built on the device from
// the selected row counts and ordered by length class and head (order_key),
// and one forward launch per batch element on the selector's slots.
#include "cuda/select/dynamic_attention.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kItemThreads = 256;

struct ItemArgs {
  const int32_t* counts = nullptr;  // the selector's row counts, (B, mask_heads * num_q_blocks)
  WorkItem* items = nullptr;        // (B, mask_heads * num_q_tiles), numbered as items_kernel says
  uint64_t* keys = nullptr;         // each item's sort key (order_key)
  int32_t* order = nullptr;         // each item's index (the sorted values)
  int64_t batch = 0, mask_heads = 0, num_q_tiles = 0, num_q_blocks = 0, tiles_per_block = 1, capacity = 0;
  int top_class = 0;  // length_class(capacity)
  int count_bits = 1, head_bits = 1, class_bits = 1;
};

// The length class of a row of `count` >= 1 entries: classes step by a
// factor sqrt(2) (class 2e for counts in [2^e, 2^e sqrt 2), 2e + 1 up to
// 2^(e+1)). (order_key puts empty rows after every class.)
__host__ __device__ __forceinline__ int length_class(int64_t count) {
  if (count <= 0) return 0;
  int e = 0;
  while ((int64_t{2} << e) <= count) ++e;
  return 2 * e + (count * count >= (int64_t{2} << (2 * e)) ? 1 : 0);
}

// The key that orders the items of a batch element, batch after batch, in
// one ascending sort: length classes longest first, each class head by head,
// each head's rows longest first (so the CTAs running at one time read one
// head's keys and values, which stay in L2, while the grid still starts its
// longest rows first to within a factor sqrt(2)). The selector's counts are
// at most `capacity`.
__device__ __forceinline__ uint64_t order_key(int64_t b, int64_t head, int32_t count, const ItemArgs& a) {
  const uint64_t class_rank = count > 0 ? static_cast<uint64_t>(a.top_class - length_class(count)) : a.top_class + 1;
  const int low_bits = a.count_bits + a.head_bits;
  return static_cast<uint64_t>(b) << (low_bits + a.class_bits) | class_rank << low_bits |
         static_cast<uint64_t>(head) << a.count_bits | static_cast<uint64_t>(a.capacity - count);
}

// Item n of a batch element covers query tile num_q_tiles - 1 - n % num_q_tiles
// of mask head n / num_q_tiles: the used slots of the mask row that holds
// the tile.
__global__ void __launch_bounds__(kItemThreads) items_kernel(const ItemArgs a) {
  const int64_t per_batch = a.mask_heads * a.num_q_tiles;
  const int64_t id = static_cast<int64_t>(blockIdx.x) * kItemThreads + threadIdx.x;
  if (id >= a.batch * per_batch) return;
  const int64_t b = id / per_batch, n = id % per_batch;
  const int64_t head = n / a.num_q_tiles, tile = a.num_q_tiles - 1 - n % a.num_q_tiles;
  const int64_t mask_row = head * a.num_q_blocks + tile / a.tiles_per_block;
  const int32_t count = a.counts[b * a.mask_heads * a.num_q_blocks + mask_row];
  WorkItem w;
  w.begin = mask_row * a.capacity;
  w.end = w.begin + count;
  w.row = static_cast<int32_t>(head * a.num_q_tiles + tile);
  w.slot = -1;
  a.items[id] = w;
  a.keys[id] = order_key(b, head, count, a);
  a.order[id] = static_cast<int32_t>(id);
}

// out[id] = the item the sort put at place id.
__global__ void __launch_bounds__(kItemThreads)
    gather_items_kernel(const WorkItem* in_tile_order, const int32_t* sorted, WorkItem* out, int64_t count) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * kItemThreads + threadIdx.x;
  if (id < count) out[id] = in_tile_order[sorted[id]];
}

// Bits that hold every value up to `max_value` (the radix sort looks at no more).
int bits_for(int64_t max_value) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= max_value) ++bits;
  return bits;
}

using pattern_math::ceil_div;

// Whether the attention of the dynamic path runs on the Hopper kernel: the
// library's kernel choice (cuda_kernel()), where the device, the build, the
// head dim and the block sizes allow it. Forcing it where they do not throws.
bool use_sm90(const SelectConfig& config, int64_t head_dim) {
  const TileShape tile = sm90_tile(head_dim);
  const bool fits = config.block_q % tile.rows == 0 && config.block_k % tile.cols == 0;
  return choose_sm90("CUDA dynamic attention", head_dim, fits, [&] {
    fail("CUDA dynamic attention: the sm90 kernel (SPATTN_CUDA_KERNEL=sm90) needs block_q a multiple of ",
         tile.rows, " and block_k a multiple of ", tile.cols, " at head_dim ", head_dim, "; got block_q ",
         config.block_q, ", block_k ", config.block_k);
  });
}

}  // namespace

// The work items and what ordering them needs: the items as numbered, the
// sort's keys and values in and out, and the radix sort's scratch, all
// allocated once so that make_items allocates nothing.
struct DynamicAttention::Items {
  int64_t count = 0;
  int top_class = 0;  // length_class(capacity)
  int count_bits = 1, head_bits = 1, class_bits = 1, key_bits = 1;
  DevicePtr data;           // WorkItem[count], ordered: what the kernel reads
  DevicePtr in_tile_order;  // WorkItem[count], as items_kernel numbers them
  DevicePtr keys;           // uint64_t[2 * count]: in, out
  DevicePtr order;          // int32_t[2 * count]: in, out
  DevicePtr sort_scratch;
  size_t sort_scratch_bytes = 0;

  Items(int64_t batch, int64_t mask_heads, int64_t per_batch, int64_t capacity)
      : count(batch * per_batch),
        top_class(length_class(capacity)),
        count_bits(bits_for(capacity)),
        head_bits(bits_for(mask_heads - 1)),
        class_bits(bits_for(top_class + 1)),
        key_bits(count_bits + head_bits + class_bits + bits_for(batch - 1)),
        data(device_alloc(sizeof(WorkItem) * count, "cudaMalloc(work items)")),
        in_tile_order(device_alloc(sizeof(WorkItem) * count, "cudaMalloc(work items in tile order)")),
        keys(device_alloc(sizeof(uint64_t) * 2 * count, "cudaMalloc(work item keys)")),
        order(device_alloc(sizeof(int32_t) * 2 * count, "cudaMalloc(work item order)")) {
    require(key_bits <= 64, "CUDA dynamic attention: the work item sort key needs ", key_bits,
            " bits (batch ", batch, ", mask heads ", mask_heads, ", ", capacity, " blocks per row); at most 64");
    check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, sort_scratch_bytes, key(0), key(count), index(0),
                                               index(count), static_cast<int>(count), 0, key_bits),
               "cub::DeviceRadixSort (scratch size)");
    sort_scratch = device_alloc(sort_scratch_bytes, "cudaMalloc(work item sort scratch)");
  }
  // Device bytes of `count` items with their sort keys and order (the sort's scratch aside).
  static int64_t bytes(int64_t count) {
    return bytes_for(count, 2 * (sizeof(WorkItem) + sizeof(uint64_t) + sizeof(int32_t)));
  }
  WorkItem* items() const { return static_cast<WorkItem*>(data.get()); }
  WorkItem* items_in_tile_order() const { return static_cast<WorkItem*>(in_tile_order.get()); }
  uint64_t* key(int64_t at) const { return static_cast<uint64_t*>(keys.get()) + at; }
  int32_t* index(int64_t at) const { return static_cast<int32_t*>(order.get()) + at; }
};

DynamicAttention::DynamicAttention(const SelectConfig& config, const SelectShape& shape)
    : shape_(shape),
      sm90_(use_sm90(config, shape.head_dim)),
      // The sm80 kernel keeps its 64-key tile here at every head dim (its
      // 128-key tile at D <= 64 is not used by this path).
      tile_(kernel_tile(sm90_, shape.head_dim, false)) {
  require(config.block_q % tile_.rows == 0, "CUDA dynamic attention: block_q must be a multiple of ", tile_.rows,
          ", got ", config.block_q);
  require(config.block_k % tile_.cols == 0, "CUDA dynamic attention: block_k must be a multiple of ", tile_.cols,
          ", got ", config.block_k);
  if (sm90_)
    scratch_pool();  // the sm90 launch's work counter comes from it; created here, before any graph capture
  else
    check_fwd_sm80_head_dim(shape.head_dim);
  selector_ = std::make_unique<BlockSelector>(config, shape);
  shape_mask_ = BlockMask::build(Pattern::dense(config.causal),
                                 MaskShape{shape.q_len, shape.k_len, config.block_q, config.block_k, 1});
  predicate_ = shared_device_copy(shape_mask_, nullptr)->view();  // kept in shape_mask_'s plan cache
  predicate_.blocks = BlockMaskView{};  // only the expressions are used
  num_q_tiles_ = ceil_div(shape.q_len, tile_.rows);
  num_k_tiles_ = ceil_div(shape.k_len, tile_.cols);
  const int64_t per_batch = selector_->mask_heads() * num_q_tiles_;
  require(shape.batch * per_batch <= INT32_MAX, "CUDA dynamic attention: ", shape.batch * per_batch,
          " work items (batch x mask heads x query tiles) exceed 2^31 - 1");
  cuda_check_memory(MemoryEstimate(select_request("CUDA dynamic attention", config, shape))
                        .add("work items", Items::bytes(shape.batch * per_batch)));
  items_ = std::make_unique<Items>(shape.batch, selector_->mask_heads(), per_batch, selector_->capacity());
}

DynamicAttention::~DynamicAttention() = default;

void DynamicAttention::select(const TensorView& q, const TensorView& k, cudaStream_t stream) {
  pool(q, k, stream);
  score_select(stream);
  make_items(stream);
}

void DynamicAttention::make_items(cudaStream_t stream) {
  Items& it = *items_;
  ItemArgs a;
  a.counts = selector_->counts();
  a.items = it.items_in_tile_order();
  a.keys = it.key(0);
  a.order = it.index(0);
  a.batch = shape_.batch;
  a.mask_heads = selector_->mask_heads();
  a.num_q_tiles = num_q_tiles_;
  a.num_q_blocks = shape_mask_.num_q_blocks();
  a.tiles_per_block = shape_mask_.block_q() / tile_.rows;
  a.capacity = selector_->capacity();
  a.top_class = it.top_class;
  a.count_bits = it.count_bits;
  a.head_bits = it.head_bits;
  a.class_bits = it.class_bits;
  const auto blocks = static_cast<unsigned>(ceil_div(it.count, kItemThreads));
  items_kernel<<<blocks, kItemThreads, 0, stream>>>(a);
  check_launch("items_kernel");
  // Within each batch element: length classes longest first, head by head
  // inside a class (order_key; the kernels start the items in this order, so
  // rows of very different length, as a mass threshold selects, spread
  // evenly).
  size_t scratch_bytes = it.sort_scratch_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairs(it.sort_scratch.get(), scratch_bytes, it.key(0), it.key(it.count),
                                             it.index(0), it.index(it.count), static_cast<int>(it.count), 0,
                                             it.key_bits, stream),
             "cub::DeviceRadixSort of the work items");
  gather_items_kernel<<<blocks, kItemThreads, 0, stream>>>(it.items_in_tile_order(), it.index(it.count), it.items(),
                                                           it.count);
  check_launch("gather_items_kernel");
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
    p.plan.items = items_->items() + b * items_per_batch;
    p.plan.num_items = items_per_batch;
    p.plan.num_q_tiles = num_q_tiles_;
    p.plan.num_k_tiles = num_k_tiles_;
    p.plan.tile_rows = tile_.rows;
    p.plan.tile_cols = tile_.cols;
    if (sm90_)
      run_fwd_sm90(p, dtype, stream);
    else
      run_fwd_sm80(p, dtype, stream);
  }
}

}  // namespace spattn::cuda_detail
