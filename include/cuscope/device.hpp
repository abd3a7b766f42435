// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Devices: count, current device, and a guard that switches and restores the current one.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "detail/config.hpp"
#include "error.hpp"

namespace cuscope {

/// @brief Number of CUDA devices; 0 when there are none.
/// @throws cuda_error for failures other than having no device.
[[nodiscard]] int device_count();

/// @brief The calling thread's current device.
[[nodiscard]] int current_device();

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline int device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return 0;
  }
  CUSCOPE_DETAIL_CHECK_FOR(status, "cudaGetDeviceCount(&count)", std::string("device count"));
  return count;
}

inline int current_device() {
  int device = 0;
  CUSCOPE_CUDA_TRY(cudaGetDevice(&device));
  return device;
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

namespace detail {

/// Makes device current again for the calling thread after a guard switched away from it; never
/// throws. Tried twice: since CUDA 12.0 cudaSetDevice also initializes the device's primary
/// context, which can fail for a moment (for lack of memory) and succeed later, and a thread left
/// on the wrong device would send all its later work there. A second failure goes to the cleanup
/// handler, naming object.
inline bool restore_device_nothrow(int device, const char* object) noexcept {
  if (CUSCOPE_CUDA_TRY_NOTHROW(cudaSetDevice(device)) == cudaSuccess) return true;
  return CUSCOPE_DETAIL_CLEANUP(cudaSetDevice(device), object, nullptr);
}

/// Throws std::invalid_argument naming who asked when device is not a device of this machine, and
/// cuda_error when the devices cannot be counted for another reason than having none.
void check_device(int device, const char* who);

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline void check_device(int device, const char* who) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice) {
    (void)cudaGetLastError();
    count = 0;
  } else {
    // A driver too old for the runtime, or a broken one, is not "no device": say which.
    CUSCOPE_DETAIL_CHECK_FOR(status, "cudaGetDeviceCount(&count)",
                             std::string(who) + ": device " + std::to_string(device));
  }
  if (device < 0 || device >= count)
    throw std::invalid_argument(
        std::string(who) + ": device " + std::to_string(device) + " is not valid (" +
        std::to_string(count) + (count == 1 ? " device" : " devices") + " present" +
        (status == cudaErrorNoDevice ? ": cudaGetDeviceCount(&count) answered cudaErrorNoDevice"
                                     : "") +
        ")");
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

/// Makes device current for the calling thread: returns the device that was current when it
/// switched, -1 when device was current already. Throws std::invalid_argument when device does
/// not exist, cuda_error for another failure.
int make_device_current(int device);

}  // namespace detail

/// @brief Makes a device current for the calling thread and restores the previous one when it
/// goes out of scope. Switches only when the device differs.
class scoped_device {
 public:
  /// @brief Makes device current.
  /// @throws std::invalid_argument when device does not exist.
  explicit scoped_device(int device) : previous_(detail::make_device_current(device)) {}
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;

  /// @brief Restores the device that was current at construction.
  ~scoped_device() {
    // A destructor cannot throw: a failed restore is tried once more, then reported.
    if (previous_ >= 0) (void)detail::restore_device_nothrow(previous_, "cuscope::scoped_device");
  }

 private:
  int previous_;  // -1: nothing switched
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
  stream_device_guard(cudaStream_t stream, int device)
      : previous_(is_default_stream(stream) ? make_device_current(device) : -1) {}
  stream_device_guard(const stream_device_guard&) = delete;
  stream_device_guard& operator=(const stream_device_guard&) = delete;
  ~stream_device_guard() {
    if (previous_ >= 0) (void)restore_device_nothrow(previous_, "cuscope::scoped_device");
  }

 private:
  int previous_;  // -1: nothing switched
};

/// stream_device_guard for destructors: never throws; when the switch fails nothing changes.
class stream_device_guard_nothrow {
 public:
  stream_device_guard_nothrow(cudaStream_t stream, int device) noexcept;
  stream_device_guard_nothrow(const stream_device_guard_nothrow&) = delete;
  stream_device_guard_nothrow& operator=(const stream_device_guard_nothrow&) = delete;
  ~stream_device_guard_nothrow() {
    if (previous_ >= 0) (void)restore_device_nothrow(previous_, "the current device");
  }

 private:
  int previous_ = -1;
};

/// Makes device current for a scope where nothing may throw, for a best-effort query: ok() says
/// whether it is current. A failure to switch changes nothing and is cleared; the previous device
/// is restored as restore_device_nothrow does.
class device_switch_nothrow {
 public:
  explicit device_switch_nothrow(int device) noexcept;
  device_switch_nothrow(const device_switch_nothrow&) = delete;
  device_switch_nothrow& operator=(const device_switch_nothrow&) = delete;
  ~device_switch_nothrow() {
    if (previous_ >= 0) (void)restore_device_nothrow(previous_, "the current device");
  }

  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
};

}  // namespace detail
}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope {

inline int detail::make_device_current(int device) {
  int previous = 0;
  const cudaError_t current = cudaGetDevice(&previous);
  if (current != cudaSuccess) {
    (void)cudaGetLastError();
    check_device(device, "cuscope::scoped_device");
    CUSCOPE_DETAIL_CHECK_FOR(current, "cudaGetDevice(&previous)", std::string("current device"));
  }
  if (device == previous) return -1;
  const cudaError_t status = cudaSetDevice(device);
  if (status == cudaErrorInvalidDevice) {
    (void)cudaGetLastError();
    check_device(device, "cuscope::scoped_device");
  }
  CUSCOPE_DETAIL_CHECK_FOR(status, "cudaSetDevice(device)", "device " + std::to_string(device));
  return previous;
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope::detail {

inline stream_device_guard_nothrow::stream_device_guard_nothrow(cudaStream_t stream,
                                                                int device) noexcept {
  if (!is_default_stream(stream)) return;
  int current = 0;
  if (!CUSCOPE_DETAIL_CLEANUP(cudaGetDevice(&current), "the device of a default stream", stream) ||
      current == device)
    return;
  if (CUSCOPE_DETAIL_CLEANUP(cudaSetDevice(device), "the device of a default stream", stream))
    previous_ = current;
}

inline device_switch_nothrow::device_switch_nothrow(int device) noexcept {
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (current != device) {
    if (cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    previous_ = current;
  }
  ok_ = true;
}

}  // namespace cuscope::detail
#endif  // CUSCOPE_DETAIL_HOST_CODE
