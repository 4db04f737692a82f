// isa.hpp - which SIMD kernel the fast CPU backend runs, chosen at run time.
//
// The best instruction set the CPU and the build support is detected once
// (AVX-512 F/BW/VL/DQ, else AVX2+FMA, else portable). It can be overridden by
// the environment variable SPATTN_CPU_ISA=avx512|avx2|portable (read once) or,
// in tests and benchmarks, by force_cpu_isa(). Declarations only: the per-ISA
// translation units include this header.
#pragma once

#include "cpu/fast/kernel_args.hpp"

namespace spattn::cpu_fast {

enum class CpuIsa : int { Portable = 0, Avx2 = 1, Avx512 = 2 };

const char* cpu_isa_name(CpuIsa isa);
// Was the kernel compiled in and does this CPU run it?
bool cpu_isa_supported(CpuIsa isa);
// The best supported instruction set.
CpuIsa detected_cpu_isa();
// The instruction set cpu_attention uses now: forced, else SPATTN_CPU_ISA, else detected.
CpuIsa active_cpu_isa();
// Forces an instruction set (throws spattn::Error if unsupported) until cleared.
void force_cpu_isa(CpuIsa isa);
void clear_forced_cpu_isa();

const TileKernel& tile_kernel(CpuIsa isa);

// Per-ISA accessors (simd_*.cpp); the x86 ones exist only in x86-64 builds.
const TileKernel* portable_tile_kernel();
const TileKernel* avx2_tile_kernel();
const TileKernel* avx512_tile_kernel();

}  // namespace spattn::cpu_fast
