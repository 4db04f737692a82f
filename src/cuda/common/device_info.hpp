// cuda/common/device_info.hpp - what a launch needs to know about the current
// device (its compute capability, SM count, L2 size) and the dynamic
// shared-memory limit of a kernel, each asked of the runtime once per device
// instead of at every launch. Like the mask plans cached on the device, these
// do not survive a cudaDeviceReset.
#pragma once

namespace spattn::cuda_detail {

struct DeviceInfo {
  int major = 0, minor = 0;  // compute capability
  int sms = 0;               // multiprocessors
  int l2_bytes = 0;  // L2 cache size
};

// The current device's facts, queried on its first use and kept.
const DeviceInfo& current_device_info();

// Raises `kernel`'s dynamic shared-memory limit to `bytes` on the current
// device the first time it is asked there (the attribute stays set); `what`
// names the kernel in the error.
void allow_dynamic_smem(const void* kernel, int bytes, const char* what);

}  // namespace spattn::cuda_detail
