// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief pool_resource and pinned_pool_resource: a memory pool, or a pool of page-locked host
/// memory, as a CCCL memory resource (cuda::mr), for code built on cuda::mr::resource_ref,
/// cuda::mr::async_resource_ref and the containers that take them.
///
/// Include it where cuda::mr is wanted; the core headers do not, so that <cuda/memory_resource>
/// costs nothing to code that does not use it. It provides the members of both generations of
/// the concepts: CCCL 3.0 (CUDA 13.0: allocate(bytes, alignment), allocate_async(bytes, alignment,
/// stream)) and CCCL 3.1+ (allocate_sync(bytes, alignment), allocate(stream, bytes, alignment)).
#pragma once

// CCCL up to 3.0 hides cuda::mr behind LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE. It must be
// defined for the whole build (cuscope::headers, pkg-config's cuscope and the Conan package define
// it): defined here, it would depend on which header first includes <cuda/memory_resource>.
#include <cuda/std/version>
#if (!defined(CCCL_VERSION) || CCCL_VERSION < 3001000) && \
    !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#  error \
      "cuscope/memory_resource.hpp: CCCL before 3.1 needs LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE defined for the whole build (the cuscope::cuscope target and pkg-config's cuscope define it)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include "cuda_stream_ref.hpp"
#include "detail/adaptor.hpp"
#include "detail/format.hpp"
#include "detail/ledger_fwd.hpp"
#include "device.hpp"
#include "error.hpp"
#include "memory_pool.hpp"
#include "pinned_memory_pool.hpp"
#include "stream.hpp"

namespace cuscope {

namespace detail {

/// What pool_resource and pinned_pool_resource share: allocation from a pool under both
/// generations of the cuda::mr names, and equality. Resource names the derived class, whose
/// name error messages and leak reports carry (Resource::name) and whose get_property says where
/// the memory is accessible.
template <class Resource>
class pool_resource_base {
 public:
  /// @brief The alignment every allocation has, and the largest that may be asked for.
  static constexpr std::size_t max_alignment = 256;

  /// @brief The pool.
  [[nodiscard]] memory_pool_ref pool() const noexcept { return pool_; }
  /// @brief The stream of the synchronous members.
  [[nodiscard]] stream_ref sync_stream() const noexcept { return stream_ref(sync_stream_); }

  // CCCL 3.1+ names ---------------------------------------------------------------------------

  /// @brief bytes from the pool, usable in stream order on stream. Enqueued on stream; does not
  /// synchronize. Returns nullptr for 0 bytes.
  /// @throws std::invalid_argument for an alignment the pool cannot honour; out_of_memory;
  /// cuda_error.
  [[nodiscard]] CUSCOPE_DETAIL_HOT_INLINE void* allocate(stream_ref stream, std::size_t bytes,
                                                         std::size_t alignment = max_alignment) {
    check_alignment(alignment, bytes);
    // Without a session, the pool's own inline path; a session's counting out of line.
    if (ledger_.get() != nullptr) return allocate_counted(stream, bytes);
    return detail::allocate_plain(pool_, stream.get(), bytes);
  }

  /// @brief Returns ptr to the pool in stream order on stream. Enqueued on stream; does not
  /// synchronize. Never throws: a failure goes to the cleanup handler, as in a destructor.
  CUSCOPE_DETAIL_HOT_INLINE void deallocate(stream_ref stream, void* ptr, std::size_t bytes,
                                            std::size_t alignment = max_alignment) noexcept {
    (void)alignment;
    free_nothrow(ptr, bytes, stream.get());
  }

  /// @brief bytes from the pool, usable on any stream when it returns: allocated on the sync
  /// stream, which it synchronizes.
  /// @throws std::invalid_argument for an alignment the pool cannot honour; out_of_memory;
  /// cuda_error.
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = max_alignment) {
    check_alignment(alignment, bytes);
    const stream_ref s(sync_stream_);
    const detail::stream_device_guard on(s.get(), pool_.device());
    void* p = ledger_.get() != nullptr ? allocate_counted(s, bytes) : pool_.allocate(s, bytes);
    try {
      s.synchronize();
    } catch (...) {
      free_nothrow(p, bytes, s.get());
      throw;
    }
    return p;
  }

  /// @brief Returns ptr, no longer in use on any stream, to the pool. Enqueued on the sync
  /// stream; does not synchronize. Never throws: a failure goes to the cleanup handler.
  void deallocate_sync(void* ptr, std::size_t bytes,
                       std::size_t alignment = max_alignment) noexcept {
    (void)alignment;
    free_nothrow(ptr, bytes, sync_stream_);
  }

  // CCCL 3.0 names ----------------------------------------------------------------------------

  /// @brief allocate(stream, bytes, alignment) under its CCCL 3.0 name.
  [[nodiscard]] CUSCOPE_DETAIL_HOT_INLINE void* allocate_async(std::size_t bytes,
                                                               std::size_t alignment,
                                                               stream_ref stream) {
    return allocate(stream, bytes, alignment);
  }

