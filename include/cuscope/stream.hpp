// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Streams: stream_ref, a non-owning handle, and stream, an owning one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "detail/config.hpp"
#include "detail/format.hpp"
#include "device.hpp"
#include "error.hpp"

namespace cuscope {

class stream;
class event_ref;

namespace detail {

/// After a query returned cudaErrorNotReady: clears it where the runtime left it as the thread's
/// last error (a GPU does; frameworks clear it likewise), and leaves any other pending error.
inline void clear_not_ready() noexcept {
  if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
}

/// Whether stream_ref converts to and from S, another library's stream reference with get() and
/// a constructor from cudaStream_t. False unless an interop header says otherwise: nothing
/// converts merely because it has a get() (a std::unique_ptr<CUstream_st, D> does, and would
/// take ownership of a borrowed stream).
template <class S>
struct stream_interop : std::false_type {};

}  // namespace detail

/// @brief A non-owning handle to a CUDA stream. Trivially copyable; every member is noexcept.
///
/// Implicitly constructible from a cudaStream_t and convertible to one. A literal 0 or nullptr
/// does not convert: name the legacy default stream with stream_ref::legacy(). Conversions to and
/// from cuda::stream_ref come with <cuscope/cuda_stream_ref.hpp>.
class stream_ref {
 public:
  /// @brief Refers to stream.
  constexpr stream_ref(cudaStream_t stream) noexcept : stream_(stream) {}  // NOLINT: implicit
  stream_ref(int) = delete;
  stream_ref(std::nullptr_t) = delete;

  /// @brief Refers to the stream another library's reference names, for the types that an
  /// interop header enables (cuda::stream_ref with <cuscope/cuda_stream_ref.hpp>).
  template <class S, std::enable_if_t<detail::stream_interop<S>::value, int> = 0>
  constexpr stream_ref(const S& other) noexcept : stream_(other.get()) {}  // NOLINT: implicit

  /// @brief Converts to another library's stream reference that an interop header enables.
  template <class S, std::enable_if_t<detail::stream_interop<S>::value, int> = 0>
  constexpr operator S() const noexcept {  // NOLINT: implicit
    return S(stream_);
  }

  /// @brief The legacy default stream, which synchronizes with all blocking streams.
  [[nodiscard]] static stream_ref legacy() noexcept { return {detail::legacy_stream_handle()}; }
  /// @brief The calling thread's per-thread default stream.
  [[nodiscard]] static stream_ref per_thread() noexcept;

  /// @brief The raw handle.
  [[nodiscard]] constexpr cudaStream_t get() const noexcept { return stream_; }
  /// @brief The raw handle, for calls into the CUDA runtime.
  constexpr operator cudaStream_t() const noexcept { return stream_; }  // NOLINT: implicit

  /// @brief Blocks until all work enqueued on the stream has completed.
  /// @throws cuda_error when the stream or work on it failed.
  void synchronize() const { CUSCOPE_DETAIL_TRY_FOR(cudaStreamSynchronize(stream_), describe()); }

  /// @brief True when all work enqueued on the stream has completed. Does not block. A
  /// cudaErrorNotReady that the query leaves as the thread's last error is cleared; any other
  /// pending error stays.
  [[nodiscard]] bool ready() const;

  /// @brief Makes the work enqueued on this stream from now on wait for event (recorded on any
  /// stream, of any device). Enqueued; does not synchronize. Defined in <cuscope/event.hpp>.
  void wait(event_ref event) const;
  /// @brief Makes the work enqueued on this stream from now on wait for the work enqueued on
  /// other so far, through an event recorded on other. Enqueued on both; does not synchronize.
  /// Defined in <cuscope/event.hpp>.
  void wait(stream_ref other) const;

#if CUSCOPE_HAS_STREAM_GET_DEVICE
  /// @brief The device the stream belongs to.
  [[nodiscard]] int device() const {
    int device = 0;
    CUSCOPE_DETAIL_TRY_FOR(cudaStreamGetDevice(stream_, &device), describe());
    return device;
  }
#endif

