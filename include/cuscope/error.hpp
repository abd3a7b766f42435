// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Errors: cuda_error, out_of_memory, the CUSCOPE_CUDA_TRY macros, and the cleanup
/// handler that every failure in a destructor or other never-throwing path is reported to.
#pragma once

#include <cuda_runtime_api.h>

#include <cassert>
#include <cstddef>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

#include "detail/config.hpp"
#include "kernel.hpp"

#if !defined(__GNUC__) && !defined(__clang__)
#  include <atomic>
#endif

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

/// @brief A cleanup step that failed where nothing may throw: a destructor, a move assignment, the
/// end of a session or a batch range. Every pointer is valid only during the handler's call.
struct cleanup_error {
  /// @brief The call or step that failed, as written: "cudaStreamDestroy(stream_)",
  /// "session::finish".
  const char* operation = "";
  /// @brief What was being cleaned up: "cuscope::stream", "cuscope::device_buffer"...
  const char* object = "";
  /// @brief Its handle (stream, event, pool, device pointer) or address; may be null.
  const void* handle = nullptr;
  /// @brief The bytes involved (of an allocation that could not be freed); 0 when none.
  std::size_t bytes = 0;
  /// @brief The CUDA status; cudaSuccess when the failure was an exception that carried none.
  cudaError_t status = cudaSuccess;
  /// @brief cudaGetErrorString(status), or the exception's what().
  const char* message = "";
  /// @brief Where in cuscope the step was made.
  const char* file = "";
  /// @brief Its line.
  int line = 0;
};

/// @brief Receives every cleanup failure. Called on the thread that failed, from a destructor or
/// other noexcept path: it must not throw, and should not block for long.
using cleanup_handler = void (*)(const cleanup_error&) noexcept;

