// python/csrc/device_object_cache.hpp - device selectors (objects that own
// device buffers: spattn::CudaDynamicAttention, the CUDA BlockSelector) made
// once per (selection configuration, shape, scale, device) and reused by the
// operators that run them.
//
// A cache keeps the most recently used objects and queues each call under its
// lock, so calls that share buffers are queued one after the other. Outside a
// CUDA graph capture, a call on another stream than the object's previous one
// first makes its stream wait for that one (an event, no host
// synchronisation); torch.cuda.graph captures on a stream of its own, so the
// stream is not part of the key. An object cannot be made inside a capture
// (its constructor allocates): that raises an error saying so.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/select.hpp"
#include "spattn/tensor.hpp"

namespace spattn::torch_bridge {

// Everything a device selector is made for; absent optionals are NaN.
struct SelectorKey {
  std::vector<int64_t> ints;
  std::vector<double> reals;

  bool operator==(const SelectorKey& o) const {
    if (ints != o.ints || reals.size() != o.reals.size()) return false;
    for (size_t n = 0; n < reals.size(); ++n)
      if (!(reals[n] == o.reals[n] || (std::isnan(reals[n]) && std::isnan(o.reals[n])))) return false;
    return true;
  }
};

inline SelectorKey selector_key(const SelectConfig& c, const TensorView& q, const TensorView& k, double scale,
                                int device) {
  SelectorKey key;
  key.ints = {c.block_q,      c.block_k,          c.topk.value_or(-1), c.min_blocks, c.max_blocks,
              c.sink_blocks,  c.local_blocks,     c.causal,            c.stride,     c.per_query_head,
              q.batch(),      q.heads(),          k.heads(),           q.seq_len(),  k.seq_len(),
              q.head_dim(),   device};
  key.reals = {c.tau.value_or(NAN), c.scale.value_or(NAN), scale};
  return key;
}

inline void check_stream_call(cudaError_t status, const char* what) {
  require(status == cudaSuccess, what, " failed: ", cudaGetErrorString(status));
}

template <typename Object>
class DeviceObjectCache {
 public:
  explicit DeviceObjectCache(const char* op_name) : op_name_(op_name) {}

  // Finds the object of `key` or makes it with make() (a unique_ptr), then
  // calls use(object) with the cache locked, ordered after the object's
  // previous call.
  template <typename Make, typename Use>
  void run(SelectorKey key, cudaStream_t stream, Make&& make, Use&& use) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_stream_call(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.begin();
    while (it != entries_.end() && !((*it)->key == key)) ++it;
    if (it != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, it);
    } else {
      require(!capturing, op_name_,
              " is called for the first time with this configuration and shape while a CUDA graph is being "
              "captured; run it once before the capture so its buffers exist");
      entries_.push_front(std::make_unique<Entry>(std::move(key), make(), stream));
      if (entries_.size() > kMaxEntries) entries_.pop_back();
    }
    Entry& entry = *entries_.front();
    if (!capturing && entry.last_stream != stream) {
      check_stream_call(cudaEventRecord(entry.done, entry.last_stream), "cudaEventRecord");
      check_stream_call(cudaStreamWaitEvent(stream, entry.done, 0), "cudaStreamWaitEvent");
    }
    entry.last_stream = stream;
    use(*entry.object);
  }

 private:
  static constexpr size_t kMaxEntries = 8;

  // One cached object, the stream of its latest call and an event to order
  // a call on another stream after it.
  struct Entry {
    SelectorKey key;
    std::unique_ptr<Object> object;
    cudaStream_t last_stream = nullptr;
    cudaEvent_t done = nullptr;

    Entry(SelectorKey k, std::unique_ptr<Object> o, cudaStream_t stream)
        : key(std::move(k)), object(std::move(o)), last_stream(stream) {
      check_stream_call(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    ~Entry() {
      if (done) cudaEventDestroy(done);  // errors at teardown are ignored on purpose
    }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
  };

  const char* op_name_;
  std::mutex mutex_;
  std::list<std::unique_ptr<Entry>> entries_;  // most recently used first
};

}  // namespace spattn::torch_bridge