  /// @brief deallocate(stream, ptr, bytes, alignment) under its CCCL 3.0 name.
  CUSCOPE_DETAIL_HOT_INLINE void deallocate_async(void* ptr, std::size_t bytes,
                                                  std::size_t alignment,
                                                  stream_ref stream) noexcept {
    deallocate(stream, ptr, bytes, alignment);
  }

  /// @brief allocate_sync(bytes, alignment) under its CCCL 3.0 name.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = max_alignment) {
    return allocate_sync(bytes, alignment);
  }

  /// @brief deallocate_sync(ptr, bytes, alignment) under its CCCL 3.0 name.
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment = max_alignment) noexcept {
    deallocate_sync(ptr, bytes, alignment);
  }

  // ---------------------------------------------------------------------------------------------

  /// @brief True when both refer to the same pool and count for the same session (or none).
  friend bool operator==(const Resource& a, const Resource& b) noexcept {
    return a.pool_ == b.pool_ && a.ledger_.get() == b.ledger_.get();
  }
  /// @brief True unless both refer to the same pool and count for the same session.
  friend bool operator!=(const Resource& a, const Resource& b) noexcept { return !(a == b); }

 protected:
  pool_resource_base(memory_pool_ref pool, cudaStream_t sync_stream,
                     ledger_access* accounting) noexcept
      : pool_(pool), sync_stream_(sync_stream), ledger_(accounting) {}

  memory_pool_ref pool_;
  cudaStream_t sync_stream_;
  detail::ledger_ref ledger_;

 private:
  CUSCOPE_DETAIL_HOT_INLINE void check_alignment(std::size_t alignment, std::size_t bytes) const {
    // A power of two up to max_alignment: alignment - 1 below it (0 wraps around), sharing no
    // bit with alignment.
    if (alignment - 1 >= max_alignment || (alignment & (alignment - 1)) != 0)
      bad_alignment(alignment, bytes);
  }

  CUSCOPE_DETAIL_NOINLINE void* allocate_counted(stream_ref stream, std::size_t bytes) {
    return ledger_.get()->adaptor_allocate(pool_, stream, bytes, Resource::name);
  }

  [[noreturn]] CUSCOPE_DETAIL_COLD void bad_alignment(std::size_t alignment,
                                                      std::size_t bytes) const {
    throw std::invalid_argument(std::string(Resource::name) + ": alignment " +
                                std::to_string(alignment) + " for " +
                                detail::format_count(bytes, "byte") + " from " + pool_.describe() +
                                " is not a power of two up to 256, which is all a pool gives");
  }

  CUSCOPE_DETAIL_HOT_INLINE void free_nothrow(void* ptr, std::size_t bytes,
                                              cudaStream_t stream) noexcept {
    if (ledger_.get() != nullptr)
      return ledger_.get()->adaptor_free(ptr, bytes, stream_ref(stream), pool_);
    detail::free_plain_nothrow(ptr, bytes, stream, pool_);
  }
};

// Whether pool holds page-locked host memory: its location as the driver reports it
// (cudaMemPoolAttrLocationType, answered by CUDA 13.2 drivers and newer), else whether cuscope
// made it as a pinned_memory_pool (a memory_pool_ref does not say).
inline bool host_located_pool(cudaMemPool_t pool) noexcept {
  constexpr int location_type = 0xC;  // cudaMemPoolAttrLocationType, named from CUDA 13.2 on
  cudaMemLocationType type = cudaMemLocationTypeInvalid;
  if (cudaMemPoolGetAttribute(pool, static_cast<cudaMemPoolAttr>(location_type), &type) ==
      cudaSuccess)
    return type == cudaMemLocationTypeHost || type == cudaMemLocationTypeHostNuma ||
           type == cudaMemLocationTypeHostNumaCurrent;
  (void)cudaGetLastError();  // an older driver: cudaErrorInvalidValue
  return pool_directory::get().host(pool);
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void refuse_host_pool(const memory_pool_ref& pool) {
  throw std::invalid_argument(
      "cuscope::pool_resource: " + pool.describe() +
      " holds page-locked host memory, which is host accessible too; a pool_resource would claim "
      "device memory only: use pinned_pool_resource over the pinned_memory_pool");
}

}  // namespace detail

