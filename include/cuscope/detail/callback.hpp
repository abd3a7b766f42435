// SPDX-License-Identifier: Apache-2.0
// A copyable type-erased callable for the callbacks users set (session_options::on_finish and
// leak_sink, a batch producer's fill): what std::function does there, without <functional>,
// which costs more to parse than the rest of a core header's standard includes together.
// Callables of up to two pointers that move without throwing are stored in place; larger ones on
// the heap.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace cuscope::detail {

template <class Signature>
class callback;

/// @brief Holds any copyable callable with signature R(Args...), or nothing.
template <class R, class... Args>
class callback<R(Args...)> {
  union storage {
    void* heap;
    alignas(std::max_align_t) unsigned char local[2 * sizeof(void*)];
  };

  template <class F>
  static constexpr bool stored_in_place =
      sizeof(F) <= sizeof(storage) &&
      alignof(std::max_align_t) % alignof(F) == 0 && std::is_nothrow_move_constructible_v<F>;

  struct operations {
    R (*call)(storage&, Args&&...);
    void (*copy)(storage& to, const storage& from);
    void (*move)(storage& to, storage& from) noexcept;  // leaves from without a callable
    void (*destroy)(storage&) noexcept;
  };

  template <class F>
  static F& target(storage& s) noexcept {
    if constexpr (stored_in_place<F>)
      return *std::launder(reinterpret_cast<F*>(s.local));
    else
      return *static_cast<F*>(s.heap);
  }

  template <class F>
  static const F& target(const storage& s) noexcept {
    if constexpr (stored_in_place<F>)
      return *std::launder(reinterpret_cast<const F*>(s.local));
    else
      return *static_cast<const F*>(s.heap);
  }

  template <class F, class... A>
  static void construct(storage& s, A&&... a) {
    if constexpr (stored_in_place<F>)
      ::new (static_cast<void*>(s.local)) F(std::forward<A>(a)...);
    else
      s.heap = new F(std::forward<A>(a)...);
  }

  template <class F>
  static const operations* operations_of() noexcept {
    static constexpr operations ops{
        [](storage& s, Args&&... args) -> R {
          if constexpr (std::is_void_v<R>)
            target<F>(s)(std::forward<Args>(args)...);
          else
            return target<F>(s)(std::forward<Args>(args)...);
        },
        [](storage& to, const storage& from) { construct<F>(to, target<F>(from)); },
        [](storage& to, storage& from) noexcept {
          if constexpr (stored_in_place<F>) {
            ::new (static_cast<void*>(to.local)) F(std::move(target<F>(from)));
            target<F>(from).~F();
          } else {
            to.heap = from.heap;
          }
        },
        [](storage& s) noexcept {
          if constexpr (stored_in_place<F>)
            target<F>(s).~F();
          else
            delete static_cast<F*>(s.heap);
        }};
    return &ops;
  }

  template <class F>
  static constexpr bool accepted =
      !std::is_same_v<F, callback> && !std::is_same_v<F, std::nullptr_t> &&
      std::is_copy_constructible_v<F> && std::is_invocable_r_v<R, F&, Args...>;

 public:
  /// @brief Holds nothing.
  callback() noexcept = default;
  /// @brief Holds nothing.
  callback(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)

  /// @brief Holds a copy of f (nothing when f is a null function pointer).
  template <class F, class D = std::decay_t<F>, std::enable_if_t<accepted<D>, int> = 0>
  callback(F&& f) {  // NOLINT(google-explicit-constructor): std::function converts too
    if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D>) {
      const D pointer = f;
      if (pointer == nullptr) return;
    }
    construct<D>(storage_, std::forward<F>(f));
    ops_ = operations_of<D>();
  }

  callback(const callback& other) {
    if (other.ops_ == nullptr) return;
    other.ops_->copy(storage_, other.storage_);
    ops_ = other.ops_;
  }

  callback(callback&& other) noexcept {
    if (other.ops_ == nullptr) return;
    other.ops_->move(storage_, other.storage_);
    ops_ = std::exchange(other.ops_, nullptr);
  }

  callback& operator=(const callback& other) {
    if (this != &other) callback(other).swap(*this);
    return *this;
  }

  callback& operator=(callback&& other) noexcept {
    if (this != &other) {
      reset();
      if (other.ops_ != nullptr) {
        other.ops_->move(storage_, other.storage_);
        ops_ = std::exchange(other.ops_, nullptr);
      }
    }
    return *this;
  }

  callback& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }

  ~callback() { reset(); }

  void swap(callback& other) noexcept {
    callback held(std::move(other));
    other = std::move(*this);
    *this = std::move(held);
  }

  /// @brief Whether it holds a callable.
  explicit operator bool() const noexcept { return ops_ != nullptr; }

  /// @brief Calls the callable held.
  /// @throws std::logic_error when it holds nothing; whatever the callable throws.
  R operator()(Args... args) const {
    if (ops_ == nullptr) throw std::logic_error("cuscope: an empty callback was called");
    return ops_->call(storage_, std::forward<Args>(args)...);
  }

 private:
  void reset() noexcept {
    if (ops_ != nullptr) std::exchange(ops_, nullptr)->destroy(storage_);
  }

  mutable storage storage_{};
  const operations* ops_ = nullptr;
};

}  // namespace cuscope::detail
