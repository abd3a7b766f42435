// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Thrust on cuscope's pools: thrust_allocator<T> for thrust::device_vector, and
/// thrust_policy(stream, pool), which runs algorithms on a stream with their temporary storage
/// from a pool. The only cuscope header that includes Thrust.
///
/// With Thrust's CUDA device system (nvcc) the policies are thrust::cuda::par_nosync and
/// thrust::cuda::par on the stream. With another device system (THRUST_DEVICE_SYSTEM_CPP, OMP or
/// TBB, as the tests on the simulated device use) they are thrust::device with the same
/// allocators: the memory still comes from the pool on the stream, the work runs on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <thrust/device_ptr.h>
#include <thrust/device_reference.h>
#include <thrust/execution_policy.h>
#include <thrust/memory.h>
#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#  include <thrust/system/cuda/execution_policy.h>
#endif

#include "detail/adaptor.hpp"
#include "detail/ledger_fwd.hpp"
#include "error.hpp"
#include "memory_pool.hpp"
#include "stream.hpp"

namespace cuscope {

namespace detail {

/// The allocator Thrust calls for the temporary storage of an algorithm: bytes from a pool on a
/// stream. Thrust frees the storage when the algorithm returns, which may be before its kernels
/// have run (par_nosync): the free is in stream order on the same stream, so that is safe.
///
/// It also holds what a thrust_allocator allocates with (the pool, the stream and the session's
/// ledger): a thrust_allocator is its vector policy, which holds one of these, and nothing else.
///
/// What cannot change for the allocator's life is decided once, when it is made: whether it is
/// rare (a session counts it, or its stream is a default stream handle, which names the default
/// stream of the pool's device and so needs that device current). The usual allocation is then
/// that flag, the recorder flag and the byte count tested, the runtime call and its status; the
/// usual free the two flags, the pointer, the call and its status. Every other case (a session, a
/// default stream, 0 bytes, a recorder attached to any pool, a failure) is served out of line by
/// the pool's own paths, with their messages.
class thrust_temporary_allocator {
 public:
  using value_type = char;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;

  thrust_temporary_allocator(stream_ref stream, memory_pool_ref pool,
                             ledger_access* accounting = nullptr) noexcept
      : pool_(pool.get()),
        stream_(stream.get()),
        ledger_(accounting),
        device_(pool.device()),
        rare_(accounting != nullptr || is_default_stream(stream.get())) {}

  CUSCOPE_DETAIL_HOT_INLINE char* allocate(std::size_t bytes) {
    return static_cast<char*>(allocate_bytes(bytes, "cuscope::thrust_policy"));
  }

  CUSCOPE_DETAIL_HOT_INLINE void deallocate(char* ptr, std::size_t bytes) noexcept {
    deallocate_bytes(ptr, bytes);
  }

  // bytes on the stream, named who (in a session's leak report and messages).
  CUSCOPE_DETAIL_HOT_INLINE void* allocate_bytes(std::size_t bytes, const char* who) {
    // 0 bytes never reach the runtime: nullptr without a call, as from the pool itself (a GPU's
    // cudaMallocFromPoolAsync of 0 bytes succeeds; what it writes to the pointer is undocumented).
    if ((rare_ | any_pool_recorded()) || bytes == 0) return allocate_rare(bytes, who);
    void* p = nullptr;
    const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, pool_, stream_);
    if (status != cudaSuccess) return allocate_plain_failed(pool(), stream_, bytes, status);
    return p;
  }

  CUSCOPE_DETAIL_HOT_INLINE void deallocate_bytes(void* ptr, std::size_t bytes) noexcept {
    if (rare_ | any_pool_recorded()) return deallocate_rare(ptr, bytes);
    if (ptr == nullptr) return;
    const cudaError_t status = cudaFreeAsync(ptr, stream_);
    if (status != cudaSuccess) (void)free_async_slow(ptr, stream_, device_, bytes, status);
  }

  memory_pool_ref pool() const noexcept { return memory_pool_ref(pool_, device_); }
  stream_ref stream() const noexcept { return stream_ref(stream_); }
  ledger* accounting() const noexcept { return ledger_.owner(); }

  friend bool operator==(const thrust_temporary_allocator& a,
                         const thrust_temporary_allocator& b) noexcept {
    return a.pool_ == b.pool_ && a.device_ == b.device_ && a.stream_ == b.stream_ &&
           a.ledger_.get() == b.ledger_.get();
  }
  friend bool operator!=(const thrust_temporary_allocator& a,
                         const thrust_temporary_allocator& b) noexcept {
    return !(a == b);
  }

 private:
  // A session's counting, a default stream, 0 bytes, a recorder attached to a pool.
  CUSCOPE_DETAIL_NOINLINE void* allocate_rare(std::size_t bytes, const char* who) {
    if (ledger_.get() != nullptr)
      return ledger_.get()->adaptor_allocate(pool(), stream(), bytes, who);
    return allocate_plain_slow(pool(), stream_, bytes);
  }

