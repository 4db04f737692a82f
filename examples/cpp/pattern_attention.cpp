// examples/cpp/pattern_attention.cpp - attention with a sparse pattern.
//
// Builds the block mask of a streaming pattern (16 sink tokens + a window of
// 256) for 2048 tokens, makes the plan of the call's shape once (host
// tensors: the fast CPU backend), runs spattn::attention on that plan as a
// model would run it step after step, and checks the output against the
// exact fp64 reference backend.
#include <cstdio>
#include <vector>

#include "example_data.hpp"
#include "spattn/spattn.hpp"

int main() {
  const int64_t B = 1, H = 4, L = 2048, D = 64;
  const spattn::Pattern pattern = spattn::Pattern::streaming(/*sink=*/16, /*window=*/256);
  const spattn::BlockMask mask = spattn::BlockMask::build(
      pattern, spattn::MaskShape{/*q_len=*/L, /*k_len=*/L, /*block_q=*/64, /*block_k=*/64, /*num_heads=*/H});

  const size_t n = static_cast<size_t>(B * H * L * D);
  std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
  std::vector<float> out(n), expected(n), lse(static_cast<size_t>(B * H * L));
  using spattn::DType;
  const spattn::TensorView qv = spattn::make_bhld(q.data(), DType::F32, B, H, L, D);
  const spattn::TensorView kv = spattn::make_bhld(k.data(), DType::F32, B, H, L, D);
  const spattn::TensorView vv = spattn::make_bhld(v.data(), DType::F32, B, H, L, D);
  const spattn::TensorView lse_view = spattn::make_lse(lse.data(), B, H, L);

  // Everything about the call but its tensors is decided here, once; each
  // call on the plan only checks the tensors against it and runs.
  const spattn::Plan plan = spattn::make_plan(mask, spattn::call_shape(qv, kv));
  const spattn::TensorView out_view = spattn::make_bhld(out.data(), DType::F32, B, H, L, D);
  for (int step = 0; step < 3; ++step) spattn::attention(qv, kv, vv, out_view, plan, {}, &lse_view);

  // A call with the mask takes its plan from the mask's cache instead.
  spattn::AttentionOptions reference;
  reference.backend = spattn::Backend::Reference;
  spattn::attention(qv, kv, vv, spattn::make_bhld(expected.data(), DType::F32, B, H, L, D), mask, reference);

  const double err = max_abs_diff(out, expected);
  std::printf("streaming(16, 256), L = %lld: %s, max |out - reference| = %.2e, lse[0] = %.4f\n",
              static_cast<long long>(L), plan.describe().c_str(), err, lse[0]);
  return err < 1e-3 ? 0 : 1;
}
