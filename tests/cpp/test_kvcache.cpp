// tests/cpp/test_kvcache.cpp - attention over a KV cache on the host backends
// (spattn/kvcache.hpp): paged and contiguous caches with new keys appended
// equal the dense fp64 oracle run on each sequence's keys laid out in order
// (built by the test from its own copy of the data, never from the cache);
// the appended rows land in their pages; a streaming or window decode reads
// no page its pattern skips (those hold NaN); bad arguments are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "spattn/kvcache.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

constexpr int64_t kHq = 4, kHkv = 2, kD = 16;

// Every sequence's keys and values in order (the test's own copy), the
// caches (paged: pages handed out in a shuffled order) and the new rows.
struct CacheProblem {
  std::vector<int64_t> cached;  // keys already in each sequence's cache
  int64_t new_len, q_len, page_size, max_pages;
  bool with_pages;
  std::vector<HostTensor> keys, values;  // per sequence (1, Hkv, cached + new_len, D)
  HostTensor k_cache, v_cache, k_new, v_new, q;
  std::vector<int32_t> page_table, cache_seqlens;

  CacheProblem(std::vector<int64_t> cached_in, int64_t new_len_in, int64_t q_len_in, int64_t page_size_in,
               bool with_pages_in, DType dtype, std::mt19937_64& rng)
      : cached(std::move(cached_in)),
        new_len(new_len_in),
        q_len(q_len_in),
        page_size(page_size_in),
        max_pages(0),
        with_pages(with_pages_in),
        k_cache(dtype, 1, 1, 1, 1),
        v_cache(dtype, 1, 1, 1, 1),
        k_new(dtype, batch(), kHkv, new_len, kD, Layout::BLHD),
        v_new(dtype, batch(), kHkv, new_len, kD, Layout::BLHD),
        q(dtype, batch(), kHq, q_len, kD, Layout::BLHD) {
    int64_t longest = 0;
    for (int64_t c : cached) longest = std::max(longest, c + new_len);
    max_pages = (longest + page_size - 1) / page_size + 1;  // a spare page per sequence
    const int64_t num_pages = with_pages ? batch() * max_pages : batch();
    const int64_t rows = with_pages ? page_size : max_pages * page_size;
    k_cache = HostTensor(dtype, num_pages, kHkv, rows, kD, Layout::BLHD);
    v_cache = HostTensor(dtype, num_pages, kHkv, rows, kD, Layout::BLHD);
    k_cache.poison();  // rows beyond a sequence's keys are never read
    v_cache.poison();
    std::vector<int32_t> order(static_cast<size_t>(num_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    page_table.assign(order.begin(), order.end());
    k_new.fill_random(rng);
    v_new.fill_random(rng);
    q.fill_random(rng);
    for (int64_t b = 0; b < batch(); ++b) {
      cache_seqlens.push_back(static_cast<int32_t>(cached[b]));
      keys.emplace_back(dtype, 1, kHkv, cached[b] + new_len, kD);
      values.emplace_back(dtype, 1, kHkv, cached[b] + new_len, kD);
      keys.back().fill_random(rng);
      values.back().fill_random(rng);
      for (int64_t h = 0; h < kHkv; ++h)
        for (int64_t j = 0; j < cached[b] + new_len; ++j)
          for (int64_t d = 0; d < kD; ++d) {
            if (j >= cached[b]) {  // the test's copy of the new rows
              keys.back().view.store(0, h, j, d, k_new.view.load(b, h, j - cached[b], d));
              values.back().view.store(0, h, j, d, v_new.view.load(b, h, j - cached[b], d));
              continue;
            }
            k_cache.view.store(page_of(b, j), h, j % rows_per_page(), d, keys.back().view.load(0, h, j, d));
            v_cache.view.store(page_of(b, j), h, j % rows_per_page(), d, values.back().view.load(0, h, j, d));
          }
    }
  }

  int64_t batch() const { return static_cast<int64_t>(cached.size()); }
  int64_t rows_per_page() const { return with_pages ? page_size : max_pages * page_size; }
  int64_t page_of(int64_t b, int64_t j) const {
    return with_pages ? page_table[static_cast<size_t>(b * max_pages + j / page_size)] : b;
  }

  KvCacheView view() const {
    KvCacheView c;
    c.k_cache = k_cache.view;
    c.v_cache = v_cache.view;
    c.page_table = with_pages ? page_table.data() : nullptr;
    c.max_pages = with_pages ? max_pages : 0;
    c.cache_seqlens = cache_seqlens.data();
    return c;
  }
};

std::vector<double> row_values(const TensorView& t, int64_t b) {
  std::vector<double> out;
  for (int64_t h = 0; h < t.heads(); ++h)
    for (int64_t l = 0; l < t.seq_len(); ++l)
      for (int64_t d = 0; d < t.head_dim(); ++d) out.push_back(t.load(b, h, l, d));
  return out;
}

// Runs the call and compares every sequence's out and LSE with the oracle.
void expect_matches_oracle(CacheProblem& p, const Pattern& pattern, Backend backend, double tolerance) {
  HostTensor out(p.q.view.dtype, p.batch(), kHq, p.q_len, kD, Layout::BLHD), lse(DType::F32, p.batch(), kHq,
                                                                                  p.q_len, 1);
  out.poison();
  lse.poison();
  const BlockMask mask = BlockMask::build(pattern, MaskShape{64, 64, 16, 16, kHq});
  AttentionOptions options;
  options.backend = backend;
  const bool append = p.new_len > 0;
  attention_with_kvcache(p.q.view, p.view(), append ? &p.k_new.view : nullptr, append ? &p.v_new.view : nullptr,
                         out.view, &mask, options, &lse.view);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  for (int64_t b = 0; b < p.batch(); ++b) {
    const int64_t k_len = p.cached[b] + p.new_len;
    const DenseResult want = dense_masked_attention(batch_slice(p.q.view, b), p.keys[b].view, p.values[b].view,
                                                    pattern.within_length(k_len), scale);
    EXPECT_LT(relative_error(row_values(out.view, b), want.out), tolerance) << "sequence " << b;
    EXPECT_LT(max_lse_error(row_values(lse.view, b), want.lse), 1e-4) << "sequence " << b;
    // The new rows are now in the cache, at the sequence's positions.
    for (int64_t r = 0; r < p.new_len; ++r) {
      const int64_t j = p.cached[b] + r;
      for (int64_t d = 0; d < kD; ++d)
        ASSERT_EQ(p.k_cache.view.load(p.page_of(b, j), 1, j % p.rows_per_page(), d),
                  p.k_new.view.load(b, 1, r, d));
    }
  }
}

struct NamedPattern {
  std::string name;
  Pattern pattern;
};

std::vector<NamedPattern> patterns() {
  return {{"dense", Pattern::dense()},
          {"causal", Pattern::causal()},
          {"streaming", Pattern::streaming(4, 32)},
          {"sliding_window", Pattern::sliding_window(24, 0)},
          {"dilated", Pattern::dilated({16, 32}, {1, 2}, true)}};
}

TEST(KvCache, PagedAndContiguousCachesEqualTheOracle) {
  for (const bool with_pages : {true, false})
    for (const NamedPattern& np : patterns())
      for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
        SCOPED_TRACE(np.name + (with_pages ? ", paged" : ", contiguous") + " on " + backend_name(backend));
        std::mt19937_64 rng(1700);
        // A decode step (one query, one new key), a chunk of 5 queries and
        // new keys, and queries over the cache alone; one sequence starts empty.
        CacheProblem decode({37, 0, 150}, 1, 1, 16, with_pages, DType::F32, rng);
        expect_matches_oracle(decode, np.pattern, backend, 1e-5);
        CacheProblem chunk({37, 3, 150}, 5, 5, 16, with_pages, DType::F32, rng);
        expect_matches_oracle(chunk, np.pattern, backend, 1e-5);
        CacheProblem cached({40, 17, 99}, 0, 3, 32, with_pages, DType::BF16, rng);
        expect_matches_oracle(cached, np.pattern, backend, 2e-2);
      }
}

// Page sizes from 16 to 256 keys, ragged lengths (0, a partly filled last
// page), a 300-query chunk of prefill appended and attended in one call.
TEST(KvCache, PageSizesAndLongChunks) {
  for (const int64_t page : {16, 64, 256})
    for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
      SCOPED_TRACE("page " + std::to_string(page) + " on " + backend_name(backend));
      std::mt19937_64 rng(static_cast<uint64_t>(1800 + page));
      CacheProblem chunk({0, 700, 257}, 300, 300, page, true, DType::F32, rng);
      expect_matches_oracle(chunk, Pattern::causal(), backend, 1e-5);
      CacheProblem decode({1, 700, 257}, 1, 1, page, true, DType::F32, rng);
      expect_matches_oracle(decode, Pattern::streaming(4, 100), backend, 1e-5);
    }
}

