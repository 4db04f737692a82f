// tools/spattn/attention_job.hpp - one attention problem on fresh random inputs.
//
// Owns q, k, v (N(0, 1)) and out for a shape, dtype and layout, mirrors them to
// the GPU when the backend is CUDA (device_buffers.hpp), and runs the fused
// backend, the naive dense baseline, or a check against the fp64 reference.
// `spattn run` and `spattn bench` are thin loops around it. Also the parts of
// the `spattn run` report that the static and the topk patterns share: the
// problem's table lines and JSON fields, and the --check verdict.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "device_buffers.hpp"
#include "host_tensor.hpp"
#include "spattn/attention.hpp"
#include "timing.hpp"

namespace spattn::cli {

struct ProblemShape {
  int64_t batch = 1;
  int64_t heads = 1;     // query heads
  int64_t kv_heads = 1;  // key/value heads, divides heads
  int64_t q_len = 0;
  int64_t k_len = 0;
  int64_t head_dim = 64;
  DType dtype = DType::F32;
  Layout layout = Layout::BHLD;
};

// Auto becomes best_backend(); throws unless the result is available here.
Backend resolve_backend(Backend requested);

// The relative error --check accepts against the fp64 reference for `dtype`.
double check_tolerance(DType dtype);

// The --check verdict of `spattn run`; `checked` is false without --check.
struct CheckResult {
  bool checked = false;
  double error = 0.0;      // ||out - ref|| / ||ref|| against the fp64 reference
  double tolerance = 0.0;  // check_tolerance(dtype)
  bool passed = true;
};
// Judges `error` against check_tolerance(dtype); NaN fails.
CheckResult judge_error(double error, DType dtype);

class JsonWriter;

// The table lines "backend" and "shape".
void print_problem(std::ostream& os, const ProblemShape& s, Backend backend);
// The table line "check ... vs <against> (tolerance T): ok | FAILED", when checked.
void print_check(std::ostream& os, const CheckResult& c, const std::string& against);
// The JSON fields of the shape: batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, layout.
void write_problem_json(JsonWriter& j, const ProblemShape& s);
// The JSON field "check": {relative_error, tolerance, passed}, or null when not checked.
void write_check_json(JsonWriter& j, const CheckResult& c);

class AttentionJob {
 public:
  // `backend` must be resolved (not Auto). Inputs come from a generator seeded by `seed`.
  AttentionJob(const ProblemShape& shape, Backend backend, uint64_t seed);
  ~AttentionJob();

  const ProblemShape& shape() const { return shape_; }
  Backend backend() const { return backend_; }

  // attention() on the job's backend; returns once the output is written.
  void run(const BlockMask& mask);
  // naive_dense_attention on the host copies (the seed programs' baseline).
  void run_naive(const BlockMask& mask);
  // ||out - ref|| / ||ref|| of the latest run() against reference_attention in fp64.
  double error_against_reference(const BlockMask& mask);

 private:
  ProblemShape shape_;
  Backend backend_;
  HostTensor q_, k_, v_, out_;
  std::unique_ptr<DeviceBuffers> device_;  // set for Backend::Cuda only
};

}  // namespace spattn::cli
