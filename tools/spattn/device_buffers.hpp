// tools/spattn/device_buffers.hpp - device copies of the tool's host tensors.
//
// The only place where the tool touches GPU memory: the CUDA backend takes
// device pointers, so `spattn run/bench --backend cuda` mirrors q, k, v and
// out here (same bytes, same strides), runs on the mirrors, and copies the
// output back for --check. In a build without CUDA, constructing a
// DeviceBuffers throws spattn::Error.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "host_tensor.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cli {

// The name of the current CUDA device, or "" in a build without CUDA.
std::string cuda_device_name();

class DeviceBuffers {
 public:
  // Allocates one device buffer per host tensor and copies the contents over.
  explicit DeviceBuffers(const std::vector<const HostTensor*>& tensors);
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  // The device view of tensor `n` (same dtype, shape and strides as the host one).
  TensorView view(size_t n) const;
  // Copies device tensor `n` back into `host` (which it was made from).
  void copy_to_host(size_t n, const HostTensor& host) const;
  // Waits for all work queued on the device.
  void synchronize() const;

 private:
  std::vector<void*> buffers_;
  std::vector<TensorView> views_;
};

}  // namespace spattn::cli
