// dist/cp_tensor_ops.hpp - the elementwise steps of context-parallel
// attention around its attention calls: packing rows into messages, merging
// partial results by their LSE, summing gradients, on host or device memory
// (each function runs where its tensors' data lie: queued on `stream` for
// device memory, at once on the host). Shapes must be equal; strides are free.
#pragma once

#include <cstdint>
#include <memory>

#include "spattn/tensor.hpp"

namespace spattn::dist::detail {

// Whether `p` points to device memory (false in builds without CUDA).
bool on_device(const void* p);

// An owned, uninitialised buffer of `bytes` bytes, on the device when
// `device` (the current one), else on the host.
std::shared_ptr<void> allocate(int64_t bytes, bool device);

// `bytes` bytes from src to dst (either may be device memory), finished on return.
void copy_bytes(void* dst, const void* src, int64_t bytes);

// Blocks the host until the work queued on `stream` is done (nothing on the host).
void synchronize(void* stream, bool device);

// The calling thread's current CUDA device (-1 in builds without CUDA or on
// machines without a device), and making `device` current for the calling
// thread (nothing for -1).
int current_device();
void use_device(int device);

// dst = src, converted to dst's element type.
void convert(const TensorView& dst, const TensorView& src, void* stream);
// Every element of t = value.
void fill(const TensorView& t, double value, void* stream);
// acc += part; acc is fp32.
void add_into(const TensorView& acc, const TensorView& part, void* stream);
// The rows of (acc_out, acc_lse) and (part_out, part_lse), results of the same
// query rows over disjoint key sets, merged into acc: lse = log(e^acc_lse +
// e^part_lse), out = e^(acc_lse - lse) acc_out + e^(part_lse - lse) part_out.
// A side whose LSE is -inf weighs 0; a NaN LSE makes the row NaN. All fp32;
// the LSE views are (B, H, L, 1).
void merge_into(const TensorView& acc_out, const TensorView& acc_lse, const TensorView& part_out,
                const TensorView& part_lse, void* stream);

// The same on the device (cp_tensor_ops.cu; CUDA builds).
void device_convert(const TensorView& dst, const TensorView& src, void* stream);
void device_fill(const TensorView& t, double value, void* stream);
void device_add_into(const TensorView& acc, const TensorView& part, void* stream);
void device_merge_into(const TensorView& acc_out, const TensorView& acc_lse, const TensorView& part_out,
                       const TensorView& part_lse, void* stream);
std::shared_ptr<void> device_allocate(int64_t bytes);
void device_copy_bytes(void* dst, const void* src, int64_t bytes);
void device_synchronize(void* stream);
int device_current();
void device_use(int device);

}  // namespace spattn::dist::detail
