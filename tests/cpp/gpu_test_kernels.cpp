// tests/cpp/gpu_test_kernels.cpp - the two fused CUDA kernels, each forced
// (cuda_set_kernel), against the fp64 reference on the key cases: every
// pattern, both dtypes, head dims 64 and 128 (and 256, the sm90 kernel's
// 128 x 64 tile), odd lengths, Lq != Lk both ways, GQA, batches, both layouts,
// mask blocks 16..256, rows with no allowed key, split rows (long rows, and
// the few rows of decoding-like calls split to fill the device), scores rising
// along each row (the online softmax's rescaling), dilated terms through the
// token permutation, each order of the work units; then the Hopper kernel's
// tall tile forced on the same kinds of problems at head dim 64. The Hopper
// kernel (sm90) runs only on a device of compute capability 9.0 with a build
// for it; elsewhere its cases are skipped.
#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/device_info.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "gpu_test_problems.hpp"
#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

class GpuKernels : public ForcedKernelTest {};

// Every pattern in both dtypes on blocks of 64 at each of `head_dims`, the
// cases drawn from rng(rng_seed), the inputs from seeds counted up from `seed`
// (returned past the last).
uint64_t expect_every_pattern_on_blocks_of_64(std::initializer_list<int64_t> head_dims, uint64_t rng_seed,
                                               uint64_t seed) {
  std::mt19937_64 rng(rng_seed);
  for (GpuProblem pr : pattern_problems(every_pattern_cases(rng)))
    for (int64_t d : head_dims) {
      pr.head_dim = d;
      pr.block_q = pr.block_k = 64;
      expect_matches_reference(pr, seed++);
    }
  return seed;
}

TEST_P(GpuKernels, EveryPatternBothDtypesBothHeadDims) { expect_every_pattern_on_blocks_of_64({64, 128}, 2101, 2200); }

// The sm80 kernel's 128 x 64 tile at head dims 32 and 64, which calls take
// for masks whose blocks fill its 128 x 128 tile poorly (sm80_wide_tile;
// forced here, where the fixture forces the wide tile): every pattern and
// BigBird on blocks of 64. The sm90 runs skip.
TEST_P(GpuKernels, Sm80NarrowTileUpToHeadDim64) {
  if (GetParam() != CudaKernel::Sm80) GTEST_SKIP() << "a tile of the sm80 kernel";
  const ForcedTile narrow(cuda_detail::force_sm80_wide_tile, false);
  uint64_t seed = expect_every_pattern_on_blocks_of_64({32, 64}, 2951, 2950);
  for (int64_t d : {32, 64}) expect_matches_reference(bigbird_on_blocks_of_64(d), seed++);
}

// Head dim 256 runs the sm90 kernel on its narrow (128 x 64) tile: patterns
// with full, partial and ragged tiles, both dtypes, Lq != Lk, GQA, mask blocks
// smaller and larger than the tile, a split row and a dilated split.
TEST_P(GpuKernels, HeadDim256) {
  std::mt19937_64 rng(2151);
  const std::vector<Case> cases = {
      dense_case(false), causal_case(), window_case(200), streaming_case(16, 100),
      bigbird_case(1000, 64, 3, 1, 3, 7, false), custom_case(rng, 1000, 1000, 2, 64, 64, 0.3, false, false),
      per_head_case({streaming_case(8, 50), dense_case(true)}, 2)};
  uint64_t seed = 2160;
  for (const Case& c : cases)
    for (DType dtype : {DType::BF16, DType::F16}) {
      GpuProblem pr;
      pr.pattern = c.pattern;
      pr.dtype = pr.out_dtype = dtype;
      pr.q_heads = pr.kv_heads = 2;
      pr.q_len = pr.k_len = 1000;
      pr.head_dim = 256;
      pr.block_q = pr.block_k = 64;
      expect_matches_reference(pr, seed++);
    }
  const int64_t blocks[][2] = {{32, 32}, {128, 128}, {256, 64}, {64, 256}};
  for (const auto& b : blocks) {
    GpuProblem pr;
    pr.pattern = Pattern::causal();
    pr.q_heads = 4;
    pr.kv_heads = 2;
    pr.q_len = 700;
    pr.k_len = 1100;
    pr.head_dim = 256;
    pr.block_q = b[0];
    pr.block_k = b[1];
    expect_matches_reference(pr, seed++);
  }
  GpuProblem split;  // the global row of a long sequence is split into pieces
  split.pattern = Pattern::longformer(64, {0});
  split.q_heads = split.kv_heads = 1;
  split.q_len = split.k_len = 4400;
  split.head_dim = 256;
  expect_matches_reference(split, seed++);
  GpuProblem dilated;
  dilated.pattern = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  dilated.q_heads = dilated.kv_heads = 2;
  dilated.q_len = 600;
  dilated.k_len = 600;
  dilated.head_dim = 256;
  expect_matches_reference(dilated, seed++);
}

