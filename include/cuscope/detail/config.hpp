// SPDX-License-Identifier: Apache-2.0
// Compiler and toolkit switches shared by the public headers.
#pragma once

#if __cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L)
#  error "cuscope needs C++17 or later: compile with -std=c++17 (nvcc: -std=c++17)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#  define CUSCOPE_HOST_DEVICE __host__ __device__
#else
#  define CUSCOPE_HOST_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define CUSCOPE_DETAIL_COLD __attribute__((cold, noinline))
#  define CUSCOPE_DETAIL_NOINLINE __attribute__((noinline))
// The few hot-path members that call a cold path: compilers stop inlining them at the depth of a
// buffer's constructor, where a call costs more than the member's own work.
#  define CUSCOPE_DETAIL_HOT_INLINE __attribute__((always_inline))
#else
#  define CUSCOPE_DETAIL_COLD
#  define CUSCOPE_DETAIL_NOINLINE
#  define CUSCOPE_DETAIL_HOT_INLINE
#endif

// nvcc compiles a translation unit once for the host and once more per device architecture. The
// device passes check the host code too, so they need cuscope's declarations, but none of its
// host-only function bodies: definitions under CUSCOPE_DETAIL_HOST_CODE are left out of them,
// which spares every architecture the parsing of cuscope's implementation.
#if defined(__CUDA_ARCH__)
#  define CUSCOPE_DETAIL_HOST_CODE 0
#else
#  define CUSCOPE_DETAIL_HOST_CODE 1
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

// CUDA runs on 64-bit hosts only: sizes, 64-bit attributes and addresses convert without casts.
static_assert(sizeof(std::size_t) == sizeof(std::uint64_t) &&
                  sizeof(std::uintptr_t) == sizeof(std::uint64_t),
              "cuscope needs a 64-bit host, as CUDA does");

namespace cuscope::detail {

// The legacy and the per-thread default stream. CUDA's headers define cudaStreamLegacy and
// cudaStreamPerThread as C-style casts, which -Wold-style-cast reports wherever they are named
// when CUDA's include directory is given with -I; they are named here only.
#if defined(__GNUC__) || defined(__clang__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
inline cudaStream_t legacy_stream_handle() noexcept {
  return cudaStreamLegacy;
}
inline cudaStream_t per_thread_stream_handle() noexcept {
  return cudaStreamPerThread;
}
#if defined(__GNUC__) || defined(__clang__)
#  pragma GCC diagnostic pop
#endif

}  // namespace cuscope::detail
