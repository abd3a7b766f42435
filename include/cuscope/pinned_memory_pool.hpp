// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief pinned_memory_pool: an owning pool of page-locked host memory (a CUDA memory pool
/// located on the host), with the options, statistics and trim of memory_pool. Staging buffers
/// taken from it come and go without cudaMallocHost and cudaFreeHost.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "detail/config.hpp"
#include "device.hpp"
#include "error.hpp"
#include "memory_pool.hpp"

// Host-located pools: cudaMemLocationTypeHostNuma from the CUDA 12.9 headers (with the attribute
// that says whether a device supports them), cudaMemLocationTypeHost from 13.0.
#if CUDART_VERSION >= 13000
#  define CUSCOPE_HAS_PINNED_MEMORY_POOL 1
#  define CUSCOPE_DETAIL_HOST_POOL_LOCATION cudaMemLocationTypeHost
#  define CUSCOPE_DETAIL_HOST_POOL_ATTRIBUTE cudaDevAttrHostMemoryPoolsSupported
#elif CUDART_VERSION >= 12090
#  define CUSCOPE_HAS_PINNED_MEMORY_POOL 1
#  define CUSCOPE_DETAIL_HOST_POOL_LOCATION cudaMemLocationTypeHostNuma
#  define CUSCOPE_DETAIL_HOST_POOL_ATTRIBUTE cudaDevAttrHostNumaMemoryPoolsSupported
#else
#  define CUSCOPE_HAS_PINNED_MEMORY_POOL 0
#endif

namespace cuscope {

/// @brief An owning pool of page-locked host memory, reachable by the host at its address and by
/// device options.device (the current device by default), which it grants read-write access.
///
/// The same options as memory_pool (release threshold, hard limit, initial reserve, reuse
/// policy) and the same statistics and trim. Allocations are stream-ordered: the host may touch
/// memory once the allocation has run on its stream (pinned_buffer's pool constructor waits for
/// that). Needs CUDA 12.9 headers (host NUMA node 0) or 13.0 (cudaMemLocationTypeHost) and a
/// driver and device that support host memory pools (pinned_memory_pool::supported).
/// Move-only; a moved-from pool is empty, destructible and assignable.
class pinned_memory_pool : public detail::pool_base<pinned_memory_pool> {
 public:
  /// @brief Whether device can use host memory pools here: the headers cuscope was compiled with
  /// know them and the device says it supports them.
  /// @throws std::invalid_argument for an invalid device; cuda_error when the device cannot be
  /// asked.
  [[nodiscard]] static bool supported(int device);

  /// @brief Creates a pool of page-locked host memory with options.
  /// @throws std::invalid_argument for an invalid device or inconsistent options; cuda_error
  /// (cudaErrorNotSupported) where host memory pools are not supported; cuda_error.
  explicit pinned_memory_pool(const pool_options& options = {});

  pinned_memory_pool(const pinned_memory_pool&) = delete;
  pinned_memory_pool& operator=(const pinned_memory_pool&) = delete;