// More work units than multiprocessors at D = 64, so a CTA of the sm90
// kernel runs units of all-full tiles (two score tiles) and others one after
// another: a dense problem; a per-head mix of a dense head, whose long rows
// split into all-full pieces, and window heads; dense and causal heads over
// shared kv heads.
TEST_P(GpuKernels, ManyUnitsPerMultiprocessorAtHeadDim64) {
  uint64_t seed = 2250;
  GpuProblem dense;
  dense.q_heads = dense.kv_heads = 8;
  dense.q_len = dense.k_len = 4096;
  expect_matches_reference(dense, seed++);
  GpuProblem split;
  split.pattern = Pattern::per_head(
      {Pattern::dense(), Pattern::sliding_window(256), Pattern::sliding_window(256), Pattern::sliding_window(256)});
  split.q_heads = split.kv_heads = 4;
  split.q_len = split.k_len = 8192;
  split.dtype = split.out_dtype = DType::F16;
  expect_matches_reference(split, seed++);
  GpuProblem mixed;
  mixed.pattern = Pattern::per_head({Pattern::dense(), Pattern::causal(), Pattern::dense(), Pattern::causal()});
  mixed.q_heads = 4;
  mixed.kv_heads = 2;
  mixed.q_len = 5000;
  mixed.k_len = 8000;
  expect_matches_reference(mixed, seed++);
}

// `q_len` queries (the last positions) over `k_len` keys, `q_heads` over `kv_heads`.
GpuProblem cache_problem(const Pattern& pattern, int64_t q_heads, int64_t kv_heads, int64_t q_len, int64_t k_len,
                         int64_t head_dim, DType dtype) {
  GpuProblem pr;
  pr.pattern = pattern;
  pr.q_heads = q_heads;
  pr.kv_heads = kv_heads;
  pr.q_len = q_len;
  pr.k_len = k_len;
  pr.head_dim = head_dim;
  pr.dtype = pr.out_dtype = dtype;
  return pr;
}

// Few query rows over many keys with few heads, as in decoding: the work
// units are far fewer than the multiprocessors, so the call's plan splits
// the rows into pieces (tile_plan.hpp, min_items) whose partial results
// merge: one query, 16 grouped queries, 3 queries of a streaming mask and 200
// causal rows (pieces of different rows and lengths), both dtypes.
TEST_P(GpuKernels, FewRowsOverManyKeys) {
  uint64_t seed = 2270;
  for (const GpuProblem& pr : {cache_problem(Pattern::dense(), 2, 2, 1, 20000, 128, DType::BF16),
                               cache_problem(Pattern::causal(), 4, 1, 16, 20011, 128, DType::F16),
                               cache_problem(Pattern::streaming(64, 4096), 2, 2, 3, 30000, 64, DType::BF16),
                               cache_problem(Pattern::causal(), 1, 1, 200, 10000, 64, DType::F16)})
    expect_matches_reference(pr, seed++);
}

