// SPDX-License-Identifier: Apache-2.0
// Memory pools: stream-ordered allocation and free, the pool functions of the runtime, and the
// release threshold. The allocator inside a pool is pool_allocator.cpp.
// docs/simulated-device.md, "Memory pools".
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "api.hpp"
#include "internal.hpp"

namespace cuscope::sim::detail {

CUmemPoolHandle_st* create_pool(state& g, int device, std::size_t max_size, bool is_default) {
  auto p =
      std::make_unique<CUmemPoolHandle_st>(g, device, g.config.pool_granularity_bytes, max_size);
  p->is_default = is_default;
  p->created_by_call = g.calls;
  CUmemPoolHandle_st* raw = p.get();
  g.pools.push_back(std::move(p));
  g.pool_handles.insert(raw);
  return raw;
}

cudaError_t pool_allocate(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, CUstream_st& s,
                          const char* api, void** out) {
  if (bytes == 0) return cudaErrorInvalidValue;
  if (bytes > std::numeric_limits<std::size_t>::max() - allocation_alignment)
    return cudaErrorMemoryAllocation;
  const std::size_t need = round_up(bytes, allocation_alignment);
  pool_allocator::result placed;
  const auto rank = [&](const free_tag& freed_by, bool free_pending) {
    return rank_for(g, pool, s, freed_by, free_pending);
  };
  if (!pool.allocator.allocate(need, rank, placed)) return cudaErrorMemoryAllocation;
  std::vector<dependency> deps;
  if (placed.waits)
    deps.push_back({g.streams[placed.wait_for.stream - 1].get(), placed.wait_for.seq});
  const std::uintptr_t ptr = placed.placement.address();
  device_allocation a;
  a.ptr = ptr;
  a.size = bytes;
  a.footprint = need;
  a.device = pool.device;
  a.kind = alloc_kind::stream_ordered;
  a.pool = &pool;
  a.place = placed.placement;
  a.stream_id = s.id;
  a.call = g.calls;
  a.api = api;
  g.device_allocs.emplace(ptr, a);
  // Fresh memory holds garbage once the allocation runs in stream order.
  const std::uint64_t ticket = g.next_ticket;
  enqueue(
      g, s,
      [&g, ptr, bytes, ticket] {
        // Not after a cudaFree that did not wait for it: the memory may hold another allocation.
        if (g.revoked.empty() || revoked_for(g, ptr, bytes, ticket) == nullptr)
          poison(translate(g, ptr, bytes), std::min(bytes, poison_limit));
      },
      std::move(deps));
  *out = reinterpret_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t pool_free(state& g, std::map<std::uintptr_t, device_allocation>::iterator allocation,
                      CUstream_st* s) {
  const device_allocation a = allocation->second;
  CUmemPoolHandle_st* pool = a.pool;
  g.device_allocs.erase(allocation);
  if (s == nullptr) {
    poison(a.place.host(), std::min(a.footprint, poison_limit));
    pool->allocator.free_now(a.place);
    pool_release_if_destroyed(*pool);
    return cudaSuccess;
  }
  const pending_free f = pool->allocator.free_later(a.place, free_tag{s->id, s->enqueued + 1});
  enqueue(g, *s, [pool, f] {
    poison(f.chunk->mem.host + f.offset, std::min(f.size, poison_limit));
    pool->allocator.complete(f);
    pool_release_if_destroyed(*pool);
  });
  return cudaSuccess;
}

void pool_release_if_destroyed(CUmemPoolHandle_st& pool) {
  if (!pool.destroyed || pool.allocator.used() != 0 || pool.allocator.pending_frees() != 0) return;
  pool.allocator.release_all();
}

void after_synchronize(state& g, int device) {
  for (auto& p : g.pools) {
    if (p->device != device) continue;
    if (p->allocator.reserved() > p->release_threshold)
      p->allocator.trim(static_cast<std::size_t>(std::min<std::uint64_t>(
                            p->release_threshold, std::numeric_limits<std::size_t>::max())),
                        trim_mode::down_to);
    pool_release_if_destroyed(*p);
  }
}

namespace api {

cudaError_t malloc_async(void** ptr, std::size_t bytes, cudaStream_t stream, bool ptds) {
  return call("cudaMallocAsync", [&](state& g) -> cudaError_t {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    CUmemPoolHandle_st* pool = g.devices[static_cast<std::size_t>(s->device)].current_pool;
    return pool_allocate(g, *pool, bytes, *s, "cudaMallocAsync", ptr);
  });
}

cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                   cudaStream_t stream, bool ptds) {
  return call("cudaMallocFromPoolAsync", [&](state& g) -> cudaError_t {
    if (ptr == nullptr || !valid_pool(g, pool)) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    return pool_allocate(g, *pool, bytes, *s, "cudaMallocFromPoolAsync", ptr);
  });
}

cudaError_t free_async(void* ptr, cudaStream_t stream, bool ptds) {
  return call("cudaFreeAsync", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (ptr == nullptr) return cudaSuccess;
    const auto it = g.device_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g.device_allocs.end()) return cudaErrorInvalidValue;
    if (it->second.kind == alloc_kind::stream_ordered) return pool_free(g, it, s);
    // Memory from cudaMalloc may be freed in stream order too: the allocation is gone now, its
    // memory goes back to the device when the free runs.
    const std::uintptr_t p = it->second.ptr;
    const std::size_t footprint = it->second.footprint;
    const int device = it->second.device;
    g.device_allocs.erase(it);
    enqueue(g, *s, [&g, p, footprint, device] { release_malloc(g, p, footprint, device); });
    return cudaSuccess;
  });
}

}  // namespace api
}  // namespace cuscope::sim::detail

