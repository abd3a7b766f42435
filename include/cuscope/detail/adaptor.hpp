// SPDX-License-Identifier: Apache-2.0
// What the adaptors over a pool (pool_resource, the Thrust allocators and policies) allocate and
// free through: the pool's own paths with the usual case inline, and, for a session's adaptors,
// the session's ledger through ledger_access (detail/ledger_fwd.hpp). Neither the ledger nor
// device_allocation.hpp is included: a header with an adaptor costs what the pool's costs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "../device.hpp"
#include "../memory_pool.hpp"
#include "../stream.hpp"
#include "config.hpp"
#include "ledger_fwd.hpp"
#include "recorder_hook.hpp"

namespace cuscope::detail {

/// bytes from pool on stream for an adaptor that no session counts (pool_resource, the Thrust
/// allocators): as pool.allocate(stream, bytes), with the rare cases (0 bytes, a default stream, a
/// recorder attached to any pool) tested before the runtime call and served out of line, so that
/// the usual one is the call and its status test.
void* allocate_plain(const memory_pool_ref& pool, cudaStream_t stream, std::size_t bytes);

/// allocate_plain's rare cases, out of line: pool.allocate(stream, bytes).
void* allocate_plain_slow(const memory_pool_ref& pool, cudaStream_t stream, std::size_t bytes);

/// allocate_plain's failed runtime call (status), out of line: the out-of-memory handler, then
/// the exception naming the pool.
void* allocate_plain_failed(const memory_pool_ref& pool, cudaStream_t stream, std::size_t bytes,
                            cudaError_t status);

/// Frees ptr (nullptr: nothing), bytes from pool, in stream order on stream, for an adaptor that
/// no session counts (pool_resource, the Thrust allocators), and records the free into the pool's
/// recorder; never throws. A failure is reported through the cleanup channel.
void free_plain_nothrow(void* ptr, std::size_t bytes, cudaStream_t stream,
                        const memory_pool_ref& pool) noexcept;

}  // namespace cuscope::detail

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

namespace cuscope::detail {

// allocate_plain()'s rare cases, out of line: the pool's own allocation.
CUSCOPE_DETAIL_NOINLINE inline void* allocate_plain_slow(const memory_pool_ref& pool,
                                                         cudaStream_t stream, std::size_t bytes) {
  return pool.allocate(stream_ref(stream), bytes);
}

// allocate_plain()'s failed runtime call, out of line: the out-of-memory handler, the exception.
CUSCOPE_DETAIL_COLD inline void* allocate_plain_failed(const memory_pool_ref& pool,
                                                       cudaStream_t stream, std::size_t bytes,
                                                       cudaError_t status) {
  return pool_access::allocate_failed(pool, stream_ref(stream), bytes, status);
}

CUSCOPE_DETAIL_HOT_INLINE inline void* allocate_plain(const memory_pool_ref& pool,
                                                      cudaStream_t stream, std::size_t bytes) {
  if (bytes == 0 || is_default_stream(stream) || any_pool_recorded())
    return allocate_plain_slow(pool, stream, bytes);
  void* p = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, pool.get(), stream);
  if (status != cudaSuccess) return allocate_plain_failed(pool, stream, bytes, status);
  return p;
}

// free_plain_nothrow()'s rare cases, out of line: a default stream (the pool's device made
// current), a recorder attached to any pool.
CUSCOPE_DETAIL_NOINLINE inline void free_plain_slow(void* ptr, std::size_t bytes,
                                                    cudaStream_t stream,
                                                    const memory_pool_ref& pool) noexcept {
  if (!free_async_nothrow(ptr, stream, pool.device(), bytes)) return;
  if (const hook_entry* entries = recorded_pools())
    notify_pool_free(pool.get(), stream, entries, ptr, bytes);
}

CUSCOPE_DETAIL_HOT_INLINE inline void free_plain_nothrow(void* ptr, std::size_t bytes,
                                                         cudaStream_t stream,
                                                         const memory_pool_ref& pool) noexcept {
  if (ptr == nullptr) return;
  if (is_default_stream(stream) || any_pool_recorded())
    return free_plain_slow(ptr, bytes, stream, pool);
  const cudaError_t status = cudaFreeAsync(ptr, stream);
  if (status != cudaSuccess) (void)free_async_slow(ptr, stream, pool.device(), bytes, status);
}

}  // namespace cuscope::detail

#endif  // CUSCOPE_DETAIL_HOST_CODE