  /// @brief Takes other's pool; other is left empty.
  pinned_memory_pool(pinned_memory_pool&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        device_(other.device_),
        max_bytes_(other.max_bytes_) {}

  /// @brief Destroys this pool and takes other's; other is left empty.
  pinned_memory_pool& operator=(pinned_memory_pool&& other) noexcept;

  /// @brief Destroys the pool; never throws. Memory of live allocations goes back once they are
  /// freed.
  ~pinned_memory_pool();

  /// @brief The raw handle; nullptr when empty.
  [[nodiscard]] cudaMemPool_t get() const noexcept;
  /// @brief The hard limit on reserved memory; 0 for none (as memory_pool::max_bytes()).
  [[nodiscard]] std::size_t max_bytes() const noexcept;
  /// @brief True after a move or release().
  [[nodiscard]] bool empty() const noexcept;
  /// @brief Gives up ownership: the caller destroys the returned pool. Leaves this empty.
  [[nodiscard]] cudaMemPool_t release() noexcept;

  /// @brief A non-owning reference (for pinned_buffer, batch_options::staging_pool).
  /// @throws std::logic_error when empty.
  [[nodiscard]] memory_pool_ref ref() const&;
  /// @brief Deleted: a reference to a temporary pool would outlive the pool.
  memory_pool_ref ref() && = delete;
  /// @brief A non-owning reference; see ref().
  operator memory_pool_ref() const&;  // NOLINT: implicit
  /// @brief Deleted: a reference to a temporary pool would outlive the pool.
  operator memory_pool_ref() && = delete;

 private:
  friend class detail::pool_base<pinned_memory_pool>;

  // Backs bytes with memory now, as memory_pool does.
  void reserve(std::size_t bytes);

  void destroy() noexcept;

  cudaMemPool_t handle_ = nullptr;
  int device_ = 0;
  std::size_t max_bytes_ = 0;
};

}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope {

inline bool pinned_memory_pool::supported(int device) {
  detail::check_device(device, "cuscope::pinned_memory_pool::supported");
#  if CUSCOPE_HAS_PINNED_MEMORY_POOL
  int value = 0;
  const cudaError_t status =
      cudaDeviceGetAttribute(&value, CUSCOPE_DETAIL_HOST_POOL_ATTRIBUTE, device);
  if (status == cudaErrorInvalidValue) {
    (void)cudaGetLastError();  // a driver that does not know the attribute
    return false;
  }
  CUSCOPE_DETAIL_CHECK_FOR(status, "cudaDeviceGetAttribute(&value, host memory pools supported)",
                           "device " + std::to_string(device));
  return value != 0;
#  else
  return false;
#  endif
}

inline pinned_memory_pool::pinned_memory_pool(const pool_options& options)
    : max_bytes_(options.max_bytes) {
  device_ = options.device == -1 ? current_device() : options.device;
  detail::check_device(device_, "cuscope::pinned_memory_pool");
  if (!supported(device_))
    detail::throw_cuda_error(cudaErrorNotSupported, "cudaMemPoolCreate", __FILE__, __LINE__,
                             "pinned_memory_pool for device " + std::to_string(device_) +
                                 ": host memory pools need CUDA 12.9 or newer and a device "
                                 "that supports them (cudaDeviceGetAttribute answered 0, or "
                                 "cudaErrorInvalidValue from a driver that does not know them)");
#  if CUSCOPE_HAS_PINNED_MEMORY_POOL
  if (options.export_handle != pool_export::none)
    throw std::invalid_argument(
        "cuscope::pinned_memory_pool: host memory pools cannot be shared with other processes");
  if (options.max_bytes != 0 && options.initial_bytes > options.max_bytes)
    throw std::invalid_argument("cuscope::pinned_memory_pool: initial_bytes exceeds max_bytes");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = CUSCOPE_DETAIL_HOST_POOL_LOCATION;
  props.location.id = 0;  // host NUMA node 0; ignored for cudaMemLocationTypeHost
  props.maxSize = options.max_bytes;
  CUSCOPE_DETAIL_TRY_FOR(cudaMemPoolCreate(&handle_, &props),
                         "new pinned_memory_pool for device " + std::to_string(device_));
  if (max_bytes_ != 0) max_bytes_ = detail::enforced_max_bytes(handle_, max_bytes_);
  try {
    detail::pool_directory::get().made(handle_, device_, options.name, true);
    set_access(device_, access_flags::read_write);
    for (const int peer : options.access_from)
      if (peer != device_) set_access(peer, access_flags::read_write);
    set_release_threshold(options.release_threshold_bytes);
    set_reuse(options.reuse);
    if (options.initial_bytes != 0) reserve(options.initial_bytes);
  } catch (...) {
    destroy();
    throw;
  }
#  endif
}

inline pinned_memory_pool& pinned_memory_pool::operator=(pinned_memory_pool&& other) noexcept {
  if (this != &other) {
    destroy();
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
    max_bytes_ = other.max_bytes_;
  }
  return *this;
}

inline pinned_memory_pool::~pinned_memory_pool() {
  destroy();
}

inline cudaMemPool_t pinned_memory_pool::get() const noexcept {
  return handle_;
}

inline std::size_t pinned_memory_pool::max_bytes() const noexcept {
  return max_bytes_;
}

inline bool pinned_memory_pool::empty() const noexcept {
  return handle_ == nullptr;
}

inline cudaMemPool_t pinned_memory_pool::release() noexcept {
  return std::exchange(handle_, nullptr);
}

inline memory_pool_ref pinned_memory_pool::ref() const& {
  if (handle_ == nullptr)
    throw std::logic_error(
        "cuscope::pinned_memory_pool: use of an empty (moved-from or released) pool");
  return memory_pool_ref(handle_, device_);
}

inline pinned_memory_pool::operator memory_pool_ref() const& {
  return ref();
}

inline void pinned_memory_pool::reserve(std::size_t bytes) {
  const stream_ref s = stream_ref::per_thread();
  scoped_device on(device_);
  void* p = allocate(s, bytes);
  CUSCOPE_DETAIL_TRY_FOR(cudaFreeAsync(p, s.get()), describe());
  s.synchronize();
  // The reserve was never in use by anyone: the peaks start from what the pool holds now.
  reset_peaks();
}

inline void pinned_memory_pool::destroy() noexcept {
  if (handle_ != nullptr &&
      CUSCOPE_DETAIL_CLEANUP(cudaMemPoolDestroy(handle_), "cuscope::pinned_memory_pool", handle_))
    detail::pool_directory::get().destroyed(handle_, device_);
  handle_ = nullptr;
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE
