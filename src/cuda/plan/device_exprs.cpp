// cuda/plan/device_exprs.cpp - upload of a Pattern's expressions and tables
// (see device_exprs.hpp).
#include "cuda/plan/device_exprs.hpp"

#include <map>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"

namespace spattn::cuda_detail {

const void* DeviceExprs::copy(const void* host, size_t bytes, cudaStream_t stream) {
  void* device = nullptr;
  check_cuda(cudaMalloc(&device, bytes), "cudaMalloc of a pattern table");
  allocations_.push_back(device);
  // Pageable sources are staged before cudaMemcpyAsync returns.
  check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync of a pattern table");
  return device;
}

DeviceExprs::DeviceExprs(const Pattern& pattern, cudaStream_t stream) {
  try {
    std::map<const void*, const void*> copied;  // tables shared by terms or heads: once
    auto table = [&](const auto* host, int64_t count) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(host)>>;
      if (host == nullptr || count == 0) return static_cast<const T*>(nullptr);
      auto found = copied.find(host);
      if (found == copied.end())
        found = copied.emplace(host, copy(host, static_cast<size_t>(count) * sizeof(T), stream)).first;
      return static_cast<const T*>(found->second);
    };
    std::vector<PatternExpr> exprs = pattern.exprs();
    for (PatternExpr& e : exprs) {
      for (int32_t n = 0; n < e.num_terms; ++n) {
        PatternTerm& t = e.terms[n];
        if (t.kind == TermKind::BigBird) {
          t.indices = table(t.indices, t.table_rows * t.table_width);
        } else if (t.kind == TermKind::Custom) {
          const int64_t rows = t.table_heads * t.table_rows;
          const int64_t nnz = t.offsets ? t.offsets[rows] : 0;
          t.indices = table(t.indices, nnz);
          t.offsets = table(t.offsets, rows + 1);
        } else if (t.kind == TermKind::Longformer) {
          t.tokens = table(t.tokens, t.num_tokens);
        }
      }
    }
    exprs_ = static_cast<const PatternExpr*>(copy(exprs.data(), exprs.size() * sizeof(PatternExpr), stream));
    num_exprs_ = static_cast<int64_t>(exprs.size());
  } catch (...) {
    for (void* p : allocations_) cudaFree(p);
    throw;
  }
}

DeviceExprs::~DeviceExprs() {
  for (void* p : allocations_) cudaFree(p);  // errors at process teardown are ignored on purpose
}

}  // namespace spattn::cuda_detail