// A streaming decode at 2,000 keys in pages of 16 keeps the sink's page and
// the window's last pages: every other page holds NaN and its page-table
// entry is -1 (freed), so reading or looking it up would fail.
TEST(KvCache, StreamingDecodeReadsOnlyItsPages) {
  for (const Backend backend : {Backend::Reference, Backend::Cpu}) {
    std::mt19937_64 rng(1701);
    CacheProblem p({2000}, 1, 1, 16, true, DType::F32, rng);
    const int64_t window = 48, k_len = 2001;
    int64_t poisoned = 0;
    for (int64_t page = 1; page * 16 < k_len - window - 16; ++page, ++poisoned) {
      const int64_t physical = p.page_of(0, page * 16);
      p.page_table[static_cast<size_t>(page)] = -1;
      for (int64_t h = 0; h < kHkv; ++h)
        for (int64_t r = 0; r < 16; ++r)
          for (int64_t d = 0; d < kD; ++d) {
            p.k_cache.view.store(physical, h, r, d, std::numeric_limits<double>::quiet_NaN());
            p.v_cache.view.store(physical, h, r, d, std::numeric_limits<double>::quiet_NaN());
          }
    }
    EXPECT_GT(poisoned, 110);
    expect_matches_oracle(p, Pattern::streaming(4, window), backend, 1e-5);
  }
}

