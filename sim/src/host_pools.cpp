// SPDX-License-Identifier: Apache-2.0
// Host-located memory pools (cudaMemLocationTypeHost, cudaMemLocationTypeHostNuma): pinned host
// memory served in stream order. docs/simulated-device.md, "Memory pools", host-located pools.
#include <sys/mman.h>

#include <iterator>
#include <memory>

#include "internal.hpp"

namespace cuscope::sim::detail {

namespace {

// Maps pool memory from the host: page-aligned memory that the host reaches at its address, marked
// as pinned host memory so that copies treat it so.
class host_backing final : public pool_backing {
 public:
  explicit host_backing(state& g) noexcept : g_(&g) {}

  bool map(std::size_t bytes, mapped_memory& out) override {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    mark(address, bytes);
    out = mapped_memory{address, bytes, static_cast<std::byte*>(p)};
    return true;
  }

  [[nodiscard]] bool can_map(std::size_t) const noexcept override { return true; }

  void release_part(const mapped_memory& memory, std::size_t offset,
                    std::size_t bytes) noexcept override {
    // The addresses stay reserved (unmap gives back the whole range): no longer accessible, and
    // no longer backed.
    const std::uintptr_t begin = memory.va + offset;
    unmark(begin, bytes);
    void* p = reinterpret_cast<void*>(begin);
    madvise(p, bytes, MADV_DONTNEED);
    mprotect(p, bytes, PROT_NONE);
  }

  void unmap(const mapped_memory& memory) noexcept override {
    unmark(memory.va, memory.size);
    munmap(reinterpret_cast<void*>(memory.va), memory.size);
  }

 private:
  void mark(std::uintptr_t address, std::size_t bytes) {
    host_allocation h;
    h.ptr = address;
    h.size = bytes;
    h.pool_chunk = true;
    h.call = g_->calls;
    h.api = "a host memory pool";
    g_->host_allocs.emplace(address, h);
  }

  // Removes [begin, begin + bytes) from the marked ranges, splitting the one it lies in.
  void unmark(std::uintptr_t begin, std::size_t bytes) noexcept {
    const std::uintptr_t end = begin + bytes;
    auto it = g_->host_allocs.upper_bound(begin);
    if (it == g_->host_allocs.begin()) return;
    --it;
    while (it != g_->host_allocs.end() && it->first < end) {
      host_allocation h = it->second;
      if (!h.pool_chunk || h.ptr + h.size <= begin) {
        ++it;
        continue;
      }
      it = g_->host_allocs.erase(it);
      if (h.ptr < begin) {
        host_allocation left = h;
        left.size = begin - h.ptr;
        g_->host_allocs.emplace(left.ptr, left);
      }
      if (h.ptr + h.size > end) {
        host_allocation right = h;
        right.ptr = end;
        right.size = h.ptr + h.size - end;
        it = g_->host_allocs.emplace(right.ptr, right).first;
        ++it;
      }
    }
  }

  state* g_;
};

}  // namespace

cudaError_t create_host_pool(state& g, const cudaMemPoolProps& props, cudaMemPool_t* out) {
  const int type = props.location.type;
  // cudaMemLocationTypeHost from the CUDA 13.0 headers on ("To create a memory pool for host
  // memory not targeting a specific NUMA node ... cudaMemLocationTypeHost"; the 12.9 headers
  // refuse it); HostNuma with a NUMA node id (one node, 0, in the simulation); HostNumaCurrent
  // "will result in cudaErrorInvalidValue".
#if CUDART_VERSION >= 13000
  const bool host = type == cudaMemLocationTypeHost;
#else
  const bool host = false;
#endif
  const bool numa = type == cudaMemLocationTypeHostNuma;
  if (!host && !numa) return cudaErrorInvalidValue;
  if (numa && props.location.id != 0) return cudaErrorInvalidValue;
  // "Pools created with the type cudaMemLocationTypeHost are not IPC capable and handleTypes
  // must be 0."
  if (props.handleTypes != cudaMemHandleTypeNone) return cudaErrorInvalidValue;
  if (current_device(g) == nullptr) return cudaErrorNoDevice;
  std::size_t max_size = 0;
#if CUDART_VERSION >= 12020
  max_size = props.maxSize;
#endif
  CUmemPoolHandle_st* created = create_pool(g, 0, max_size, false);
  created->host = true;
  created->location_type = props.location.type;
  created->location_id = numa ? props.location.id : 0;
  created->host_memory = std::make_unique<host_backing>(g);
  created->backing.delegate_to(created->host_memory.get());
  *out = created;
  return cudaSuccess;
}

}  // namespace cuscope::sim::detail
