// cpu_attention.cpp - the fast CPU backend: fused block-sparse attention.
//
// Work items (work_plan.hpp) are runs of query tiles of one (batch, head) that
// share their key chunks. For each item the driver packs every tile's queries
// (transposed, pre-scaled), lists the key chunks through the block iterator,
// stages those chunks' values (and keys unless fp32) (kv_stage.hpp), runs the SIMD
// kernel of the active instruction set (tile_kernel.hpp: scores, online
// softmax and P.V fused, nothing of size L x L) and writes the normalised
// rows and LSE. Items are handed out one at a time to the OpenMP threads,
// each kv head's costliest first, so causal or BigBird rows whose cost varies
// by 100x still balance; each thread starts on a different kv head, so
// threads seldom stage the same keys and values. Each item is computed by one
// thread in a fixed order, so the result is bit for bit the same for any
// thread count.
// Memory, per thread: tiles of O(D x 512) floats and the staged values (and
// keys when they are not fp32) of one head or one item: O(L x D), never L x L.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/fast/decode_rows.hpp"
#include "cpu/fast/forward_plan.hpp"
#include "cpu/fast/isa.hpp"
#include "cpu/fast/kv_stage.hpp"
#include "cpu/fast/partial_bits.hpp"
#include "cpu/fast/tile_io.hpp"
#include "cpu/fast/work_plan.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using cpu_fast::AlignedFloats;
using cpu_fast::TileKernel;

constexpr double kLog2e = 1.44269504088896340736;

// Per-thread buffers, sized once before the parallel region.
struct ThreadScratch {
  int64_t tile_floats;  // D * M
  AlignedFloats q_t, acc_t, row_max, row_sum, scores, chunk_max;
  cpu_fast::StagedKv kv;
  std::vector<float> row_buffer, inverse;
  std::vector<uint64_t> bits;
  std::vector<cpu_fast::QueryTile> tiles;
  std::vector<cpu_fast::TileMaskContext> contexts;
  std::vector<cpu_fast::KeyChunk> chunks;
  cpu_fast::ChunkScratch chunk_scratch;

  ThreadScratch(const TensorView& k, const TileKernel& kernel, int64_t tiles_per_item,
                int64_t max_chunks, int64_t max_item_keys)
      : tile_floats(k.head_dim() * kernel.tile_rows),
        q_t(tiles_per_item * tile_floats),
        acc_t(tiles_per_item * tile_floats),
        row_max(tiles_per_item * kernel.tile_rows),
        row_sum(tiles_per_item * kernel.tile_rows),
        scores(kernel.chunk_keys * kernel.tile_rows),
        chunk_max(kernel.tile_rows),
        kv(k, max_item_keys, max_chunks),
        row_buffer(static_cast<size_t>(k.head_dim())),
        inverse(static_cast<size_t>(kernel.tile_rows)),
        bits(static_cast<size_t>(kernel.chunk_keys)),
        tiles(static_cast<size_t>(tiles_per_item)),
        contexts(static_cast<size_t>(tiles_per_item)) {
    chunks.reserve(static_cast<size_t>(max_chunks));
  }
};

// The per-thread scratch of a call, kept between calls of the same sizes:
// allocating it afresh each call (megabytes of new pages that the OS zeroes)
// cost 5-10% of a sparse call at L = 4096 (dev/notes/cpu-18-per-thread-buffers-kept-between-calls-of.md).
struct Workspace {
  std::vector<int64_t> sizes;  // what the buffers were made for
  std::vector<ThreadScratch> threads;
};

class WorkspacePool {
 public:
  // A workspace for `sizes`: an idle one made for the same sizes, or a new one.
  std::unique_ptr<Workspace> take(const std::vector<int64_t>& sizes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->sizes != sizes) continue;
      std::unique_ptr<Workspace> w = std::move(*it);
      idle_.erase(it);
      return w;
    }
    auto w = std::make_unique<Workspace>();
    w->sizes = sizes;
    return w;
  }
  // Keeps `w` for later calls; only the most recent kKeep are kept.
  void give_back(std::unique_ptr<Workspace> w) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.insert(idle_.begin(), std::move(w));
    if (idle_.size() > kKeep) idle_.resize(kKeep);
  }

 private:
  static constexpr size_t kKeep = 2;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Workspace>> idle_;
};

