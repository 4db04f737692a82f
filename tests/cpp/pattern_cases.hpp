// tests/cpp/pattern_cases.hpp - patterns paired with an independent statement
// of what they mean.
//
// Each Case holds a Pattern built through the public builders and a Spec: the
// predicate allowed(h, i, p, j) written here straight from the table in
// DESIGN.md section 2 (floor division and modulo spelled out, no library
// code). Tests compare Pattern::allowed, BlockMask::build and the backends
// against the Spec over every pair. The random_* functions draw parameters
// relative to the sequence lengths so every pattern is exercised in its
// interesting range (empty, partial and full blocks, Lq != Lk).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "spattn/pattern.hpp"

namespace spattn::testing {

// allowed(h, i, p, j): query head h, query row i at position p, key j.
using Spec = std::function<bool(int64_t h, int64_t i, int64_t p, int64_t j)>;

struct Case {
  std::string name;
  Pattern pattern;
  Spec spec;
};

inline int64_t spec_mod(int64_t x, int64_t m) {
  const int64_t r = x % m;
  return r < 0 ? r + m : r;
}
inline int64_t spec_div(int64_t x, int64_t m) { return (x - spec_mod(x, m)) / m; }
inline int64_t ceil_div(int64_t x, int64_t m) { return x / m + (x % m != 0 ? 1 : 0); }

inline Spec and_causal(Spec s, bool causal) {
  if (!causal) return s;
  return [s](int64_t h, int64_t i, int64_t p, int64_t j) { return j <= p && s(h, i, p, j); };
}

inline int64_t draw(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

inline std::string flag(bool causal) { return causal ? ", causal" : ""; }

// ---- one builder per pattern, each with its spec ----

inline Case dense_case(bool causal) {
  return {"dense(" + flag(causal) + ")", Pattern::dense(causal),
          and_causal([](int64_t, int64_t, int64_t, int64_t) { return true; }, causal)};
}

inline Case causal_case() {
  return {"causal", Pattern::causal(),
          [](int64_t, int64_t, int64_t p, int64_t j) { return j <= p; }};
}

inline Case block_diagonal_case(int64_t block, bool causal) {
  const Spec same_block = [block](int64_t, int64_t, int64_t p, int64_t j) {
    return spec_div(p, block) == spec_div(j, block);
  };
  return {"block_diagonal(" + std::to_string(block) + flag(causal) + ")",
          Pattern::block_diagonal(block, causal), and_causal(same_block, causal)};
}

inline Case sliding_window_case(int64_t left, int64_t right, bool causal) {
  return {
      "sliding_window(" + std::to_string(left) + ", " + std::to_string(right) + flag(causal) + ")",
      Pattern::sliding_window(left, right, causal),
      and_causal(
          [left, right](int64_t, int64_t, int64_t p, int64_t j) {
            return p - j <= left && j - p <= right;  // p - left <= j <= p + right, overflow-free
          },
          causal)};
}

inline Case window_case(int64_t window) {
  return {"sliding_window(" + std::to_string(window) + ")", Pattern::sliding_window(window),
          [window](int64_t, int64_t, int64_t p, int64_t j) { return j <= p && p - j < window; }};
}

inline Case streaming_case(int64_t sink, int64_t window) {
  return {"streaming(" + std::to_string(sink) + ", " + std::to_string(window) + ")",
          Pattern::streaming(sink, window), [sink, window](int64_t, int64_t, int64_t p, int64_t j) {
            return j <= p && (j < sink || p - j < window);
          }};
}

inline Case strided_case(int64_t stride) {
  return {"strided(" + std::to_string(stride) + ")", Pattern::strided(stride),
          [stride](int64_t, int64_t, int64_t p, int64_t j) {
            return j <= p && (p - j < stride || (p - j) % stride == 0);
          }};
}

inline Case fixed_case(int64_t stride, int64_t summary) {
  return {"fixed(" + std::to_string(stride) + ", " + std::to_string(summary) + ")",
          Pattern::fixed(stride, summary),
          [stride, summary](int64_t, int64_t, int64_t p, int64_t j) {
            return j <= p &&
                   (spec_div(j, stride) == spec_div(p, stride) || j % stride >= stride - summary);
          }};
}

inline Case dilated_case(const std::vector<int64_t>& segments, const std::vector<int64_t>& rates,
                         bool causal) {
  std::string name = "dilated(";
  for (size_t n = 0; n < segments.size(); ++n)
    name += (n ? " " : "") + std::to_string(segments[n]) + "/" + std::to_string(rates[n]);
  return {name + flag(causal) + ")", Pattern::dilated(segments, rates, causal),
          and_causal(
              [segments, rates](int64_t h, int64_t, int64_t p, int64_t j) {
                for (size_t n = 0; n < segments.size(); ++n) {
                  const int64_t w = segments[n], r = rates[n];
                  if (spec_div(p, w) == spec_div(j, w) && spec_mod(p, r) == h % r && j % r == h % r)
                    return true;
                }
                return false;
              },
              causal)};
}

// BigBird over key blocks; the random blocks come from the documented
// generator (checked on its own in test_pattern_semantics.cpp).
inline Case bigbird_case(int64_t k_len, int64_t block, int64_t window, int64_t global,
                         int64_t random, uint64_t seed, bool causal) {
  const int64_t n = ceil_div(k_len, block);
  const std::vector<int32_t> table = bigbird_random_blocks(n, window, global, random, seed, causal);
  const std::string name = "bigbird(Lk " + std::to_string(k_len) + ", B " + std::to_string(block) +
                           ", w " + std::to_string(window) + ", g " + std::to_string(global) +
                           ", r " + std::to_string(random) + ", seed " + std::to_string(seed) +
                           flag(causal) + ")";
  return {name, Pattern::bigbird(k_len, block, window, global, random, seed, causal),
          and_causal(
              [=](int64_t, int64_t, int64_t p, int64_t j) {
                const int64_t qb = spec_div(p, block), kb = j / block;
                if (std::abs(qb - kb) <= (window - 1) / 2) return true;
                if (kb < global || kb >= n - global) return true;
                if (qb < 0 || qb >= n) return false;
                if (qb < global || qb >= n - global) return true;
                for (int64_t s = 0; s < random; ++s)
                  if (table[qb * random + s] == kb) return true;
                return false;
              },
              causal)};
}

inline Case longformer_case(int64_t window, const std::vector<int64_t>& global, bool causal) {
  std::string name = "longformer(" + std::to_string(window) + ", {";
  for (int64_t g : global) name += std::to_string(g) + " ";
  auto is_global = [global](int64_t x) {
    return std::find(global.begin(), global.end(), x) != global.end();
  };
  return {name + "}" + flag(causal) + ")", Pattern::longformer(window, global, causal),
          and_causal(
              [=](int64_t, int64_t, int64_t p, int64_t j) {
                return std::abs(p - j) <= window / 2 || is_global(j) || is_global(p);
              },
              causal)};
}

// A custom mask from a random dense block matrix (heads, rows, cols); through
// the dense-matrix builder or, with `bsr`, through BSR arrays.
inline Case custom_case(std::mt19937_64& rng, int64_t q_len, int64_t k_len, int64_t heads,
                        int64_t block_q, int64_t block_k, double density, bool causal, bool bsr) {
  const int64_t rows = ceil_div(q_len, block_q), cols = ceil_div(k_len, block_k);
  std::vector<uint8_t> blocks(static_cast<size_t>(heads * rows * cols));
  std::bernoulli_distribution keep(density);
  for (auto& b : blocks) b = keep(rng) ? 1 : 0;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t r = 0; r < heads * rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (blocks[r * cols + c]) indices.push_back(static_cast<int32_t>(c));
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  const std::string name = std::string(bsr ? "custom_bsr" : "custom") + "(heads " +
                           std::to_string(heads) + ", " + std::to_string(block_q) + "x" +
                           std::to_string(block_k) + flag(causal) + ")";
  Pattern pattern =
      bsr ? Pattern::custom_bsr(offsets, indices, heads, rows, cols, block_q, block_k, causal)
          : Pattern::custom(blocks, heads, rows, cols, block_q, block_k, causal);
  return {name, pattern,
          and_causal(
              [=](int64_t h, int64_t i, int64_t, int64_t j) {
                const int64_t head = heads == 1 ? 0 : h;
                return blocks[(head * rows + i / block_q) * cols + j / block_k] != 0;
              },
              causal)};
}

// ---- composition ----

inline Case unite_case(const Case& a, const Case& b) {
  return {"(" + a.name + " | " + b.name + ")", Pattern::unite(a.pattern, b.pattern),
          [sa = a.spec, sb = b.spec](int64_t h, int64_t i, int64_t p, int64_t j) {
            return sa(h, i, p, j) || sb(h, i, p, j);
          }};
}

inline Case intersect_case(const Case& a, const Case& b) {
  return {"(" + a.name + " & " + b.name + ")", Pattern::intersect(a.pattern, b.pattern),
          [sa = a.spec, sb = b.spec](int64_t h, int64_t i, int64_t p, int64_t j) {
            return sa(h, i, p, j) && sb(h, i, p, j);
          }};
}

// heads.size() must divide the query head count H; query head h uses
// heads[h / (H / heads.size())].
inline Case per_head_case(const std::vector<Case>& heads, int64_t num_heads) {
  std::vector<Pattern> patterns;
  std::vector<Spec> specs;
  std::string name = "per_head[";
  for (const Case& c : heads) {
    patterns.push_back(c.pattern);
    specs.push_back(c.spec);
    name += c.name + "; ";
  }
  const int64_t group = num_heads / static_cast<int64_t>(heads.size());
  return {name + "]", Pattern::per_head(patterns),
          [specs, group](int64_t h, int64_t i, int64_t p, int64_t j) {
            return specs[h / group](h, i, p, j);
          }};
}

inline Case with_causal_case(const Case& c) {
  return {c.name + ".with_causal()", c.pattern.with_causal(), and_causal(c.spec, true)};
}

// ---- random draws ----

constexpr int kNumLeafKinds = 13;

// A random single pattern of kind `kind` (0 .. kNumLeafKinds-1) for the shape.
// `single_term` restricts dilated to one branch (so it can sit inside an
// intersection).
inline Case random_leaf(std::mt19937_64& rng, int kind, int64_t q_len, int64_t k_len,
                        int64_t num_heads, bool single_term = false) {
  const int64_t L = std::max(q_len, k_len);
  const bool causal = draw(rng, 0, 1) == 1;
  switch (kind) {
    case 0:
      return dense_case(causal);
    case 1:
      return causal_case();
    case 2:
      return block_diagonal_case(draw(rng, 1, L + 1), causal);
    case 3:
      return sliding_window_case(draw(rng, 0, L), draw(rng, 0, L / 2 + 1), causal);
    case 4:
      return window_case(draw(rng, 1, L + 1));
    case 5:
      return streaming_case(draw(rng, 0, L / 2), draw(rng, 1, L));
    case 6:
      return strided_case(draw(rng, 1, std::max<int64_t>(1, L / 2)));
    case 7: {
      const int64_t stride = draw(rng, 1, std::max<int64_t>(1, L / 2));
      return fixed_case(stride, draw(rng, 0, stride));
    }
    case 8: {
      const int64_t branches = single_term ? 1 : draw(rng, 1, 3);
      std::vector<int64_t> segments, rates;
      for (int64_t n = 0; n < branches; ++n) {
        segments.push_back(draw(rng, 1, L + 1));
        rates.push_back(draw(rng, 1, 4));
      }
      return dilated_case(segments, rates, causal);
    }
    case 9: {
      const int64_t block = draw(rng, 1, std::max<int64_t>(1, k_len / 4));
      const int64_t n = ceil_div(k_len, block);
      return bigbird_case(k_len, block, draw(rng, 1, 5), draw(rng, 0, 2),
                          draw(rng, 0, std::min<int64_t>(3, n)), rng(), causal);
    }
    case 10: {
      std::vector<int64_t> global;
      for (int64_t n = draw(rng, 0, 3); n > 0; --n) {
        const int64_t g = draw(rng, 0, k_len - 1);
        if (std::find(global.begin(), global.end(), g) == global.end()) global.push_back(g);
      }
      return longformer_case(draw(rng, 0, L / 2), global, causal);
    }
    default: {
      const int64_t heads = draw(rng, 0, 1) ? num_heads : 1;
      return custom_case(rng, q_len, k_len, heads, draw(rng, 1, 40), draw(rng, 1, 40),
                         std::uniform_real_distribution<double>(0.05, 0.8)(rng), causal,
                         kind == 12);
    }
  }
}

// A random leaf, union, intersection, per-head mix or causal variant.
inline Case random_case(std::mt19937_64& rng, int64_t q_len, int64_t k_len, int64_t num_heads) {
  auto leaf = [&](bool single_term = false) {
    return random_leaf(rng, static_cast<int>(draw(rng, 0, kNumLeafKinds - 1)), q_len, k_len,
                       num_heads, single_term);
  };
  switch (draw(rng, 0, 5)) {
    case 0:
      return unite_case(leaf(), leaf());
    case 1:
      return intersect_case(leaf(true), leaf(true));
    case 2: {
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= num_heads; ++d)
        if (num_heads % d == 0) divisors.push_back(d);
      const int64_t count =
          divisors[static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(divisors.size()) - 1))];
      std::vector<Case> heads;
      for (int64_t h = 0; h < count; ++h) heads.push_back(leaf());
      return per_head_case(heads, num_heads);
    }
    case 3:
      return with_causal_case(leaf());
    default:
      return leaf();
  }
}

}  // namespace spattn::testing
