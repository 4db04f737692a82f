// tools/spattn/attention_job.cpp - one attention problem on fresh random inputs
// (see attention_job.hpp).
#include "attention_job.hpp"

#include <random>
#include <vector>

#include "json_writer.hpp"
#include "spattn/error.hpp"
#include "text_table.hpp"

namespace spattn::cli {

Backend resolve_backend(Backend requested) {
  const Backend b = requested == Backend::Auto ? best_backend() : requested;
  require(backend_available(b), "backend ", backend_name(b), " is not available in this build or on",
          " this machine");
  return b;
}

double check_tolerance(DType dtype) {
  constexpr double kF32Tolerance = 1e-5;   // fp32 inputs, fp32 accumulation
  constexpr double kHalfTolerance = 1e-2;  // fp16 / bf16 inputs and output
  return dtype == DType::F32 ? kF32Tolerance : kHalfTolerance;
}

CheckResult judge_error(double error, DType dtype) {
  CheckResult c;
  c.checked = true;
  c.error = error;
  c.tolerance = check_tolerance(dtype);
  c.passed = c.error <= c.tolerance;  // false for NaN too
  return c;
}

void print_problem(std::ostream& os, const ProblemShape& s, Backend backend) {
  os << "backend     " << backend_name(backend) << "\n";
  os << "shape       B=" << s.batch << " Hq=" << s.heads << " Hkv=" << s.kv_heads << " Lq=" << s.q_len
     << " Lk=" << s.k_len << " D=" << s.head_dim << " " << dtype_name(s.dtype) << " "
     << layout_name(s.layout) << "\n";
}

void print_check(std::ostream& os, const CheckResult& c, const std::string& against) {
  if (!c.checked) return;
  os << "check       relative error " << format_general(c.error) << " vs " << against << " (tolerance "
     << format_general(c.tolerance) << "): " << (c.passed ? "ok" : "FAILED") << "\n";
}

void write_problem_json(JsonWriter& j, const ProblemShape& s) {
  j.field("batch", s.batch).field("heads", s.heads).field("kv_heads", s.kv_heads);
  j.field("seq_q", s.q_len).field("seq_k", s.k_len).field("head_dim", s.head_dim);
  j.field("dtype", dtype_name(s.dtype)).field("layout", layout_name(s.layout));
}

void write_check_json(JsonWriter& j, const CheckResult& c) {
  j.key("check");
  if (!c.checked) {
    j.null();
    return;
  }
  j.begin_object();
  j.field("relative_error", c.error).field("tolerance", c.tolerance).field("passed", c.passed);
  j.end_object();
}

AttentionJob::AttentionJob(const ProblemShape& s, Backend backend, uint64_t seed)
    : shape_(s),
      backend_(backend),
      q_("q", s.dtype, s.batch, s.heads, s.q_len, s.head_dim, s.layout),
      k_("k", s.dtype, s.batch, s.kv_heads, s.k_len, s.head_dim, s.layout),
      v_("v", s.dtype, s.batch, s.kv_heads, s.k_len, s.head_dim, s.layout),
      out_("out", s.dtype, s.batch, s.heads, s.q_len, s.head_dim, s.layout) {
  require(backend != Backend::Auto, "AttentionJob needs a resolved backend");
  std::mt19937_64 rng(seed);
  q_.fill_normal(rng);
  k_.fill_normal(rng);
  v_.fill_normal(rng);
  out_.poison();
  if (backend_ == Backend::Cuda)
    device_ = std::make_unique<DeviceBuffers>(std::vector<const HostTensor*>{&q_, &k_, &v_, &out_});
}

AttentionJob::~AttentionJob() = default;

void AttentionJob::run(const BlockMask& mask) {
  AttentionOptions options;
  options.backend = backend_;
  if (device_) {
    attention(device_->view(0), device_->view(1), device_->view(2), device_->view(3), mask, options);
    device_->synchronize();
  } else {
    attention(q_.view(), k_.view(), v_.view(), out_.view(), mask, options);
  }
}

void AttentionJob::run_naive(const BlockMask& mask) {
  validate_attention(q_.view(), k_.view(), v_.view(), out_.view(), mask, nullptr);
  naive_dense_attention(q_.view(), k_.view(), v_.view(), out_.view(), mask,
                        resolve_scale({}, shape_.head_dim), nullptr);
}

double AttentionJob::error_against_reference(const BlockMask& mask) {
  if (device_) device_->copy_to_host(3, out_);
  HostTensor ref("reference out", DType::F64, shape_.batch, shape_.heads, shape_.q_len,
                 shape_.head_dim, Layout::BHLD);
  ref.poison();
  reference_attention(q_.view(), k_.view(), v_.view(), ref.view(), mask,
                      resolve_scale({}, shape_.head_dim), nullptr);
  return relative_error(out_.view(), ref.view());
}

}  // namespace spattn::cli
