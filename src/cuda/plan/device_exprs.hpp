// cuda/plan/device_exprs.hpp - a Pattern's per-head expressions on the device.
//
// Pattern terms are plain structs whose table pointers (BigBird random blocks,
// custom CSR arrays, Longformer global tokens) point into host memory. This
// copies the tables to the current device, once per distinct host table, and
// then the expressions with every pointer rewritten to its device copy. The
// copies are queued on a stream; the memory lives as long as the object. Used
// by the mask's device copy (device_mask_copy.cpp) and the device mask builder
// (device_mask_build.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "spattn/pattern.hpp"

namespace spattn::cuda_detail {

class DeviceExprs {
 public:
  // Queues the copies on `stream`; the host pattern may change or go away once
  // this returns (the sources are staged before the call returns).
  DeviceExprs(const Pattern& pattern, cudaStream_t stream);
  ~DeviceExprs();
  DeviceExprs(const DeviceExprs&) = delete;
  DeviceExprs& operator=(const DeviceExprs&) = delete;

  const PatternExpr* exprs() const { return exprs_; }  // num_exprs() entries
  int64_t num_exprs() const { return num_exprs_; }

 private:
  const void* copy(const void* host, size_t bytes, cudaStream_t stream);

  std::vector<void*> allocations_;
  const PatternExpr* exprs_ = nullptr;
  int64_t num_exprs_ = 0;
};

}  // namespace spattn::cuda_detail
