// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Devices: count, current device, and a guard that switches and restores the current one.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "error.hpp"

namespace cuscope {

/// @brief Number of CUDA devices; 0 when there are none.
/// @throws cuda_error for failures other than having no device.
[[nodiscard]] inline int device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return 0;
  }
  CUSCOPE_DETAIL_TRY_FOR(status, std::string("device count"));
  return count;
}

/// @brief The calling thread's current device.
[[nodiscard]] inline int current_device() {
  int device = 0;
  CUSCOPE_CUDA_TRY(cudaGetDevice(&device));
  return device;
}

namespace detail {

/// Throws std::invalid_argument naming who asked when device is not a device of this machine.
inline void check_device(int device, const char* who) {
  const int count = device_count();
  if (device < 0 || device >= count)
    throw std::invalid_argument(std::string(who) + ": device " + std::to_string(device) +
                                " is not valid (" + std::to_string(count) +
                                (count == 1 ? " device" : " devices") + " present)");
}

}  // namespace detail

/// @brief Makes a device current for the calling thread and restores the previous one when it
/// goes out of scope. Switches only when the device differs.
class scoped_device {
 public:
  /// @brief Makes device current.
  /// @throws std::invalid_argument when device does not exist.
  explicit scoped_device(int device) {
    const cudaError_t current = cudaGetDevice(&previous_);
    if (current != cudaSuccess) {
      (void)cudaGetLastError();
      detail::check_device(device, "cuscope::scoped_device");
      CUSCOPE_DETAIL_TRY_FOR(current, std::string("current device"));
    }
    if (device != previous_) {
      const cudaError_t status = cudaSetDevice(device);
      if (status == cudaErrorInvalidDevice) {
        (void)cudaGetLastError();
        detail::check_device(device, "cuscope::scoped_device");
      }
      CUSCOPE_DETAIL_TRY_FOR(status, "device " + std::to_string(device));
      switched_ = true;
    }
  }
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;

  /// @brief Restores the device that was current at construction.
  ~scoped_device() {
    // A destructor cannot throw: a failed restore is tried once more, then reported.
    if (switched_ && CUSCOPE_CUDA_TRY_NOTHROW(cudaSetDevice(previous_)) != cudaSuccess)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaSetDevice(previous_), "cuscope::scoped_device", nullptr);
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

namespace detail {

/// Whether CUDA resolves handle against the calling thread's current device: the legacy default
/// stream (nullptr or cudaStreamLegacy) and the per-thread one.
inline bool is_default_stream(cudaStream_t handle) noexcept {
  return handle == nullptr || handle == legacy_stream_handle() ||
         handle == per_thread_stream_handle();
}

/// While alive, a default stream handle names the default stream of device, the device of the
/// memory a stream-ordered call works on, whatever device is current; does nothing for other
/// streams. Restores the current device.
class stream_device_guard {
 public:
  stream_device_guard(cudaStream_t stream, int device) {
    if (is_default_stream(stream)) on_.emplace(device);
  }

 private:
  std::optional<scoped_device> on_;
};

/// stream_device_guard for destructors: never throws; when the switch fails nothing changes.
class stream_device_guard_nothrow {
 public:
  stream_device_guard_nothrow(cudaStream_t stream, int device) noexcept {
    if (!is_default_stream(stream)) return;
    int current = 0;
    if (!CUSCOPE_DETAIL_CLEANUP(cudaGetDevice(&current), "the device of a default stream",
                                stream) ||
        current == device)
      return;
    if (CUSCOPE_DETAIL_CLEANUP(cudaSetDevice(device), "the device of a default stream", stream))
      previous_ = current;
  }
  stream_device_guard_nothrow(const stream_device_guard_nothrow&) = delete;
  stream_device_guard_nothrow& operator=(const stream_device_guard_nothrow&) = delete;
  ~stream_device_guard_nothrow() {
    if (previous_ >= 0)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaSetDevice(previous_), "the current device", nullptr);
  }

 private:
  int previous_ = -1;
};

}  // namespace detail
}  // namespace cuscope
