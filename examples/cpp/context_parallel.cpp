// examples/cpp/context_parallel.cpp - one sequence's attention over several
// ranks (spattn/dist_attention.hpp), forward and backward.
//
// Each rank holds its shard of q, k and v (the layout's chunks of the
// sequence), sends its peers only the key and value rows their queries keep,
// and gets its rows of the output and its shards' gradients. Two ways to run:
//
//   context_parallel           4 ranks as threads of this process
//                              (InProcessGroup), host memory, fp32
//   torchrun --nproc-per-node N --no-python context_parallel --nccl
//                              one rank per process and GPU over NCCL, bf16
//                              (a CUDA build with NCCL; torchrun sets RANK,
//                              WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK)
//
// Every rank draws the whole sequence's inputs from one seed, runs its shard,
// and checks its rows of out, dq, dk and dv against one attention() and
// attention_backward() call over the whole sequence on its own memory. The
// patterns: causal over a zigzag layout (balanced), a sliding window over a
// contiguous one (each rank needs only its left neighbour's last rows).
// Exits 1 if an error is above the dtype's tolerance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "example_data.hpp"
#include "spattn/spattn.hpp"
#if defined(SPATTN_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

using spattn::DType;
using spattn::TensorView;
namespace dist = spattn::dist;

constexpr int64_t B = 1, Hq = 4, Hkv = 2, D = 64, kBlock = 128;

// A (B, H, L, D) tensor's values on the host, mirrored to the device when `device`.
class Store {
 public:
  Store(DType dtype, int64_t H, int64_t L, int64_t D_, bool device)
      : dtype_(dtype), shape_{B, H, L, D_}, bytes_(B * H * L * D_ * spattn::dtype_size(dtype)), device_(device),
        host_(static_cast<size_t>(bytes_)) {
#if defined(SPATTN_WITH_CUDA)
    if (device_ && cudaMalloc(&data_, static_cast<size_t>(bytes_)) != cudaSuccess) throw std::bad_alloc();
#endif
    if (!device_) data_ = host_.data();
  }
  ~Store() {
#if defined(SPATTN_WITH_CUDA)
    if (device_) cudaFree(data_);
#endif
  }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  TensorView view() const { return spattn::make_bhld(data_, dtype_, shape_[0], shape_[1], shape_[2], shape_[3]); }
  // Writes `values` (logical order), rounded to the dtype, and mirrors them.
  void set(const std::vector<float>& values) {
    const TensorView host = host_view();
    for (size_t i = 0; i < values.size(); ++i) spattn::store_from_double(host.data, dtype_, static_cast<int64_t>(i), values[i]);
    copy(true);
  }
  // The values as floats (after the device's work is done).
  std::vector<float> get() {
    copy(false);
    const TensorView host = host_view();
    std::vector<float> values(static_cast<size_t>(host.numel()));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(spattn::load_as_double(host.data, dtype_, static_cast<int64_t>(i)));
    return values;
  }

 private:
  TensorView host_view() {
    return spattn::make_bhld(host_.data(), dtype_, shape_[0], shape_[1], shape_[2], shape_[3]);
  }
  void copy(bool to_device) {
#if defined(SPATTN_WITH_CUDA)
    if (device_) {
      cudaDeviceSynchronize();
      cudaMemcpy(to_device ? data_ : host_.data(), to_device ? host_.data() : data_, static_cast<size_t>(bytes_),
                 to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    }
#endif
    (void)to_device;
  }

  DType dtype_;
  int64_t shape_[4];
  int64_t bytes_;
  bool device_;
  std::vector<unsigned char> host_;
  void* data_ = nullptr;
};

// Rows `rows` of a (B, H, L, D) array in logical order.
std::vector<float> take_rows(const std::vector<float>& all, int64_t H, int64_t L, const std::vector<int64_t>& rows) {
  std::vector<float> out;
  for (int64_t h = 0; h < B * H; ++h)
    for (const int64_t r : rows) {
      const float* row = all.data() + (h * L + r) * D;
      out.insert(out.end(), row, row + D);
    }
  return out;
}

// max |a - b| / max |b|.
double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double top = 0.0;
  for (const float x : b) top = std::max(top, static_cast<double>(std::fabs(x)));
  return max_abs_diff(a, b) / std::max(top, 1e-30);
}