WorkspacePool& workspace_pool() {
  static WorkspacePool pool;
  return pool;
}

// The rows of `t` that work item `item` reads, when they are contiguous
// along the head dimension (nothing to prefetch otherwise). Prefetching the
// next item's queries measured 3% off dense attention (dev/notes/cpu-17-prefetch-the-next-item-s-queries-during.md).
cpu_fast::PrefetchRows item_rows(const TensorView& t, const cpu_fast::TileLayout& layout,
                                 const BlockMaskView& plan, const cpu_fast::WorkItem& item) {
  cpu_fast::PrefetchRows rows;
  if (t.stride[3] != 1) return rows;
  const int64_t size = dtype_size(t.dtype);
  const int64_t row0 = layout.row0(plan, item.first_tile);
  rows.base = static_cast<const char*>(t.data) + t.offset(item.batch, item.head, row0, 0) * size;
  rows.row_stride = t.stride[2] * size;
  rows.rows = layout.row0(plan, item.last_tile - 1) + layout.rows(plan, item.last_tile - 1) - row0;
  rows.row_bytes = t.head_dim() * size;
  return rows;
}

}  // namespace

namespace cpu_fast {

ForwardPlan make_forward_plan(const BlockMask& mask, const CallShape& shape) {
  const CpuIsa isa = active_cpu_isa();
  const TileKernel& kernel = tile_kernel(isa);
  const BlockMaskView view = mask.view();
  const TileLayout layout(view, kernel.tile_rows);
  WorkPlan work = plan_items(view, layout, shape.batch, shape.q_heads, shape.kv_heads);
  const int64_t max_chunks = max_item_chunks(view, layout, kernel.chunk_keys);
  return ForwardPlan{isa, layout, std::move(work), max_chunks, decode_rows_fit(shape)};
}

std::string describe(const ForwardPlan& plan) {
  if (plan.decode_rows) return "cpu decode rows (each kv head's few rows over its kept key blocks)";
  return std::string("cpu ") + cpu_isa_name(plan.isa) + ", " + std::to_string(plan.layout.tile_rows) +
         "-row tiles, " + std::to_string(plan.work.items.size()) + " work items";
}

void run_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                 const BlockMask& mask, const ForwardPlan& forward, double scale, const TensorView* lse) {
  require(std::isfinite(scale), "scale must be finite, got ", scale);
  if (forward.decode_rows) return run_decode_rows(q, KeyRows{k, v}, out, mask, scale, lse);
  const TileKernel& kernel = tile_kernel(forward.isa);
  const int64_t Hq = q.heads(), D = q.head_dim(), M = kernel.tile_rows;
  const int64_t group = Hq / k.heads(), shift = k.seq_len() - q.seq_len();
  // Queries are pre-scaled so scores come out in the log2 domain.
  const std::vector<float> dim_factors(static_cast<size_t>(D), static_cast<float>(scale * kLog2e));
  const BlockMaskView plan = mask.view();
  const Pattern* pattern = mask.pattern();

  const TileLayout& layout = forward.layout;
  const WorkPlan& work = forward.work;
  const std::vector<std::pair<int64_t, int64_t>> panels = value_panels(D, kernel.value_panel);
  const int threads = omp_get_max_threads();
  const int64_t max_chunks = forward.max_chunks;
  const bool keys_fp32 = k.dtype == DType::F32 && k.stride[3] == 1;
  std::unique_ptr<Workspace> workspace = workspace_pool().take(
      {static_cast<int64_t>(kernel.tile_rows), kernel.chunk_keys, kernel.value_panel, D, k.seq_len(),
       keys_fp32, whole_head_limit(), layout.tiles_per_item, max_chunks, work.max_item_keys,
       threads, static_cast<int64_t>(forward.isa)});
  std::vector<ThreadScratch>& scratch = workspace->threads;
  if (scratch.empty()) {
    scratch.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t)
      scratch.emplace_back(k, kernel, layout.tiles_per_item, max_chunks, work.max_item_keys);
  }
  for (ThreadScratch& s : scratch) s.kv.forget();

  // One work item on the calling thread, in its scratch; while it computes,
  // the queries of `next` (the item most likely to come next) are prefetched.
  const auto run_item = [&](ThreadScratch& s, const cpu_fast::WorkItem& item,
                            const cpu_fast::WorkItem* next) {
    const int64_t b = item.batch, h = item.head, kv_head = h / group;
    const PatternExpr* expr = pattern ? &pattern->expr_for_head(h, Hq) : nullptr;
    const int64_t num_tiles = item.last_tile - item.first_tile;
    for (int64_t t = 0; t < num_tiles; ++t) {
      const int64_t tile = item.first_tile + t;
      cpu_fast::TileMaskContext& context = s.contexts[static_cast<size_t>(t)];
      context.expr = expr;
      context.head = h;
      context.row0 = layout.row0(plan, tile);
      context.rows = layout.rows(plan, tile);
      context.shift = shift;
      cpu_fast::QueryTile& qt = s.tiles[static_cast<size_t>(t)];
      float* q_t = s.q_t.data() + t * s.tile_floats;
      cpu_fast::pack_query_tile(q, b, h, context.row0, context.rows, dim_factors.data(), M,
                                kernel.transpose, s.row_buffer.data(), q_t);
      qt.q_t = q_t;
      qt.acc_t = s.acc_t.data() + t * s.tile_floats;
      qt.row_max = s.row_max.data() + t * M;
      qt.row_sum = s.row_sum.data() + t * M;
      qt.mask_context = &context;
    }
    cpu_fast::key_chunks(plan, layout, item, Hq, kernel.chunk_keys, s.chunk_scratch, s.chunks);
    s.kv.prepare(k, v, b, kv_head, panels, s.chunks);

    cpu_fast::TileGroupArgs args;
    args.head_dim = D;
    args.k = s.kv.key_rows(k, b, kv_head);
    args.k_row_stride = s.kv.key_row_stride(k);
    args.keys_by_index = s.kv.keys_by_index();
    args.v_panels = s.kv.value_panels();
    args.staged_keys = s.kv.staged_keys();
    args.tiles = s.tiles.data();
    args.num_tiles = num_tiles;
    args.chunks = s.chunks.data();
    args.num_chunks = static_cast<int64_t>(s.chunks.size());
    args.allowed_bits = &cpu_fast::tile_allowed_bits;
    args.scores = s.scores.data();
    args.bits = s.bits.data();
    args.chunk_max = s.chunk_max.data();
    if (next) args.prefetch = item_rows(q, layout, plan, *next);
    kernel.run(args);

    for (int64_t t = 0; t < num_tiles; ++t) {
      const cpu_fast::QueryTile& qt = s.tiles[static_cast<size_t>(t)];
      const cpu_fast::TileMaskContext& context = s.contexts[static_cast<size_t>(t)];
      cpu_fast::store_output_tile(out, lse, b, h, context.row0, context.rows, M, qt.acc_t,
                                  qt.row_max, qt.row_sum, kernel.transpose_out, s.inverse.data());
    }
  };

  // Each group of items (one kv head) hands out its items from a counter,
  // costliest first. Thread t starts in group t * groups / threads and moves
  // on to the next group when its own runs dry, so threads mostly stage and
  // reuse the keys and values of different heads, and all of them finish on
  // the cheap ends of the last groups.
  const int64_t groups = static_cast<int64_t>(work.group_begin.size()) - 1;
  std::vector<std::atomic<int64_t>> next_item(static_cast<size_t>(groups));
  for (size_t g = 0; g < next_item.size(); ++g) next_item[g] = work.group_begin[g];

#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    ThreadScratch& s = scratch[static_cast<size_t>(thread)];
    for (int64_t step = 0; step < groups; ++step) {
      const int64_t g = (thread * groups / threads + step) % groups;
      std::atomic<int64_t>& next = next_item[static_cast<size_t>(g)];
      const int64_t end = work.group_begin[static_cast<size_t>(g) + 1];
      for (int64_t n = next++; n < end; n = next++) {
        const cpu_fast::WorkItem* after = n + 1 < end ? &work.items[static_cast<size_t>(n) + 1] : nullptr;
        run_item(s, work.items[static_cast<size_t>(n)], after);
      }
    }
  }
  workspace_pool().give_back(std::move(workspace));
}

}  // namespace cpu_fast

void cpu_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const BlockMask& mask, double scale,
                   const TensorView* lse) {
  validate_attention(q, k, v, out, mask, lse);
  cpu_fast::run_forward(q, k, v, out, mask, cpu_fast::make_forward_plan(mask, call_shape(q, k)), scale, lse);
}

}  // namespace spattn
