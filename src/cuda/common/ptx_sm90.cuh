// cuda/common/ptx_sm90.cuh - the sm90 (Hopper) instructions of the Hopper
// forward kernel, as thin inline-PTX wrappers written from the PTX ISA:
// mbarriers (init, arrive, expect-tx, parity wait), shared-memory words by
// address, named barriers,
// tensor-memory-accelerator
// tile copies (cp.async.bulk.tensor: loads completing on an mbarrier, stores
// in bulk-async groups), matrix stores (stmatrix), warpgroup
// matrix products (wgmma.mma_async, sm_90a) with their shared-memory matrix
// descriptors and fences, and register reallocation (setmaxnreg, sm_90a).
//
// wgmma m64nNk16 with fp32 accumulation: a warpgroup (4 warps) computes a
// 64 x N tile; warp w holds rows [16 w, 16 w + 16) in the m16n8 C layout of
// mma.sync, stacked over N / 8 columns: d[0][n][c] is row g + 8 (c / 2),
// column 8 n + 2 t + c % 2 (g = lane / 4, t = lane % 4). A from registers
// uses the m16n8k16 A fragment layout per warp.
//
// Shared-memory operands use the 128-byte swizzle: rows of 128 bytes, the
// 16-byte chunk c of row r stored at chunk c ^ (r % 8), atoms of 8 rows (1024
// bytes) 1024-byte aligned. A descriptor (PTX ISA "Matrix Descriptor") holds
// the start address, the leading-dimension byte offset (LBO), the
// stride-dimension byte offset (SBO), all >> 4, and the swizzle mode (1 =
// 128 bytes, bits 62-63). K-major operands (rows contiguous along K): SBO =
// 1024, the distance of 8-row groups; LBO unused; the k-th 16-element step
// starts 32 k bytes into the row. MN-major operands (transposed B, rows
// contiguous along N): 64 N-elements per 128-byte row, LBO = the distance of
// the next 64 N-elements, SBO = 1024, the distance of the next 8 K-rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace spattn::cuda_detail {

