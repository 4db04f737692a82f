// bench/mask_build_bench.cpp - how long a static plan takes to exist on the
// GPU: built on the device (cuda_build_mask's builder) against built on the
// host (BlockMask::build) and then uploaded.
//
//   spattn_mask_build_bench [--seqs 131072,1048576] [--heads 1] [--block 128]
//                           [--repeats 50] [--cases dense,causal,...]
//
// Per case and length it prints one JSON object (and a table row):
//   host_build_ms   BlockMask::build, median of a few runs (wall clock);
//   upload_ms       the first-use copy of that mask to the device (one run);
//   device_build_ms the device builder (count, scan, wait for the block
//                   count, allocate, fill), CUDA events, median of --repeats
//                   after 3 warm-ups; the pattern's tables are already on the
//                   device (uploaded once per pattern, not per plan);
//   api_ms          cuda_build_mask as a user calls it: table upload, device
//                   build and the copy of the arrays back to the host mirror
//                   (wall clock, median);
//   match           whether the device arrays equal the host ones.
// Cases (Lq = Lk = seq, bottom-right aligned): dense, causal, window (4096),
// streaming (128 + 4096), block-diagonal (4096), strided (4096), fixed
// (4096, 128), dilated (segments 2048,8192, rates 4,16), bigbird (block 128,
// 3/1/3, seed 0), longformer (window 4096, 8 global tokens),
// dilated+window (dilated 2048/4 causal + window 512), random (1% of the
// 128-blocks, seeded, as a custom mask).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "cuda/plan/device_mask_build.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "spattn/cuda.hpp"
#include "spattn/spattn.hpp"

namespace spattn::bench {
namespace {

struct Options {
  std::vector<int64_t> seqs = {131072, 1048576};
  std::vector<std::string> cases = {"dense",   "causal", "window",  "streaming",  "block-diagonal", "strided",
                                    "fixed",   "dilated", "bigbird", "longformer", "dilated+window", "random"};
  int64_t heads = 1, block = 128, repeats = 50;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int n = 1; n < argc; ++n) {
    const std::string flag = argv[n];
    require(n + 1 < argc, flag, " needs a value");
    const std::string value = argv[++n];
    if (flag == "--cases") o.cases = split(value);
    else if (flag == "--seqs") {
      o.seqs.clear();
      for (const std::string& s : split(value)) o.seqs.push_back(std::stoll(s));
    } else if (flag == "--heads") o.heads = std::stoll(value);
    else if (flag == "--block") o.block = std::stoll(value);
    else if (flag == "--repeats") o.repeats = std::max<int64_t>(1, std::stoll(value));
    else fail("unknown flag ", flag);
  }
  return o;
}

// 1% of the blocks of an n x n grid (seeded), as CSR rows for a custom mask.
Pattern random_custom(int64_t n, int64_t block) {
  std::mt19937_64 rng(0);
  std::bernoulli_distribution keep(0.01);
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < n; ++c)
      if (keep(rng)) indices.push_back(static_cast<int32_t>(c));
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  return Pattern::custom_bsr(offsets, indices, 1, n, n, block, block);
}

Pattern make_pattern(const std::string& name, int64_t seq, int64_t block) {
  if (name == "dense") return Pattern::dense();
  if (name == "causal") return Pattern::causal();
  if (name == "window") return Pattern::sliding_window(4096);
  if (name == "streaming") return Pattern::streaming(128, 4096);
  if (name == "block-diagonal") return Pattern::block_diagonal(4096);
  if (name == "strided") return Pattern::strided(4096);
  if (name == "fixed") return Pattern::fixed(4096, 128);
  if (name == "dilated") return Pattern::dilated({2048, 8192}, {4, 16});
  if (name == "bigbird") return Pattern::bigbird(seq, block, 3, 1, 3, 0);
  if (name == "longformer") return Pattern::longformer(4096, {0, 1, 2, 3, 4, 5, 6, 7});
  if (name == "dilated+window")
    return Pattern::unite(Pattern::dilated({2048}, {4}, true), Pattern::sliding_window(512));
  if (name == "random") return random_custom((seq + block - 1) / block, block);
  fail("unknown case '", name, "'");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median wall time of fn over up to `repeats` runs after one warm-up, fewer
// when they would take more than ~2 s.
double wall_median_ms(const std::function<void()>& fn, int64_t repeats) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  const double warm = seconds_since(t0);
  const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(repeats, static_cast<int64_t>(2.0 / (warm + 1e-9))));
  std::vector<double> ms;
  for (int64_t n = 0; n < runs; ++n) {
    t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(seconds_since(t0) * 1e3);
  }
  return median(ms);
}

