// spattn/hd.hpp - marks functions that compile for both host and CUDA device.
//
// The pattern predicates and the block iterator are written once and used by
// the CPU backends and, through nvcc, by the CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define SPATTN_HD __host__ __device__ __forceinline__
#else
#define SPATTN_HD inline
#endif
