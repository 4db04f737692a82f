// examples/cpp/dynamic_selection.cpp - key blocks chosen at run time from q and k.
//
// Fills q and k with attention-like structure (a local band, sink tokens,
// heavy keys, topics), keeps per query block the causal key blocks that carry
// 90% of the estimated softmax mass (spattn::attention_dynamic), and reports
// the density and the measured quality against dense causal attention.
#include <cmath>
#include <cstdio>
#include <vector>

#include "example_data.hpp"
#include "spattn/spattn.hpp"

int main() {
  const int64_t B = 1, H = 4, L = 4096, D = 64;
  const size_t n = static_cast<size_t>(B * H * L * D);
  std::vector<float> q(n), k(n), v = random_floats(n, 3), out(n);
  using spattn::DType;
  const spattn::TensorView qv = spattn::make_bhld(q.data(), DType::F32, B, H, L, D);
  const spattn::TensorView kv = spattn::make_bhld(k.data(), DType::F32, B, H, L, D);
  const spattn::TensorView vv = spattn::make_bhld(v.data(), DType::F32, B, H, L, D);
  const spattn::TensorView ov = spattn::make_bhld(out.data(), DType::F32, B, H, L, D);
  spattn::make_structured_qk(qv, kv);

  spattn::SelectConfig config;
  config.block_q = config.block_k = 64;
  config.tau = 0.9;
  config.causal = true;
  const std::vector<spattn::BlockMask> masks = spattn::attention_dynamic(qv, kv, vv, ov, config);

  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const spattn::SelectionQuality quality =
      spattn::selection_quality(qv, kv, vv, ov, masks, /*causal=*/true, scale, /*rows_per_head=*/64);
  const int64_t kept = masks[0].num_blocks(), causal_blocks = (L / 64) * (L / 64 + 1) / 2 * H;
  std::printf("tau 0.9, L = %lld: %lld of %lld causal blocks kept, recall mean %.3f (worst %.3f), "
              "output error %.3f\n",
              static_cast<long long>(L), static_cast<long long>(kept), static_cast<long long>(causal_blocks),
              quality.recall_mean, quality.recall_min, quality.output_error);
  return quality.recall_mean > 0.85 && kept < causal_blocks ? 0 : 1;
}
