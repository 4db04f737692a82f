// isa.cpp - run-time choice of the fast CPU backend's SIMD kernel.
//
// x86-64 builds compile the AVX2 and AVX-512 kernels (SPATTN_CPU_X86 is
// defined) and pick one with __builtin_cpu_supports, which also checks that
// the OS saves the wider registers. Other targets only have the portable kernel.
#include "cpu/fast/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include "plan/plan_state.hpp"
#include "spattn/error.hpp"

namespace spattn::cpu_fast {
namespace {

constexpr int kNotForced = -1;
std::atomic<int> forced_isa{kNotForced};

bool cpu_has_avx512() {
#if defined(SPATTN_CPU_X86)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#if defined(SPATTN_CPU_X86)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

CpuIsa parse_isa(const std::string& name) {
  if (name == "avx512") return CpuIsa::Avx512;
  if (name == "avx2") return CpuIsa::Avx2;
  if (name == "portable") return CpuIsa::Portable;
  fail("SPATTN_CPU_ISA must be one of avx512, avx2, portable, got '", name, "'");
}

// SPATTN_CPU_ISA, validated once; kNotForced when unset or empty.
int environment_isa() {
  static const int isa = [] {
    const char* value = std::getenv("SPATTN_CPU_ISA");
    if (value == nullptr || *value == '\0') return kNotForced;
    const CpuIsa parsed = parse_isa(value);
    require(cpu_isa_supported(parsed), "SPATTN_CPU_ISA=", value,
            " is not supported by this CPU or build");
    return static_cast<int>(parsed);
  }();
  return isa;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Portable: return "portable";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
  }
  return "?";
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Portable: return true;
    case CpuIsa::Avx2: return cpu_has_avx2();
    case CpuIsa::Avx512: return cpu_has_avx512();
  }
  return false;
}

CpuIsa detected_cpu_isa() {
  static const CpuIsa isa = cpu_has_avx512() ? CpuIsa::Avx512
                            : cpu_has_avx2() ? CpuIsa::Avx2
                                             : CpuIsa::Portable;
  return isa;
}

CpuIsa active_cpu_isa() {
  const int forced = forced_isa.load();
  if (forced != kNotForced) return static_cast<CpuIsa>(forced);
  const int from_env = environment_isa();
  if (from_env != kNotForced) return static_cast<CpuIsa>(from_env);
  return detected_cpu_isa();
}

void force_cpu_isa(CpuIsa isa) {
  require(cpu_isa_supported(isa), "cpu isa '", cpu_isa_name(isa),
          "' is not supported by this CPU or build");
  forced_isa.store(static_cast<int>(isa));
  detail::invalidate_cached_plans();  // cached plans hold the instruction set they were made for
}

void clear_forced_cpu_isa() {
  forced_isa.store(kNotForced);
  detail::invalidate_cached_plans();
}

const TileKernel& tile_kernel(CpuIsa isa) {
  require(cpu_isa_supported(isa), "cpu isa '", cpu_isa_name(isa),
          "' is not supported by this CPU or build");
  switch (isa) {
#if defined(SPATTN_CPU_X86)
    case CpuIsa::Avx512: return *avx512_tile_kernel();
    case CpuIsa::Avx2: return *avx2_tile_kernel();
#endif
    default: return *portable_tile_kernel();
  }
}

}  // namespace spattn::cpu_fast
