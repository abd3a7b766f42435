// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief pinned_buffer<T>: page-locked host memory, the source and target of truly asynchronous
/// copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "detail/format.hpp"
#include "error.hpp"
#include "memory_pool.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief count elements of a trivially copyable T in page-locked host memory (cudaHostAlloc),
/// freed with the object. Contents start uninitialized; a zero-length buffer holds no allocation.
///
/// Move-only. Freeing page-locked memory is slow (GPUs synchronize in cudaFreeHost), so keep such
/// buffers for the life of a loop rather than per iteration. CUDA does not promise that
/// synchronization: synchronize the streams that use the buffer before it is destroyed.
template <class T>
class pinned_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "pinned_buffer<T> needs a trivially copyable T");

 public:
  using value_type = T;             ///< The element type.
  using size_type = std::size_t;    ///< Sizes and indices.
  using iterator = T*;              ///< Iterator.
  using const_iterator = const T*;  ///< Iterator to const.

  /// @brief An empty buffer.
  pinned_buffer() noexcept = default;

  /// @brief count uninitialized elements; flags are cudaHostAlloc's (cudaHostAllocDefault,
  /// cudaHostAllocPortable, cudaHostAllocMapped, cudaHostAllocWriteCombined).
  /// @throws std::length_error when the byte count overflows; out_of_memory; cuda_error.
  explicit pinned_buffer(std::size_t count, unsigned flags = cudaHostAllocDefault) : size_(count) {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw std::length_error("cuscope::pinned_buffer: " + std::to_string(count) + " elements of " +
                              std::to_string(sizeof(T)) + " bytes overflow the byte count");
    if (count == 0) return;
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, count * sizeof(T), flags);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory(count * sizeof(T),
                          "cuscope: out of memory: " + detail::format_bytes(count * sizeof(T)) +
                              " of page-locked host memory requested (cudaHostAlloc failed with "
                              "cudaErrorMemoryAllocation)");
    }
    CUSCOPE_DETAIL_CHECK_FOR(status, "cudaHostAlloc(&p, count * sizeof(T), flags)",
                             "pinned_buffer of " + detail::format_bytes(count * sizeof(T)));
    data_ = static_cast<T*>(p);
  }

  /// @brief count uninitialized elements from pool, a pool of page-locked host memory
  /// (pinned_memory_pool), allocated on stream; waits for stream so that the host may use the
  /// memory at once. The memory goes back to the pool in stream order on stream when the buffer
  /// is destroyed, without cudaFreeHost's cost: the device's work on stream enqueued before the
  /// destruction is ordered before it, other streams' work must be ordered by the caller.
  /// @throws std::length_error when the byte count overflows; out_of_memory; cuda_error.
  pinned_buffer(stream_ref stream, std::size_t count, memory_pool_ref pool)
      : size_(count), stream_(stream.get()), device_(pool.device()), pooled_(true) {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw std::length_error("cuscope::pinned_buffer: " + std::to_string(count) + " elements of " +
                              std::to_string(sizeof(T)) + " bytes overflow the byte count");
    if (count == 0) return;
    data_ = static_cast<T*>(pool.allocate(stream, count * sizeof(T)));
    try {
      const detail::stream_device_guard on(stream_, device_);
      stream.synchronize();
    } catch (...) {
      free();
      throw;
    }
  }

  /// @brief Takes ownership of ptr, count elements from cudaHostAlloc or cudaMallocHost.
  [[nodiscard]] static pinned_buffer adopt(T* ptr, std::size_t count) noexcept {
    pinned_buffer b;
    b.data_ = ptr;
    b.size_ = ptr == nullptr ? 0 : count;
    return b;
  }

  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  /// @brief Takes other's memory; other is left empty.
  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_),
        device_(other.device_),
        pooled_(other.pooled_) {}

  /// @brief Frees this buffer's memory and takes other's; other is left empty.
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
      device_ = other.device_;
      pooled_ = other.pooled_;
    }
    return *this;
  }

  /// @brief Frees the memory (after the device has finished with it); never throws.
  ~pinned_buffer() { free(); }

  /// @brief Gives up ownership: the caller frees the pointer with cudaFreeHost (with cudaFreeAsync
  /// on stream() when it came from a pool). Leaves this empty.
  [[nodiscard]] T* release() noexcept {
    size_ = 0;
    return std::exchange(data_, nullptr);
  }

  /// @brief Pointer to the first element.
  [[nodiscard]] T* data() noexcept { return data_; }
  /// @brief Pointer to the first element.
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// @brief Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// @brief Whether the memory came from a pool (and goes back to it on stream()).
  [[nodiscard]] bool pooled() const noexcept { return pooled_; }
  /// @brief The stream the memory of a pooled buffer is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// @brief True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief Element i.
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// @brief Element i.
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// @brief Iterator to the first element.
  [[nodiscard]] T* begin() noexcept { return data_; }
  /// @brief Iterator past the last element.
  [[nodiscard]] T* end() noexcept { return data_ + size_; }
  /// @brief Iterator to the first element.
  [[nodiscard]] const T* begin() const noexcept { return data_; }
  /// @brief Iterator past the last element.
  [[nodiscard]] const T* end() const noexcept { return data_ + size_; }

 private:
  void free() noexcept {
    if (data_ != nullptr && pooled_)
      (void)detail::free_async_nothrow(data_, stream_, device_, size_ * sizeof(T));
    else if (data_ != nullptr)
      (void)CUSCOPE_DETAIL_CLEANUP_BYTES(cudaFreeHost(data_), "cuscope::pinned_buffer", data_,
                                         size_ * sizeof(T));
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  bool pooled_ = false;
};

}  // namespace cuscope