using namespace cuscope::sim::detail;

extern "C" {

// Stream-ordered allocation and pools ------------------------------------------------------------

cudaError_t CUDARTAPI cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  return api::malloc_async(ptr, bytes, stream, false);
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool,
                                              cudaStream_t stream) {
  return api::malloc_from_pool_async(ptr, bytes, pool, stream, false);
}

cudaError_t CUDARTAPI cudaFreeAsync(void* ptr, cudaStream_t stream) {
  return api::free_async(ptr, stream, false);
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  return call("cudaMemPoolCreate", [&](state& g) -> cudaError_t {
    if (pool == nullptr || props == nullptr) return cudaErrorInvalidValue;
    if (props->allocType != cudaMemAllocationTypePinned) return cudaErrorInvalidValue;
    if (props->location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
    if (find_device(g, props->location.id) == nullptr) return cudaErrorInvalidDevice;
    std::size_t max_size = 0;
#if CUDART_VERSION >= 12020
    max_size = props->maxSize;
#endif
    *pool = create_pool(g, props->location.id, max_size, false);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t pool) {
  return call("cudaMemPoolDestroy", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool) || pool->is_default) return cudaErrorInvalidValue;
    pool->destroyed = true;
    device_state& d = g.devices[static_cast<std::size_t>(pool->device)];
    if (d.current_pool == pool) d.current_pool = d.default_pool;
    // Memory behind live allocations or frees that have not run is released once they are gone.
    pool_release_if_destroyed(*pool);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                              void* value) {
  return call("cudaMemPoolSetAttribute", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool) || value == nullptr) return cudaErrorInvalidValue;
    switch (attr) {
      case cudaMemPoolReuseFollowEventDependencies:
        pool->follow_event_dependencies = *static_cast<int*>(value) != 0;
        return cudaSuccess;
      case cudaMemPoolReuseAllowOpportunistic:
        pool->allocator.set_opportunistic(*static_cast<int*>(value) != 0);
        return cudaSuccess;
      case cudaMemPoolReuseAllowInternalDependencies:
        pool->allow_internal_dependencies = *static_cast<int*>(value) != 0;
        return cudaSuccess;
      case cudaMemPoolAttrReleaseThreshold:
        pool->release_threshold = *static_cast<std::uint64_t*>(value);
        return cudaSuccess;
      case cudaMemPoolAttrReservedMemHigh:
        if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
        pool->allocator.reset_reserved_high();
        return cudaSuccess;
      case cudaMemPoolAttrUsedMemHigh:
        if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
        pool->allocator.reset_used_high();
        return cudaSuccess;
      default:
        return cudaErrorInvalidValue;
    }
  });
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                              void* value) {
  return call("cudaMemPoolGetAttribute", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool) || value == nullptr) return cudaErrorInvalidValue;
    const auto u64 = [&](std::uint64_t v) {
      *static_cast<std::uint64_t*>(value) = v;
      return cudaSuccess;
    };
    const auto flag = [&](bool v) {
      *static_cast<int*>(value) = v ? 1 : 0;
      return cudaSuccess;
    };
    switch (attr) {
      case cudaMemPoolReuseFollowEventDependencies:
        return flag(pool->follow_event_dependencies);
      case cudaMemPoolReuseAllowOpportunistic:
        return flag(pool->allocator.opportunistic());
      case cudaMemPoolReuseAllowInternalDependencies:
        return flag(pool->allow_internal_dependencies);
      case cudaMemPoolAttrReleaseThreshold:
        return u64(pool->release_threshold);
      case cudaMemPoolAttrReservedMemCurrent:
        return u64(pool->allocator.reserved());
      case cudaMemPoolAttrReservedMemHigh:
        return u64(pool->allocator.reserved_high());
      case cudaMemPoolAttrUsedMemCurrent:
        return u64(pool->allocator.used());
      case cudaMemPoolAttrUsedMemHigh:
        return u64(pool->allocator.used_high());
      default:
        return cudaErrorInvalidValue;
    }
  });
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  return call("cudaMemPoolTrimTo", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool)) return cudaErrorInvalidValue;
    pool->allocator.trim(min_bytes_to_keep, trim_mode::keep_at_least);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* list,
                                           size_t count) {
  return call("cudaMemPoolSetAccess", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool) || (list == nullptr && count != 0)) return cudaErrorInvalidValue;
    for (std::size_t i = 0; i < count; ++i) {
      if (list[i].location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
      if (find_device(g, list[i].location.id) == nullptr) return cudaErrorInvalidDevice;
      // The owning device always has read-write access.
      if (list[i].location.id == pool->device && list[i].flags != cudaMemAccessFlagsProtReadWrite)
        return cudaErrorInvalidValue;
      if (list[i].flags != cudaMemAccessFlagsProtNone &&
          list[i].flags != cudaMemAccessFlagsProtRead &&
          list[i].flags != cudaMemAccessFlagsProtReadWrite)
        return cudaErrorInvalidValue;
    }
    // All descriptors are valid: apply them, later ones winning. Only the answers of
    // cudaMemPoolGetAccess change; accesses from other devices are not checked.
    for (std::size_t i = 0; i < count; ++i) {
      if (list[i].location.id == pool->device) continue;
      if (list[i].flags == cudaMemAccessFlagsProtNone) {
        pool->peer_access.erase(list[i].location.id);
      } else {
        pool->peer_access[list[i].location.id] = list[i].flags;
      }
    }
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                           cudaMemLocation* location) {
  return call("cudaMemPoolGetAccess", [&](state& g) -> cudaError_t {
    if (flags == nullptr || location == nullptr || !valid_pool(g, pool))
      return cudaErrorInvalidValue;
    if (location->type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
    if (find_device(g, location->id) == nullptr) return cudaErrorInvalidDevice;
    if (location->id == pool->device) {
      *flags = cudaMemAccessFlagsProtReadWrite;
    } else {
      const auto it = pool->peer_access.find(location->id);
      *flags = it == pool->peer_access.end() ? cudaMemAccessFlagsProtNone : it->second;
    }
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return call("cudaDeviceGetDefaultMemPool", [&](state& g) -> cudaError_t {
    if (pool == nullptr) return cudaErrorInvalidValue;
    device_state* d = find_device(g, device);
    if (d == nullptr) return cudaErrorInvalidDevice;
    *pool = d->default_pool;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return call("cudaDeviceGetMemPool", [&](state& g) -> cudaError_t {
    if (pool == nullptr) return cudaErrorInvalidValue;
    device_state* d = find_device(g, device);
    if (d == nullptr) return cudaErrorInvalidDevice;
    *pool = d->current_pool;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  return call("cudaDeviceSetMemPool", [&](state& g) -> cudaError_t {
    device_state* d = find_device(g, device);
    if (d == nullptr) return cudaErrorInvalidDevice;
    if (!valid_pool(g, pool) || pool->device != device) return cudaErrorInvalidValue;
    d->current_pool = pool;
    return cudaSuccess;
  });
}

}  // extern "C"