  /// @brief "stream 0x...", "the legacy default stream" or "the per-thread default stream".
  [[nodiscard]] std::string describe() const;

  /// @brief True when both name the same stream.
  friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept {
    return a.stream_ == b.stream_;
  }
  /// @brief True when they name different streams.
  friend constexpr bool operator!=(stream_ref a, stream_ref b) noexcept {
    return a.stream_ != b.stream_;
  }

 private:
  cudaStream_t stream_;
};

/// @brief What a new stream looks like.
struct stream_options {
  /// @brief Device of the stream; -1 for the calling thread's current device.
  int device = -1;
  /// @brief cudaStreamNonBlocking (the default: no implicit synchronization with the legacy
  /// default stream) or cudaStreamDefault.
  unsigned flags = cudaStreamNonBlocking;
  /// @brief Priority; lower numbers are higher priority. Clamped by CUDA to the device's range.
  int priority = 0;
};

/// @brief An owning CUDA stream: created on construction, destroyed with the object.
///
/// Move-only; a moved-from stream is empty, destructible and assignable. Destruction does not
/// wait: work still enqueued completes and CUDA then releases the stream.
class stream {
 public:
  /// @brief Creates a stream on options.device (the current device by default); the current
  /// device is unchanged afterwards.
  /// @throws std::invalid_argument for a device that does not exist; cuda_error when CUDA fails.
  explicit stream(const stream_options& options = {});

  /// @brief Takes ownership of handle, a stream created on device with the given flags.
  /// @throws std::invalid_argument for a default stream; cuda_error when its priority cannot be
  /// read (the caller then still owns handle).
  [[nodiscard]] static stream adopt(cudaStream_t handle, int device,
                                    unsigned flags = cudaStreamNonBlocking);

  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// @brief Takes other's stream; other is left empty.
  stream(stream&& other) noexcept
      : stream_(std::exchange(other.stream_, nullptr)),
        device_(other.device_),
        flags_(other.flags_),
        priority_(other.priority_) {}

  /// @brief Destroys this stream and takes other's; other is left empty.
  stream& operator=(stream&& other) noexcept;

  /// @brief Destroys the stream; never throws.
  ~stream() { destroy(); }

  /// @brief The raw handle; nullptr when empty.
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  /// @brief Gives up ownership: the caller destroys the returned handle. Leaves this empty.
  [[nodiscard]] cudaStream_t release() noexcept { return std::exchange(stream_, nullptr); }
  /// @brief True after a move or release().
  [[nodiscard]] bool empty() const noexcept { return stream_ == nullptr; }

  /// @brief A non-owning reference.
  /// @throws std::logic_error when empty: an empty handle would mean the legacy default stream.
  [[nodiscard]] stream_ref ref() const&;
  /// @brief A non-owning reference; see ref().
  operator stream_ref() const& { return ref(); }  // NOLINT: implicit
  /// @brief Deleted: a reference to a temporary stream would outlive the stream.
  stream_ref ref() && = delete;
  /// @brief Deleted: a reference to a temporary stream would outlive the stream.
  operator stream_ref() && = delete;

  /// @brief The device the stream belongs to.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// @brief The creation flags.
  [[nodiscard]] unsigned flags() const noexcept { return flags_; }
  /// @brief The priority CUDA gave the stream.
  [[nodiscard]] int priority() const noexcept { return priority_; }

  /// @brief Blocks until all work enqueued on the stream has completed.
  void synchronize() const { ref().synchronize(); }
  /// @brief True when all work enqueued on the stream has completed. Does not block.
  [[nodiscard]] bool ready() const { return ref().ready(); }
  /// @brief See stream_ref::wait(event_ref). Enqueued; does not synchronize.
  void wait(event_ref event) const;
  /// @brief See stream_ref::wait(stream_ref). Enqueued on both; does not synchronize.
  void wait(stream_ref other) const;