/// @brief A memory_pool_ref as a CCCL memory resource with the device_accessible property.
///
/// Non-owning and cheap to copy (a pool reference, a stream and, for a session's resource, a
/// counted reference to the session's accounting): the pool must outlive it and every allocation
/// made through it. Two resources are equal when they refer to the same pool and count for the same
/// session, or for none (memory from one may be returned through the other). Alignments up to 256
/// bytes (powers of two) are honoured, as every pool allocation is 256-byte aligned; a larger one
/// is refused with std::invalid_argument.
///
/// The stream-ordered members (allocate(stream, ...), allocate_async) run on the stream given.
/// The synchronous ones (allocate_sync, and allocate(bytes, alignment) under the CCCL 3.0 names)
/// allocate on the resource's sync stream and wait for it, so that the memory is usable on any
/// stream when they return; their deallocation is enqueued on that stream and does not wait, and
/// the memory must no longer be in use by then.
///
/// A pool of page-locked host memory is not one for it (its memory is host accessible too):
/// pinned_pool_resource is. A pinned_memory_pool is refused at compile time, a reference to one
/// when the resource is made.
class pool_resource : public detail::pool_resource_base<pool_resource> {
 public:
  /// @brief A resource over pool; the synchronous members use sync_stream (by default the
  /// per-thread default stream, of the pool's device).
  /// @throws std::invalid_argument for a pool of page-locked host memory (a pinned_memory_pool's
  /// ref(), or any pool the driver places on the host): pinned_pool_resource is the one for it.
  explicit pool_resource(memory_pool_ref pool, stream_ref sync_stream = stream_ref::per_thread())
      : pool_resource_base(pool, sync_stream.get(), nullptr) {
    if (detail::host_located_pool(pool.get())) detail::refuse_host_pool(pool);
  }

  /// @brief Deleted: page-locked host memory is host accessible too; pinned_pool_resource says so.
  pool_resource(const pinned_memory_pool& pool,
                stream_ref sync_stream = stream_ref::per_thread()) = delete;

  /// @brief A resource over the session's pool, whose allocations the session counts (its
  /// budget, its leak check) like its make_buffer; the synchronous members use the session's
  /// stream. Allocating after the session finished throws std::logic_error.
  template <class Session, detail::if_session<Session> = 0>
  explicit pool_resource(Session& session)
      : pool_resource_base(session.pool(), session.stream().get(),
                           detail::access_of(detail::accounting_of(session))) {}

  /// @brief Whether the session counts what the resource allocates (it was made from session).
  template <class Session, detail::if_session<Session> = 0>
  [[nodiscard]] bool counts_for(const Session& session) const noexcept {
    return ledger_.get() != nullptr && ledger_.owner() == detail::accounting_of(session);
  }

  /// @brief The memory is device accessible (cuda::mr::device_accessible).
  friend void get_property(const pool_resource&, ::cuda::mr::device_accessible) noexcept {}

 private:
  friend class detail::pool_resource_base<pool_resource>;
  friend struct detail::accounting_access;

  // The accounting of the session the resource counts for; nullptr for none.
  detail::ledger* accounting() const noexcept { return ledger_.owner(); }
  // The name in error messages and leak reports.
  static constexpr const char* name = "cuscope::pool_resource";
};

/// @brief A pinned_memory_pool as a CCCL memory resource with the properties host_accessible and
/// device_accessible: page-locked host memory, which the host reaches at its address and the
/// pool's device through it.
///
/// The members, their stream semantics and equality are pool_resource's (it counts for no
/// session). The host may touch memory from the stream-ordered allocate once the allocation has
/// run on its stream; memory from the synchronous ones at once.
class pinned_pool_resource : public detail::pool_resource_base<pinned_pool_resource> {
 public:
  /// @brief A resource over pool, which must outlive it and every allocation made through it; the
  /// synchronous members use sync_stream (by default the per-thread default stream, of the pool's
  /// device).
  /// @throws std::logic_error for an empty (moved-from or released) pool.
  explicit pinned_pool_resource(const pinned_memory_pool& pool,
                                stream_ref sync_stream = stream_ref::per_thread())
      : pool_resource_base(pool.ref(), sync_stream.get(), nullptr) {}

  /// @brief Deleted: the resource would outlive a temporary pool.
  pinned_pool_resource(pinned_memory_pool&& pool,
                       stream_ref sync_stream = stream_ref::per_thread()) = delete;

  /// @brief The memory is host accessible (cuda::mr::host_accessible).
  friend void get_property(const pinned_pool_resource&, ::cuda::mr::host_accessible) noexcept {}
  /// @brief The memory is device accessible (cuda::mr::device_accessible).
  friend void get_property(const pinned_pool_resource&, ::cuda::mr::device_accessible) noexcept {}

 private:
  friend class detail::pool_resource_base<pinned_pool_resource>;
  // The name in error messages.
  static constexpr const char* name = "cuscope::pinned_pool_resource";
};

#if CCCL_VERSION >= 3001000
// CCCL 3.1+: synchronous_resource allocates synchronously, resource in stream order.
static_assert(::cuda::mr::synchronous_resource_with<pool_resource, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::resource_with<pool_resource, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::synchronous_resource_with<
              pinned_pool_resource, ::cuda::mr::host_accessible, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::resource_with<pinned_pool_resource, ::cuda::mr::host_accessible,
                                        ::cuda::mr::device_accessible>);
#else
// CCCL 3.0: resource allocates synchronously, async_resource in stream order.
static_assert(::cuda::mr::resource_with<pool_resource, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::async_resource_with<pool_resource, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::resource_with<pinned_pool_resource, ::cuda::mr::host_accessible,
                                        ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::async_resource_with<pinned_pool_resource, ::cuda::mr::host_accessible,
                                              ::cuda::mr::device_accessible>);
#endif

}  // namespace cuscope
