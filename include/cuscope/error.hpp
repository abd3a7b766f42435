// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Errors: cuda_error, out_of_memory and the CUSCOPE_CUDA_TRY macros.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

#include "detail/config.hpp"

namespace cuscope {

/// @brief A CUDA runtime call failed; status() is the cudaError_t it returned.
class cuda_error : public std::runtime_error {
 public:
  /// @brief An error carrying status and a message that names the call and the object.
  cuda_error(cudaError_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}

  /// @brief The cudaError_t the failing call returned.
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  cudaError_t status_;
};

/// @brief An allocation failed for lack of memory: in the device, in a pool under its limit, or in
/// a session's budget. what() says how much was asked, from where, and what was held.
class out_of_memory : public std::bad_alloc {
 public:
  /// @brief An error for a request of requested_bytes, explained by message.
  out_of_memory(std::size_t requested_bytes, const std::string& message,
                cudaError_t status = cudaErrorMemoryAllocation)
      : requested_bytes_(requested_bytes), status_(status), message_(message) {}

  /// @brief The bytes that were asked for.
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }
  /// @brief cudaErrorMemoryAllocation, or cudaSuccess when a session's budget refused the request
  /// before CUDA was asked.
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }
  /// @brief The explanation.
  [[nodiscard]] const char* what() const noexcept override { return message_.what(); }

 private:
  std::size_t requested_bytes_;
  cudaError_t status_;
  std::runtime_error message_;  // copies without throwing, unlike std::string
};

namespace detail {

/// Builds and throws the cuda_error (or out_of_memory) for a failed call. Out of line and cold so
/// that the checking macros add one compare and one branch to the hot path.
[[noreturn]] CUSCOPE_DETAIL_COLD inline void throw_cuda_error(cudaError_t status, const char* call,
                                                              const char* file, int line,
                                                              const std::string& object = {}) {
  (void)cudaGetLastError();  // a non-sticky error must not be reported again by a later call
  std::string message = "cuscope: ";
  if (!object.empty()) message += object + ": ";
  message += call;
  message += " failed with ";
  message += cudaGetErrorName(status);
  message += " (";
  message += cudaGetErrorString(status);
  message += ") at ";
  message += file;
  message += ':';
  message += std::to_string(line);
  if (status == cudaErrorMemoryAllocation) throw out_of_memory(0, message, status);
  throw cuda_error(status, message);
}

/// The never-throwing check for destructors and other noexcept paths: clears a non-sticky error
/// and treats cudaErrorCudartUnloading (objects with static lifetime destroyed after the runtime
/// has shut down) as success.
inline cudaError_t check_nothrow(cudaError_t status) noexcept {
  if (status == cudaSuccess) return status;
  (void)cudaGetLastError();
  return status == cudaErrorCudartUnloading ? cudaSuccess : status;
}

}  // namespace detail
}  // namespace cuscope

/// @brief Calls a CUDA runtime function and throws cuscope::cuda_error (cuscope::out_of_memory for
/// cudaErrorMemoryAllocation) naming the call, the error and file:line when it fails.
#define CUSCOPE_CUDA_TRY(call)                                                         \
  do {                                                                                 \
    const cudaError_t cuscope_status_ = (call);                                        \
    if (cuscope_status_ != cudaSuccess)                                                \
      ::cuscope::detail::throw_cuda_error(cuscope_status_, #call, __FILE__, __LINE__); \
  } while (false)

/// @brief Calls a CUDA runtime function without throwing; evaluates to its cudaError_t, with
/// cudaErrorCudartUnloading reported as cudaSuccess. For destructors and noexcept paths.
#define CUSCOPE_CUDA_TRY_NOTHROW(call) ::cuscope::detail::check_nothrow(call)

/// Like CUSCOPE_CUDA_TRY, naming the object the call was made for. object is evaluated only when
/// the call fails.
#define CUSCOPE_DETAIL_TRY_FOR(call, object)                                                     \
  do {                                                                                           \
    const cudaError_t cuscope_status_ = (call);                                                  \
    if (cuscope_status_ != cudaSuccess)                                                          \
      ::cuscope::detail::throw_cuda_error(cuscope_status_, #call, __FILE__, __LINE__, (object)); \
  } while (false)
