// kv_stage.hpp - keys and values of a work item, staged for the kernels.
//
// Before a work item runs, the values of its key chunks are copied as fp32
// (any input dtype and strides, BHLD or BLHD) into per-thread buffers in
// panels of head dims (value_panels()), so each P.V register tile reads one
// sequential stream. Keys are read in place when they are fp32 rows with unit
// head-dim stride, else staged as contiguous fp32 rows beside the values.
// Items are ordered per kv head (work_plan.hpp), and what a thread staged is
// kept for its next item of the same (batch, kv head):
//  - whole-head mode, when a head's keys and values fit whole_head_limit()
//    floats per buffer: staged row = key index; keys are staged in granules of
//    kGranuleKeys on first use, so every key of a head is copied at most
//    once per thread, whatever the pattern;
//  - item mode, for longer heads: an item stages the span from its first to
//    its last key when that is at most kSpanSlack times the keys it visits
//    (windows), else only its chunks, in key order; the next item reuses the
//    staging when all its keys lie in it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cpu/fast/kernel_args.hpp"
#include "cpu/fast/tile_io.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cpu_fast {

constexpr int64_t kWholeHeadFloats = int64_t{8} << 20;  // 32 MiB of keys (and of values)
constexpr int64_t kGranuleKeys = 64;
constexpr int64_t kSpanSlack = 4;

// The largest head (keys x head_dim floats) staged whole: kWholeHeadFloats
// unless changed (tests lower it to cover item mode on small inputs).
int64_t whole_head_limit();
void set_whole_head_limit(int64_t floats);

class StagedKv {
 public:
  // For k and v (seq_len x head_dim per head); items visit at most
  // max_item_keys keys in at most max_chunks chunks.
  StagedKv(const TensorView& k, int64_t max_item_keys, int64_t max_chunks);

  // Sets chunk.staged for every chunk of an item of (batch b, kv head h),
  // staging the keys and values it needs that are not staged already.
  void prepare(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
               const std::vector<std::pair<int64_t, int64_t>>& panels, std::vector<KeyChunk>& chunks);

  // Key rows for TileGroupArgs: the input's own rows when it is fp32 with unit
  // head-dim stride (indexed by key), else the staged copy (by staged row).
  bool keys_by_index() const { return !stage_keys_; }
  const float* key_rows(const TensorView& k, int64_t b, int64_t h) const;
  int64_t key_row_stride(const TensorView& k) const;
  const float* value_panels() const { return values_.data(); }
  int64_t staged_keys() const { return count_; }  // rows, the stride between value panels
  // Forgets what is staged (the next call's inputs are new); keeps the buffers.
  void forget() { batch_ = head_ = -1; }

 private:
  // Keys [first, last) staged from row `staged` on (item mode).
  struct Run {
    int64_t first, last, staged;
  };
  bool map_onto_runs(std::vector<KeyChunk>& chunks) const;
  void prepare_whole_head(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                          const std::vector<std::pair<int64_t, int64_t>>& panels,
                          std::vector<KeyChunk>& chunks);
  void prepare_item(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                    const std::vector<std::pair<int64_t, int64_t>>& panels, std::vector<KeyChunk>& chunks);
  // Copies keys [first, last) of (b, h) to staged rows from `staged` on.
  void copy_keys(const TensorView& k, const TensorView& v, int64_t b, int64_t h,
                 const std::vector<std::pair<int64_t, int64_t>>& panels, int64_t first, int64_t last,
                 int64_t staged);

  bool whole_head_, stage_keys_;
  AlignedFloats keys_, values_;
  std::vector<float> row_buffer_;
  std::vector<uint8_t> granule_staged_;  // whole-head mode
  std::vector<Run> runs_;                // item mode
  int64_t batch_ = -1, head_ = -1, count_ = 0;
};

}  // namespace spattn::cpu_fast