  CUSCOPE_DETAIL_NOINLINE void deallocate_rare(void* ptr, std::size_t bytes) noexcept {
    if (ledger_.get() != nullptr) return ledger_.get()->adaptor_free(ptr, bytes, stream(), pool());
    free_plain_nothrow(ptr, bytes, stream_, pool());
  }

  // The pool as its handle and device, so that the flag fits beside the device: 32 bytes.
  cudaMemPool_t pool_;
  cudaStream_t stream_;
  ledger_ref ledger_;
  int device_;
  bool rare_;  // a session counts it, or its stream is a default stream handle
};

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
inline auto make_thrust_policy(stream_ref stream, memory_pool_ref pool,
                               ledger_access* l = nullptr) {
  return thrust::cuda::par_nosync(thrust_temporary_allocator(stream, pool, l)).on(stream.get());
}
inline auto make_thrust_policy_sync(stream_ref stream, memory_pool_ref pool,
                                    ledger_access* l = nullptr) {
  return thrust::cuda::par(thrust_temporary_allocator(stream, pool, l)).on(stream.get());
}
#else
inline auto make_thrust_policy(stream_ref stream, memory_pool_ref pool,
                               ledger_access* l = nullptr) {
  return thrust::device(thrust_temporary_allocator(stream, pool, l));
}
inline auto make_thrust_policy_sync(stream_ref stream, memory_pool_ref pool,
                                    ledger_access* l = nullptr) {
  return thrust::device(thrust_temporary_allocator(stream, pool, l));
}
#endif

}  // namespace detail

/// @brief The type of thrust_policy(stream, pool).
using thrust_policy_type = decltype(detail::make_thrust_policy(std::declval<stream_ref>(),
                                                               std::declval<memory_pool_ref>()));
/// @brief The type of thrust_policy_sync(stream, pool).
using thrust_policy_sync_type = decltype(detail::make_thrust_policy_sync(
    std::declval<stream_ref>(), std::declval<memory_pool_ref>()));

/// @brief An execution policy that runs Thrust algorithms on stream and takes their temporary
/// storage (sort, reduce, scan...) from pool on stream. Does not synchronize
/// (thrust::cuda::par_nosync): an algorithm may return before its work has run, except where
/// Thrust must wait to return a value (reduce, count...); synchronize the stream before reading
/// its results on the host or from another stream.
[[nodiscard]] inline thrust_policy_type thrust_policy(stream_ref stream, memory_pool_ref pool) {
  return detail::make_thrust_policy(stream, pool);
}

/// @brief As thrust_policy, but each algorithm synchronizes stream before it returns
/// (thrust::cuda::par).
[[nodiscard]] inline thrust_policy_sync_type thrust_policy_sync(stream_ref stream,
                                                                memory_pool_ref pool) {
  return detail::make_thrust_policy_sync(stream, pool);
}

/// @brief thrust_policy on the session's stream and pool, its temporary storage counted by the
/// session (its budget, its leak check) like its make_buffer.
template <class Session, detail::if_session<Session> = 0>
[[nodiscard]] thrust_policy_type thrust_policy(Session& session) {
  return detail::make_thrust_policy(session.stream(), session.pool(),
                                    detail::access_of(detail::accounting_of(session)));
}

/// @brief thrust_policy_sync on the session's stream and pool, counted by the session.
template <class Session, detail::if_session<Session> = 0>
[[nodiscard]] thrust_policy_sync_type thrust_policy_sync(Session& session) {
  return detail::make_thrust_policy_sync(session.stream(), session.pool(),
                                         detail::access_of(detail::accounting_of(session)));
}

/// @brief A Thrust allocator of T from a pool on a stream, for
/// thrust::device_vector<T, cuscope::thrust_allocator<T>>.
///
/// Memory is allocated and freed in stream order on the allocator's stream (cudaFreeAsync: the
/// free waits for the work enqueued on that stream before it). The vector's own work (filling and
/// copying elements when it is built, resized or grown) runs on the stream through
/// thrust_policy_sync, so the vector is ready when the call returns, as with Thrust's default
/// allocator. Element access, assignment into existing elements and copies to host containers use
/// Thrust's default stream instead: synchronize the allocator's stream before them when other work
/// on it may still run (after a thrust_policy algorithm, for instance).
///
/// Copies of a vector take the same pool and stream; copy assignment keeps the target's, move
/// assignment and swap take the other's. Two allocators are equal when they share pool and stream
/// and count for the same session, or for none. Not default-constructible: there is no default
/// pool.
template <class T>
class thrust_allocator {
 public:
  using value_type = T;                                            ///< The element type.
  using pointer = thrust::device_ptr<T>;                           ///< Pointer to an element.
  using const_pointer = thrust::device_ptr<const T>;               ///< Pointer to a const element.
  using reference = thrust::device_reference<T>;                   ///< Reference to an element.
  using const_reference = thrust::device_reference<const T>;       ///< Reference to a const one.
  using size_type = std::size_t;                                   ///< Sizes.
  using difference_type = std::ptrdiff_t;                          ///< Differences of pointers.
  using propagate_on_container_copy_assignment = std::false_type;  ///< Keep the target's.
  using propagate_on_container_move_assignment = std::true_type;   ///< Take the source's.
  using propagate_on_container_swap = std::true_type;              ///< Swap them.
  using is_always_equal = std::false_type;  ///< Equal only with the same pool and stream.
  /// @brief The execution policy of the vector's own work (Thrust's allocator_system).
  using system_type = thrust_policy_sync_type;

