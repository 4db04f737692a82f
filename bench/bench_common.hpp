// bench/bench_common.hpp - what the benchmark programs share: CUDA status
// checks, comma-separated option lists, CUDA-event timing of one call, and the
// error report of main.
#pragma once

#include <cuda_runtime_api.h>

#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "spattn/spattn.hpp"

namespace spattn::bench {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(what, ": ", cudaGetErrorString(status));
}

// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

// A pair of CUDA events that time the device work one call enqueues on a stream.
class EventTimer {
 public:
  EventTimer() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Milliseconds between events recorded on `stream` before and after fn().
  template <typename Fn>
  float time_ms(cudaStream_t stream, Fn&& fn) {
    check(cudaEventRecord(start_, stream), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop_, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Runs the body of main: an exception is reported as "<program>: error: <what>"
// and gives exit status 2.
template <typename Body>
int run_program(const char* program, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace spattn::bench
