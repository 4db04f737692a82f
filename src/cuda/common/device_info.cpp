// cuda/common/device_info.cpp - the per-device caches of device_info.hpp,
// guarded by one mutex (a launch takes it briefly; the runtime is asked only
// on a device's first launch).
#include "cuda/common/device_info.hpp"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/common/cuda_check.hpp"

namespace spattn::cuda_detail {
namespace {

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}

int current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

}  // namespace

const DeviceInfo& current_device_info() {
  static std::map<int, DeviceInfo> infos;  // node-based: references stay valid
  const int device = current_device();
  std::lock_guard<std::mutex> lock(cache_mutex());
  const auto found = infos.find(device);
  if (found != infos.end()) return found->second;
  DeviceInfo info;
  check_cuda(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute(compute capability major)");
  check_cuda(cudaDeviceGetAttribute(&info.minor, cudaDevAttrComputeCapabilityMinor, device),
             "cudaDeviceGetAttribute(compute capability minor)");
  check_cuda(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute(multiprocessor count)");
  check_cuda(cudaDeviceGetAttribute(&info.l2_bytes, cudaDevAttrL2CacheSize, device),
             "cudaDeviceGetAttribute(L2 cache size)");
  return infos.emplace(device, info).first->second;
}

void allow_dynamic_smem(const void* kernel, int bytes, const char* what) {
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device) -> bytes
  const int device = current_device();
  std::lock_guard<std::mutex> lock(cache_mutex());
  int& set = allowed[{kernel, device}];
  if (set >= bytes) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             (std::string("cudaFuncSetAttribute(") + what + " shared memory)").c_str());
  set = bytes;
}

}  // namespace spattn::cuda_detail
