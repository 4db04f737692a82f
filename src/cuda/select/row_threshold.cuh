// cuda/select/row_threshold.cuh - which blocks one row of the selector keeps,
// found without sorting the row.
//
// Non-negative floats order as their bit patterns, so the best candidates of a
// row (allowed, not forced; higher probability first, ties to the lower block
// index) are those above a threshold in the bits of their probability, plus
// the lowest-indexed of those equal to it. radix_search finds that threshold
// about 8 bits at a time with a 256-bin histogram per row in shared memory
// (at most four passes over the row, fewer when the bin that holds the cut
// holds exactly the blocks still wanted): by count for topk and the budgets, by
// probability mass for tau, where each bin also sums the mass of its blocks in
// 32-bit fixed point (integer adds, so the result does not depend on the
// order of the atomics). store_kept then compacts the forced blocks and the
// chosen candidates in ascending block order into the row's slots.
#pragma once

#include <cstdint>

#include "cuda/select/thread_group.cuh"
#include "select/select_rules.hpp"

namespace spattn::cuda_detail::select_kernels {

constexpr int kRadixBits = 8;
constexpr int kRadixBins = 1 << kRadixBits;
// Bit 31 of a rank is 0, so the first pass takes the 8 exponent bits (which
// spread a row's probabilities over many bins), the last one the low 7 bits
// (its top bit is already fixed).
constexpr int kRadixPasses = 4;
__device__ __forceinline__ int radix_shift(int pass) { return pass < kRadixPasses - 1 ? 23 - 8 * pass : 0; }
constexpr float kMassUnit = 4294967296.0f;  // fixed-point probability mass: 1 = 2^32

// A row's histogram of one pass, in shared memory.
struct RadixHistogram {
  unsigned long long mass[kRadixBins];
  uint32_t count[kRadixBins];
};

// The bin of a pass that holds the cut, written by the thread that finds it.
struct RadixCut {
  int32_t digit;  // -1: the target lies beyond every candidate
  uint32_t before_count, bin_count;
  unsigned long long before_mass;
};

struct RowScratch {
  RadixHistogram* hist;
  RadixCut* cut;
  int32_t* counts;             // kWarp entries for the group's scans
  unsigned long long* masses;  // kWarp entries
};

__device__ __forceinline__ uint32_t rank_bits(float prob) {
  return prob > 0.0f ? __float_as_uint(prob) : 0u;  // 0, -0 and NaN rank last
}
__device__ __forceinline__ unsigned long long fixed_mass(float prob) {
  return prob > 0.0f ? __float2ull_rn(prob * kMassUnit) : 0ull;
}

// The sinks [0, sinks) and the local run [first, last] of a query block.
struct ForcedBlocks {
  int64_t sinks, first, last;
  __device__ bool has(int64_t c) const { return c < sinks || (c >= first && c <= last); }
};

__device__ __forceinline__ ForcedBlocks forced_blocks(const select_detail::SelectParams& p, int64_t qb) {
  return ForcedBlocks{p.sink_blocks, select_detail::local_first(p, qb), select_detail::local_last(p, qb)};
}

// The kept candidates: those whose bits above `shift` exceed the prefix's,
// then the first take_equal of those equal to it there (ascending index).
// shift = 32 compares nothing: all candidates are equal.
struct Threshold {
  uint32_t prefix = 0;
  int shift = 32;
  int64_t take_equal = 0;
};

__device__ __forceinline__ uint64_t level_of(uint32_t bits, int shift) {
  return static_cast<uint64_t>(bits) >> shift;
}

// The threshold of the row's best candidates among probs[0, n): by count
// (kByMass false) the `need` best, 0 < need; by mass the fewest best whose
// mass reaches need_mass > 0 (fixed point), all of them when the candidates
// hold less. *taken gets the number of candidates kept.
template <bool kByMass>
__device__ Threshold radix_search(const ThreadGroup& g, const float* probs, int64_t n, const ForcedBlocks& forced,
                                  int64_t need, unsigned long long need_mass, const RowScratch& s,
                                  int64_t* taken) {
  Threshold t;
  int64_t above = 0;  // candidates above the current level
  unsigned long long above_mass = 0;
  const int per_thread = kRadixBins / g.size;  // g.size is a power of two <= kRadixBins
  for (int pass = 0; pass < kRadixPasses; ++pass) {
    const int shift = radix_shift(pass);
    for (int i = g.rank; i < kRadixBins; i += g.size) {
      s.hist->count[i] = 0;
      if (kByMass) s.hist->mass[i] = 0;
    }
    g.sync();
    const uint64_t level = level_of(t.prefix, t.shift);
    for (int64_t c = g.rank; c < n; c += g.size) {
      const uint32_t bits = rank_bits(probs[c]);
      if (forced.has(c) || level_of(bits, t.shift) != level) continue;
      const int digit = static_cast<int>((bits >> shift) & (kRadixBins - 1));
      // One count atomic per digit per warp: probabilities crowd a few bins.
      const unsigned peers = __match_any_sync(__activemask(), digit);
      if ((threadIdx.x % kWarp) == __ffs(peers) - 1) atomicAdd(&s.hist->count[digit], __popc(peers));
      if (kByMass) atomicAdd(&s.hist->mass[digit], fixed_mass(probs[c]));
    }
    if (g.rank == 0) s.cut->digit = -1;
    g.sync();
    // This thread's bins, highest digit first: kRadixBins - 1 - (rank * per_thread + j).
    const int first_bin = kRadixBins - 1 - g.rank * per_thread;
    int32_t own = 0;
    unsigned long long own_mass = 0;
    for (int j = 0; j < per_thread; ++j) {
      own += static_cast<int32_t>(s.hist->count[first_bin - j]);
      if (kByMass) own_mass += s.hist->mass[first_bin - j];
    }
    int32_t total = 0;
    int64_t before = group_exclusive_scan(g, own, s.counts, &total);
    unsigned long long before_mass = kByMass ? group_exclusive_scan(g, own_mass, s.masses) : 0ull;
    for (int j = 0; j < per_thread; ++j) {
      const int bin = first_bin - j;
      const uint32_t count = s.hist->count[bin];
      const unsigned long long mass = kByMass ? s.hist->mass[bin] : 0ull;
      const bool crosses = kByMass ? above_mass + before_mass < need_mass &&
                                         above_mass + before_mass + mass >= need_mass
                                   : above + before < need && above + before + count >= need;
      if (crosses) *s.cut = RadixCut{bin, static_cast<uint32_t>(before), count, before_mass};
      before += count;
      before_mass += mass;
    }
    g.sync();
    const RadixCut cut = *s.cut;
    if (cut.digit < 0) {  // every candidate at this level is kept
      t.take_equal = n;
      *taken = above + total;
      return t;
    }
    t.prefix |= static_cast<uint32_t>(cut.digit) << shift;
    t.shift = shift;
    above += cut.before_count;
    above_mass += cut.before_mass;
    if (!kByMass) {
      const int64_t rest = need - above;
      if (rest == cut.bin_count || shift == 0) {
        t.take_equal = rest;
        *taken = need;
        return t;
      }
    } else if (cut.bin_count == 1 || shift == 0) {
      // Equal blocks have equal mass: keep them while the mass before is short.
      const unsigned long long unit = fixed_mass(__uint_as_float(t.prefix)), gap = need_mass - above_mass;
      const int64_t wanted = cut.bin_count == 1 ? 1 : static_cast<int64_t>((gap + unit - 1) / unit);
      t.take_equal = wanted < cut.bin_count ? wanted : cut.bin_count;
      *taken = above + t.take_equal;
      return t;
    }
  }
  return t;  // not reached: the last pass (shift 0) always returns
}

// Stores the forced blocks of [0, n) and the candidates the threshold keeps,
// ascending, with their full flags (0: cut by causality), at out / out_full.
__device__ void store_kept(const ThreadGroup& g, const select_detail::SelectParams& p, int64_t qb,
                           const float* probs, int64_t n, const ForcedBlocks& forced, const Threshold& t,
                           int32_t* out, uint8_t* out_full, int32_t* scratch) {
  const int64_t chunk = (n + g.size - 1) / g.size;
  const int64_t c0 = g.rank * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
  const uint64_t level = level_of(t.prefix, t.shift);
  int32_t own_equal = 0;
  for (int64_t c = c0; c < c1; ++c)
    own_equal += !forced.has(c) && level_of(rank_bits(probs[c]), t.shift) == level;
  const int32_t equal_before = group_exclusive_scan(g, own_equal, scratch);
  auto kept = [&](int64_t c, int32_t& equal_rank) {
    if (forced.has(c)) return true;
    const uint64_t l = level_of(rank_bits(probs[c]), t.shift);
    if (l != level) return l > level;
    return equal_rank++ < t.take_equal;
  };
  int32_t own_kept = 0, rank = equal_before;
  for (int64_t c = c0; c < c1; ++c) own_kept += kept(c, rank);
  int32_t at = group_exclusive_scan(g, own_kept, scratch);
  rank = equal_before;
  for (int64_t c = c0; c < c1; ++c)
    if (kept(c, rank)) {
      out_full[at] = select_detail::block_is_cut(p, qb, c) ? 0 : 1;
      out[at++] = static_cast<int32_t>(c);
    }
}

}  // namespace spattn::cuda_detail::select_kernels