// One query position with grouped query heads: each kv head's query heads
// run as the rows of one tile (packed_query_heads): groups of 4 (dense, both
// layouts; a window and a streaming mask, whose partial tiles evaluate the
// predicate for the packed rows, at head dims 128 and 64), 16 (MQA, fp16, fp32
// output), 7 and 2 (batch 2, a sliding window over 20000 keys, so packed and
// split); then a per-head mix, whose mask has a head per query head and so
// runs unpacked, without the LSE.
TEST_P(GpuKernels, PackedQueryHeadsOfOneQuery) {
  uint64_t seed = 2280;
  GpuProblem grouped = cache_problem(Pattern::dense(), 8, 2, 1, 5000, 128, DType::BF16);
  for (Layout layout : {Layout::BHLD, Layout::BLHD}) {
    grouped.layout = layout;
    expect_matches_reference(grouped, seed++);
  }
  for (int64_t d : {128, 64}) {
    expect_matches_reference(cache_problem(Pattern::sliding_window(1000), 8, 2, 1, 5000, d, DType::BF16), seed++);
    expect_matches_reference(cache_problem(Pattern::streaming(40, 700), 16, 4, 1, 4321, d, DType::F16), seed++);
  }
  GpuProblem mqa = cache_problem(Pattern::streaming(100, 900), 16, 1, 1, 3000, 64, DType::F16);
  mqa.out_dtype = DType::F32;
  expect_matches_reference(mqa, seed++);
  expect_matches_reference(cache_problem(Pattern::causal(), 14, 2, 1, 2900, 128, DType::BF16), seed++);
  GpuProblem window = cache_problem(Pattern::sliding_window(700), 8, 4, 1, 20000, 128, DType::BF16);
  window.batch = 2;
  expect_matches_reference(window, seed++);
  GpuProblem mix =
      cache_problem(Pattern::per_head({Pattern::causal(), Pattern::streaming(4, 300)}), 16, 4, 1, 2500, 64, DType::BF16);
  mix.with_lse = false;
  expect_matches_reference(mix, seed++);
}

// A few query positions with grouped query heads (speculative decoding):
// each kv head's query heads run as one tile of positions x G rows, copied
// into that order and back (packed_rows.hpp), row r being position r / G
// in the partial-tile predicate: causal chunks (both layouts, head dims 128
// and 64, a group of 7), a window and a streaming mask, MQA filling all 128
// rows with fp32 output, an output 4 bytes past a 16-byte boundary, a
// window over 20000 keys in a batch of 2 (packed and split), a custom mask of
// 16 x 16 blocks (positions in two row blocks: sub-block bits per position),
// and a call without the LSE.
TEST_P(GpuKernels, PackedQueryHeadsOfFewQueries) {
  uint64_t seed = 2290;
  GpuProblem causal = cache_problem(Pattern::causal(), 8, 2, 4, 5000, 128, DType::BF16);
  for (Layout layout : {Layout::BHLD, Layout::BLHD})
    for (int64_t d : {128, 64}) {
      causal.layout = layout;
      causal.head_dim = d;
      expect_matches_reference(causal, seed++);
    }
  expect_matches_reference(cache_problem(Pattern::causal(), 14, 2, 3, 2900, 128, DType::F16), seed++);
  expect_matches_reference(cache_problem(Pattern::sliding_window(1000), 8, 2, 5, 5000, 64, DType::BF16), seed++);
  expect_matches_reference(cache_problem(Pattern::streaming(40, 700), 16, 4, 2, 4321, 128, DType::F16), seed++);
  GpuProblem mqa = cache_problem(Pattern::streaming(100, 900), 16, 1, 8, 3000, 64, DType::F16);
  mqa.out_dtype = DType::F32;
  expect_matches_reference(mqa, seed++);
  GpuProblem offset = cache_problem(Pattern::causal(), 8, 4, 3, 1500, 128, DType::BF16);
  offset.out_offset = 2;
  expect_matches_reference(offset, seed++);
  GpuProblem window = cache_problem(Pattern::sliding_window(700), 8, 4, 6, 20000, 128, DType::BF16);
  window.batch = 2;
  expect_matches_reference(window, seed++);
  std::mt19937_64 rng(2290);
  GpuProblem custom = cache_problem(custom_case(rng, 32, 3000, 1, 16, 16, 0.3, true, false).pattern, 8, 2, 32,
                                    3000, 128, DType::BF16);
  custom.block_q = custom.block_k = 16;
  expect_matches_reference(custom, seed++);
  GpuProblem no_lse = cache_problem(Pattern::sliding_window(300), 32, 8, 4, 9000, 128, DType::BF16);
  no_lse.with_lse = false;
  expect_matches_reference(no_lse, seed++);
}

TEST_P(GpuKernels, OddLengthsAndUnequalLengths) {
  uint64_t seed = 2300;
  for (const GpuProblem& pr : odd_and_unequal_length_problems()) expect_matches_reference(pr, seed++);
}

TEST_P(GpuKernels, GroupedQueryHeadsBatchesAndLayouts) {
  uint64_t seed = 2400;
  for (const GpuProblem& pr : grouped_query_problems()) expect_matches_reference(pr, seed++);
}

