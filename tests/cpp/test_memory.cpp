// tests/cpp/test_memory.cpp - memory guards (spattn/memory.hpp): sizes that
// saturate instead of overflowing, the message of a refused request, the
// estimate of BlockMask::build against the plans it builds, and refusals
// that come at once, before anything large is allocated, from the mask
// builder, the BigBird table and the host selection; the same check against
// another memory (a GPU's). Refusals are provoked
// with an address-space limit (setrlimit) in a child process, so they do not
// depend on the machine's memory.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "spattn/block_mask.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"
#include "spattn/pattern.hpp"
#include "spattn/select.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(Memory, SizesSaturate) {
  EXPECT_EQ(bytes_for(kMax / 2, 4), kMax);
  EXPECT_EQ(bytes_for(-3, 4), 0);
  EXPECT_EQ(bytes_for(3, 4), 12);
  EXPECT_EQ(add_bytes(kMax - 1, 2), kMax);
  EXPECT_EQ(format_bytes(kMax), "more than 8 EiB");
  EXPECT_EQ(format_bytes(12), "12 bytes");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
}

TEST(Memory, AvailableIsPositiveAndBelowTheMachine) {
  const int64_t available = available_memory_bytes();
  EXPECT_GT(available, 0);
  EXPECT_LT(available, kMax);
}

TEST(Memory, RefusalNamesRequestBytesAndAvailable) {
  try {
    MemoryEstimate("--seq 99").add("q", kMax / 4).add("mask", kMax / 4).check();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--seq 99 needs " + std::to_string(kMax / 4 * 2) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q 2.00 EiB, mask 2.00 EiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("of memory are available"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(MemoryEstimate("small").add("a few bytes", 64).check());
}

// Another memory (the CUDA backend's: a GPU's free memory) is checked the
// same way against the amount given, and named in the message.
TEST(Memory, RefusalAgainstAnotherMemoryNamesIt) {
  const MemoryEstimate need = MemoryEstimate("CUDA selector (batch=2)").add("pooled q", 900);
  EXPECT_NO_THROW(need.check(1200, "device memory"));  // 900 <= 80% of 1200
  try {
    need.check(1000, "device memory");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA selector (batch=2) needs 900 bytes (900 bytes: pooled q 900 bytes)"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("but only 1000 bytes (1000 bytes) of device memory are available"), std::string::npos) << msg;
  }
}

// The estimate is exact for patterns whose rows all keep as many blocks, and
// close (from 64 rows) for the others.
TEST(Memory, BuildEstimateMatchesThePlan) {
  const std::vector<std::pair<Pattern, MaskShape>> cases = {
      {Pattern::streaming(4, 256), MaskShape{100000, 100000, 128, 128, 1}},
      {Pattern::sliding_window(511, 0, true), MaskShape{65536, 65536, 64, 64, 1}},
      {Pattern::causal(), MaskShape{8192, 8192, 128, 128, 1}},
      {Pattern::dilated({2048}, {4}), MaskShape{16384, 16384, 128, 128, 4}},
      {Pattern::dense(), MaskShape{3000, 5000, 64, 128, 2}},
  };
  for (const auto& [pattern, shape] : cases) {
    const BlockMask mask = BlockMask::build(pattern, shape);
    const double exact = static_cast<double>(mask.row_offsets().size() * 8 + mask.kv_indices().size() * 5);
    const double estimate = static_cast<double>(BlockMask::build_bytes(pattern, shape));
    EXPECT_NEAR(estimate / exact, 1.0, 0.05) << pattern.describe();
  }
}

// The child of expect_refused_under_limit: limits its address space to
// `headroom` bytes beyond what it maps now, runs `body` and exits 0 when it
// throws spattn::Error naming "memory" within `seconds`.
[[noreturn]] void run_under_limit(const std::function<void()>& body, int64_t headroom, double seconds) {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  statm >> pages;
  const auto limit = static_cast<rlim_t>(pages * 4096 + headroom);
  const rlimit r{limit, limit};
  if (setrlimit(RLIMIT_AS, &r) != 0) std::_Exit(3);
  const auto start = std::chrono::steady_clock::now();
  try {
    body();
    std::cerr << "no error";
    std::_Exit(1);
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << e.what() << " (after " << s << " s)";
    std::_Exit(s < seconds && std::string(e.what()).find("memory") != std::string::npos ? 0 : 2);
  } catch (const std::exception& e) {
    std::cerr << "not spattn::Error: " << e.what();
    std::_Exit(4);
  }
}

void expect_refused_under_limit(const std::function<void()>& body, int64_t headroom, double seconds) {
  EXPECT_EXIT(run_under_limit(body, headroom, seconds), ::testing::ExitedWithCode(0), "of memory are available");
}

TEST(MemoryDeathTest, BuildRefusesAtOnce) {
  // 78 million rows of 28 bytes (2.2 GB) at 10^10 tokens: refused under a
  // 512 MiB limit before the rows are walked (which takes seconds).
  expect_refused_under_limit(
      [] { BlockMask::build(Pattern::streaming(4, 256), MaskShape{int64_t{10000000000}, int64_t{10000000000}, 128, 128, 1}); },
      512 << 20, 0.5);
}

TEST(MemoryDeathTest, BigBirdTableRefusesAtOnce) {
  // 100000 blocks x 20000 random blocks: an 8 GB table.
  expect_refused_under_limit([] { Pattern::bigbird(100000, 1, 3, 1, 20000, 0, false); }, 512 << 20, 0.5);
}

TEST(MemoryDeathTest, SelectionRefusesAtOnce) {
  // 40000 x 40000 blocks of probabilities (12.8 GB) for one head.
  expect_refused_under_limit(
      [] {
        std::vector<float> q(40000 * 8, 1.0f), k(40000 * 8, 1.0f);
        SelectConfig c;
        c.block_q = c.block_k = 1;
        c.topk = 4;
        select_blocks(make_bhld(q.data(), DType::F32, 1, 1, 40000, 8), make_bhld(k.data(), DType::F32, 1, 1, 40000, 8), c);
      },
      512 << 20, 0.5);
}

// Drawing r of n blocks per row tested each draw against the row's earlier
// draws (O(r) a draw, O(n r^2) a table): 4000 x 2000 took seconds.
TEST(Memory, BigBirdTableIsFastForManyRandomBlocks) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> table = bigbird_random_blocks(4000, 3, 1, 2000, 7, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 1.0);
  for (int64_t b = 1; b < 3999; ++b) {
    std::vector<int32_t> row(table.begin() + b * 2000, table.begin() + (b + 1) * 2000);
    std::sort(row.begin(), row.end());
    EXPECT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "row " << b << " repeats a block";
  }
}

}  // namespace
}  // namespace spattn::testing