TEST(KvCache, BadArgumentsAreNamed) {
  std::mt19937_64 rng(1702);
  CacheProblem p({20, 5}, 2, 2, 16, true, DType::F32, rng);
  HostTensor out(DType::F32, 2, kHq, 2, kD, Layout::BLHD);
  const auto message = [&](KvCacheView cache, bool with_new, Backend backend = Backend::Auto,
                           const BlockMask* mask = nullptr) {
    AttentionOptions options;
    options.backend = backend;
    try {
      attention_with_kvcache(p.q.view, cache, with_new ? &p.k_new.view : nullptr, with_new ? &p.v_new.view : nullptr,
                             out.view, mask, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  KvCacheView bad_page = p.view();
  std::vector<int32_t> table = p.page_table;
  table[0] = 999;
  bad_page.page_table = table.data();
  EXPECT_NE(message(bad_page, true).find("page_table[0][0]=999 is not a page of the cache"), std::string::npos);
  table[0] = p.page_table[0];
  table[1] = -1;  // sequence 0's second page (keys 16..21, read by every pattern here)
  EXPECT_NE(message(bad_page, true).find("page_table[0][1]=-1 is not a page of the cache"), std::string::npos);
  std::vector<int32_t> long_seqlens = {static_cast<int32_t>(p.max_pages * 16), 5};
  KvCacheView full = p.view();
  full.cache_seqlens = long_seqlens.data();
  EXPECT_NE(message(full, true).find("but its cache holds"), std::string::npos);
  std::vector<int32_t> none = {0, 0};
  KvCacheView empty = p.view();
  empty.cache_seqlens = none.data();
  EXPECT_NE(message(empty, false).find("has 2 queries but 0 keys"), std::string::npos);
  const BlockMask from_arrays(4, 4, 2, 2, 1, {0, 1, 2}, {0, 1}, {1, 1});
  EXPECT_NE(message(p.view(), true, Backend::Auto, &from_arrays).find("must come from a pattern"), std::string::npos);
  const std::string cuda = message(p.view(), true, Backend::Cuda);
  EXPECT_TRUE(cuda.find("is not available") != std::string::npos ||
              cuda.find("has no KV-cache path yet") != std::string::npos)
      << cuda;
}

}  // namespace
}  // namespace spattn::testing
