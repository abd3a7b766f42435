// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Events: event_ref, a non-owning handle, and event, an owning one; and the orderings
/// between streams that they carry (stream_ref::wait).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "detail/config.hpp"
#include "detail/format.hpp"
#include "device.hpp"
#include "error.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief A non-owning handle to a CUDA event. Trivially copyable; comparisons are noexcept.
///
/// Constructible from a cudaEvent_t, but not from a literal 0 or nullptr.
class event_ref {
 public:
  /// @brief Refers to event.
  constexpr event_ref(cudaEvent_t event) noexcept : event_(event) {}  // NOLINT: implicit
  event_ref(int) = delete;
  event_ref(std::nullptr_t) = delete;

  /// @brief The raw handle.
  [[nodiscard]] constexpr cudaEvent_t get() const noexcept { return event_; }

  /// @brief Captures the work enqueued on stream so far: the event completes when it has run.
  /// Enqueued on stream (which must belong to the event's device); does not synchronize.
  void record(stream_ref stream) const;

  /// @brief Blocks until the work the event captured has completed.
  void synchronize() const { CUSCOPE_DETAIL_TRY_FOR(cudaEventSynchronize(event_), describe()); }

  /// @brief True when the work the event captured has completed (or it was never recorded). Does
  /// not block. A cudaErrorNotReady that the query leaves as the thread's last error is cleared;
  /// any other pending error stays.
  [[nodiscard]] bool ready() const;

  /// @brief "event 0x...", for messages.
  [[nodiscard]] std::string describe() const;

  /// @brief True when both name the same event.
  friend constexpr bool operator==(event_ref a, event_ref b) noexcept {
    return a.event_ == b.event_;
  }
  /// @brief True when they name different events.
  friend constexpr bool operator!=(event_ref a, event_ref b) noexcept {
    return a.event_ != b.event_;
  }

 private:
  cudaEvent_t event_;
};

/// @brief Milliseconds between two recorded events made with timing (event_options::timing).
/// @throws cuda_error when either has not completed (cudaErrorNotReady) or has no timing.
[[nodiscard]] float elapsed_ms(event_ref start, event_ref end);

/// @brief What a new event looks like.
struct event_options {
  /// @brief Device of the event; -1 for the calling thread's current device. An event is
  /// recorded only on streams of its device.
  int device = -1;
  /// @brief Whether elapsed_ms can measure it. Ordering-only events (the default) are cheaper.
  bool timing = false;
  /// @brief Whether synchronize() yields the thread rather than spinning (cudaEventBlockingSync).
  bool blocking_sync = false;
  /// @brief Whether other processes may open it (cudaEventInterprocess; ipc_handle() and
  /// open_ipc_event() in ipc.hpp). Such an event cannot measure time.
  bool interprocess = false;
};

/// @brief An owning CUDA event: created on construction, destroyed with the object.
///
/// Move-only; a moved-from event is empty, destructible and assignable, and any other use of it
/// throws std::logic_error. Destruction does not wait: CUDA releases the event once the work it
/// captured has completed.
class event {
 public:
  /// @brief Creates an event on options.device (the current device by default); the current
  /// device is unchanged afterwards.
  /// @throws std::invalid_argument for a device that does not exist; cuda_error when CUDA fails.
  /// @throws std::invalid_argument for an interprocess event with timing.
  explicit event(const event_options& options = {});

  /// @brief Takes ownership of handle, an event created on device.
  /// @throws std::invalid_argument for a null handle.
  [[nodiscard]] static event adopt(cudaEvent_t handle, int device);

  event(const event&) = delete;
  event& operator=(const event&) = delete;

  /// @brief Takes other's event; other is left empty.
  event(event&& other) noexcept
      : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

  /// @brief Destroys this event and takes other's; other is left empty.
  event& operator=(event&& other) noexcept;

  /// @brief Destroys the event; never throws (a failure goes to the cleanup handler).
  ~event() { destroy(); }

