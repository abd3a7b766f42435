// SPDX-License-Identifier: Apache-2.0
// Compiler and toolkit switches shared by the public headers.
#pragma once

#if __cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L)
#  error "cuscope needs C++17 or later: compile with -std=c++17 (nvcc: -std=c++17)"
#endif

#include <cuda_runtime_api.h>

#if defined(__CUDACC__)
#  define CUSCOPE_HOST_DEVICE __host__ __device__
#else
#  define CUSCOPE_HOST_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define CUSCOPE_DETAIL_COLD __attribute__((cold, noinline))
#else
#  define CUSCOPE_DETAIL_COLD
#endif

// cudaMemPoolProps::maxSize, a pool's hard limit, exists from CUDA 12.2.
#if CUDART_VERSION >= 12020
#  define CUSCOPE_HAS_POOL_MAX_SIZE 1
#else
#  define CUSCOPE_HAS_POOL_MAX_SIZE 0
#endif

// cudaStreamGetDevice exists from CUDA 12.8.
#if CUDART_VERSION >= 12080
#  define CUSCOPE_HAS_STREAM_GET_DEVICE 1
#else
#  define CUSCOPE_HAS_STREAM_GET_DEVICE 0
#endif
