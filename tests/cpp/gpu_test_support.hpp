// tests/cpp/gpu_test_support.hpp - device copies of host tensors and one
// checked CUDA attention run against the fp64 reference (header-only, for the
// gpu_test_*.cpp suites).
//
// run_on_gpu() draws fresh N(0, 1) inputs for a problem, mirrors them to the
// device, poisons the device output and LSE with NaN bytes, runs the fused (or
// naive) CUDA kernel, copies the results back and returns their errors against
// reference_attention on the host copies.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/work_units.hpp"
#include "cuda/kernel_choice.hpp"
#include "spattn/cuda.hpp"
#include "spattn/spattn.hpp"
#include "test_support.hpp"

namespace spattn::testing {

#define SPATTN_REQUIRE_GPU()                                                        \
  do {                                                                              \
    if (::spattn::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";       \
  } while (0)

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A stream of the test's own, destroyed with it.
struct TestStream {
  cudaStream_t stream = nullptr;
  TestStream() { cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~TestStream() { cudaStreamDestroy(stream); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
};

// Captures `call` (work queued on the stream it is given) in a graph on a
// stream of its own, runs `before_replay` (poisoning what the replay must
// write), replays the graph and waits for it.
inline void replay_captured(const std::function<void(cudaStream_t)>& call,
                            const std::function<void()>& before_replay) {
  TestStream s;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  call(s.stream);
  cuda_ok(cudaStreamEndCapture(s.stream, &graph), "cudaStreamEndCapture");
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda_ok(instantiated, "cudaGraphInstantiate");
  before_replay();
  const cudaError_t launched = cudaGraphLaunch(exec, s.stream);
  const cudaError_t finished = cudaStreamSynchronize(s.stream);
  cudaGraphExecDestroy(exec);
  cuda_ok(launched, "cudaGraphLaunch");
  cuda_ok(finished, "graph replay");
}

// Forces a fused kernel for the scope of the object, then restores the previous choice.
class ForcedKernel {
 public:
  explicit ForcedKernel(CudaKernel kernel) : previous_(cuda_kernel()) { cuda_set_kernel(kernel); }
  ~ForcedKernel() { cuda_set_kernel(previous_); }
  ForcedKernel(const ForcedKernel&) = delete;
  ForcedKernel& operator=(const ForcedKernel&) = delete;

 private:
  CudaKernel previous_;
};

// Every launch of the fused kernels takes its work units in `order` while
// this lives (cuda_detail::force_unit_order); the order forced before comes
// back after.
class ForcedUnitOrder {
 public:
  explicit ForcedUnitOrder(cuda_detail::UnitOrder order) : previous_(cuda_detail::force_unit_order(order)) {}
  ~ForcedUnitOrder() { cuda_detail::force_unit_order(previous_); }
  ForcedUnitOrder(const ForcedUnitOrder&) = delete;
  ForcedUnitOrder& operator=(const ForcedUnitOrder&) = delete;

 private:
  std::optional<cuda_detail::UnitOrder> previous_;
};

// Forces one of the tile choices (kernel_choice.hpp: force_sm90_tall_tile,
// force_sm90_narrow_tile, force_sm90_small_tile, force_sm80_wide_tile) for
// its lifetime.
class ForcedTile {
 public:
  using Force = std::optional<bool> (*)(std::optional<bool>);
  ForcedTile(Force force, bool take) : force_(force), previous_(force(take)) {}
  ~ForcedTile() { force_(previous_); }
  ForcedTile(const ForcedTile&) = delete;
  ForcedTile& operator=(const ForcedTile&) = delete;

 private:
  Force force_;
  std::optional<bool> previous_;
};

// The tall-tile choice forced for its lifetime.
class ForcedTallTile : public ForcedTile {
 public:
  explicit ForcedTallTile(bool tall) : ForcedTile(cuda_detail::force_sm90_tall_tile, tall) {}
};

// A suite whose tests run once per fused kernel, forced (the parameter);
// without a device they skip, and the sm90 runs skip where the device or the
// build has no sm90 kernel. Instantiate with ::testing::Values(CudaKernel::Sm80,
// CudaKernel::Sm90) and forced_kernel_name. The sm80 runs take that kernel's
// 128 x 128 tile wherever the blocks fit it (head dims up to 64), so its
// paths stay covered by small problems, whose ragged last key tile alone
// would send many of them to the 128 x 64 tile (sm80_wide_tile; that
// choice is tested on its own).
class ForcedKernelTest : public ::testing::TestWithParam<CudaKernel> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (GetParam() == CudaKernel::Sm90 && !cuda_sm90_kernel_available())
      GTEST_SKIP() << "the sm90 kernel needs a device of compute capability 9.0 and a build for it";
    forced_ = std::make_unique<ForcedKernel>(GetParam());
    if (GetParam() == CudaKernel::Sm80)
      sm80_wide_ = std::make_unique<ForcedTile>(cuda_detail::force_sm80_wide_tile, true);
  }
  void TearDown() override {
    sm80_wide_.reset();
    forced_.reset();
  }

 private:
  std::unique_ptr<ForcedKernel> forced_;
  std::unique_ptr<ForcedTile> sm80_wide_;
};

inline std::string forced_kernel_name(const ::testing::TestParamInfo<CudaKernel>& info) {
  return info.param == CudaKernel::Sm80 ? "sm80" : "sm90";
}

// A device buffer holding the same bytes (and strides) as a host tensor,
// optionally starting `front_elems` elements after the allocation's (256-byte
// aligned) start.
class DeviceTensor {
 public:
  explicit DeviceTensor(const HostTensor& host, int64_t front_elems = 0)
      : bytes_(host.bytes.size()), front_(static_cast<size_t>(front_elems) * dtype_size(host.view.dtype)) {
    cuda_ok(cudaMalloc(&base_, front_ + bytes_), "cudaMalloc");
    ptr_ = static_cast<unsigned char*>(base_) + front_;
    cuda_ok(cudaMemcpy(ptr_, host.bytes.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    view_ = host.view;
    view_.data = ptr_;
  }
  ~DeviceTensor() { cudaFree(base_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  const TensorView& view() const { return view_; }
  // All bytes 0xff: NaN in fp16, bf16 and fp32.
  void poison() { cuda_ok(cudaMemset(ptr_, 0xff, bytes_), "cudaMemset"); }
  void copy_to(HostTensor& host) const {
    cuda_ok(cudaMemcpy(host.bytes.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }

 private:
  void* base_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_, front_;
  TensorView view_;
};

struct GpuProblem {
  Pattern pattern = Pattern::dense();
  DType dtype = DType::BF16;
  DType out_dtype = DType::BF16;
  int64_t batch = 1, q_heads = 2, kv_heads = 2, q_len = 256, k_len = 256, head_dim = 64;
  int64_t block_q = 128, block_k = 128;
  Layout layout = Layout::BHLD;
  bool naive = false;
  // Inputs: q and k drawn N(0, amplitude^2), key j then scaled by
  // 1 + key_growth * j / k_len (scores that rise along a row), v N(0, 1).
  double amplitude = 1.0, key_growth = 0.0;
  // The output starts this many elements after a 16-byte boundary (the
  // kernels store rows that are not 16-byte aligned 4 bytes at a time).
  int64_t out_offset = 0;
  // Whether the call asks for the LSE (compared too when it does).
  bool with_lse = true;

  std::string describe() const {
    return std::string(dtype_name(dtype)) + " B" + std::to_string(batch) + " Hq" + std::to_string(q_heads) +
           " Hkv" + std::to_string(kv_heads) + " Lq" + std::to_string(q_len) + " Lk" + std::to_string(k_len) +
           " D" + std::to_string(head_dim) + " blocks " + std::to_string(block_q) + "x" +
           std::to_string(block_k) + (layout == Layout::BLHD ? " blhd" : " bhld") +
           (out_dtype == DType::F32 ? " out fp32" : "") +
           (out_offset != 0 ? " out +" + std::to_string(out_offset) : "") + (with_lse ? "" : " no lse") +
           (naive ? " naive" : "") + " " +
           pattern.describe();
  }
};

struct GpuErrors {
  double out = 0.0;  // ||out - ref|| / ||ref||
  double lse = 0.0;  // max |lse - ref| (inf if -inf disagrees)
};

// Relative-error bound of the output for an input dtype.
inline double out_tolerance(DType dtype) { return dtype == DType::BF16 ? 1e-2 : 3e-3; }
constexpr double kLseTolerance = 1e-2;

inline GpuErrors run_on_gpu(const GpuProblem& pr, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const BlockMask mask = BlockMask::build(
      pr.pattern, MaskShape{pr.q_len, pr.k_len, pr.block_q, pr.block_k, pr.q_heads});
  HostTensor q(pr.dtype, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor k(pr.dtype, pr.batch, pr.kv_heads, pr.k_len, pr.head_dim, pr.layout);
  HostTensor v(pr.dtype, pr.batch, pr.kv_heads, pr.k_len, pr.head_dim, pr.layout);
  q.fill_random(rng, pr.amplitude);
  k.fill_random(rng, pr.amplitude);
  v.fill_random(rng);
  if (pr.key_growth != 0.0)
    for (int64_t b = 0; b < pr.batch; ++b)
      for (int64_t h = 0; h < pr.kv_heads; ++h)
        for (int64_t j = 0; j < pr.k_len; ++j)
          for (int64_t d = 0; d < pr.head_dim; ++d)
            k.view.store(b, h, j, d, k.view.load(b, h, j, d) * (1.0 + pr.key_growth * j / pr.k_len));
  HostTensor out(pr.out_dtype, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor lse(DType::F32, pr.batch, pr.q_heads, pr.q_len, 1);
  out.poison();
  lse.poison();

  DeviceTensor dq(q), dk(k), dv(v), dout(out, pr.out_offset), dlse(lse);
  dout.poison();
  dlse.poison();
  const double scale = 1.0 / std::sqrt(static_cast<double>(pr.head_dim));
  const TensorView* lse_arg = pr.with_lse ? &dlse.view() : nullptr;
  if (pr.naive)
    cuda_naive_attention(dq.view(), dk.view(), dv.view(), dout.view(), mask, scale, lse_arg);
  else
    cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), mask, scale, lse_arg);
  cuda_ok(cudaDeviceSynchronize(), "attention kernel");
  dout.copy_to(out);
  dlse.copy_to(lse);

  HostTensor ref(DType::F64, pr.batch, pr.q_heads, pr.q_len, pr.head_dim, pr.layout);
  HostTensor ref_lse(DType::F64, pr.batch, pr.q_heads, pr.q_len, 1);
  reference_attention(q.view, k.view, v.view, ref.view, mask, scale, &ref_lse.view);
  return GpuErrors{relative_error(out.to_double(), ref.to_double()),
                   pr.with_lse ? max_lse_error(lse.to_double(), ref_lse.to_double()) : 0.0};
}

// Runs the problem and checks both bounds; the trace names the problem.
inline void expect_matches_reference(const GpuProblem& pr, uint64_t seed) {
  SCOPED_TRACE(pr.describe());
  const GpuErrors e = run_on_gpu(pr, seed);
  EXPECT_LT(e.out, out_tolerance(pr.dtype));
  EXPECT_LT(e.lse, kLseTolerance);
}

}  // namespace spattn::testing