  /// @brief The raw handle; nullptr when empty.
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }
  /// @brief Gives up ownership: the caller destroys the returned handle. Leaves this empty.
  [[nodiscard]] cudaEvent_t release() noexcept { return std::exchange(event_, nullptr); }
  /// @brief True after a move or release().
  [[nodiscard]] bool empty() const noexcept { return event_ == nullptr; }
  /// @brief The device the event belongs to.
  [[nodiscard]] int device() const noexcept { return device_; }

  /// @brief A non-owning reference.
  /// @throws std::logic_error when empty.
  [[nodiscard]] event_ref ref() const&;
  /// @brief A non-owning reference; see ref().
  operator event_ref() const& { return ref(); }  // NOLINT: implicit
  /// @brief Deleted: a reference to a temporary event would outlive the event.
  event_ref ref() && = delete;
  /// @brief Deleted: a reference to a temporary event would outlive the event.
  operator event_ref() && = delete;

  /// @brief See event_ref::record. Enqueued on stream; does not synchronize.
  void record(stream_ref stream) const { ref().record(stream); }
  /// @brief See event_ref::synchronize. Blocks.
  void synchronize() const { ref().synchronize(); }
  /// @brief See event_ref::ready. Does not block.
  [[nodiscard]] bool ready() const { return ref().ready(); }

 private:
  event(cudaEvent_t handle, int device) noexcept : event_(handle), device_(device) {}

  void create(unsigned flags);

  void destroy() noexcept;

  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

inline void stream_ref::wait(event_ref event) const {
  CUSCOPE_DETAIL_TRY_FOR(cudaStreamWaitEvent(stream_, event.get(), 0),
                         describe() + " waiting for " + event.describe());
}

inline void stream::wait(event_ref event) const {
  ref().wait(event);
}

inline void stream::wait(stream_ref other) const {
  ref().wait(other);
}

inline void stream_ref::wait(stream_ref other) const {
  if (other == *this) return;
  // CUDA records an event only on a stream of the event's own device.
  event_options o;
  o.device = detail::stream_device(other, current_device());
  const event e(o);
  e.record(other);
  wait(e);
}

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline float elapsed_ms(event_ref start, event_ref end) {
  float ms = 0;
  CUSCOPE_DETAIL_TRY_FOR(cudaEventElapsedTime(&ms, start.get(), end.get()),
                         start.describe() + " to " + end.describe());
  return ms;
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

namespace detail {

/// Makes later wait, in stream order, for the work enqueued on earlier so far. Default stream
/// handles name the default streams of device, whatever device is current. Enqueued on both;
/// does not synchronize.
void order_after(stream_ref later, stream_ref earlier, int device);

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline void order_after(stream_ref later, stream_ref earlier, int device) {
  if (later == earlier) return;
  const scoped_device on(stream_device(earlier, device));
  const event e;  // on earlier's device, which is current
  e.record(earlier);
  const stream_device_guard on_later(later.get(), device);
  later.wait(e);
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

}  // namespace detail
}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope {

inline void event_ref::record(stream_ref stream) const {
  CUSCOPE_DETAIL_TRY_FOR(cudaEventRecord(event_, stream.get()),
                         describe() + " on " + stream.describe());
}

inline bool event_ref::ready() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    detail::clear_not_ready();
    return false;
  }
  CUSCOPE_DETAIL_CHECK_FOR(status, "cudaEventQuery(event_)", describe());
  return true;
}

inline std::string event_ref::describe() const {
  return "event " + detail::format_pointer(static_cast<const void*>(event_));
}

inline event::event(const event_options& options) {
  if (options.interprocess && options.timing)
    throw std::invalid_argument(
        "cuscope::event: an interprocess event cannot measure time (event_options::timing)");
  const unsigned flags = (options.timing ? cudaEventDefault : cudaEventDisableTiming) |
                         (options.blocking_sync ? cudaEventBlockingSync : cudaEventDefault) |
                         (options.interprocess ? cudaEventInterprocess : cudaEventDefault);
  if (options.device == -1) {  // the current device: no check and no switch
    device_ = current_device();
    create(flags);
    return;
  }
  device_ = options.device;
  detail::check_device(device_, "cuscope::event");
  const scoped_device on(device_);
  create(flags);
}

inline event event::adopt(cudaEvent_t handle, int device) {
  if (handle == nullptr) throw std::invalid_argument("cuscope::event::adopt: null handle");
  return event(handle, device);
}

inline event& event::operator=(event&& other) noexcept {
  if (this != &other) {
    destroy();
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

inline event_ref event::ref() const& {
  if (event_ == nullptr)
    throw std::logic_error("cuscope::event: use of an empty (moved-from or released) event");
  return event_ref(event_);
}

inline void event::create(unsigned flags) {
  CUSCOPE_DETAIL_TRY_FOR(cudaEventCreateWithFlags(&event_, flags),
                         "new event on device " + std::to_string(device_));
}

inline void event::destroy() noexcept {
  // cudaEventDestroy does not depend on the current device.
  if (event_ != nullptr)
    (void)CUSCOPE_DETAIL_CLEANUP(cudaEventDestroy(event_), "cuscope::event", event_);
  event_ = nullptr;
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE
