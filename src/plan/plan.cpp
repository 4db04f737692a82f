// plan/plan.cpp - make_plan: the call shape checked against the mask, the
// backend resolved, and that backend's planner run (spattn/plan.hpp).
#include "spattn/plan.hpp"

#include <atomic>
#include <sstream>

#include "cpu/fast/forward_plan.hpp"
#include "pattern/key_major_plan.hpp"
#include "plan/plan_cache.hpp"
#include "plan/plan_state.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

#if defined(SPATTN_WITH_CUDA)
#include "cuda/common/cuda_check.hpp"
#include "cuda/plan/cuda_plan.hpp"
#include "spattn/cuda.hpp"
#endif

namespace spattn {

std::string CallShape::describe() const {
  std::ostringstream s;
  s << (varlen ? "varlen " : "") << "batch " << batch << ", heads " << q_heads << "/" << kv_heads << ", Lq "
    << q_len << ", Lk " << k_len << ", D " << head_dim << ", " << dtype_name(dtype);
  return s.str();
}

Plan::Plan(BlockMask mask, CallShape shape, std::shared_ptr<const detail::PlanState> state)
    : mask_(std::move(mask)), shape_(shape), state_(std::move(state)) {}

const detail::PlanState& Plan::state() const {
  require(state_ != nullptr, "the plan is empty: make it with make_plan");
  return *state_;
}

Backend Plan::backend() const { return state().backend; }
int Plan::device() const { return state().device; }
bool Plan::has_backward() const { return state().key_major != nullptr; }
std::string Plan::describe() const { return state().description; }

void validate_call_shape(const BlockMask& mask, const CallShape& shape) {
  require(shape.batch >= 0, "batch must be >= 0, got ", shape.batch);
  require(shape.q_heads >= 0, "q heads must be >= 0, got ", shape.q_heads);
  require(shape.kv_heads >= 1, "k heads must be >= 1, got ", shape.kv_heads);
  require(shape.q_heads % shape.kv_heads == 0, "q heads (", shape.q_heads, ") must be a multiple of k heads (",
          shape.kv_heads, ")");
  require(shape.head_dim >= 1, "head_dim must be >= 1, got ", shape.head_dim);
  // A varlen call's lengths are the mask's; what decides whether it can serve them comes first.
  if (shape.varlen) {
    require(mask.pattern() != nullptr, "varlen: the mask must be built from a pattern (varlen_mask), got a "
            "mask without one");
    require(mask.pattern()->is_prefix_stable(), "varlen: the pattern ", mask.pattern()->describe(),
            " depends on the sequence lengths (BigBird, custom masks), so one mask cannot serve every "
            "sequence; run attention() per sequence instead");
    require(mask.q_len() == mask.k_len(), "varlen: the mask must be square (varlen_mask), got Lq=",
            mask.q_len(), " Lk=", mask.k_len());
  }
  require(shape.q_len == mask.q_len(), "the mask was built for Lq=", mask.q_len(), " but q has seq_len ",
          shape.q_len);
  require(shape.k_len == mask.k_len(), "the mask was built for Lk=", mask.k_len(), " but k has seq_len ",
          shape.k_len);
  require(shape.q_heads % mask.num_heads() == 0, "the mask has ", mask.num_heads(),
          " heads, which must divide q heads (", shape.q_heads, ")");
  if (const Pattern* pattern = mask.pattern()) {
    require(shape.q_heads % pattern->num_exprs() == 0, "the mask's pattern has ", pattern->num_exprs(),
            " per-head patterns, which must divide q heads (", shape.q_heads, ")");
    // The predicate of a head-dependent pattern reads the query head index, so
    // its plan must have been built with one mask head per query head.
    require(!pattern->head_dependent() || shape.q_heads == 0 || mask.num_heads() == shape.q_heads,
            "the mask's pattern depends on the head, so the mask must be built for q heads (", shape.q_heads,
            "), got a mask of ", mask.num_heads(), " heads");
  }
}

Backend plan_backend(Backend requested, int device) {
  const bool on_device = device >= 0;
  const Backend backend = requested == Backend::Auto ? (on_device ? Backend::Cuda : Backend::Cpu) : requested;
  // Tensors on a device prove the CUDA backend is there (the common case, asked at every call).
  if (backend == Backend::Cuda && on_device) return backend;
  require(backend_available(backend), "backend '", backend_name(backend),
          "' is not available in this build or on this machine");
  if (backend == Backend::Cuda)
    require(on_device, "backend 'cuda' needs tensors in CUDA device memory, got host memory");
  else
    require(!on_device, "backend '", backend_name(backend), "' runs host tensors, got tensors on CUDA device ",
            device);
  return backend;
}

Plan make_plan(const BlockMask& mask, const CallShape& shape, const PlanOptions& options) {
  validate_call_shape(mask, shape);
  PlanOptions resolved = options;
  resolved.backend = plan_backend(options.backend, options.device);
  return Plan(mask, shape, detail::make_plan_state(mask, shape, resolved));
}

namespace detail {

std::shared_ptr<const PlanState> make_plan_state(const BlockMask& mask, const CallShape& shape,
                                                 const PlanOptions& options) {
  auto state = std::make_shared<PlanState>();
  state->backend = options.backend;
  state->device = options.device;
  switch (options.backend) {
    case Backend::Reference: state->description = "reference"; break;
    case Backend::Cpu:
      state->cpu = std::make_shared<const cpu_fast::ForwardPlan>(cpu_fast::make_forward_plan(mask, shape));
      state->description = cpu_fast::describe(*state->cpu);
      break;
    case Backend::Cuda:
#if defined(SPATTN_WITH_CUDA)
      state->cuda = cuda_detail::make_cuda_plan(mask, shape, options.device, options.stream, options.backward);
      state->description = cuda_detail::describe(*state->cuda);
      break;
#else
      fail("backend 'cuda' is not available in this build");
#endif
    case Backend::Auto: fail("make_plan: the backend must be resolved first");
  }
  if (options.backward && options.backend != Backend::Cuda)
    state->key_major = std::make_shared<const KeyMajorPlan>(key_major_plan(mask.view()));
  return state;
}

Backend check_call_on_plan(const Plan& plan, const CallShape& shape, Backend requested) {
  const Backend backend = plan.backend();
  require(requested == Backend::Auto || requested == backend, "the options ask for backend '",
          backend_name(requested), "' but the plan is for backend '", backend_name(backend), "'");
  require(shape == plan.shape(), "the tensors' shape (", shape.describe(), ") is not the plan's (",
          plan.shape().describe(), ")");
  return backend;
}

int tensor_device(const void* data) {
#if defined(SPATTN_WITH_CUDA)
  return cuda_pointer_device(data);
#else
  (void)data;
  return -1;
#endif
}

Backend host_only_backend(Backend requested, const TensorView& q, const char* what) {
  const bool host_fp64 = requested == Backend::Auto && q.dtype == DType::F64 && tensor_device(q.data) < 0;
  const Backend backend = host_fp64 ? Backend::Reference : resolve_backend(requested, q.data);
  require(backend == Backend::Reference || backend == Backend::Cpu, "backend '", backend_name(backend), "' has no ",
          what, " yet (the host backends have one: pass host tensors)");
  return backend;
}

Plan cached_plan(const BlockMask& mask, const CallShape& shape, Backend requested, const void* q_data,
                 bool backward, void* stream) {
  PlanOptions options;
  options.device = tensor_device(q_data);
#if defined(SPATTN_WITH_CUDA)
  // An empty q holds no memory to name its device: a CUDA call then plans
  // for the current device (it launches nothing).
  if (q_data == nullptr && requested == Backend::Cuda)
    cuda_detail::check_cuda(cudaGetDevice(&options.device), "cudaGetDevice");
#endif
  options.backend = plan_backend(requested, options.device);
  options.backward = backward;
  options.stream = stream;
  return Plan(mask, shape, mask.plan_cache().find_or_make(mask, shape, options));
}

namespace {
std::atomic<uint64_t>& generation() {
  static std::atomic<uint64_t> g{0};
  return g;
}
}  // namespace

uint64_t plan_generation() { return generation().load(); }
void invalidate_cached_plans() { generation().fetch_add(1); }

}  // namespace detail
}  // namespace spattn
