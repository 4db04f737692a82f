// python/csrc/dist_ops.cpp - the context-parallel plan (spattn/dist.hpp) for
// the Python package's spattn.distributed: a layout's chunks per rank, and
// every (receiver, sender) pair's runs of key rows, every rank's attention
// calls. Host-side set-up, run
// eagerly; errors arrive as ValueError with the library's wording.
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "spattn/dist.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

dist::LayoutKind layout_kind(int64_t zigzag) {
  require(zigzag == 0 || zigzag == 1, "zigzag must be 0 or 1, got ", zigzag);
  return zigzag ? dist::LayoutKind::Zigzag : dist::LayoutKind::Contiguous;
}

// Every rank's chunks, in its shard's order, int64 (world_size, chunks per rank, 2): start, end.
at::Tensor cp_layout_pieces(int64_t zigzag, int64_t seq_len, int64_t world_size, int64_t block) {
  return run_with_value_errors([&] {
    const dist::ShardLayout layout(layout_kind(zigzag), seq_len, world_size, block);
    std::vector<int64_t> ends;
    for (int64_t r = 0; r < world_size; ++r)
      for (const dist::Chunk& c : layout.pieces(r)) ends.insert(ends.end(), {c.start, c.end});
    return tensor_of(ends).view({world_size, -1, 2});
  });
}

// Every pair's runs as rows (receiver, sender, start, length, offset, source),
// int64 (n, 6), and every rank's calls as rows (rank, piece, q_offset, q_len,
// q_start, peer, k_offset, k_len, k_start), int64 (m, 9), peer -1 for its own rows.
std::tuple<at::Tensor, at::Tensor> cp_plan(const at::Tensor& code, const at::Tensor& i32, const at::Tensor& i64, int64_t zigzag,
                        int64_t seq_len, int64_t world_size, int64_t block, int64_t num_heads) {
  return run_with_value_errors([&] {
    const at::Tensor c = cpu_contiguous(code, at::kLong, "code");
    require(c.numel() > 0, "code is empty: no pattern");
    const auto pattern = pattern_of(c.data_ptr<int64_t>(), c.numel(), i32, i64);
    const dist::ShardLayout layout(layout_kind(zigzag), seq_len, world_size, block);
    const dist::ContextParallelPlan plan(*pattern, layout, num_heads);
    std::vector<int64_t> rows, calls;
    for (int64_t r = 0; r < world_size; ++r) {
      for (int64_t s = 0; s < world_size; ++s) {
        if (s == r) continue;
        for (const dist::KeyRun& run : plan.runs(r, s))
          rows.insert(rows.end(), {r, s, run.start, run.length, run.offset, run.source});
      }
      for (const dist::CallSpec& c : plan.calls(r))
        calls.insert(calls.end(), {r, c.piece, c.q_offset, c.q_len, c.q_start, c.peer, c.k_offset, c.k_len, c.k_start});
    }
    return std::make_tuple(tensor_of(rows).view({-1, 6}), tensor_of(calls).view({-1, 9}));
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  using namespace spattn::torch_bridge;
  m.def("cp_layout_pieces(int zigzag, int seq_len, int world_size, int block) -> Tensor", &cp_layout_pieces);
  m.def("cp_plan(Tensor code, Tensor table_i32, Tensor table_i64, int zigzag, int seq_len, int world_size, "
        "int block, int num_heads) -> (Tensor, Tensor)",
        &cp_plan);
}
