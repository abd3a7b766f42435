// SPDX-License-Identifier: Apache-2.0
// What every benchmark needs first: whether it runs on the simulated device, size units, and the
// check of CUDA calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#ifndef CUSCOPE_BENCH_SIMULATED
#  define CUSCOPE_BENCH_SIMULATED 0
#endif

namespace cuscope_bench {

inline constexpr bool simulated = CUSCOPE_BENCH_SIMULATED != 0;
inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

// Errors ------------------------------------------------------------------------------------------

/// Throws std::runtime_error naming the call and the CUDA error when status is not cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(std::string(what) + " failed with " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ")");
}

}  // namespace cuscope_bench

/// Checks a CUDA runtime call; the benchmark stops with a non-zero exit code when it fails.
#define CUSCOPE_BENCH_CHECK(call) ::cuscope_bench::check((call), #call)
