// tools/spattn/device_buffers.cpp - device copies of host tensors through the
// CUDA runtime (see device_buffers.hpp). Without SPATTN_HAVE_CUDA the class
// exists but refuses to be constructed.
#include "device_buffers.hpp"

#include "spattn/error.hpp"

#if defined(SPATTN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace spattn::cli {

#if defined(SPATTN_HAVE_CUDA)

namespace {
void check_cuda(cudaError_t status, const char* what) {
  require(status == cudaSuccess, what, " failed: ", cudaGetErrorString(status));
}
}  // namespace

DeviceBuffers::DeviceBuffers(const std::vector<const HostTensor*>& tensors) {
  try {
    for (const HostTensor* host : tensors) {
      void* device = nullptr;
      check_cuda(cudaMalloc(&device, static_cast<size_t>(host->bytes())), "cudaMalloc");
      buffers_.push_back(device);
      TensorView v = host->view();
      v.data = device;
      views_.push_back(v);
      check_cuda(cudaMemcpy(device, host->view().data, static_cast<size_t>(host->bytes()),
                            cudaMemcpyHostToDevice),
                 "cudaMemcpy host->device");
    }
  } catch (...) {
    for (void* p : buffers_) cudaFree(p);
    throw;
  }
}

DeviceBuffers::~DeviceBuffers() {
  for (void* p : buffers_) cudaFree(p);
}

void DeviceBuffers::copy_to_host(size_t n, const HostTensor& host) const {
  check_cuda(cudaMemcpy(host.view().data, buffers_.at(n), static_cast<size_t>(host.bytes()),
                        cudaMemcpyDeviceToHost),
             "cudaMemcpy device->host");
}

void DeviceBuffers::synchronize() const { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp props;
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&props, device) != cudaSuccess)
    return "";
  return props.name;
}

#else

DeviceBuffers::DeviceBuffers(const std::vector<const HostTensor*>&) {
  fail("backend cuda: this spattn was built without CUDA");
}

DeviceBuffers::~DeviceBuffers() = default;

void DeviceBuffers::copy_to_host(size_t, const HostTensor&) const {}

void DeviceBuffers::synchronize() const {}

std::string cuda_device_name() { return ""; }

#endif

TensorView DeviceBuffers::view(size_t n) const { return views_.at(n); }

}  // namespace spattn::cli
