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

// cudaMemPoolAttr by value: 0x1-0x8 since CUDA 11.2, 0x9-0xE in the 13.2 headers, 0xF in 13.4.
namespace pool_attr {
constexpr int follow_event_dependencies = 0x1;
constexpr int allow_opportunistic = 0x2;
constexpr int allow_internal_dependencies = 0x3;
constexpr int release_threshold = 0x4;
constexpr int reserved_current = 0x5;
constexpr int reserved_high = 0x6;
constexpr int used_current = 0x7;
constexpr int used_high = 0x8;
constexpr int allocation_type = 0x9;
constexpr int export_handle_types = 0xA;
constexpr int location_id = 0xB;
constexpr int location_type = 0xC;
constexpr int max_pool_size = 0xD;
constexpr int hw_decompress_enabled = 0xE;
constexpr int locality_domain_id = 0xF;
}  // namespace pool_attr

CUmemPoolHandle_st* create_pool(state& g, int device, std::size_t max_size, bool is_default) {
  // The driver rounds maxSize up to its granularity: CCCL's tests see a 1 MiB pool refuse only a
  // request of more than 32 MiB, and cudaMemPoolAttrMaxPoolSize "may be higher" than asked.
  const std::size_t unit = g.config.pool_granularity_bytes;
  const std::size_t most = std::numeric_limits<std::size_t>::max() / unit * unit;
  const std::size_t limit = max_size > most ? most : round_up(max_size, unit);
  auto p = std::make_unique<CUmemPoolHandle_st>(g, device, unit, limit);
  p->max_size = limit;
  p->is_default = is_default;
  p->created_by_call = g.calls;
  CUmemPoolHandle_st* raw = p.get();
  g.pools.push_back(std::move(p));
  g.pool_handles.insert(raw);
  return raw;
}

cudaError_t pool_allocate(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, CUstream_st& s,
                          const char* api, void** out) {
  if (bytes == 0) {
    // Succeeds, allocating nothing (alpaka#1868 saw *ptr left as it was with CUDA 11.2).
    if (!g.config.zero_byte_async_keeps_pointer) *out = nullptr;
    return cudaSuccess;
  }
  const std::size_t rounding = g.config.pool_rounding_bytes;
  if (bytes > std::numeric_limits<std::size_t>::max() - rounding) return cudaErrorMemoryAllocation;
  const std::size_t need = round_up(bytes, rounding);
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
  forget_free(g, ptr);
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
    if (pool->share != nullptr)
      ipc_exporter_freed(g, *pool, ipc_take_export(*pool, a.ptr), a.ptr, "cudaFree");
    poison(a.place.host(), std::min(a.footprint, poison_limit));
    pool->allocator.free_now(a.place);
    pool_release_if_destroyed(*pool);
    return cudaSuccess;
  }
  const pending_free f = pool->allocator.free_later(a.place, free_tag{s->id, s->enqueued + 1});
  const bool foreign = s->device != pool->device;
  const std::int32_t exported = pool->share != nullptr ? ipc_take_export(*pool, a.ptr) : -1;
  enqueue(g, *s, [pool, f, foreign, exported] {
    if (pool->share != nullptr)
      ipc_exporter_freed(global(), *pool, exported, f.chunk->mem.va + f.offset, "cudaFreeAsync");
    poison(f.chunk->mem.host + f.offset, std::min(f.size, poison_limit));
    pool->allocator.complete(f);
    if (foreign) pool->foreign_frees_ran = true;
    pool_release_if_destroyed(*pool);
  });
  return cudaSuccess;
}

void pool_release_if_destroyed(CUmemPoolHandle_st& pool) {
  if (!pool.destroyed || pool.allocator.used() != 0 || pool.allocator.pending_frees() != 0) return;
  pool.allocator.release_all();
  if (pool.share != nullptr && !pool.share->imported) {
    pool.backing.share(nullptr);
    pool.share.reset();
  }
}

void after_synchronize(state& g, int device) {
  for (auto& p : g.pools) {
    // The synchronized device's pools, and a pool of another device whose memory was freed on one
    // of its streams (CUDA's sample streamOrderedAllocationP2P frees device 0's memory on a
    // device 1 stream).
    if (p->device != device && !p->foreign_frees_ran && !p->host) continue;
    if (p->device != device) p->foreign_frees_ran = false;
    // IPC pools do not give memory back (Guide 4.3.3.4.4): their threshold is ignored.
    if (p->share != nullptr) continue;
    if (p->allocator.reserved() > p->release_threshold)
      p->allocator.trim(static_cast<std::size_t>(
          std::min<std::uint64_t>(p->release_threshold, std::numeric_limits<std::size_t>::max())));
    pool_release_if_destroyed(*p);
  }
}

