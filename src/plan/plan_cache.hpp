// plan/plan_cache.hpp - the plans a BlockMask keeps for the calls that pass
// the mask without a plan (attention(q, k, v, out, mask)), and the mask's
// copies on CUDA devices, which every plan of the mask on a device shares.
//
// One cache per mask, shared by its copies (BlockMask::plan_cache). A lookup
// is a short scan under a mutex; a miss makes the plan (make_plan_state)
// while holding it. At most kMaxPlans plans are kept, the least recently used
// one dropped first (a Plan the caller holds stays valid). Plans made before
// a change of a process-wide choice (plan_generation) are made again.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "plan/plan_state.hpp"

namespace spattn {
namespace cuda_detail {
class DeviceMaskCopy;
}

namespace detail {

class PlanCache {
 public:
  static constexpr size_t kMaxPlans = 16;

  // The plan of `shape` with `options` (backend already resolved) for `mask`,
  // whose cache this is; made on first use.
  std::shared_ptr<const PlanState> find_or_make(const BlockMask& mask, const CallShape& shape,
                                                const PlanOptions& options);
  // Plans held now.
  int64_t size() const;

  using DeviceCopy = std::shared_ptr<const cuda_detail::DeviceMaskCopy>;
  // The mask's copy on CUDA device `device`, made by `make` on first use.
  DeviceCopy device_copy(int device, const std::function<DeviceCopy()>& make);
  // Makes `copy` (arrays built on the device) the mask's copy on `device`.
  void adopt_device_copy(int device, DeviceCopy copy);

 private:
  struct Entry {
    CallShape shape;
    Backend backend;
    int device;
    bool backward;
    uint64_t generation;
    std::shared_ptr<const PlanState> state;
  };
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::mutex copies_mutex_;
  std::vector<std::pair<int, DeviceCopy>> device_copies_;
};

}  // namespace detail
}  // namespace spattn
