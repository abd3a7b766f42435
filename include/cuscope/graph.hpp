// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief CUDA graphs: whether a stream is capturing, and the device's graph memory (the memory
/// of allocations made inside captured graphs, which no pool's statistics or trim include).
/// docs/graphs.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "detail/config.hpp"
#include "device.hpp"
#include "error.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief Where a stream stands with stream capture (cudaStreamIsCapturing).
enum class capture_status {
  none,         ///< Not capturing: work runs.
  active,       ///< Capturing into a graph: work is recorded, not run.
  invalidated,  ///< Was capturing until an illegal call; cudaStreamEndCapture must end it.
};

/// @brief The device's graph memory (cudaDeviceGetGraphMemAttribute), in bytes.
struct graph_memory_stats {
  std::size_t used_bytes = 0;           ///< Mapped for graphs' allocations.
  std::size_t used_high_bytes = 0;      ///< Peak of used_bytes since the last reset.
  std::size_t reserved_bytes = 0;       ///< Held from the device by the graph allocator.
  std::size_t reserved_high_bytes = 0;  ///< Peak of reserved_bytes since the last reset.
  /// @brief Reserved and not mapped: what trim_graph_memory gives back at least.
  [[nodiscard]] std::size_t cached_bytes() const noexcept {
    return reserved_bytes > used_bytes ? reserved_bytes - used_bytes : 0;
  }
};

/// @brief The capture status of stream. Asking does not disturb a capture. The legacy default
/// stream counts as active while a blocking stream of its device captures: using it then would
/// invalidate that capture.
/// @throws cuda_error when the stream is invalid.
[[nodiscard]] capture_status stream_capture_status(stream_ref stream);

/// @brief True while stream captures (or its capture was invalidated and has not ended): work
/// enqueued on it is recorded into a graph, and synchronizing it is illegal.
/// @throws cuda_error when the stream is invalid.
[[nodiscard]] bool is_capturing(stream_ref stream);

/// @brief The graph memory of device.
/// @throws std::invalid_argument for an invalid device; cuda_error.
[[nodiscard]] graph_memory_stats graph_memory(int device);

/// @brief Starts the peaks of device's graph memory afresh (drivers may keep them where they
/// are: the documentation does not promise a reset).
/// @throws std::invalid_argument for an invalid device; cuda_error.
void reset_graph_memory_peaks(int device);

/// @brief Gives the device's graph memory that no executing or scheduled graph uses back to the
/// driver (cudaDeviceGraphMemTrim). Does not synchronize: memory of launches still pending stays.
/// Synchronize the streams that launched graphs first (a session with
/// session_options::trim_graph_memory does both).
/// @throws std::invalid_argument for an invalid device; cuda_error.
void trim_graph_memory(int device);

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline capture_status stream_capture_status(stream_ref stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream.get(), &status);
  if (e == cudaErrorStreamCaptureImplicit) {
    (void)cudaGetLastError();
    return capture_status::active;
  }
  CUSCOPE_DETAIL_CHECK_FOR(e, "cudaStreamIsCapturing(stream.get(), &status)", stream.describe());
  switch (status) {
    case cudaStreamCaptureStatusActive:
      return capture_status::active;
    case cudaStreamCaptureStatusInvalidated:
      return capture_status::invalidated;
    default:
      return capture_status::none;
  }
}

inline bool is_capturing(stream_ref stream) {
  return stream_capture_status(stream) != capture_status::none;
}

inline graph_memory_stats graph_memory(int device) {
  detail::check_device(device, "cuscope::graph_memory");
  const auto get = [device](cudaGraphMemAttributeType attr) -> std::size_t {
    std::uint64_t value = 0;
    CUSCOPE_DETAIL_TRY_FOR(cudaDeviceGetGraphMemAttribute(device, attr, &value),
                           "graph memory of device " + std::to_string(device));
    return value;
  };
  graph_memory_stats s;
  s.used_bytes = get(cudaGraphMemAttrUsedMemCurrent);
  s.used_high_bytes = get(cudaGraphMemAttrUsedMemHigh);
  s.reserved_bytes = get(cudaGraphMemAttrReservedMemCurrent);
  s.reserved_high_bytes = get(cudaGraphMemAttrReservedMemHigh);
  return s;
}

inline void reset_graph_memory_peaks(int device) {
  detail::check_device(device, "cuscope::reset_graph_memory_peaks");
  for (const cudaGraphMemAttributeType attr :
       {cudaGraphMemAttrUsedMemHigh, cudaGraphMemAttrReservedMemHigh}) {
    std::uint64_t zero = 0;
    CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSetGraphMemAttribute(device, attr, &zero),
                           "graph memory of device " + std::to_string(device));
  }
}

inline void trim_graph_memory(int device) {
  detail::check_device(device, "cuscope::trim_graph_memory");
  CUSCOPE_DETAIL_TRY_FOR(cudaDeviceGraphMemTrim(device),
                         "graph memory of device " + std::to_string(device));
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

namespace detail {

/// The current used and reserved graph memory of device (a valid one), for object's messages.
void graph_memory_now(int device, std::size_t& used, std::size_t& reserved,
                      const std::string& object);

/// Throws std::logic_error naming who and stream when stream captures: what follows would
/// synchronize it, which invalidates the capture.
void refuse_in_capture(stream_ref stream, int device, const std::string& who, const char* what);

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline void graph_memory_now(int device, std::size_t& used, std::size_t& reserved,
                             const std::string& object) {
  std::uint64_t value = 0;
  CUSCOPE_DETAIL_TRY_FOR(
      cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemCurrent, &value), object);
  used = value;
  CUSCOPE_DETAIL_TRY_FOR(
      cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrReservedMemCurrent, &value), object);
  reserved = value;
}

inline void refuse_in_capture(stream_ref stream, int device, const std::string& who,
                              const char* what) {
  const stream_device_guard on(stream.get(), device);
  if (!is_capturing(stream)) return;
  throw std::logic_error(who + ": cannot " + what + " while " + stream.describe() +
                         " is capturing a CUDA graph (a synchronization would invalidate the "
                         "capture); end the capture with cudaStreamEndCapture first");
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

}  // namespace detail

}  // namespace cuscope
