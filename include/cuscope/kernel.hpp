// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The light header for translation units of kernels and their launchers: device_span<T>
/// and launch_status, and nothing of cuscope's host code.
///
/// nvcc compiles a .cu file once for the host and once more per device architecture; every pass
/// parses what the file includes. <cuscope/cuscope.hpp> costs a kernel file about a second of
/// CPU time per compilation; this header costs it almost nothing: it includes
/// <cuda_runtime_api.h>, <cstddef>, <cstdint> and <type_traits>, and no <string>, <vector>,
/// <stdexcept>, <atomic>, <mutex> or <chrono>. docs/adopting.md ("Compile time") shows the split:
///
/// - the kernel file includes <cuscope/kernel.hpp>; its launchers take device_span<T> (a buffer's
///   span()) and a cudaStream_t (cuscope::stream_ref converts to one implicitly, cuscope::stream
///   through get()), and return the launch_status of their launches;
/// - the host files include <cuscope/cuscope.hpp> (as .cpp files, nvcc is not needed for them at
///   all), own the memory, and hand a launcher's status to cuscope::check_launch, which throws
///   cuscope::cuda_error naming the launch (cuscope::out_of_memory, a std::bad_alloc, when the
///   launch could not get device memory).
///
/// A stream handle with cuscope::stream_ref's members would need their definitions here too (an
/// inline function must be defined wherever it is used), and with them <string> and cuscope's
/// errors: launchers take the raw handle instead.
#pragma once

#include <cuda_runtime_api.h>

#include "detail/config.hpp"
#include "device_span.hpp"

namespace cuscope {

/// @brief What kernel launches returned, as a kernel file hands it to host code: the status that
/// cudaGetLastError() gave right after them, and the launch and place that
/// CUSCOPE_LAUNCH_STATUS named. Trivially copyable; its strings are literals.
///
/// cudaGetLastError() reports a failed launch (a bad configuration, no image for the device, a
/// kernel without a stand-in on the simulated device) and clears it; it also reports an error
/// that an earlier call left pending on the calling thread. Errors in the kernel's execution show
/// later, at a synchronization. cuscope::check_launch (<cuscope/error.hpp>) throws for a failure.
struct launch_status {
  /// @brief cudaSuccess, or the error the launches left.
  cudaError_t status = cudaSuccess;
  /// @brief The launch as written at CUSCOPE_LAUNCH_STATUS ("fill", "scale<float>").
  const char* launch = "";
  /// @brief The file of the check.
  const char* file = "";
  /// @brief Its line.
  int line = 0;

  /// @brief True when status is cudaSuccess.
  [[nodiscard]] constexpr bool ok() const noexcept { return status == cudaSuccess; }
};

}  // namespace cuscope

/// @brief Right after one or more kernel launches: a cuscope::launch_status with
/// cudaGetLastError() (which it clears), the launch named as written, and __FILE__:__LINE__.
/// For example `return CUSCOPE_LAUNCH_STATUS(fill);` after `fill<<<blocks, 256, 0, s>>>(...)`.
#define CUSCOPE_LAUNCH_STATUS(...) \
  (::cuscope::launch_status{::cudaGetLastError(), #__VA_ARGS__, __FILE__, __LINE__})
