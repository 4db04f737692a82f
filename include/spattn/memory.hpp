// spattn/memory.hpp - memory guards: what a call will allocate, checked
// against what the machine has, before anything is allocated.
//
// Every entry point that allocates in proportion to its arguments (mask
// building, pattern tables, the CLI's inputs, pictures and reference buffers)
// adds its items to a MemoryEstimate and calls check() first, so a request too
// large for the machine is refused at once with a message naming the request,
// the bytes it needs and the bytes available, instead of being killed by the
// kernel or failing minutes later. Sizes saturate at INT64_MAX: a size that
// overflows 64 bits is simply more than any machine has.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spattn {

// Bytes that can still be allocated: MemAvailable from /proc/meminfo (else
// sysconf's available physical pages), lowered to the address space left
// under RLIMIT_AS and RLIMIT_DATA when those are set (ulimit -v).
int64_t available_memory_bytes();

// What one request may take of `available`: kUsablePercent of it.
constexpr int64_t kUsablePercent = 80;
int64_t usable_memory_bytes(int64_t available);

// count * element_bytes, or INT64_MAX when that overflows; negative counts give 0.
int64_t bytes_for(int64_t count, int64_t element_bytes);
// a + b, or INT64_MAX when that overflows.
int64_t add_bytes(int64_t a, int64_t b);

// "21.8 GiB", "512 MiB", "4.00 KiB", "12 bytes"; "more than 8 EiB" for INT64_MAX.
std::string format_bytes(int64_t bytes);

class MemoryEstimate {
 public:
  // `request` names what was asked for in the caller's own terms, e.g.
  // "--seq 100000000000" or "BlockMask::build(q_len=..., block_q=...)".
  explicit MemoryEstimate(std::string request) : request_(std::move(request)) {}

  // Adds `bytes` for `item` (e.g. "q, k, v and out").
  MemoryEstimate& add(const std::string& item, int64_t bytes);
  int64_t total() const { return total_; }

  // Throws spattn::Error unless total() <= usable_memory_bytes(available_memory_bytes()): "<request>
  // needs N bytes (X GiB: item a, item b, ...) but only M bytes (Y GiB) of
  // memory are available".
  void check() const;
  // The same against `available` bytes of another memory, named `memory`
  // (the CUDA backend's: "device memory", the free memory of the GPU).
  void check(int64_t available, const std::string& memory) const;

 private:
  std::string request_;
  std::vector<std::pair<std::string, int64_t>> items_;
  int64_t total_ = 0;
};

}  // namespace spattn
