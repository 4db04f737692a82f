// fma_peak.cpp - CPU description and the measured fp32 FMA peak.
//
// The peak runs the active kernel's FMA loop (24 independent chains on
// AVX-512, enough to cover FMA latency on two FMA ports) on every thread at
// once, calibrated to last about the requested time, best of three.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "cpu/fast/isa.hpp"
#include "spattn/cpu_info.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string("unknown") : line.substr(start);
  }
  return "unknown";
}

std::string cpu_features() {
  std::string names;
#if defined(SPATTN_CPU_X86)
  const auto add = [&names](bool present, const char* name) {
    if (!present) return;
    if (!names.empty()) names += ' ';
    names += name;
  };
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512dq"), "avx512dq");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  add(__builtin_cpu_supports("avx512fp16"), "avx512fp16");
  add(__builtin_cpu_supports("amx-bf16"), "amx-bf16");
#endif
  return names.empty() ? std::string("none") : names;
}

// Seconds for every thread to run `iterations` of the FMA loop at once.
double timed_run(const cpu_fast::TileKernel& kernel, int threads, int64_t iterations) {
  const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  kernel.fma_loop(iterations);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo info;
  info.model = cpu_model_name();
  info.kernel = cpu_fast::cpu_isa_name(cpu_fast::active_cpu_isa());
  info.features = cpu_features();
  info.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  info.threads = omp_get_max_threads();
  return info;
}

double measure_cpu_fma_peak_gflops(int threads, double seconds) {
  require(threads >= 0, "threads must be >= 0, got ", threads);
  require(seconds > 0.0 && seconds <= 60.0, "seconds must be in (0, 60], got ", seconds);
  if (threads == 0) threads = omp_get_max_threads();
  const cpu_fast::TileKernel& kernel = cpu_fast::tile_kernel(cpu_fast::active_cpu_isa());
  const double flops_per_iteration = kernel.fma_loop(1);
  int64_t iterations = 1 << 16;
  double elapsed = timed_run(kernel, threads, iterations);
  while (elapsed < seconds / 8) {
    iterations *= 4;
    elapsed = timed_run(kernel, threads, iterations);
  }
  iterations = static_cast<int64_t>(static_cast<double>(iterations) * seconds / elapsed) + 1;
  double best = 0.0;
  for (int run = 0; run < 3; ++run) {
    elapsed = timed_run(kernel, threads, iterations);
    best = std::max(best, flops_per_iteration * static_cast<double>(iterations) * threads / elapsed);
  }
  return best / 1e9;
}

}  // namespace spattn