namespace api {

namespace {

// A failed allocation leaves nullptr in *ptr (CCCL's memory_pools.cu checks it on a GPU).
cudaError_t null_on_failure(void** ptr, cudaError_t e) {
  if (e != cudaSuccess && ptr != nullptr) *ptr = nullptr;
  return e;
}

}  // namespace

cudaError_t malloc_async(void** ptr, std::size_t bytes, cudaStream_t stream, bool ptds) {
  return call("cudaMallocAsync", [&](state& g) -> cudaError_t {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess)
      return null_on_failure(ptr, e);
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess)
      return null_on_failure(ptr, e);
    CUmemPoolHandle_st* pool = g.devices[static_cast<std::size_t>(s->device)].current_pool;
    if (s->capture != nullptr)
      return null_on_failure(ptr, capture_allocate(g, *s, *pool, bytes, ptr));
    return null_on_failure(ptr, pool_allocate(g, *pool, bytes, *s, "cudaMallocAsync", ptr));
  });
}

cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                   cudaStream_t stream, bool ptds) {
  return call("cudaMallocFromPoolAsync", [&](state& g) -> cudaError_t {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    // Imported pools serve no allocations (Guide 4.3.3.4.5).
    if (!valid_pool(g, pool) || (pool->share != nullptr && pool->share->imported))
      return null_on_failure(ptr, cudaErrorInvalidValue);
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess)
      return null_on_failure(ptr, e);
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess)
      return null_on_failure(ptr, e);
    if (s->capture != nullptr)
      return null_on_failure(ptr, capture_allocate(g, *s, *pool, bytes, ptr));
    return null_on_failure(ptr, pool_allocate(g, *pool, bytes, *s, "cudaMallocFromPoolAsync", ptr));
  });
}

