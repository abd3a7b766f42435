// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief device_span<T>: a non-owning view of elements in device memory, usable in kernels.
#pragma once

#include <cstddef>
#include <type_traits>

#include "detail/config.hpp"

namespace cuscope {

/// @brief A pointer and a count of elements in device memory. Trivially copyable; every member is
/// noexcept, and host-device when compiled by nvcc, so a span can be passed to a kernel by value.
/// Its elements must only be read on the device (or copied to the host).
template <class T>
class device_span {
 public:
  using element_type = T;                  ///< The element type, with its const.
  using value_type = std::remove_cv_t<T>;  ///< The element type without const.
  using size_type = std::size_t;           ///< Sizes and indices.
  using pointer = T*;                      ///< Pointer to an element.
  using reference = T&;                    ///< Reference to an element.
  using iterator = T*;                     ///< Iterator (a device pointer).

  /// @brief An empty span.
  constexpr device_span() noexcept = default;
  /// @brief count elements from data.
  CUSCOPE_HOST_DEVICE constexpr device_span(T* data, std::size_t count) noexcept
      : data_(data), size_(count) {}
  /// @brief A span of const elements from a span of mutable ones.
  template <class U, std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>, int> = 0>
  CUSCOPE_HOST_DEVICE constexpr device_span(const device_span<U>& other) noexcept
      : data_(other.data()), size_(other.size()) {}

  /// @brief Pointer to the first element.
  CUSCOPE_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  /// @brief Number of elements.
  CUSCOPE_HOST_DEVICE constexpr std::size_t size() const noexcept { return size_; }
  /// @brief Number of bytes.
  CUSCOPE_HOST_DEVICE constexpr std::size_t size_bytes() const noexcept {
    return size_ * sizeof(T);
  }
  /// @brief True when there are no elements.
  CUSCOPE_HOST_DEVICE constexpr bool empty() const noexcept { return size_ == 0; }
  /// @brief Element i, in device code.
  CUSCOPE_HOST_DEVICE constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// @brief Iterator to the first element.
  CUSCOPE_HOST_DEVICE constexpr T* begin() const noexcept { return data_; }
  /// @brief Iterator past the last element.
  CUSCOPE_HOST_DEVICE constexpr T* end() const noexcept { return data_ + size_; }
  /// @brief The first count elements (count must not exceed size()).
  CUSCOPE_HOST_DEVICE constexpr device_span first(std::size_t count) const noexcept {
    return {data_, count};
  }
  /// @brief The last count elements (count must not exceed size()).
  CUSCOPE_HOST_DEVICE constexpr device_span last(std::size_t count) const noexcept {
    return {data_ + (size_ - count), count};
  }
  /// @brief count elements from offset (both within the span).
  CUSCOPE_HOST_DEVICE constexpr device_span subspan(std::size_t offset,
                                                    std::size_t count) const noexcept {
    return {data_ + offset, count};
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cuscope
