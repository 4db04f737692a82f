// python/csrc/mask_registry.cpp - the decoded masks of the operators (see
// mask_registry.hpp).
#include "mask_registry.hpp"

#include <list>
#include <mutex>
#include <utility>

#include "packed_mask.hpp"
#include "spattn/pattern.hpp"

namespace spattn::torch_bridge {
namespace {

constexpr int64_t kDenseBlock = 128;

struct Entry {
  const void* tensor = nullptr;  // null: a dense mask of `lengths`
  int64_t version = 0;
  std::pair<int64_t, int64_t> lengths;
  at::Tensor keep_alive;
  std::shared_ptr<const BlockMask> mask;
};

// Inference tensors keep no version counter; they cannot change outside inference mode.
int64_t version_of(const at::Tensor& t) { return t.is_inference() ? -1 : static_cast<int64_t>(t._version()); }

class Registry {
 public:
  std::shared_ptr<const BlockMask> find_or_make(const std::optional<at::Tensor>& packed, int64_t q_len,
                                                int64_t k_len, const std::function<void()>& before_copy) {
    const void* tensor = packed ? packed->unsafeGetTensorImpl() : nullptr;
    const int64_t version = packed ? version_of(*packed) : 0;
    const std::pair<int64_t, int64_t> lengths = packed ? std::make_pair(int64_t{0}, int64_t{0})
                                                       : std::make_pair(q_len, k_len);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->tensor == tensor && it->version == version && it->lengths == lengths) {
        entries_.splice(entries_.begin(), entries_, it);
        return it->mask;
      }
    std::shared_ptr<const BlockMask> mask;
    if (packed) {
      if (!packed->device().is_cpu() && before_copy) before_copy();
      mask = std::make_shared<const BlockMask>(unpack_mask(packed->cpu()));
    } else {
      mask = std::make_shared<const BlockMask>(
          BlockMask::build(Pattern::dense(), MaskShape{q_len, k_len, kDenseBlock, kDenseBlock, 1}));
    }
    entries_.push_front(Entry{tensor, version, lengths, packed ? *packed : at::Tensor(), mask});
    if (entries_.size() > kMaxMasks) entries_.pop_back();
    return mask;
  }

 private:
  std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::shared_ptr<const BlockMask> registered_mask(const std::optional<at::Tensor>& packed, int64_t q_len,
                                                 int64_t k_len, const std::function<void()>& before_copy) {
  return registry().find_or_make(packed, q_len, k_len, before_copy);
}

}  // namespace spattn::torch_bridge
