// kv_stage.cpp - staging of a work item's keys and values (see kv_stage.hpp).
#include "cpu/fast/kv_stage.hpp"

#include <algorithm>
#include <atomic>

#include "cpu/fast/element_access.hpp"

namespace spattn::cpu_fast {
namespace {

std::atomic<int64_t> whole_head_floats{kWholeHeadFloats};

bool fits_whole_head(int64_t seq_len, int64_t head_dim) { return seq_len * head_dim <= whole_head_limit(); }

int64_t capacity(int64_t seq_len, int64_t head_dim, int64_t max_item_keys) {
  return fits_whole_head(seq_len, head_dim) ? seq_len : std::min(seq_len, kSpanSlack * max_item_keys);
}

}  // namespace

int64_t whole_head_limit() { return whole_head_floats.load(); }
void set_whole_head_limit(int64_t floats) { whole_head_floats.store(floats); }

StagedKv::StagedKv(const TensorView& k, int64_t max_item_keys, int64_t max_chunks)
    : whole_head_(fits_whole_head(k.seq_len(), k.head_dim())),
      stage_keys_(!(k.dtype == DType::F32 && k.stride[3] == 1)),
      keys_(stage_keys_ ? capacity(k.seq_len(), k.head_dim(), max_item_keys) * k.head_dim() : 0),
      values_(capacity(k.seq_len(), k.head_dim(), max_item_keys) * k.head_dim()),
      row_buffer_(static_cast<size_t>(k.head_dim())) {
  if (whole_head_)
    granule_staged_.resize(static_cast<size_t>((k.seq_len() + kGranuleKeys - 1) / kGranuleKeys));
  runs_.reserve(static_cast<size_t>(max_chunks));
}

const float* StagedKv::key_rows(const TensorView& k, int64_t b, int64_t h) const {
  return stage_keys_ ? keys_.data() : static_cast<const float*>(k.data) + k.offset(b, h, 0, 0);
}

int64_t StagedKv::key_row_stride(const TensorView& k) const {
  return stage_keys_ ? k.head_dim() : k.stride[2];
}

void StagedKv::prepare(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                       const std::vector<std::pair<int64_t, int64_t>>& panels,
                       std::vector<KeyChunk>& chunks) {
  if (whole_head_)
    prepare_whole_head(k, v, b, h, panels, chunks);
  else
    prepare_item(k, v, b, h, panels, chunks);
}

void StagedKv::prepare_whole_head(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                                  const std::vector<std::pair<int64_t, int64_t>>& panels,
                                  std::vector<KeyChunk>& chunks) {
  const int64_t L = k.seq_len();
  if (b != batch_ || h != head_) {
    std::fill(granule_staged_.begin(), granule_staged_.end(), uint8_t{0});
    batch_ = b;
    head_ = h;
    count_ = L;
  }
  for (KeyChunk& chunk : chunks) {
    chunk.staged = chunk.first;
    for (int64_t g = chunk.first / kGranuleKeys; g <= (chunk.first + chunk.count - 1) / kGranuleKeys; ++g) {
      if (granule_staged_[static_cast<size_t>(g)]) continue;
      granule_staged_[static_cast<size_t>(g)] = 1;
      copy_keys(k, v, b, h, panels, g * kGranuleKeys, std::min(L, (g + 1) * kGranuleKeys), g * kGranuleKeys);
    }
  }
}

// Points every chunk at the staged rows holding its keys; false when some
// chunk's keys are not all in one staged run.
bool StagedKv::map_onto_runs(std::vector<KeyChunk>& chunks) const {
  size_t at = 0;
  for (KeyChunk& chunk : chunks) {
    while (at < runs_.size() && runs_[at].last <= chunk.first) ++at;
    if (at == runs_.size() || runs_[at].first > chunk.first || runs_[at].last < chunk.first + chunk.count)
      return false;
    chunk.staged = runs_[at].staged + (chunk.first - runs_[at].first);
  }
  return true;
}

void StagedKv::prepare_item(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                            const std::vector<std::pair<int64_t, int64_t>>& panels,
                            std::vector<KeyChunk>& chunks) {
  if (b == batch_ && h == head_ && map_onto_runs(chunks)) return;
  batch_ = b;
  head_ = h;
  runs_.clear();
  count_ = 0;
  if (chunks.empty()) return;
  int64_t keys_needed = 0;
  for (const KeyChunk& chunk : chunks) keys_needed += chunk.count;
  const int64_t span_first = chunks.front().first;
  const int64_t span = chunks.back().first + chunks.back().count - span_first;
  if (span <= kSpanSlack * keys_needed) {
    runs_.push_back(Run{span_first, span_first + span, 0});
    count_ = span;
  } else {
    for (const KeyChunk& chunk : chunks) {
      if (!runs_.empty() && runs_.back().last == chunk.first)
        runs_.back().last += chunk.count;
      else
        runs_.push_back(Run{chunk.first, chunk.first + chunk.count, count_});
      count_ += chunk.count;
    }
  }
  map_onto_runs(chunks);
  for (const Run& run : runs_) copy_keys(k, v, b, h, panels, run.first, run.last, run.staged);
}

void StagedKv::copy_keys(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                         const std::vector<std::pair<int64_t, int64_t>>& panels, int64_t first,
                         int64_t last, int64_t staged) {
  const int64_t D = k.head_dim();
  float* keys = keys_.data();
  float* values = values_.data();
  with_loader(k, [&](auto load_k) {
    with_loader(v, [&](auto load_v) {
      for (int64_t key = first; key < last; ++key) {
        const int64_t s = staged + (key - first);
        if (stage_keys_) {
          const float* k_row = row_as_float(k, load_k, b, h, key, row_buffer_.data());
          float* k_out = keys + s * D;
          for (int64_t d = 0; d < D; ++d) k_out[d] = k_row[d];
        }
        const float* v_row = row_as_float(v, load_v, b, h, key, row_buffer_.data());
        for (const auto& [d0, w] : panels) {
          float* v_out = values + d0 * count_ + s * w;
          for (int64_t r = 0; r < w; ++r) v_out[r] = v_row[d0 + r];
        }
      }
    });
  });
}

}  // namespace spattn::cpu_fast