// ---- mbarriers ----

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialised barriers visible to the async proxy (the copy engine).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives and adds `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- shared-memory words by address ----
__device__ __forceinline__ void st_shared_u32(uint32_t address, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t address) {
  uint32_t value;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(value) : "r"(address) : "memory");
  return value;
}

// ---- named barriers ----

// Waits at barrier `id` until `threads` threads (this warp's included) have
// arrived or synced there.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at barrier `id` (counting towards `threads`) without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- tensor-memory-accelerator copies ----

// Copies the box at coordinates (c0, .., c4) of a 5-d tensor map into
// shared memory at `dst`; completes `bytes` of transactions on `bar`.
// Elements outside the tensor are written as zeros.
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const void* tensor_map, uint32_t bar, int32_t c0,
                                            int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5, %6}], [%7];\n" ::"r"(dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}

// Copies the box at `src` in shared memory to coordinates (c0, .., c4) of a
// 5-d tensor map, as one bulk-async group member (bulk_commit_group); the
// elements of the box outside the tensor are not written. The shared memory
// must have been written before a fence_async_proxy_shared.
__device__ __forceinline__ void tma_store_5d(const void* tensor_map, uint32_t src, int32_t c0, int32_t c1,
                                             int32_t c2, int32_t c3, int32_t c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
          tensor_map),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Closes the bulk-async group of this thread's copies issued since the last one.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until every bulk-async group this thread committed has read its shared memory.
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Makes this thread's earlier shared-memory writes visible to the async
// proxy (the TMA) once a barrier has ordered them.
__device__ __forceinline__ void fence_async_proxy_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- matrix stores (sm_90) ----

// Stores four 8 x 8 matrices of 16-bit elements: register j of every lane
// holds the pair (row lane / 4, columns 2 (lane % 4), + 1) of matrix j (the
// m16n8 C layout), and lane 8 j + i gives the shared-memory address of row i
// of matrix j (16 bytes).
__device__ __forceinline__ void stmatrix_x4(uint32_t address, const uint32_t (&x)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(x[0]),
               "r"(x[1]), "r"(x[2]), "r"(x[3])
               : "memory");
}

// ---- register reallocation (sm_90a) ----

template <int kRegs>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- warpgroup matrix products (sm_90a) ----

// Descriptor of a 128-byte-swizzled shared-memory operand (see the header).
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((address & 0x3ffff) >> 4) | static_cast<uint64_t>(lbo_bytes >> 4) << 16 |
         static_cast<uint64_t>(sbo_bytes >> 4) << 32 | uint64_t{1} << 62;
}

// The descriptor `desc` moved `bytes` further (a multiple of 16 inside the
// same shared-memory window): one add to the start-address field (bits 0-13,
// in 16-byte units), which cannot carry out since shared addresses stay below
// 2^18. Lets a kernel build a descriptor once and step through a tile with
// compile-time offsets.
__device__ __forceinline__ uint64_t smem_descriptor_plus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Orders register and shared-memory accesses before the following wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most kPending committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across a
// wgmma wait (the asynchronous product writes them behind its back).
template <int kRows, int kCols>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kRows][kCols][4]) {
#pragma unroll
  for (int a = 0; a < kRows; ++a)
#pragma unroll
    for (int n = 0; n < kCols; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[a][n][c])::"memory");
}

// wgmma_ss and wgmma_rs for each (element type, N) are generated from one
// definition by SPATTN_WGMMA_DEFINE below: the PTX of the two element types
// differs only in its type token (bf16, f16), and that of the shapes only in N
// and in the operand count. The accumulator operands of an m64nNk16 product
// come first: the PTX register list %0 .. %(N / 2 - 1) (SPATTN_WGMMA_D_REGS_N*)
// and the matching read-write constraints on d[0][n][c], four per 8-column
// block n (SPATTN_WGMMA_D_N*). The macros are undefined at the end of the file.
#define SPATTN_WGMMA_D_BLOCK(n) "+f"(d[0][n][0]), "+f"(d[0][n][1]), "+f"(d[0][n][2]), "+f"(d[0][n][3])
#define SPATTN_WGMMA_D_N64                                                                            \
  SPATTN_WGMMA_D_BLOCK(0), SPATTN_WGMMA_D_BLOCK(1), SPATTN_WGMMA_D_BLOCK(2), SPATTN_WGMMA_D_BLOCK(3), \
  SPATTN_WGMMA_D_BLOCK(4), SPATTN_WGMMA_D_BLOCK(5), SPATTN_WGMMA_D_BLOCK(6), SPATTN_WGMMA_D_BLOCK(7)
#define SPATTN_WGMMA_D_N128                                                                       \
  SPATTN_WGMMA_D_N64, SPATTN_WGMMA_D_BLOCK(8), SPATTN_WGMMA_D_BLOCK(9), SPATTN_WGMMA_D_BLOCK(10), \
  SPATTN_WGMMA_D_BLOCK(11), SPATTN_WGMMA_D_BLOCK(12), SPATTN_WGMMA_D_BLOCK(13),                   \
  SPATTN_WGMMA_D_BLOCK(14), SPATTN_WGMMA_D_BLOCK(15)
#define SPATTN_WGMMA_D_N256                                                                          \
  SPATTN_WGMMA_D_N128, SPATTN_WGMMA_D_BLOCK(16), SPATTN_WGMMA_D_BLOCK(17), SPATTN_WGMMA_D_BLOCK(18), \
  SPATTN_WGMMA_D_BLOCK(19), SPATTN_WGMMA_D_BLOCK(20), SPATTN_WGMMA_D_BLOCK(21),                      \
  SPATTN_WGMMA_D_BLOCK(22), SPATTN_WGMMA_D_BLOCK(23), SPATTN_WGMMA_D_BLOCK(24),                      \
  SPATTN_WGMMA_D_BLOCK(25), SPATTN_WGMMA_D_BLOCK(26), SPATTN_WGMMA_D_BLOCK(27),                      \
  SPATTN_WGMMA_D_BLOCK(28), SPATTN_WGMMA_D_BLOCK(29), SPATTN_WGMMA_D_BLOCK(30),                      \
  SPATTN_WGMMA_D_BLOCK(31)
#define SPATTN_WGMMA_D_REGS_N64                                                                     \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SPATTN_WGMMA_D_REGS_N128                                                                    \
  SPATTN_WGMMA_D_REGS_N64 ", "                                                                      \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, " \
  "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SPATTN_WGMMA_D_REGS_N256                                                                      \
  SPATTN_WGMMA_D_REGS_N128 ", "                                                                       \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, "   \
  "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
  "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "  \
  "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d (64 x N) (+)= A (64 x 16, shared, K-major) * B (16 x N, shared, K-major);
// d is overwritten when accumulate is false.
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[1][N / 8][4], uint64_t desc_a, uint64_t desc_b, bool accumulate);

// d (64 x N) += A (64 x 16, registers) * B (16 x N, shared, MN-major).
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[1][N / 8][4], const uint32_t (&a)[4], uint64_t desc_b);

// Specialises wgmma_ss<T, N> and wgmma_rs<T, N>, `ptx_type` being the PTX
// type of T. The operands after the N / 2 accumulators, numbered from N / 2:
// for wgmma_ss desc_a and desc_b (`ss_descs`) then accumulate
// (`ss_accumulate`), the scale-d predicate; for wgmma_rs a[0..3] and desc_b
// (`rs_operands`), with scale-d always 1.
#define SPATTN_WGMMA_DEFINE(T, ptx_type, N, ss_descs, ss_accumulate, rs_operands)                          \
  template <>                                                                                              \
  __device__ __forceinline__ void wgmma_ss<T, N>(float(&d)[1][N / 8][4], uint64_t desc_a, uint64_t desc_b, \
                                                 bool accumulate) {                                        \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " ss_accumulate ", 0;\n"                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." ptx_type "." ptx_type                   \
                 " {" SPATTN_WGMMA_D_REGS_N##N "}, " ss_descs ", p, 1, 1, 0, 0;\n}\n"                      \
                 : SPATTN_WGMMA_D_N##N                                                                     \
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));                      \
  }                                                                                                        \
  template <>                                                                                              \
  __device__ __forceinline__ void wgmma_rs<T, N>(float(&d)[1][N / 8][4], const uint32_t(&a)[4],            \
                                                 uint64_t desc_b) {                                        \
    asm volatile("{\n .reg .pred p;\n setp.eq.u32 p, 1, 1;\n"                                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." ptx_type "." ptx_type                   \
                 " {" SPATTN_WGMMA_D_REGS_N##N "}, " rs_operands ", p, 1, 1, 1;\n}\n"                      \
                 : SPATTN_WGMMA_D_N##N                                                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));                               \
  }

// One definition per shape, instantiated for bf16 and fp16.
#define SPATTN_WGMMA_DEFINE_BF16_F16(N, ss_descs, ss_accumulate, rs_operands)         \
  SPATTN_WGMMA_DEFINE(__nv_bfloat16, "bf16", N, ss_descs, ss_accumulate, rs_operands) \
  SPATTN_WGMMA_DEFINE(__half, "f16", N, ss_descs, ss_accumulate, rs_operands)

SPATTN_WGMMA_DEFINE_BF16_F16(64, "%32, %33", "%34", "{%32, %33, %34, %35}, %36")
SPATTN_WGMMA_DEFINE_BF16_F16(128, "%64, %65", "%66", "{%64, %65, %66, %67}, %68")
SPATTN_WGMMA_DEFINE_BF16_F16(256, "%128, %129", "%130", "{%128, %129, %130, %131}, %132")

#undef SPATTN_WGMMA_DEFINE_BF16_F16
#undef SPATTN_WGMMA_DEFINE
#undef SPATTN_WGMMA_D_REGS_N256
#undef SPATTN_WGMMA_D_REGS_N128
#undef SPATTN_WGMMA_D_REGS_N64
#undef SPATTN_WGMMA_D_N256
#undef SPATTN_WGMMA_D_N128
#undef SPATTN_WGMMA_D_N64
#undef SPATTN_WGMMA_D_BLOCK

}  // namespace spattn::cuda_detail