// Mask blocks 16..256 on both sides at head dims 128 and 64 (the sm80
// kernel's 64- and 128-key tiles); blocks that fit only 64-key tiles
// (block_k 192, 320) keep the sm80 kernel on its narrow tile at head dims 32
// and 64, the sm90 kernel on its small or narrow tile at 64 and 128 (it has
// no head dim 32).
TEST_P(GpuKernels, MaskBlockSizesAndEmptyRows) {
  std::mt19937_64 rng(2500);
  uint64_t seed = 2500;
  for (int64_t bq : {16, 64, 128, 256})
    for (int64_t bk : {16, 64, 128, 256})
      for (GpuProblem pr : mask_block_problems(bq, bk, rng))
        for (int64_t d : {128, 64}) {
          pr.head_dim = d;
          expect_matches_reference(pr, seed++);
        }
  const std::vector<int64_t> narrow_dims =
      GetParam() == CudaKernel::Sm80 ? std::vector<int64_t>{32, 64} : std::vector<int64_t>{64, 128};
  for (const auto& [bq, bk] : std::vector<std::pair<int64_t, int64_t>>{{128, 192}, {64, 320}})
    for (GpuProblem pr : mask_block_problems(bq, bk, rng))
      for (int64_t d : narrow_dims) {
        pr.head_dim = d;
        expect_matches_reference(pr, seed++);
      }
  GpuProblem pr = rows_without_keys_problem();
  expect_matches_reference(pr, seed++);
  pr.out_dtype = DType::F32;
  expect_matches_reference(pr, seed++);
}

// Scores that rise along each row (keys scaled up with their position, q and
// k of amplitude 2): a row's running max jumps by more than the online
// softmax's slack (kStaleMaxSlack) again and again, so O is rescaled and P
// comes close to its 2^8 bound, on full, partial and split rows, with the
// FMA-pipe exponentials of head dim 64.
TEST_P(GpuKernels, ScoresRisingAlongTheRow) {
  uint64_t seed = 2650;
  for (const Pattern& pattern : {Pattern::dense(), Pattern::causal(), Pattern::sliding_window(300, 0)})
    for (DType dtype : {DType::BF16, DType::F16})
      for (int64_t d : {64, 128}) {
        GpuProblem pr;
        pr.pattern = pattern;
        pr.dtype = pr.out_dtype = dtype;
        pr.q_len = pr.k_len = 1000;
        pr.head_dim = d;
        pr.block_q = pr.block_k = 64;
        pr.amplitude = 2.0;
        pr.key_growth = 3.0;
        expect_matches_reference(pr, seed++);
      }
  GpuProblem split = split_rows_problem(split_row_patterns().front(), DType::BF16);
  split.amplitude = 2.0;
  split.key_growth = 3.0;
  expect_matches_reference(split, seed++);
}

TEST_P(GpuKernels, SplitLongRows) {
  uint64_t seed = 2600;
  for (const Pattern& pattern : split_row_patterns())
    for (DType dtype : {DType::BF16, DType::F16}) {
      GpuProblem pr = split_rows_problem(pattern, dtype);
      pr.head_dim = 128;
      expect_matches_reference(pr, seed++);
    }
}

// A call with work enough per running CTA keeps rows whole up to that share
// (call_plan's device_whole_row_plan): BigBird over 6000 tokens in 64-token
// blocks, batch 8 x 4 query heads (32 copies of its 47 query tiles), whose
// plain plans split the global rows into pieces of at most 32 key tiles: on
// an H100 (132 multiprocessors) the sm90 kernel's plan (565 key tiles, a
// share of 137) keeps them whole, the sm80 kernel's (724 key tiles of 64
// keys, two CTAs per multiprocessor, a share of 87) splits their 94 tiles
// into pieces of at most 64.
TEST_P(GpuKernels, LongRowsWholeWhereTheCallHasWorkEnough) {
  GpuProblem pr = split_rows_problem(split_row_patterns()[1], DType::BF16);
  pr.batch = 8;
  pr.head_dim = 128;
  expect_matches_reference(pr, 2700);
}