 private:
  stream(cudaStream_t handle, int device, unsigned flags) noexcept
      : stream_(handle), device_(device), flags_(flags) {}

  std::string describe_new() const;

  void destroy() noexcept;

  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  unsigned flags_ = cudaStreamNonBlocking;
  int priority_ = 0;
};

namespace detail {

/// The device of stream; for a default stream handle (or without cudaStreamGetDevice), device.
int stream_device(stream_ref stream, int device);

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline int stream_device(stream_ref stream, int device) {
#  if CUSCOPE_HAS_STREAM_GET_DEVICE
  if (!is_default_stream(stream.get())) {
    CUSCOPE_DETAIL_TRY_FOR(cudaStreamGetDevice(stream.get(), &device), stream.describe());
  }
#  endif
  return device;
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

}  // namespace detail
}  // namespace cuscope

// stream_ref::wait is defined with the events it waits for.

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope {

inline stream_ref stream_ref::per_thread() noexcept {
  return {detail::per_thread_stream_handle()};
}

inline bool stream_ref::ready() const {
  const cudaError_t status = cudaStreamQuery(stream_);
  if (status == cudaErrorNotReady) {
    detail::clear_not_ready();
    return false;
  }
  CUSCOPE_DETAIL_CHECK_FOR(status, "cudaStreamQuery(stream_)", describe());
  return true;
}

inline std::string stream_ref::describe() const {
  // A null handle is the legacy stream, or the per-thread one in code compiled for it.
  if (stream_ == nullptr) return "the default stream (a null handle)";
  if (stream_ == detail::legacy_stream_handle()) return "the legacy default stream";
  if (stream_ == detail::per_thread_stream_handle()) return "the per-thread default stream";
  return "stream " + detail::format_pointer(static_cast<const void*>(stream_));
}

inline stream::stream(const stream_options& options) : flags_(options.flags) {
  device_ = options.device == -1 ? current_device() : options.device;
  detail::check_device(device_, "cuscope::stream");
  scoped_device on(device_);
  CUSCOPE_DETAIL_TRY_FOR(cudaStreamCreateWithPriority(&stream_, flags_, options.priority),
                         "new stream on device " + std::to_string(device_));
  // CUDA clamps the priority asked for: priority() says what it gave, or the stream is not made.
  try {
    CUSCOPE_DETAIL_TRY_FOR(cudaStreamGetPriority(stream_, &priority_), describe_new());
  } catch (...) {
    destroy();
    throw;
  }
}

inline stream stream::adopt(cudaStream_t handle, int device, unsigned flags) {
  if (handle == nullptr || handle == detail::legacy_stream_handle() ||
      handle == detail::per_thread_stream_handle())
    throw std::invalid_argument("cuscope::stream::adopt: a default stream cannot be owned");
  int priority = 0;
  CUSCOPE_DETAIL_TRY_FOR(cudaStreamGetPriority(handle, &priority),
                         "cuscope::stream::adopt of " + stream_ref(handle).describe());
  stream s(handle, device, flags);
  s.priority_ = priority;
  return s;
}

inline stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    destroy();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
    flags_ = other.flags_;
    priority_ = other.priority_;
  }
  return *this;
}

inline stream_ref stream::ref() const& {
  if (stream_ == nullptr)
    throw std::logic_error("cuscope::stream: use of an empty (moved-from or released) stream");
  return stream_ref(stream_);
}

inline std::string stream::describe_new() const {
  return "new " + stream_ref(stream_).describe() + " on device " + std::to_string(device_);
}

inline void stream::destroy() noexcept {
  // cudaStreamDestroy does not depend on the current device.
  if (stream_ != nullptr)
    (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamDestroy(stream_), "cuscope::stream", stream_);
  stream_ = nullptr;
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE

#include "event.hpp"  // IWYU pragma: export
