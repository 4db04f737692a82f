// cuda/common/work_units.cpp - the unit order of a launch (work_units.hpp):
// the device's L2 against the launch's K and V, or the order a test forced.
#include "cuda/common/work_units.hpp"

#include <atomic>

namespace spattn::cuda_detail {
namespace {

// The forced order as its enumerator's value, or -1 for none.
std::atomic<int32_t> forced_order{-1};

}  // namespace

UnitOrder launch_unit_order(const FwdParams& p, const DeviceInfo& device, int64_t resident_ctas, int64_t head_dim,
                            int64_t element_bytes) {
  const int32_t forced = forced_order.load(std::memory_order_relaxed);
  if (forced >= 0) {  // a plan without bands (items built on the device) runs copy-major in one
    const auto order = static_cast<UnitOrder>(forced);
    return order == UnitOrder::kCopyMajorBanded && p.plan.band_first == nullptr ? UnitOrder::kCopyMajor : order;
  }
  return choose_unit_order(p.plan, launch_copies(p), resident_ctas, kv_bytes_read(p, head_dim, element_bytes),
                           device.l2_bytes);
}

std::optional<UnitOrder> force_unit_order(std::optional<UnitOrder> order) {
  const int32_t before = forced_order.exchange(order ? static_cast<int32_t>(*order) : -1, std::memory_order_relaxed);
  return before >= 0 ? std::optional<UnitOrder>(static_cast<UnitOrder>(before)) : std::nullopt;
}

}  // namespace spattn::cuda_detail
