// plan/plan_cache.cpp - lookup and creation of a mask's cached plans and of
// its device copies (see plan_cache.hpp).
#include "plan/plan_cache.hpp"

namespace spattn::detail {

std::shared_ptr<const PlanState> PlanCache::find_or_make(const BlockMask& mask, const CallShape& shape,
                                                         const PlanOptions& options) {
  const uint64_t generation = plan_generation();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->generation != generation) {
      it = entries_.erase(it);
      continue;
    }
    if (it->shape == shape && it->backend == options.backend && it->device == options.device &&
        it->backward == options.backward) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().state;
    }
    ++it;
  }
  std::shared_ptr<const PlanState> state = make_plan_state(mask, shape, options);
  entries_.push_front(Entry{shape, options.backend, options.device, options.backward, generation, state});
  if (entries_.size() > kMaxPlans) entries_.pop_back();
  return state;
}

int64_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(entries_.size());
}

PlanCache::DeviceCopy PlanCache::device_copy(int device, const std::function<DeviceCopy()>& make) {
  std::lock_guard<std::mutex> lock(copies_mutex_);
  for (const auto& [on, copy] : device_copies_)
    if (on == device) return copy;
  device_copies_.emplace_back(device, make());
  return device_copies_.back().second;
}

void PlanCache::adopt_device_copy(int device, DeviceCopy copy) {
  std::lock_guard<std::mutex> lock(copies_mutex_);
  for (auto& [on, held] : device_copies_)
    if (on == device) {
      held = std::move(copy);
      return;
    }
  device_copies_.emplace_back(device, std::move(copy));
}

}  // namespace spattn::detail
