// tests/cpp/test_support.cpp - shared helpers for the C++ test suites.
//
// Host tensors in any dtype and layout, poisoning, and the independent oracle:
// dense_masked_attention loops over every (batch, head, query, key), asks
// Pattern::allowed whether the pair is kept and computes a max-subtracted
// softmax in fp64 (a row with a NaN or +inf score is NaN; -inf scores weigh 0). It never touches a BlockMask or the block iterator, so it
// checks the plan and the backends from outside.
#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spattn::testing {

HostTensor::HostTensor(DType dtype, int64_t B, int64_t H, int64_t L, int64_t D, Layout layout)
    : bytes(static_cast<size_t>(B * H * L * D * dtype_size(dtype))) {
  view = layout == Layout::BHLD ? make_bhld(bytes.data(), dtype, B, H, L, D)
                                : make_blhd(bytes.data(), dtype, B, L, H, D);
}

void HostTensor::fill_random(std::mt19937_64& rng, double amplitude) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const auto& s = view.shape;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t l = 0; l < s[2]; ++l)
        for (int64_t d = 0; d < s[3]; ++d) view.store(b, h, l, d, normal(rng) * amplitude);
}

void HostTensor::poison() {
  const int64_t n = view.numel();
  switch (view.dtype) {
    case DType::F32: {
      auto* p = reinterpret_cast<float*>(bytes.data());
      for (int64_t e = 0; e < n; ++e) p[e] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    case DType::F64: {
      auto* p = reinterpret_cast<double*>(bytes.data());
      for (int64_t e = 0; e < n; ++e) p[e] = std::numeric_limits<double>::quiet_NaN();
      return;
    }
    case DType::F16:
    case DType::BF16: {
      const uint16_t nan_bits = view.dtype == DType::F16 ? 0x7e00u : 0x7fc0u;
      auto* p = reinterpret_cast<uint16_t*>(bytes.data());
      for (int64_t e = 0; e < n; ++e) p[e] = nan_bits;
      return;
    }
  }
}

std::vector<double> HostTensor::to_double() const {
  const auto& s = view.shape;
  std::vector<double> out;
  out.reserve(static_cast<size_t>(view.numel()));
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t l = 0; l < s[2]; ++l)
        for (int64_t d = 0; d < s[3]; ++d) out.push_back(view.load(b, h, l, d));
  return out;
}

DenseResult dense_masked_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const Pattern& pattern, double scale) {
  const int64_t B = q.batch(), Hq = q.heads(), Lq = q.seq_len(), D = q.head_dim();
  const int64_t Hkv = k.heads(), Lk = k.seq_len(), group = Hq / Hkv;
  DenseResult r;
  r.out.assign(static_cast<size_t>(B * Hq * Lq * D), 0.0);
  r.lse.assign(static_cast<size_t>(B * Hq * Lq), -std::numeric_limits<double>::infinity());
  std::vector<double> scores(static_cast<size_t>(Lk));
  std::vector<uint8_t> kept(static_cast<size_t>(Lk));
  std::vector<double> row_q(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t d = 0; d < D; ++d) row_q[d] = q.load(b, h, i, d);
        double row_max = -std::numeric_limits<double>::infinity();
        bool undefined = false;  // a NaN or +inf score: the row is NaN
        for (int64_t j = 0; j < Lk; ++j) {
          kept[j] = pattern.allowed(h, Hq, Lq, Lk, i, j) ? 1 : 0;
          if (!kept[j]) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += row_q[d] * k.load(b, kvh, j, d);
          scores[j] = dot * scale;
          undefined |= std::isnan(scores[j]) || scores[j] == std::numeric_limits<double>::infinity();
          row_max = std::max(row_max, scores[j]);
        }
        const int64_t base = ((b * Hq + h) * Lq + i) * D;
        if (undefined) {
          std::fill(r.out.begin() + base, r.out.begin() + base + D, std::numeric_limits<double>::quiet_NaN());
          r.lse[(b * Hq + h) * Lq + i] = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        if (row_max == -std::numeric_limits<double>::infinity()) continue;  // no allowed key, or all -inf
        double denom = 0.0;
        for (int64_t j = 0; j < Lk; ++j) {
          if (!kept[j]) continue;
          const double w = std::exp(scores[j] - row_max);
          denom += w;
          for (int64_t d = 0; d < D; ++d) r.out[base + d] += w * v.load(b, kvh, j, d);
        }
        for (int64_t d = 0; d < D; ++d) r.out[base + d] /= denom;
        r.lse[(b * Hq + h) * Lq + i] = row_max + std::log(denom);
      }
    }
  }
  return r;
}