  /// @brief The allocator of U with the same pool and stream.
  template <class U>
  struct rebind {
    using other = thrust_allocator<U>;  ///< The rebound allocator.
  };

  /// @brief Allocates from pool in stream order on stream.
  thrust_allocator(stream_ref stream, memory_pool_ref pool)
      : system_(thrust_policy_sync(stream, pool)) {}

  /// @brief Allocates from the session's pool in stream order on its stream, counted by the
  /// session (its budget, its leak check) like its make_buffer.
  template <class Session, detail::if_session<Session> = 0>
  explicit thrust_allocator(Session& session) : system_(thrust_policy_sync(session)) {}

  /// @brief The allocator of T with other's pool, stream and session.
  template <class U>
  thrust_allocator(const thrust_allocator<U>& other)  // NOLINT: implicit, as allocators are
      : system_(other.system_) {}

  /// @brief Storage for n elements from the pool, usable in stream order on the allocator's
  /// stream. Enqueued on that stream; does not synchronize.
  /// @throws std::length_error when n elements overflow the byte count; out_of_memory.
  [[nodiscard]] CUSCOPE_DETAIL_HOT_INLINE pointer allocate(size_type n) {
    if (n > max_size()) too_many(n);
    return pointer(
        static_cast<T*>(state().allocate_bytes(n * sizeof(T), "cuscope::thrust_allocator")));
  }

  /// @brief Returns storage to the pool in stream order on the allocator's stream. Enqueued on
  /// that stream; does not synchronize. Never throws.
  CUSCOPE_DETAIL_HOT_INLINE void deallocate(pointer p, size_type n) noexcept {
    state().deallocate_bytes(static_cast<void*>(p.get()), n * sizeof(T));
  }

  /// @brief The largest number of elements whose bytes a size_t can count.
  [[nodiscard]] size_type max_size() const noexcept {
    return std::numeric_limits<size_type>::max() / sizeof(T);
  }

  /// @brief The pool the memory comes from.
  [[nodiscard]] memory_pool_ref pool() const noexcept { return state().pool(); }
  /// @brief The stream of the allocations, the frees and the vector's own work.
  [[nodiscard]] stream_ref stream() const noexcept { return state().stream(); }
  /// @brief The policy of the vector's own work, which Thrust asks for (allocator_system).
  [[nodiscard]] system_type& system() noexcept { return system_; }
  /// @brief Whether the session counts what the allocator allocates (it, or the allocator it was
  /// copied or rebound from, was made from session).
  template <class Session, detail::if_session<Session> = 0>
  [[nodiscard]] bool counts_for(const Session& session) const noexcept {
    const detail::ledger* const l = accounting();
    return l != nullptr && l == detail::accounting_of(session);
  }

  /// @brief True when both allocate from the same pool on the same stream for the same session.
  template <class U>
  friend bool operator==(const thrust_allocator& a, const thrust_allocator<U>& b) noexcept {
    return a.pool() == b.pool() && a.stream() == b.stream() &&
           detail::accounting_of(a) == detail::accounting_of(b);
  }
  /// @brief True unless both allocate from the same pool on the same stream for the same session.
  template <class U>
  friend bool operator!=(const thrust_allocator& a, const thrust_allocator<U>& b) noexcept {
    return !(a == b);
  }

 private:
  template <class U>
  friend class thrust_allocator;
  friend struct detail::accounting_access;

  // The accounting of the session the allocator counts for; nullptr for none.
  detail::ledger* accounting() const noexcept { return state().accounting(); }

  [[noreturn]] CUSCOPE_DETAIL_COLD static void too_many(size_type n) {
    throw std::length_error("cuscope::thrust_allocator: " + std::to_string(n) + " elements of " +
                            std::to_string(sizeof(T)) + " bytes overflow the byte count");
  }

  // The pool, the stream and the session are those of the policy's temporary allocator, which
  // Thrust's policy holds without a const accessor.
  detail::thrust_temporary_allocator& state() noexcept { return system_.get_allocator(); }
  const detail::thrust_temporary_allocator& state() const noexcept {
    return const_cast<system_type&>(system_).get_allocator();
  }

  system_type system_;  // the vector's policy; its temporary allocator is this allocator's state
};

}  // namespace cuscope