// Dense rows whose units leave a short last round (call_plan's tail_split):
// 32 query tiles x 16 copies (batch 2 x 8 query heads over 4 kv heads) over
// 4000 keys, the last rows of the plan split into pieces (a ragged last key
// tile among them) that merge as split rows do; at D = 128 (the sm90 wide
// tile, the sm80 128 x 64 tile) and D = 64 (the sm90 tall tile).
TEST_P(GpuKernels, DenseRowsSpreadOverTheLastRound) {
  const bool sm90 = GetParam() == CudaKernel::Sm90;
  const int64_t resident = int64_t{cuda_detail::current_device_info().sms} * (sm90 ? 1 : 2);
  const int64_t row_tiles = sm90 ? 32 : 63;  // 4000 keys in tiles of 128 (sm90) or 64 (sm80) at D = 128
  ASSERT_GT(cuda_detail::tail_split(32, row_tiles, 16, resident).tail_rows, 0)
      << resident << " CTAs at a time divide the 512 units evenly; this problem has no tail to spread";
  uint64_t seed = 2750;
  for (const int64_t d : {128, 64})
    for (const DType dtype : {DType::BF16, DType::F16}) {
      GpuProblem pr;
      pr.pattern = Pattern::dense();
      pr.dtype = pr.out_dtype = dtype;
      pr.q_len = pr.k_len = 4000;
      pr.batch = 2;
      pr.q_heads = 8;
      pr.kv_heads = 4;
      pr.head_dim = d;
      expect_matches_reference(pr, seed++);
    }
}

// Dilated terms through the token permutation (cuda/plan/dilated_split.hpp),
// both passes on the forced kernel, the split made for its tile: the
// benchmark's union with a window, multi-branch and plain dilated patterns,
// odd and unequal lengths (ragged first and last segments), heads of every
// residue, GQA, both layouts, fp32 output, mask blocks off the tile (64 and
// 32: no full runs for the sm90 tile, and for 32 none for the sm80 tile).
TEST_P(GpuKernels, DilatedThroughThePermutation) {
  const Pattern bench = Pattern::unite(Pattern::dilated({512}, {4}, true), Pattern::sliding_window(128));
  const Pattern branches = Pattern::unite(Pattern::dilated({256, 1024}, {2, 8}, true), Pattern::sliding_window(64));
  struct Shape {
    int64_t lq, lk, q_heads, kv_heads, block;
  };
  uint64_t seed = 1500;
  for (const Shape& sh : {Shape{2048, 2048, 4, 4, 128}, Shape{2047, 2047, 8, 2, 64}, Shape{1000, 2500, 5, 5, 128},
                          Shape{2500, 1000, 4, 1, 32}, Shape{4099, 4099, 4, 4, 256}})
    for (const Pattern& pattern : {bench, branches, Pattern::dilated({512}, {2}, false)}) {
      GpuProblem pr;
      pr.pattern = pattern;
      pr.q_len = sh.lq;
      pr.k_len = sh.lk;
      pr.q_heads = sh.q_heads;
      pr.kv_heads = sh.kv_heads;
      pr.block_q = pr.block_k = sh.block;
      pr.head_dim = seed % 2 ? 128 : 64;
      pr.dtype = pr.out_dtype = seed % 3 ? DType::BF16 : DType::F16;
      if (seed % 5 == 0) pr.out_dtype = DType::F32;
      pr.layout = seed % 4 == 1 ? Layout::BLHD : Layout::BHLD;
      pr.batch = seed % 7 == 0 ? 2 : 1;
      expect_matches_reference(pr, seed++);
    }
}

// Fewer queries than keys put the first regular segment after position 0
// (744 / 1000: at 288, not a multiple of the 128-token blocks); the window of
// 256 over query blocks starting 256 keys in gives the rest full runs, which
// the permuted pass must leave out of the right rows. Four heads: every
// residue of the rate. Also output rows off 16-byte boundaries and calls
// without an LSE (the permuted pass merges into out and the rest's LSE
// in place).
TEST_P(GpuKernels, DilatedSplitsWhereQueryAndKeyLengthsDiffer) {
  uint64_t seed = 550;
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{744, 1000}, {1000, 744}})
    for (const int variant : {0, 1, 2}) {
      GpuProblem pr;
      pr.q_heads = pr.kv_heads = 4;
      pr.pattern = Pattern::unite(Pattern::dilated({288}, {4}, true), Pattern::sliding_window(256));
      pr.q_len = lq;
      pr.k_len = lk;
      pr.out_offset = variant == 1 ? 2 : 0;
      pr.with_lse = variant != 2;
      if (variant == 2) pr.out_dtype = DType::F32;
      expect_matches_reference(pr, seed++);
    }
}