// One rank's run of one pattern; prints its line and returns whether it passed.
bool run_rank(dist::Transport& transport, bool device, const char* name, const spattn::Pattern& pattern,
              dist::LayoutKind kind, int64_t L, std::mutex& print) {
  const DType dtype = device ? DType::BF16 : DType::F32;
  const double tolerance = device ? 3e-2 : 1e-4;
  const int64_t rank = transport.rank();
  const dist::ShardLayout layout(kind, L, transport.world_size(), kBlock);
  const dist::ContextParallelPlan plan(pattern, layout, Hq);
  const dist::RankPlan rank_plan(plan, rank);
  std::vector<int64_t> rows;
  for (const dist::Chunk& c : layout.pieces(rank))
    for (int64_t i = c.start; i < c.end; ++i) rows.push_back(i);
  const int64_t n = static_cast<int64_t>(rows.size());

  // The whole sequence's inputs, the same on every rank.
  const std::vector<float> q = random_floats(B * Hq * L * D, 1), k = random_floats(B * Hkv * L * D, 2);
  const std::vector<float> v = random_floats(B * Hkv * L * D, 3), d_out = random_floats(B * Hq * L * D, 4);

  // This rank's shard, forward and backward.
  Store q_r(dtype, Hq, n, D, device), k_r(dtype, Hkv, n, D, device), v_r(dtype, Hkv, n, D, device);
  Store d_out_r(dtype, Hq, n, D, device), out_r(dtype, Hq, n, D, device), lse_r(DType::F32, Hq, n, 1, device);
  Store dq_r(dtype, Hq, n, D, device), dk_r(dtype, Hkv, n, D, device), dv_r(dtype, Hkv, n, D, device);
  q_r.set(take_rows(q, Hq, L, rows));
  k_r.set(take_rows(k, Hkv, L, rows));
  v_r.set(take_rows(v, Hkv, L, rows));
  d_out_r.set(take_rows(d_out, Hq, L, rows));
  const TensorView lse_view = lse_r.view();
  const int64_t before = transport.bytes_sent();
  dist::attention(q_r.view(), k_r.view(), v_r.view(), out_r.view(), rank_plan, transport, {}, &lse_view);
  const int64_t sent = transport.bytes_sent() - before;
  dist::attention_backward(q_r.view(), k_r.view(), v_r.view(), out_r.view(), lse_r.view(), d_out_r.view(),
                           spattn::AttentionGrads{dq_r.view(), dk_r.view(), dv_r.view()}, rank_plan, transport);

  // One call over the whole sequence.
  Store q_a(dtype, Hq, L, D, device), k_a(dtype, Hkv, L, D, device), v_a(dtype, Hkv, L, D, device);
  Store d_out_a(dtype, Hq, L, D, device), out_a(dtype, Hq, L, D, device), lse_a(DType::F32, Hq, L, 1, device);
  Store dq_a(dtype, Hq, L, D, device), dk_a(dtype, Hkv, L, D, device), dv_a(dtype, Hkv, L, D, device);
  q_a.set(q);
  k_a.set(k);
  v_a.set(v);
  d_out_a.set(d_out);
  const spattn::BlockMask mask = spattn::BlockMask::build(pattern, spattn::MaskShape{L, L, kBlock, kBlock, Hq});
  const TensorView lse_all = lse_a.view();
  spattn::attention(q_a.view(), k_a.view(), v_a.view(), out_a.view(), mask, {}, &lse_all);
  spattn::attention_backward(q_a.view(), k_a.view(), v_a.view(), out_a.view(), lse_a.view(), d_out_a.view(),
                             spattn::AttentionGrads{dq_a.view(), dk_a.view(), dv_a.view()}, mask);

  const double errors[] = {relative(out_r.get(), take_rows(out_a.get(), Hq, L, rows)),
                           relative(dq_r.get(), take_rows(dq_a.get(), Hq, L, rows)),
                           relative(dk_r.get(), take_rows(dk_a.get(), Hkv, L, rows)),
                           relative(dv_r.get(), take_rows(dv_a.get(), Hkv, L, rows))};
  const bool ok = *std::max_element(std::begin(errors), std::end(errors)) <= tolerance;
  std::lock_guard<std::mutex> lock(print);
  std::printf("%-7s rank %lld of %lld: %lld rows, sent %.2f MB forward; error vs one call: out %.1e dq %.1e dk %.1e "
              "dv %.1e %s\n",
              name, static_cast<long long>(rank), static_cast<long long>(transport.world_size()),
              static_cast<long long>(n), sent / 1e6, errors[0], errors[1], errors[2], errors[3], ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const bool nccl = argc > 1 && std::strcmp(argv[1], "--nccl") == 0;
  if (argc > 2 || (argc == 2 && !nccl)) {
    std::fprintf(stderr, "usage: %s [--nccl]\n", argv[0]);
    return 2;
  }
  struct Case {
    const char* name;
    spattn::Pattern pattern;
    dist::LayoutKind layout;
  };
  const Case cases[] = {{"causal", spattn::Pattern::causal(), dist::LayoutKind::Zigzag},
                        {"window", spattn::Pattern::sliding_window(512), dist::LayoutKind::Contiguous}};
  std::mutex print;
  bool ok = true;
  try {
    if (nccl) {
      auto transport = dist::nccl_transport_from_env();
      for (const Case& c : cases)
        ok = run_rank(*transport, true, c.name, c.pattern, c.layout, 8192, print) && ok;
    } else {
      dist::InProcessGroup group(4);
      std::mutex results;
      for (const Case& c : cases)
        group.run([&](dist::Transport& t) {
          const bool passed = run_rank(t, false, c.name, c.pattern, c.layout, 2048, print);
          std::lock_guard<std::mutex> lock(results);
          ok = ok && passed;
        });
    }
  } catch (const spattn::Error& e) {
    std::fprintf(stderr, "context_parallel: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
