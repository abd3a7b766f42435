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

#include "detail/format.hpp"
#include "device_allocation.hpp"
#include "device_span.hpp"
#include "error.hpp"
#include "event.hpp"
#include "memory_pool.hpp"
#include "stream.hpp"

namespace cuscope {
namespace detail {

// Containers with contiguous storage of T: std::vector, std::array, spans, pinned_buffer...
template <class R, class T, class = void>
struct is_contiguous_of : std::false_type {};
template <class R, class T>
struct is_contiguous_of<
    R, T, std::void_t<decltype(std::declval<R&>().data()), decltype(std::declval<R&>().size())>>
    : std::is_same<std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<R&>().data())>>,
                   T> {};

/// Bytes of count elements of T; throws std::length_error naming who when they overflow.
template <class T>
std::size_t bytes_of(std::size_t count, const char* who) {
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
    throw std::length_error(std::string(who) + ": " + std::to_string(count) + " elements of " +
                            std::to_string(sizeof(T)) + " bytes overflow the byte count");
  return count * sizeof(T);
}

}  // namespace detail

/// @brief Device memory for count elements of a trivially copyable T, allocated from a pool on a
/// stream and freed on that stream when the buffer is destroyed: the typed layer over one
/// device_allocation.
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
  /// Enqueued on stream; does not synchronize, unless policy is alloc_policy::retry_after_trim and
  /// the first try fails.
  /// @throws std::length_error when the byte count overflows; out_of_memory when the pool cannot
  /// provide it.
  device_buffer(stream_ref stream, std::size_t count, memory_pool_ref pool,
                alloc_policy policy = alloc_policy::fail_fast)
      : alloc_(stream, detail::bytes_of<T>(count, "cuscope::device_buffer"), pool, policy) {}

  /// @brief Takes over allocation, which must hold a whole number of T.
  /// @throws std::invalid_argument when its size is not a multiple of sizeof(T); allocation is
  /// then left as it was.
  explicit device_buffer(device_allocation&& allocation) : alloc_(checked(std::move(allocation))) {}

  /// @brief A device copy of host (any contiguous container of T). Enqueued on stream; a
  /// pageable source is read before the call returns, a pinned one when the copy runs.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value, int> = 0>
  device_buffer(stream_ref stream, const Range& host, memory_pool_ref pool)
      : device_buffer(stream, static_cast<std::size_t>(host.size()), pool) {
    copy_from(stream, host.data(), size());
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
      : device_buffer(stream, other.size(), pool) {
    if (!empty()) {
      const int device = alloc_.device();
      detail::order_after(stream, other.stream(), device);
      const detail::stream_device_guard on(stream.get(), device);
      CUSCOPE_DETAIL_TRY_FOR(cudaMemcpyAsync(data(), other.data(), size_bytes(),
                                             cudaMemcpyDeviceToDevice, stream.get()),
                             describe());
      // other is freed on its own stream, which knows nothing of the copy that reads it here.
      try {
        detail::order_after(other.stream(), stream, device);
      } catch (...) {
        // Without the order, other must not be freed before the copy has read it.
        (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(stream.get()), "cuscope::device_buffer",
                                     data());
        throw;
      }
    }
  }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  /// @brief Takes other's memory; other is left empty.
  device_buffer(device_buffer&& other) noexcept = default;
  /// @brief Frees this buffer's memory and takes other's; other is left empty.
  device_buffer& operator=(device_buffer&& other) noexcept = default;
  /// @brief Frees the memory on the buffer's stream; never throws (a failure goes to the cleanup
  /// handler).
  ~device_buffer() = default;

  /// @brief Takes ownership of ptr, count elements allocated from pool on stream (for instance
  /// by cudaMallocFromPoolAsync, or released by another buffer). It will be freed on stream.
  [[nodiscard]] static device_buffer adopt(stream_ref stream, T* ptr, std::size_t count,
                                           memory_pool_ref pool) noexcept {
    device_buffer b;
    b.alloc_ = device_allocation::adopt(stream, ptr, count * sizeof(T), pool);
    return b;
  }

  /// @brief Gives up ownership: the caller frees the returned pointer (on stream(), from pool()).
  /// Leaves the buffer empty. A buffer a session made is no longer counted by it.
  [[nodiscard]] T* release() noexcept { return static_cast<T*>(alloc_.release()); }

  /// @brief The untyped allocation underneath.
  [[nodiscard]] const device_allocation& allocation() const noexcept { return alloc_; }

  /// @brief Device pointer to the first element; nullptr when empty.
  [[nodiscard]] T* data() noexcept { return static_cast<T*>(alloc_.get()); }
  /// @brief Device pointer to the first element; nullptr when empty.
  [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(alloc_.get()); }
  /// @brief Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return alloc_.size_bytes() / sizeof(T); }
  /// @brief Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return alloc_.size_bytes(); }
  /// @brief True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return alloc_.size_bytes() == 0; }
  /// @brief A view of the elements, to pass to kernels.
  [[nodiscard]] device_span<T> span() noexcept { return {data(), size()}; }
  /// @brief A read-only view of the elements.
  [[nodiscard]] device_span<const T> span() const noexcept { return {data(), size()}; }

  /// @brief The stream the buffer is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return alloc_.stream(); }
  /// @brief The device of the buffer's pool.
  [[nodiscard]] int device() const noexcept { return alloc_.device(); }
  /// @brief The pool the memory came from.
  /// @throws std::logic_error for a default-constructed or moved-from buffer.
  [[nodiscard]] memory_pool_ref pool() const {
    if (!alloc_.has_pool())
      throw std::logic_error(
          "cuscope::device_buffer: the buffer has no pool (empty or moved-from)");
    return alloc_.pool();
  }

  /// @brief Makes stream the one the buffer is freed on. The new stream waits, in stream order,
  /// for the work enqueued so far on the old one. Enqueued; does not synchronize.
  void set_stream(stream_ref stream) { alloc_.set_stream(stream); }
  /// @brief Copies count elements from src (host or device memory) to element offset.
  /// Enqueued on stream; a pageable source is read before the call returns, a pinned one when the
  /// copy runs, so it must stay valid until then.
  /// @throws std::out_of_range when the elements do not fit; std::logic_error when the buffer
  /// is empty (moved-from or default-constructed) and count is not 0.
  void copy_from(stream_ref stream, const T* src, std::size_t count, std::size_t offset = 0) {
    check_range("copy_from", count, offset);
    if (count == 0) return;
    const detail::stream_device_guard on(stream.get(), device());
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemcpyAsync(data() + offset, src, count * sizeof(T), cudaMemcpyDefault, stream.get()),
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
  /// @throws std::out_of_range when the elements are not all in the buffer; std::logic_error when
  /// the buffer is empty (moved-from or default-constructed) and count is not 0.
  void copy_to(stream_ref stream, T* dst, std::size_t count, std::size_t offset = 0) const {
    check_range("copy_to", count, offset);
    if (count == 0) return;
    const detail::stream_device_guard on(stream.get(), device());
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemcpyAsync(dst, data() + offset, count * sizeof(T), cudaMemcpyDefault, stream.get()),
        describe());
  }
  /// @brief Copies the whole buffer into host, which must hold at least size() elements.
  template <class Range, std::enable_if_t<detail::is_contiguous_of<Range, T>::value, int> = 0>
  void copy_to(stream_ref stream, Range& host) const {
    if (static_cast<std::size_t>(host.size()) < size())
      throw std::out_of_range(
          "cuscope::device_buffer::copy_to: a destination of " +
          detail::format_count(static_cast<std::size_t>(host.size()), "element") + " cannot hold " +
          std::to_string(size()));
    copy_to(stream, host.data(), size());
  }

  /// @brief The elements on the host. Blocks: enqueues the copy on stream and synchronizes it.
  [[nodiscard]] std::vector<T> to_vector(stream_ref stream) const {
    std::vector<T> out(size());
    copy_to(stream, out.data(), size());
    const detail::stream_device_guard on(stream.get(), device());
    stream.synchronize();
    return out;
  }

  /// @brief Changes the size to count elements, keeping the first min(size(), count). The new
  /// memory comes from the same pool; the buffer's stream becomes stream (ordered after the old
  /// one). Enqueued on stream; does not synchronize.
  /// @throws std::logic_error for a buffer without a pool; out_of_memory; std::length_error.
  void resize(stream_ref stream, std::size_t count) {
    if (count == size()) {
      set_stream(stream);
      return;
    }
    device_buffer next(
        alloc_.allocate_like(stream, detail::bytes_of<T>(count, "cuscope::device_buffer")));
    set_stream(stream);
    const std::size_t keep = count < size() ? count : size();
    const detail::stream_device_guard on(stream.get(), device());
    if (keep != 0)
      CUSCOPE_DETAIL_TRY_FOR(cudaMemcpyAsync(next.data(), data(), keep * sizeof(T),
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

  // count uninitialized elements from pool on stream, counted by accounting (a session's; nullptr
  // counts nothing) and named in its leak report by tag and site: how session::make_buffer makes
  // what it counts, in place. Enqueued on stream; does not synchronize, unless policy is
  // alloc_policy::retry_after_trim and the first try fails. Throws std::length_error when the
  // byte count overflows; out_of_memory when a session's budget or the pool refuses.
  device_buffer(stream_ref stream, std::size_t count, memory_pool_ref pool,
                detail::ledger* accounting, const char* tag, call_site site,
                alloc_policy policy = alloc_policy::fail_fast)
      : alloc_(stream, detail::bytes_of<T>(count, "cuscope::device_buffer"), pool, accounting, tag,
               site, policy) {}

  static device_allocation checked(device_allocation&& a) {
    if (a.size_bytes() % sizeof(T) != 0)
      throw std::invalid_argument("cuscope::device_buffer: an allocation of " +
                                  detail::format_count(a.size_bytes(), "byte") +
                                  " is not a whole number of elements of " +
                                  detail::format_count(sizeof(T), "byte"));
    return std::move(a);
  }

  void check_range(const char* what, std::size_t count, std::size_t offset) const {
    if (count != 0 && !alloc_.has_pool())
      throw std::logic_error("cuscope::device_buffer::" + std::string(what) + ": " +
                             detail::format_count(count, "element") +
                             " with an empty (moved-from or default-constructed) buffer");
    if (offset > size() || count > size() - offset)
      throw std::out_of_range("cuscope::device_buffer::" + std::string(what) + ": " +
                              detail::format_count(count, "element") + " at offset " +
                              std::to_string(offset) + (count == 1 ? " does" : " do") +
                              " not fit in a buffer of " + std::to_string(size()));
  }

  std::string describe() const {
    return "device_buffer " + detail::format_pointer(data()) + " of " +
           detail::format_bytes(size_bytes()) + " on device " + std::to_string(device());
  }

  device_allocation alloc_;
};

}  // namespace cuscope
