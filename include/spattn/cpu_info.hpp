// spattn/cpu_info.hpp - the host CPU as the fast CPU backend sees it.
//
// cpu_info() names the CPU, the SIMD kernel the CPU backend runs and the
// relevant instruction-set extensions; measure_cpu_fma_peak_gflops() measures
// the machine's fp32 FMA throughput (the ceiling the backend is compared
// against in benchmarks).
#pragma once

#include <string>

namespace spattn {

struct CpuInfo {
  std::string model;     // "model name" of /proc/cpuinfo, or "unknown"
  std::string kernel;    // SIMD kernel of the CPU backend: "avx512", "avx2" or "portable"
  std::string features;  // detected extensions, e.g. "avx2 fma avx512f avx512bw avx512vl ..."
  int logical_cpus = 0;  // std::thread::hardware_concurrency()
  int threads = 0;       // OpenMP threads the backend will use (omp_get_max_threads())
};

CpuInfo cpu_info();

// Peak fp32 FMA rate of this machine in GFLOP/s (2 flops per lane per FMA),
// measured now with the widest supported vectors: each of `threads` OpenMP
// threads (0 = omp_get_max_threads()) runs independent FMA chains for about
// `seconds`; the best of three runs is returned.
double measure_cpu_fma_peak_gflops(int threads = 0, double seconds = 0.2);

}  // namespace spattn