// The work units in each order (common/work_units.hpp). Problems this small
// run item-major by the launch's own choice (their keys and values fit in
// L2), so the copy-major orders are forced: GQA over a batch, rows split into
// pieces, a per-head plan (each with several length bands). The outputs
// start as NaN, so a unit the mapping skips fails the comparison.
TEST_P(GpuKernels, EveryUnitOrder) {
  using cuda_detail::UnitOrder;
  uint64_t seed = 2400;
  for (UnitOrder order : {UnitOrder::kItemMajor, UnitOrder::kCopyMajor, UnitOrder::kCopyMajorBanded}) {
    SCOPED_TRACE("unit order " + std::to_string(static_cast<int>(order)));
    const ForcedUnitOrder forced(order);
    for (const GpuProblem& pr : unit_order_problems()) expect_matches_reference(pr, seed++);
  }
}

INSTANTIATE_TEST_SUITE_P(Forced, GpuKernels, ::testing::Values(CudaKernel::Sm80, CudaKernel::Sm90),
                         forced_kernel_name);

// The Hopper kernel's optional tiles, each forced wherever the mask's blocks
// fit it (and the other options forced off): the tall tile (three consumer
// warpgroups, 192 x 128) at head dim 64, and the small tile (64 x 64, one
// consumer warpgroup, two CTAs per multiprocessor) and the narrow tile
// (128 x 64) at head dims 64 and 128. On its own, call_tile
// takes them only where their plans compute few enough pairs, which leaves
// most small problems on the 128 x 128 tile. Every pattern and both dtypes
// on 64- and 128-row mask blocks (the tall tile's rows overlap the latter
// without nesting), odd and unequal lengths, GQA with batches and both
// layouts, mask blocks 16..256 (16 x 16 stays on the 128-row tile where the
// tall tile would hold 96 sub-blocks), rows with no allowed key, split rows,
// scores rising along the row, each order of the work units.
struct Sm90TileOption {
  const char* name;
  int64_t head_dim;
  cuda_detail::TileShape tile;
  ForcedTile::Force force;  // taken wherever it fits; the other options never
};

// Every optional sm90 tile's forcing switch.
constexpr ForcedTile::Force kSm90TileForces[] = {cuda_detail::force_sm90_tall_tile,
                                                 cuda_detail::force_sm90_narrow_tile,
                                                 cuda_detail::force_sm90_small_tile};

class GpuSm90TileOption : public ::testing::TestWithParam<Sm90TileOption> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!cuda_sm90_kernel_available() || !cuda_detail::fwd_sm90_supports_head_dim(GetParam().head_dim))
      GTEST_SKIP() << "no sm90 kernel for head dim " << GetParam().head_dim << " on this device and build";
    kernel_ = std::make_unique<ForcedKernel>(CudaKernel::Sm90);
    for (ForcedTile::Force force : kSm90TileForces)
      tiles_.push_back(std::make_unique<ForcedTile>(force, force == GetParam().force));
  }
  void TearDown() override {
    tiles_.clear();
    kernel_.reset();
  }

  // Runs `pr` at the option's head dim after checking that it takes the
  // option's tile (all but 16 x 16 blocks on the tall tile, which split it
  // into more than 64 sub-blocks).
  static void expect_option_matches_reference(GpuProblem pr, uint64_t seed) {
    const Sm90TileOption& option = GetParam();
    pr.head_dim = option.head_dim;
    const BlockMask mask =
        BlockMask::build(pr.pattern, MaskShape{pr.q_len, pr.k_len, pr.block_q, pr.block_k, pr.q_heads});
    const bool fits = cuda_detail::tile_fits(mask, option.tile);
    EXPECT_EQ(fits, option.tile.rows != cuda_detail::kSm90TallTile.rows || pr.block_q != 16 || pr.block_k != 16);
    cuda_detail::MaskFacts facts(mask);
    const cuda_detail::TileShape taken = cuda_detail::call_tile(true, pr.head_dim, facts, true);
    const cuda_detail::TileShape wanted = fits ? option.tile : cuda_detail::sm90_tile(pr.head_dim);
    EXPECT_EQ(taken.rows, wanted.rows);
    EXPECT_EQ(taken.cols, wanted.cols);
    expect_matches_reference(pr, seed);
  }

 private:
  std::unique_ptr<ForcedKernel> kernel_;
  std::vector<std::unique_ptr<ForcedTile>> tiles_;
};

