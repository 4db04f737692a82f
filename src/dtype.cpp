// dtype.cpp - parsing element-type names.
#include "spattn/dtype.hpp"

#include "spattn/error.hpp"

namespace spattn {

DType parse_dtype(const std::string& name, const char* param) {
  if (name == "fp32" || name == "float32") return DType::F32;
  if (name == "fp16" || name == "float16") return DType::F16;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp64" || name == "float64") return DType::F64;
  fail(param, " must be one of fp32, fp16, bf16, fp64, got '", name, "'");
}

}  // namespace spattn