DenseGrads dense_masked_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                           const TensorView& d_out, const TensorView* d_lse,
                                           const Pattern& pattern, double scale) {
  const int64_t B = q.batch(), Hq = q.heads(), Lq = q.seq_len(), D = q.head_dim();
  const int64_t Hkv = k.heads(), Lk = k.seq_len(), group = Hq / Hkv;
  DenseGrads g;
  g.dq.assign(static_cast<size_t>(B * Hq * Lq * D), 0.0);
  g.dk.assign(static_cast<size_t>(B * Hkv * Lk * D), 0.0);
  g.dv.assign(static_cast<size_t>(B * Hkv * Lk * D), 0.0);
  std::vector<double> p(static_cast<size_t>(Lk)), dp(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < Lq; ++i) {
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Lk; ++j) {
          p[j] = -std::numeric_limits<double>::infinity();
          if (!pattern.allowed(h, Hq, Lq, Lk, i, j)) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += q.load(b, h, i, d) * k.load(b, kvh, j, d);
          p[j] = dot * scale;
          row_max = std::max(row_max, p[j]);
        }
        if (row_max == -std::numeric_limits<double>::infinity()) continue;  // no allowed key
        double denom = 0.0;
        for (int64_t j = 0; j < Lk; ++j) denom += p[j] = std::exp(p[j] - row_max);
        double mean_dp = 0.0;
        for (int64_t j = 0; j < Lk; ++j) {
          p[j] /= denom;
          dp[j] = 0.0;
          for (int64_t d = 0; d < D; ++d) dp[j] += d_out.load(b, h, i, d) * v.load(b, kvh, j, d);
          mean_dp += p[j] * dp[j];
        }
        const double g_lse = d_lse ? d_lse->load(b, h, i, 0) : 0.0;
        for (int64_t j = 0; j < Lk; ++j) {
          if (p[j] == 0.0) continue;
          const double ds = p[j] * (dp[j] - mean_dp) + g_lse * p[j];
          const int64_t qi = ((b * Hq + h) * Lq + i) * D, kj = ((b * Hkv + kvh) * Lk + j) * D;
          for (int64_t d = 0; d < D; ++d) {
            g.dq[qi + d] += scale * ds * k.load(b, kvh, j, d);
            g.dk[kj + d] += scale * ds * q.load(b, h, i, d);
            g.dv[kj + d] += p[j] * d_out.load(b, h, i, d);
          }
        }
      }
    }
  return g;
}

const std::vector<NonFiniteCase>& nonfinite_cases() {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  static const std::vector<NonFiniteCase> cases = {
      {"NaN in query row 5 of head 0", [](HostTensor& q, HostTensor&, HostTensor&) { q.view.store(0, 0, 5, 3, kNaN); }, -1},
      {"NaN in key 30", [](HostTensor&, HostTensor& k, HostTensor&) { k.view.store(0, 0, 30, 0, kNaN); }, -1},
      {"+inf in key 40",
       [](HostTensor&, HostTensor& k, HostTensor&) { k.view.store(0, 0, 40, 1, kInf); }, -1},
      {"every allowed score of row 0 -inf",
       [](HostTensor& q, HostTensor& k, HostTensor&) {
         k.view.store(0, 0, 0, 2, -kInf);
         for (int64_t h = 0; h < q.view.heads(); ++h) q.view.store(0, h, 0, 2, 1.0);
       },
       -1},
      {"NaN in value 50", [](HostTensor&, HostTensor&, HostTensor& v) { v.view.store(0, 0, 50, 7, kNaN); }, 7},
  };
  return cases;
}

std::string compare_nonfinite(const std::vector<double>& out, const std::vector<double>& lse,
                              const DenseResult& oracle, int64_t head_dim, double tolerance,
                              double lse_tolerance, int64_t unchecked_column) {
  const auto same_class = [](double a, double b) {
    return std::isnan(a) == std::isnan(b) && (std::isinf(a) == std::isinf(b)) && (!std::isinf(a) || a == b);
  };
  for (size_t row = 0; row < oracle.lse.size(); ++row) {
    const std::string where = "row " + std::to_string(row) + ": ";
    const double want_lse = oracle.lse[row], got_lse = lse[row];
    if (!same_class(got_lse, want_lse) ||
        (std::isfinite(want_lse) && std::abs(got_lse - want_lse) > lse_tolerance))
      return where + "LSE " + std::to_string(got_lse) + ", oracle " + std::to_string(want_lse);
    double row_scale = 1.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      const double x = oracle.out[row * head_dim + d];
      if (std::isfinite(x)) row_scale = std::max(row_scale, std::abs(x));
    }
    for (int64_t d = 0; d < head_dim; ++d) {
      const double want = oracle.out[row * head_dim + d], got = out[row * head_dim + d];
      if (d == unchecked_column && !std::isnan(want)) continue;
      if (!same_class(got, want) || (std::isfinite(want) && std::abs(got - want) > tolerance * row_scale))
        return where + "out[" + std::to_string(d) + "] " + std::to_string(got) + ", oracle " + std::to_string(want);
    }
  }
  return "";
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, ref = 0.0, self = 0.0;
  for (size_t e = 0; e < a.size(); ++e) {
    diff += (a[e] - b[e]) * (a[e] - b[e]);
    ref += b[e] * b[e];
    self += a[e] * a[e];
  }
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  return ref == 0.0 ? std::sqrt(self) : std::sqrt(diff / ref);
}

double max_lse_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (size_t e = 0; e < a.size(); ++e) {
    if (std::isnan(a[e]) || std::isnan(b[e])) return std::numeric_limits<double>::infinity();
    const bool a_inf = std::isinf(a[e]), b_inf = std::isinf(b[e]);
    if (a_inf || b_inf) {
      if (a[e] != b[e]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(a[e] - b[e]));
  }
  return worst;
}

}  // namespace spattn::testing