void run(const Options& o) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# device %s, heads %lld, block %lld\n", prop.name, static_cast<long long>(o.heads),
              static_cast<long long>(o.block));
  std::printf("# %-15s %8s %12s %10s %10s %10s %8s %12s %6s\n", "case", "L", "host build", "upload",
              "device", "api", "speedup", "blocks", "match");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  EventTimer timer;
  for (const int64_t seq : o.seqs)
    for (const std::string& name : o.cases) {
      const Pattern pattern = make_pattern(name, seq, o.block);
      const MaskShape shape{seq, seq, o.block, o.block, o.heads};

      BlockMask host;
      const double host_ms = wall_median_ms([&] { host = BlockMask::build(pattern, shape); }, 5);
      auto t0 = std::chrono::steady_clock::now();
      cuda_detail::DeviceMaskCopy(host, nullptr);
      const double upload_ms = seconds_since(t0) * 1e3;

      const cuda_detail::DeviceExprs exprs(pattern, stream);
      std::vector<double> device_ms;
      std::unique_ptr<cuda_detail::DeviceMaskArrays> arrays;
      for (int64_t n = -3; n < o.repeats; ++n) {
        arrays.reset();
        const float ms =
            timer.time_ms(stream, [&] { arrays = cuda_detail::build_mask_on_device(pattern, shape, exprs, stream); });
        if (n >= 0) device_ms.push_back(ms);
      }
      arrays.reset();
      BlockMask built;
      const double api_ms = wall_median_ms([&] { built = cuda_build_mask(pattern, shape, stream); }, o.repeats);
      const bool match = built.row_offsets() == host.row_offsets() && built.kv_indices() == host.kv_indices() &&
                         built.kv_full() == host.kv_full();
      const double dev = median(device_ms);
      std::printf("  %-15s %8lld %9.3f ms %7.3f ms %7.3f ms %7.3f ms %7.0fx %12lld %6s\n", name.c_str(),
                  static_cast<long long>(seq), host_ms, upload_ms, dev, api_ms, (host_ms + upload_ms) / dev,
                  static_cast<long long>(host.num_blocks()), match ? "yes" : "NO");
      std::printf(
          "{\"case\": \"%s\", \"describe\": \"%s\", \"seq\": %lld, \"heads\": %lld, \"mask_heads\": %lld, "
          "\"block\": %lld, \"device\": \"%s\", \"blocks_kept\": %lld, \"host_build_ms\": %.4f, "
          "\"upload_ms\": %.4f, \"device_build_ms\": %.4f, \"device_samples\": %zu, \"api_ms\": %.4f, "
          "\"match\": %s}\n",
          name.c_str(), pattern.describe().c_str(), static_cast<long long>(seq), static_cast<long long>(o.heads),
          static_cast<long long>(host.num_heads()), static_cast<long long>(o.block), prop.name,
          static_cast<long long>(host.num_blocks()), host_ms, upload_ms, dev, device_ms.size(), api_ms,
          match ? "true" : "false");
      std::fflush(stdout);
    }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace spattn::bench

int main(int argc, char** argv) {
  return spattn::bench::run_program("spattn_mask_build_bench",
                                    [&] { spattn::bench::run(spattn::bench::parse(argc, argv)); });
}