TEST_P(GpuSm90TileOption, EveryPatternBothDtypesBothBlockRows) {
  std::mt19937_64 rng(2701);
  uint64_t seed = 2700;
  for (GpuProblem pr : pattern_problems(every_pattern_cases(rng)))
    for (int64_t block : {64, 128}) {
      pr.block_q = pr.block_k = block;
      expect_option_matches_reference(pr, seed++);
    }
}

// Also blocks of 384 x 128, which every sm90 tile walks directly (no derived
// plan), and GQA problems in each unit order on 128-row blocks.
TEST_P(GpuSm90TileOption, ShapesBlocksAndOrders) {
  std::mt19937_64 rng(2801);
  uint64_t seed = 2800;
  std::vector<GpuProblem> problems = odd_and_unequal_length_problems();
  for (const GpuProblem& pr : grouped_query_problems()) problems.push_back(pr);
  for (const GpuProblem& pr : problems) expect_option_matches_reference(pr, seed++);
  for (int64_t bq : {16, 32, 64, 128, 256})
    for (int64_t bk : {16, 32, 64, 128, 256})
      for (const GpuProblem& pr : mask_block_problems(bq, bk, rng)) expect_option_matches_reference(pr, seed++);
  GpuProblem empty_rows = rows_without_keys_problem();
  expect_option_matches_reference(empty_rows, seed++);
  empty_rows.out_dtype = DType::F32;
  expect_option_matches_reference(empty_rows, seed++);
  for (const Pattern& pattern : split_row_patterns())
    expect_option_matches_reference(split_rows_problem(pattern, DType::BF16), seed++);
  // Scores rising along the row, on 128-row blocks and on 384 x 128 blocks.
  for (const Pattern& pattern : {Pattern::dense(), Pattern::causal(), Pattern::sliding_window(300, 0)}) {
    GpuProblem pr;
    pr.pattern = pattern;
    pr.q_len = pr.k_len = 1000;
    pr.amplitude = 2.0;
    pr.key_growth = 3.0;
    for (const auto& [bq, bk] : std::vector<std::pair<int64_t, int64_t>>{{128, 128}, {384, 128}}) {
      pr.block_q = bq;
      pr.block_k = bk;
      expect_option_matches_reference(pr, seed++);
    }
  }
  using cuda_detail::UnitOrder;
  for (UnitOrder order : {UnitOrder::kItemMajor, UnitOrder::kCopyMajor, UnitOrder::kCopyMajorBanded}) {
    SCOPED_TRACE("unit order " + std::to_string(static_cast<int>(order)));
    const ForcedUnitOrder forced(order);
    for (GpuProblem pr : unit_order_problems()) {
      pr.block_q = pr.block_k = 128;
      expect_option_matches_reference(pr, seed++);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forced, GpuSm90TileOption,
    ::testing::Values(Sm90TileOption{"tall", 64, cuda_detail::kSm90TallTile, cuda_detail::force_sm90_tall_tile},
                      Sm90TileOption{"small", 64, cuda_detail::kSm90SmallTile, cuda_detail::force_sm90_small_tile},
                      Sm90TileOption{"small128", 128, cuda_detail::kSm90SmallTile,
                                     cuda_detail::force_sm90_small_tile},
                      Sm90TileOption{"narrow64", 64, cuda_detail::kSm90NarrowTile,
                                     cuda_detail::force_sm90_narrow_tile},
                      Sm90TileOption{"narrow", 128, cuda_detail::kSm90NarrowTile,
                                     cuda_detail::force_sm90_narrow_tile}),
    [](const ::testing::TestParamInfo<Sm90TileOption>& info) { return std::string(info.param.name); });

// Small problems through each path of the Hopper kernel (mask walked directly
// and through a derived plan, partial and ragged tiles, a split row, both
// passes of a dilated split, each tile); scripts/gpu_check.sh runs these under
// compute-sanitizer (gpu_test_varlen.cpp has the varlen ones).
TEST(GpuSanitizerSm90, EachKernelPath) {
  SPATTN_REQUIRE_GPU();
  if (!cuda_sm90_kernel_available()) GTEST_SKIP() << "no sm90 kernel on this device and build";
  const ForcedKernel forced(CudaKernel::Sm90);
  GpuProblem pr;
  pr.q_len = 150;
  pr.k_len = 290;
  pr.head_dim = 128;
  pr.pattern = Pattern::causal();
  expect_matches_reference(pr, 1);
  pr.pattern = Pattern::sliding_window(40, 10);
  pr.block_q = pr.block_k = 32;
  pr.dtype = pr.out_dtype = DType::F16;
  pr.head_dim = 64;
  expect_matches_reference(pr, 2);
  pr = GpuProblem{};
  pr.pattern = Pattern::longformer(64, {0});
  pr.q_heads = pr.kv_heads = 1;
  pr.q_len = pr.k_len = 4400;
  pr.head_dim = 128;
  expect_matches_reference(pr, 3);
  pr = GpuProblem{};
  pr.pattern = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  pr.q_heads = pr.kv_heads = 4;
  pr.q_len = 500;
  pr.k_len = 600;
  pr.head_dim = 128;
  expect_matches_reference(pr, 4);
  pr.head_dim = 256;  // the narrow tile
  expect_matches_reference(pr, 5);
  pr = GpuProblem{};  // D = 64, every tile full: two score tiles (consume_unit_two_scores), a ragged last tile
  pr.pattern = Pattern::dense();
  pr.q_len = 200;
  pr.k_len = 700;
  pr.head_dim = 64;
  expect_matches_reference(pr, 6);
  {
    // D = 128 and 64 on the narrow tile: BigBird on 64-row blocks
    // (warpgroups whose rows hold no kept block of a tile skip it), and
    // blocks of 192 keys.
    const ForcedTile narrow(cuda_detail::force_sm90_narrow_tile, true);
    const ForcedTallTile no_tall(false);
    const ForcedTile no_small(cuda_detail::force_sm90_small_tile, false);
    uint64_t seed = 10;
    for (int64_t head_dim : {128, 64}) {
      GpuProblem bigbird = bigbird_on_blocks_of_64(head_dim);
      expect_matches_reference(bigbird, seed++);
      bigbird.pattern = Pattern::causal();
      bigbird.block_q = 128;
      bigbird.block_k = 192;
      expect_matches_reference(bigbird, seed++);
    }
  }
  {
    // D = 64 and 128 on the small tile (one consumer warpgroup, two CTAs
    // per multiprocessor): BigBird on 64-row blocks (full tiles; two score
    // tiles at D = 64), a window on 32-row blocks (partial tiles), ragged
    // ends.
    const ForcedTile small(cuda_detail::force_sm90_small_tile, true);
    const ForcedTallTile no_tall(false);
    uint64_t seed = 14;
    for (int64_t head_dim : {64, 128}) {
      GpuProblem bigbird = bigbird_on_blocks_of_64(head_dim);
      expect_matches_reference(bigbird, seed++);
      bigbird.pattern = Pattern::sliding_window(90, 20);
      bigbird.q_len = 300;
      bigbird.k_len = 500;
      bigbird.block_q = bigbird.block_k = 32;
      expect_matches_reference(bigbird, seed++);
    }
  }
  const ForcedTallTile tall(true);  // three consumer warpgroups: full, partial, ragged tiles and a derived plan
  expect_matches_reference(pr, 7);
  pr.pattern = Pattern::causal();
  pr.q_len = 400;
  expect_matches_reference(pr, 8);
  pr.block_q = pr.block_k = 64;
  pr.pattern = Pattern::sliding_window(90, 20);
  expect_matches_reference(pr, 9);
}

// Host-only: runs without a device too.
TEST(GpuKernelChoice, SetReadBackAndAvailabilityWithoutThrowing) {
  const ForcedKernel forced(CudaKernel::Sm80);
  EXPECT_EQ(cuda_kernel(), CudaKernel::Sm80);
  cuda_set_kernel(CudaKernel::Sm90);
  EXPECT_EQ(cuda_kernel(), CudaKernel::Sm90);
  const bool available = cuda_sm90_kernel_available();
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(available);
  }
}

TEST(GpuKernelChoice, ForcingSm90WhereItCannotRunThrows) {
  SPATTN_REQUIRE_GPU();
  const ForcedKernel forced(CudaKernel::Sm90);
  GpuProblem pr;
  pr.head_dim = cuda_sm90_kernel_available() ? 32 : 128;
  EXPECT_THROW(run_on_gpu(pr, 1), Error);
}

}  // namespace
}  // namespace spattn::testing
