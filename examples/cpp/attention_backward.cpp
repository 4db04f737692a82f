// examples/cpp/attention_backward.cpp - gradients of attention on the host.
//
// A training step's attention: a sliding window of 128 keys with GQA (4
// query heads over 2 kv heads), 512 tokens. One plan made with
// PlanOptions::backward serves both passes: attention() writes out and the
// LSE, attention_backward() takes them and the loss gradient d_out and writes
// dq, dk and dv (dk and dv summed over the query heads sharing a kv head).
// The loss here is sum(out * w) for a fixed random w, so d_out = w.
//
// Two checks: every gradient against the exact fp64 reference backend, and a
// few entries of each against a central finite difference of the loss
// (forwards on the reference backend into an fp64 output).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "example_data.hpp"
#include "spattn/spattn.hpp"

namespace {

using spattn::DType;
using spattn::TensorView;

constexpr int64_t B = 1, Hq = 4, Hkv = 2, L = 512, D = 32;

// sum(out * w) with out from the reference forward, accumulated in fp64.
double loss(const TensorView& q, const TensorView& k, const TensorView& v, const std::vector<float>& w,
            const spattn::BlockMask& mask) {
  std::vector<double> out(w.size());
  spattn::AttentionOptions reference;
  reference.backend = spattn::Backend::Reference;
  spattn::attention(q, k, v, spattn::make_bhld(out.data(), DType::F64, B, Hq, L, D), mask, reference);
  double sum = 0.0;
  for (size_t i = 0; i < w.size(); ++i) sum += out[i] * w[i];
  return sum;
}

}  // namespace

int main() {
  const spattn::BlockMask mask = spattn::BlockMask::build(
      spattn::Pattern::sliding_window(128), spattn::MaskShape{L, L, /*block_q=*/64, /*block_k=*/64, Hq});

  const size_t nq = static_cast<size_t>(B * Hq * L * D), nkv = static_cast<size_t>(B * Hkv * L * D);
  std::vector<float> q = random_floats(nq, 1), k = random_floats(nkv, 2), v = random_floats(nkv, 3);
  const std::vector<float> d_out = random_floats(nq, 4);  // dL/dout of L = sum(out * w), w = d_out
  std::vector<float> out(nq), lse(static_cast<size_t>(B * Hq * L));
  std::vector<float> dq(nq), dk(nkv), dv(nkv), ref_dq(nq), ref_dk(nkv), ref_dv(nkv);
  const auto q_view = [](std::vector<float>& x) { return spattn::make_bhld(x.data(), DType::F32, B, Hq, L, D); };
  const auto kv_view = [](std::vector<float>& x) { return spattn::make_bhld(x.data(), DType::F32, B, Hkv, L, D); };
  const TensorView qv = q_view(q), kv = kv_view(k), vv = kv_view(v), out_view = q_view(out);
  const TensorView lse_view = spattn::make_lse(lse.data(), B, Hq, L);
  const TensorView d_out_view = spattn::make_bhld(const_cast<float*>(d_out.data()), DType::F32, B, Hq, L, D);

  // One plan for both passes (host tensors: the fast CPU backend).
  spattn::PlanOptions plan_options;
  plan_options.backward = true;
  const spattn::Plan plan = spattn::make_plan(mask, spattn::call_shape(qv, kv), plan_options);
  spattn::attention(qv, kv, vv, out_view, plan, {}, &lse_view);
  spattn::attention_backward(qv, kv, vv, out_view, lse_view, d_out_view,
                             spattn::AttentionGrads{q_view(dq), kv_view(dk), kv_view(dv)}, plan);

  // The same gradients from the exact fp64 reference backend.
  spattn::AttentionOptions reference;
  reference.backend = spattn::Backend::Reference;
  spattn::attention_backward(qv, kv, vv, out_view, lse_view, d_out_view,
                             spattn::AttentionGrads{q_view(ref_dq), kv_view(ref_dk), kv_view(ref_dv)}, mask,
                             reference);
  const double err_ref = std::max({max_abs_diff(dq, ref_dq), max_abs_diff(dk, ref_dk), max_abs_diff(dv, ref_dv)});

  // Central differences of the loss at a few entries of q, k and v.
  struct Probe {
    const char* name;
    std::vector<float>* input;
    const std::vector<float>* grad;
  };
  const Probe probes[] = {{"q", &q, &dq}, {"k", &k, &dk}, {"v", &v, &dv}};
  const float eps = 1e-2f;
  double err_fd = 0.0;
  for (const Probe& p : probes) {
    for (size_t at = p.input->size() / 10 + 3; at < p.input->size(); at += p.input->size() / 3) {
      float& x = (*p.input)[at];
      const float x0 = x;
      x = x0 + eps;
      const double up = loss(qv, kv, vv, d_out, mask);
      const double step_up = double{x} - x0;
      x = x0 - eps;
      const double down = loss(qv, kv, vv, d_out, mask);
      const double step_down = double{x0} - x;
      x = x0;
      const double numeric = (up - down) / (step_up + step_down);
      const double analytic = (*p.grad)[at];
      err_fd = std::max(err_fd, std::fabs(numeric - analytic));
      std::printf("d%s[%zu]: attention_backward %+.6f, finite difference %+.6f\n", p.name, at, analytic, numeric);
    }
  }

  std::printf("sliding_window(128), GQA %lld/%lld, L = %lld: %s\n", static_cast<long long>(Hq),
              static_cast<long long>(Hkv), static_cast<long long>(L), plan.describe().c_str());
  std::printf("max |grad - reference| = %.2e, max |grad - finite difference| = %.2e\n", err_ref, err_fd);
  return err_ref < 1e-3 && err_fd < 1e-3 ? 0 : 1;
}