/// @brief The handler in use until another is set: prints one line to stderr and, in builds
/// without NDEBUG or CUSCOPE_NO_CLEANUP_ASSERT, fails an assertion, as a failed cleanup means a
/// bug (a stream destroyed twice, memory freed on a dead stream) or a broken device.
void default_cleanup_handler(const cleanup_error& e) noexcept;

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline void default_cleanup_handler(const cleanup_error& e) noexcept {
  char bytes[48] = "";
  if (e.bytes != 0) std::snprintf(bytes, sizeof bytes, " (%zu bytes)", e.bytes);
  std::fprintf(stderr, "cuscope: cleanup failed: %s for %s %p%s: %s%s%s (%s:%d)\n", e.operation,
               e.object, e.handle, bytes, e.status != cudaSuccess ? cudaGetErrorName(e.status) : "",
               e.status != cudaSuccess ? ": " : "", e.message, e.file, e.line);
#  if !defined(CUSCOPE_NO_CLEANUP_ASSERT)
  assert(false &&
         "cuscope: a cleanup step failed (define CUSCOPE_NO_CLEANUP_ASSERT or set a "
         "cleanup_handler to continue)");
#  endif
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

namespace detail {

// One handler for the program (per shared library where symbols are not shared, as on Windows).
// GCC and Clang reach it through their atomic builtins, which spares every includer <atomic>.
#if defined(__GNUC__) || defined(__clang__)
inline cleanup_handler cleanup_handler_slot = &default_cleanup_handler;
inline cleanup_handler exchange_cleanup_handler(cleanup_handler h) noexcept {
  return __atomic_exchange_n(&cleanup_handler_slot, h, __ATOMIC_ACQ_REL);
}
inline cleanup_handler load_cleanup_handler() noexcept {
  return __atomic_load_n(&cleanup_handler_slot, __ATOMIC_ACQUIRE);
}
#else
inline std::atomic<cleanup_handler> cleanup_handler_slot{&default_cleanup_handler};
inline cleanup_handler exchange_cleanup_handler(cleanup_handler h) noexcept {
  return cleanup_handler_slot.exchange(h);
}
inline cleanup_handler load_cleanup_handler() noexcept {
  return cleanup_handler_slot.load();
}
#endif

}  // namespace detail

/// @brief Makes handler receive cleanup failures from now on, in every thread; nullptr restores
/// default_cleanup_handler. Returns the handler it replaces.
inline cleanup_handler set_cleanup_handler(cleanup_handler handler) noexcept {
  return detail::exchange_cleanup_handler(handler != nullptr ? handler : &default_cleanup_handler);
}

/// @brief The handler that receives cleanup failures now.
[[nodiscard]] inline cleanup_handler get_cleanup_handler() noexcept {
  return detail::load_cleanup_handler();
}

/// @brief Sets a cleanup handler for a scope and restores the previous one at its end. The
/// handler is process-wide: scopes on several threads at once replace each other's.
class scoped_cleanup_handler {
 public:
  /// @brief Makes handler current (nullptr: the default one).
  explicit scoped_cleanup_handler(cleanup_handler handler) noexcept
      : previous_(set_cleanup_handler(handler)) {}
  scoped_cleanup_handler(const scoped_cleanup_handler&) = delete;
  scoped_cleanup_handler& operator=(const scoped_cleanup_handler&) = delete;
  /// @brief Restores the handler that was current at construction.
  ~scoped_cleanup_handler() { (void)set_cleanup_handler(previous_); }

 private:
  cleanup_handler previous_;
};

namespace detail {

/// Hands a cleanup failure to the current handler. Out of line and cold: the cleanup paths keep
/// one compare on success.
void report_cleanup(const char* operation, const char* object, const void* handle,
                    cudaError_t status, const char* message, const char* file, int line,
                    std::size_t bytes = 0) noexcept;

/// The check of a CUDA call made in cleanup: true on success and for cudaErrorCudartUnloading
/// (objects with static lifetime destroyed after the runtime shut down, as RMM treats it);
/// otherwise clears a non-sticky error, reports to the cleanup handler and returns false.
inline bool cleanup_ok(cudaError_t status, const char* operation, const char* object,
                       const void* handle, const char* file, int line,
                       std::size_t bytes = 0) noexcept {
  if (status == cudaSuccess) return true;
  (void)cudaGetLastError();
  if (status == cudaErrorCudartUnloading) return true;
  report_cleanup(operation, object, handle, status, cudaGetErrorString(status), file, line, bytes);
  return false;
}

/// Builds and throws the cuda_error (or out_of_memory) for a failed call. Out of line and cold so
/// that the checking macros add one compare and one branch to the hot path.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line,
                                   const std::string& object = {});

}  // namespace detail

/// @brief Throws cuda_error (out_of_memory for cudaErrorMemoryAllocation) when launched failed,
/// naming the launch and the place of its CUSCOPE_LAUNCH_STATUS; does nothing when it succeeded.
/// For the status a kernel file's launcher returns (<cuscope/kernel.hpp>).
inline void check_launch(const launch_status& launched) {
  if (launched.status != cudaSuccess)
    detail::throw_cuda_error(launched.status, launched.launch, launched.file, launched.line,
                             "kernel launch");
}

