// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief device_buffer<T>: typed, move-only device memory from a pool, freed in stream order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/ledger.hpp"
#include "device_span.hpp"
#include "error.hpp"
#include "event.hpp"
#include "memory_pool.hpp"
#include "stream.hpp"

namespace cuscope {

class session;

namespace detail {

// Containers with contiguous storage of T: std::vector, std::array, spans, pinned_buffer...
template <class R, class T, class = void>
struct is_contiguous_of : std::false_type {};
template <class R, class T>
struct is_contiguous_of<
    R, T, std::void_t<decltype(std::declval<R&>().data()), decltype(std::declval<R&>().size())>>
    : std::is_same<std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<R&>().data())>>,
                   T> {};

}  // namespace detail

/// @brief Device memory for count elements of a trivially copyable T, allocated from a pool on a
/// stream and freed on that stream when the buffer is destroyed.
///
/// The contents start uninitialized. A zero-length buffer holds no allocation. Move-only; a
/// moved-from buffer is empty. Copies take a stream: device_buffer(stream, other).
///
/// The buffer is freed on its own stream (stream()). Work enqueued on another stream, copies made
/// with copy_from and copy_to included, is not ordered before that free: move the buffer there
/// with set_stream(), or order the streams with an event, before the buffer goes away.
///
/// A default stream handle (stream_ref::legacy(), stream_ref::per_thread()) given to a buffer names
/// the default stream of the buffer's device, whatever device is current: its stream-ordered
/// members and its destructor switch to that device for the call and switch back.
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "device_buffer<T> needs a trivially copyable T");
  static_assert(!std::is_const_v<T> && !std::is_volatile_v<T>,
                "device_buffer<T> needs an unqualified T");

 public:
  using value_type = T;           ///< The element type.
  using size_type = std::size_t;  ///< Sizes and indices.

  /// @brief An empty buffer, with no pool.
  device_buffer() noexcept = default;

  /// @brief count uninitialized elements from pool, usable in stream order on stream.
  /// Enqueued on stream; does not synchronize.
  /// @throws std::length_error when the byte count overflows; out_of_memory when the pool cannot
  /// provide it.
  device_buffer(stream_ref stream, std::size_t count, memory_pool_ref pool)
      : device_buffer(stream, count, pool, nullptr) {}

  /// @brief A device copy of host (any contiguous container of T). Enqueued on stream; a
  /// pageable source is read before the call returns, a pinned one when the copy runs.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value, int> = 0>
  device_buffer(stream_ref stream, const Range& host, memory_pool_ref pool)
      : device_buffer(stream, static_cast<std::size_t>(host.size()), pool) {
    copy_from(stream, host.data(), size_);
  }
  /// @brief Deleted: the temporary would be gone before an asynchronous copy reads it.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value &&
                                              !std::is_lvalue_reference_v<Range>,
                                          int> = 0>
  device_buffer(stream_ref stream, Range&& host, memory_pool_ref pool) = delete;

  /// @brief A deep copy of other, from other's pool, on stream (ordered after other's stream).
  device_buffer(stream_ref stream, const device_buffer& other)
      : device_buffer(stream, other, other.pool()) {}

  /// @brief A deep copy of other from pool, on stream (ordered after other's stream, which then
  /// waits for the copy, so that other may be freed or written there at once).
  device_buffer(stream_ref stream, const device_buffer& other, memory_pool_ref pool)
      : device_buffer(stream, other.size_, pool) {
    if (size_ != 0) {
      detail::order_after(stream, other.stream(), device_);
      const detail::stream_device_guard on(stream.get(), device_);
      CUSCOPE_DETAIL_TRY_FOR(
          cudaMemcpyAsync(data_, other.data_, size_bytes(), cudaMemcpyDeviceToDevice, stream_),
          describe());
      // other is freed on its own stream, which knows nothing of the copy that reads it here.
      try {
        detail::order_after(other.stream(), stream, device_);
      } catch (...) {
        // Without the order, other must not be freed before the copy has read it.
        (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(stream_), "cuscope::device_buffer",
                                     data_);
        throw;
      }
    }
  }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  /// @brief Takes other's memory; other is left empty.
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_),
        pool_(std::exchange(other.pool_, nullptr)),
        device_(other.device_),
        max_bytes_(other.max_bytes_),
        retry_(other.retry_),
        ledger_(std::exchange(other.ledger_, nullptr)) {}

  /// @brief Frees this buffer's memory and takes other's; other is left empty.
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
      pool_ = std::exchange(other.pool_, nullptr);
      device_ = other.device_;
      max_bytes_ = other.max_bytes_;
      retry_ = other.retry_;
      ledger_ = std::exchange(other.ledger_, nullptr);
    }
    return *this;
  }

  /// @brief Frees the memory on the buffer's stream; never throws.
  ~device_buffer() { free(); }

  /// @brief Takes ownership of ptr, count elements allocated from pool on stream (for instance
  /// by cudaMallocFromPoolAsync, or released by another buffer). It will be freed on stream.
  [[nodiscard]] static device_buffer adopt(stream_ref stream, T* ptr, std::size_t count,
                                           memory_pool_ref pool) noexcept {
    device_buffer b;
    b.data_ = ptr;
    b.size_ = ptr == nullptr ? 0 : count;
    b.stream_ = stream.get();
    b.set_pool(pool);
    return b;
  }

  /// @brief Gives up ownership: the caller frees the returned pointer (on stream(), from pool()).
  /// Leaves the buffer empty. A buffer a session made is no longer counted by it.
  [[nodiscard]] T* release() noexcept {
    if (ledger_ != nullptr) std::exchange(ledger_, nullptr)->discharge(size_bytes());
    size_ = 0;
    return std::exchange(data_, nullptr);
  }

  /// @brief Device pointer to the first element; nullptr when empty.
  [[nodiscard]] T* data() noexcept { return data_; }
  /// @brief Device pointer to the first element; nullptr when empty.
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// @brief Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// @brief Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// @brief True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief A view of the elements, to pass to kernels.
  [[nodiscard]] device_span<T> span() noexcept { return {data_, size_}; }
  /// @brief A read-only view of the elements.
  [[nodiscard]] device_span<const T> span() const noexcept { return {data_, size_}; }

  /// @brief The stream the buffer is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief The device of the buffer's pool.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// @brief The pool the memory came from.
  /// @throws std::logic_error for a default-constructed or moved-from buffer.
  [[nodiscard]] memory_pool_ref pool() const {
    if (pool_ == nullptr)
      throw std::logic_error(
          "cuscope::device_buffer: the buffer has no pool (empty or moved-from)");
    return memory_pool_ref(pool_, device_, max_bytes_, retry_);
  }

  /// @brief Makes stream the one the buffer is freed on. The new stream waits, in stream order,
  /// for the work enqueued so far on the old one. Enqueued; does not synchronize.
  void set_stream(stream_ref stream) {
    if (data_ != nullptr) detail::order_after(stream, stream_ref(stream_), device_);
    stream_ = stream.get();
  }

  /// @brief Copies count elements from src (host or device memory) to element offset.
  /// Enqueued on stream; a pageable source is read before the call returns, a pinned one when the
  /// copy runs, so it must stay valid until then.
  /// @throws std::out_of_range when the elements do not fit.
  void copy_from(stream_ref stream, const T* src, std::size_t count, std::size_t offset = 0) {
    check_range("copy_from", count, offset);
    if (count == 0) return;
    const detail::stream_device_guard on(stream.get(), device_);
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemcpyAsync(data_ + offset, src, count * sizeof(T), cudaMemcpyDefault, stream.get()),
        describe());
  }
  /// @brief Copies all of host (a contiguous container of T) to element offset. See above.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value, int> = 0>
  void copy_from(stream_ref stream, const Range& host, std::size_t offset = 0) {
    copy_from(stream, host.data(), static_cast<std::size_t>(host.size()), offset);
  }
  /// @brief Deleted: the temporary would be gone before an asynchronous copy reads it.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value &&
                                              !std::is_lvalue_reference_v<Range>,
                                          int> = 0>
  void copy_from(stream_ref stream, Range&& host, std::size_t offset = 0) = delete;

  /// @brief Copies count elements from element offset to dst (host or device memory).
  /// Enqueued on stream; dst must stay valid until the copy has run (into pageable memory it has
  /// run when the call returns).
  /// @throws std::out_of_range when the elements are not all in the buffer.
  void copy_to(stream_ref stream, T* dst, std::size_t count, std::size_t offset = 0) const {
    check_range("copy_to", count, offset);
    if (count == 0) return;
    const detail::stream_device_guard on(stream.get(), device_);
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemcpyAsync(dst, data_ + offset, count * sizeof(T), cudaMemcpyDefault, stream.get()),
        describe());
  }
  /// @brief Copies the whole buffer into host, which must hold at least size() elements.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value, int> = 0>
  void copy_to(stream_ref stream, Range& host) const {
    if (static_cast<std::size_t>(host.size()) < size_)
      throw std::out_of_range("cuscope::device_buffer::copy_to: a destination of " +
                              std::to_string(host.size()) + " elements cannot hold " +
                              std::to_string(size_));
    copy_to(stream, host.data(), size_);
  }

  /// @brief The elements on the host. Blocks: enqueues the copy on stream and synchronizes it.
  [[nodiscard]] std::vector<T> to_vector(stream_ref stream) const {
    std::vector<T> out(size_);
    copy_to(stream, out.data(), size_);
    const detail::stream_device_guard on(stream.get(), device_);
    stream.synchronize();
    return out;
  }

  /// @brief Changes the size to count elements, keeping the first min(size(), count). The new
  /// memory comes from the same pool; the buffer's stream becomes stream (ordered after the old
  /// one). Enqueued on stream; does not synchronize.
  /// @throws std::logic_error for a buffer without a pool; out_of_memory; std::length_error.
  void resize(stream_ref stream, std::size_t count) {
    if (count == size_) {
      set_stream(stream);
      return;
    }
    device_buffer next(stream, count, pool(), ledger_);
    set_stream(stream);
    const std::size_t keep = count < size_ ? count : size_;
    const detail::stream_device_guard on(stream.get(), device_);
    if (keep != 0)
      CUSCOPE_DETAIL_TRY_FOR(cudaMemcpyAsync(next.data_, data_, keep * sizeof(T),
                                             cudaMemcpyDeviceToDevice, stream.get()),
                             describe());
    *this = std::move(next);
  }

  /// @brief Exchanges the contents of two buffers.
  friend void swap(device_buffer& a, device_buffer& b) noexcept {
    device_buffer t(std::move(a));
    a = std::move(b);
    b = std::move(t);
  }

 private:
  friend class session;

  // Allocates count elements from pool on stream and, when ledger is set, charges them to it.
  device_buffer(stream_ref stream, std::size_t count, memory_pool_ref pool, detail::ledger* ledger)
      : size_(count), stream_(stream.get()) {
    set_pool(pool);
    const std::size_t bytes = bytes_for(count);
    if (bytes == 0) return;
    if (ledger != nullptr) ledger->charge(bytes);
    try {
      data_ = static_cast<T*>(pool.allocate(stream, bytes));
    } catch (...) {
      if (ledger != nullptr) ledger->discharge(bytes);
      throw;
    }
    ledger_ = ledger;
  }

  static std::size_t bytes_for(std::size_t count) {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw std::length_error("cuscope::device_buffer: " + std::to_string(count) + " elements of " +
                              std::to_string(sizeof(T)) + " bytes overflow the byte count");
    return count * sizeof(T);
  }

  void set_pool(const memory_pool_ref& pool) noexcept {
    pool_ = pool.get();
    device_ = pool.device();
    max_bytes_ = pool.max_bytes();
    retry_ = pool.retries_after_trim();
  }

  void check_range(const char* what, std::size_t count, std::size_t offset) const {
    if (offset > size_ || count > size_ - offset)
      throw std::out_of_range("cuscope::device_buffer::" + std::string(what) + ": " +
                              std::to_string(count) + " elements at offset " +
                              std::to_string(offset) + " do not fit in a buffer of " +
                              std::to_string(size_));
  }

  std::string describe() const {
    return "device_buffer " + detail::format_pointer(data_) + " of " +
           detail::format_bytes(size_bytes()) + " on device " + std::to_string(device_);
  }

  void free() noexcept {
    if (data_ != nullptr) {
      // cudaFreeAsync is ordered by the stream, whatever device is current; only a default stream
      // handle needs the buffer's device to name the stream the buffer was used on.
      detail::free_async_nothrow(data_, stream_, device_);
      if (ledger_ != nullptr) ledger_->discharge(size_bytes());
    }
    data_ = nullptr;
    size_ = 0;
    ledger_ = nullptr;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  int device_ = 0;
  std::size_t max_bytes_ = 0;
  bool retry_ = false;
  detail::ledger* ledger_ = nullptr;
};

}  // namespace cuscope