cudaError_t free_async(void* ptr, cudaStream_t stream, bool ptds) {
  return call("cudaFreeAsync", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    if (ptr == nullptr) return cudaSuccess;
    const auto it = g.device_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g.device_allocs.end()) return invalid_free(g, ptr, "cudaFreeAsync");
    if (it->second.kind == alloc_kind::graph) return graph_free(g, it, s);
    // "During stream capture, this function results in the creation of a free node and must
    // therefore be passed the address of a graph allocation."
    if (s->capture != nullptr) return cudaErrorInvalidValue;
    remember_free(g, it->second, "cudaFreeAsync");
    if (it->second.kind == alloc_kind::stream_ordered) return pool_free(g, it, s);
    if (it->second.kind == alloc_kind::imported) return ipc_free_imported(g, it, s);
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
    if (props->location.type != cudaMemLocationTypeDevice) return create_host_pool(g, *props, pool);
    // The reference lists only cudaErrorInvalidValue and cudaErrorNotSupported, and HIP's tests
    // expect InvalidValue for a device that does not exist; the driver probe asks a GPU.
    if (find_device(g, props->location.id) == nullptr) return cudaErrorInvalidValue;
    std::size_t max_size = 0;
#if CUDART_VERSION >= 12020
    max_size = props->maxSize;
#endif
    // Only POSIX file descriptors can be exported (cudaDevAttrMemoryPoolSupportedHandleTypes).
    if ((props->handleTypes & ~cudaMemHandleTypePosixFileDescriptor) != 0)
      return cudaErrorNotSupported;
    CUmemPoolHandle_st* created = create_pool(g, props->location.id, max_size, false);
    created->handle_types = props->handleTypes;
    if (props->handleTypes != cudaMemHandleTypeNone && !ipc_share_pool(g, *created)) {
      created->destroyed = true;
      return cudaErrorMemoryAllocation;
    }
    *pool = created;
#if defined(cudaMemPoolCreateUsageHwDecompress)
    created->hw_decompress = (props->usage & cudaMemPoolCreateUsageHwDecompress) != 0;
#endif
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
    ipc_release_imported_pool_if_done(*pool);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                              void* value) {
  return call("cudaMemPoolSetAttribute", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool) || value == nullptr) return cudaErrorInvalidValue;
    // By number, so that the attributes of newer headers than these are known too.
    switch (static_cast<int>(attr)) {
      case pool_attr::follow_event_dependencies:
        pool->follow_event_dependencies = *static_cast<int*>(value) != 0;
        return cudaSuccess;
      case pool_attr::allow_opportunistic:
        pool->allocator.set_opportunistic(*static_cast<int*>(value) != 0);
        return cudaSuccess;
      case pool_attr::allow_internal_dependencies:
        pool->allow_internal_dependencies = *static_cast<int*>(value) != 0;
        return cudaSuccess;
      case pool_attr::release_threshold:
        pool->release_threshold = *static_cast<std::uint64_t*>(value);
        return cudaSuccess;
      case pool_attr::reserved_high:
        // "It is illegal to set this attribute to a non-zero value."
        if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
        pool->allocator.reset_reserved_high();
        return cudaSuccess;
      case pool_attr::used_high:
        if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
        pool->allocator.reset_used_high();
        return cudaSuccess;
      default:
        // The current values and every attribute of CUDA 13.2 and newer are read-only.
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
    const auto integer = [&](int v) {
      *static_cast<int*>(value) = v;
      return cudaSuccess;
    };
    // An imported pool's statistics are the allocations this process imported (Guide 4.3.3.4.5).
    if (pool->share != nullptr && pool->share->imported) {
      switch (static_cast<int>(attr)) {
        case pool_attr::reserved_current:
        case pool_attr::used_current:
          return u64(pool->share->imported_bytes);
        case pool_attr::reserved_high:
        case pool_attr::used_high:
          return u64(pool->share->imported_high);
        default:
          break;
      }
    }
    switch (static_cast<int>(attr)) {
      case pool_attr::follow_event_dependencies:
        return integer(pool->follow_event_dependencies ? 1 : 0);
      case pool_attr::allow_opportunistic:
        return integer(pool->allocator.opportunistic() ? 1 : 0);
      case pool_attr::allow_internal_dependencies:
        return integer(pool->allow_internal_dependencies ? 1 : 0);
      case pool_attr::release_threshold:
        return u64(pool->release_threshold);
      case pool_attr::reserved_current:
        return u64(pool->allocator.reserved());
      case pool_attr::reserved_high:
        return u64(pool->allocator.reserved_high());
      case pool_attr::used_current:
        return u64(pool->allocator.used());
      case pool_attr::used_high:
        return u64(pool->allocator.used_high());
      case pool_attr::allocation_type:
        *static_cast<cudaMemAllocationType*>(value) = cudaMemAllocationTypePinned;
        return cudaSuccess;
      case pool_attr::export_handle_types:
        *static_cast<cudaMemAllocationHandleType*>(value) = pool->handle_types;
        return cudaSuccess;
      case pool_attr::location_id:
        return integer(pool->host ? pool->location_id : pool->device);
      case pool_attr::location_type:
        *static_cast<cudaMemLocationType*>(value) = pool->location_type;
        return cudaSuccess;
      case pool_attr::max_pool_size:
        return u64(pool->max_size);
      case pool_attr::hw_decompress_enabled:
        return integer(pool->hw_decompress ? 1 : 0);
      case pool_attr::locality_domain_id:
        return integer(-1);  // "not localized to a locality domain"
      default:
        return cudaErrorInvalidValue;
    }
  });
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  return call("cudaMemPoolTrimTo", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool)) return cudaErrorInvalidValue;
    // IPC pools do not give memory back: the trim has no effect (Guide 4.3.3.4.4).
    if (pool->share == nullptr) pool->allocator.trim(min_bytes_to_keep);
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
      // The owning device always has read-write access; a host pool has no owning device.
      if (!pool->host && list[i].location.id == pool->device &&
          list[i].flags != cudaMemAccessFlagsProtReadWrite)
        return cudaErrorInvalidValue;
      if (list[i].flags != cudaMemAccessFlagsProtNone &&
          list[i].flags != cudaMemAccessFlagsProtRead &&
          list[i].flags != cudaMemAccessFlagsProtReadWrite)
        return cudaErrorInvalidValue;
    }
    // All descriptors are valid: apply them, later ones winning. Only the answers of
    // cudaMemPoolGetAccess change; accesses from other devices are not checked.
    for (std::size_t i = 0; i < count; ++i) {
      if (!pool->host && list[i].location.id == pool->device) continue;
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
    // A host pool is accessible from the host CPU ("their default accessibility will be from the
    // host CPU"), and from devices only where cudaMemPoolSetAccess granted it.
    if (pool->host && location->type != cudaMemLocationTypeDevice) {
      *flags = cudaMemAccessFlagsProtReadWrite;
      return cudaSuccess;
    }
    if (location->type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
    if (find_device(g, location->id) == nullptr) return cudaErrorInvalidDevice;
    if (!pool->host && location->id == pool->device) {
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
    if (pool->share != nullptr && pool->share->imported) return cudaErrorInvalidValue;
    d->current_pool = pool;
    return cudaSuccess;
  });
}

}  // extern "C"