namespace detail {

/// The never-throwing check for destructors and other noexcept paths: clears a non-sticky error
/// and treats cudaErrorCudartUnloading (objects with static lifetime destroyed after the runtime
/// has shut down) as success.
inline cudaError_t check_nothrow(cudaError_t status) noexcept {
  if (status == cudaSuccess) return status;
  (void)cudaGetLastError();
  return status == cudaErrorCudartUnloading ? cudaSuccess : status;
}

/// The message of the exception being handled (inside a catch block).
std::string exception_message();

/// Reports the exception being handled (inside a catch block) as a cleanup failure.
void report_cleanup_exception(const char* operation, const char* object, const void* handle,
                              const char* file, int line) noexcept;

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

CUSCOPE_DETAIL_COLD inline void report_cleanup(const char* operation, const char* object,
                                               const void* handle, cudaError_t status,
                                               const char* message, const char* file, int line,
                                               std::size_t bytes) noexcept {
  // At process exit the runtime frees everything itself: nothing is left to report, also when
  // the unloading reached a cleanup as an exception (a session's end in its destructor).
  if (status == cudaErrorCudartUnloading) return;
  cleanup_error e;
  e.operation = operation;
  e.object = object;
  e.handle = handle;
  e.bytes = bytes;
  e.status = status;
  e.message = message != nullptr ? message : "";
  e.file = file;
  e.line = line;
  get_cleanup_handler()(e);
}

CUSCOPE_DETAIL_COLD inline void throw_cuda_error(cudaError_t status, const char* call,
                                                 const char* file, int line,
                                                 const std::string& object) {
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

inline std::string exception_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

CUSCOPE_DETAIL_COLD inline void report_cleanup_exception(const char* operation, const char* object,
                                                         const void* handle, const char* file,
                                                         int line) noexcept {
  try {
    throw;
  } catch (const cuda_error& e) {
    report_cleanup(operation, object, handle, e.status(), e.what(), file, line);
  } catch (const out_of_memory& e) {
    report_cleanup(operation, object, handle, e.status(), e.what(), file, line);
  } catch (const std::exception& e) {
    report_cleanup(operation, object, handle, cudaSuccess, e.what(), file, line);
  } catch (...) {
    report_cleanup(operation, object, handle, cudaSuccess, "an exception of unknown type", file,
                   line);
  }
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

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

/// Makes a CUDA call in a cleanup path: evaluates to true when it succeeded (or the runtime is
/// unloading); a failure goes to the cleanup handler, naming object and handle.
#define CUSCOPE_DETAIL_CLEANUP(call, object, handle) \
  ::cuscope::detail::cleanup_ok((call), #call, (object), (handle), __FILE__, __LINE__)

/// CUSCOPE_DETAIL_CLEANUP for a release of bytes of memory, which the report names.
#define CUSCOPE_DETAIL_CLEANUP_BYTES(call, object, handle, bytes) \
  ::cuscope::detail::cleanup_ok((call), #call, (object), (handle), __FILE__, __LINE__, (bytes))

/// Inside a catch block of a cleanup path: reports the exception to the cleanup handler.
#define CUSCOPE_DETAIL_CLEANUP_CAUGHT(operation, object, handle) \
  ::cuscope::detail::report_cleanup_exception((operation), (object), (handle), __FILE__, __LINE__)

/// @brief Calls a CUDA runtime function without throwing; evaluates to its cudaError_t, with
/// cudaErrorCudartUnloading reported as cudaSuccess. For destructors and noexcept paths.
#define CUSCOPE_CUDA_TRY_NOTHROW(call) ::cuscope::detail::check_nothrow(call)

/// Checks status, which call (a string literal naming the CUDA call, as written) returned, and
/// throws as CUSCOPE_DETAIL_TRY_FOR does, naming that call: for calls whose status is examined
/// before it is checked. object is evaluated only when the call failed.
#define CUSCOPE_DETAIL_CHECK_FOR(status, call, object)                                          \
  do {                                                                                          \
    const cudaError_t cuscope_status_ = (status);                                               \
    if (cuscope_status_ != cudaSuccess)                                                         \
      ::cuscope::detail::throw_cuda_error(cuscope_status_, call, __FILE__, __LINE__, (object)); \
  } while (false)

/// Like CUSCOPE_CUDA_TRY, naming the object the call was made for. object is evaluated only when
/// the call fails.
#define CUSCOPE_DETAIL_TRY_FOR(call, object)                                                     \
  do {                                                                                           \
    const cudaError_t cuscope_status_ = (call);                                                  \
    if (cuscope_status_ != cudaSuccess)                                                          \
      ::cuscope::detail::throw_cuda_error(cuscope_status_, #call, __FILE__, __LINE__, (object)); \
  } while (false)
