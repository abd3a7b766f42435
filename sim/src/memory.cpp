// SPDX-License-Identifier: Apache-2.0
// Memory: the device address space and the memory behind it, cudaMalloc, host memory, copies,
// memsets, cudaMemGetInfo and pointer attributes. docs/simulated-device.md, "Memory".
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <vector>

#include "api.hpp"
#include "internal.hpp"

namespace cuscope::sim::detail {

namespace {

constexpr std::size_t page_bytes = 4096;

}  // namespace

std::size_t device_free_bytes(const state& g, const device_state& d) {
  std::size_t held =
      g.config.context_bytes + d.malloc_bytes + d.graph_reserved + d.other_process_bytes;
  for (const auto& p : g.pools)
    if (p->device == d.index && !p->host) held += p->allocator.reserved();
  return held >= g.config.total_bytes ? 0 : g.config.total_bytes - held;
}

bool reserve_region(device_state& d, std::size_t bytes, region& out, int fd,
                    std::size_t file_offset) {
  const std::size_t size = round_up(bytes, page_bytes);
  auto it = std::find_if(d.free_ranges.begin(), d.free_ranges.end(),
                         [&](const auto& r) { return r.second >= size; });
  if (it == d.free_ranges.end()) return false;
  void* host = fd < 0 ? mmap(nullptr, size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                      : mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                             static_cast<off_t>(file_offset));
  if (host == MAP_FAILED) return false;
  const std::size_t offset = it->first;
  const std::size_t left = it->second - size;
  d.free_ranges.erase(it);
  if (left > 0) d.free_ranges.emplace(offset + size, left);
  out.va = d.va_base + offset;
  out.size = size;
  out.host = static_cast<std::byte*>(host);
  d.regions.emplace(out.va, out);
  return true;
}

namespace {

// Returns [offset, offset + size) of a device's address space to its free ranges, merged with
// its neighbours.
void free_address_range(device_state& d, std::size_t offset, std::size_t size) {
  auto next = d.free_ranges.lower_bound(offset);
  if (next != d.free_ranges.end() && next->first == offset + size) {
    size += next->second;
    next = d.free_ranges.erase(next);
  }
  if (next != d.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      d.free_ranges.erase(prev);
    }
  }
  d.free_ranges.emplace(offset, size);
}

}  // namespace

void release_region(state& g, int device, std::uintptr_t va) {
  device_state& d = g.devices[static_cast<std::size_t>(device)];
  const auto r = d.regions.find(va);
  if (r == d.regions.end()) return;
  munmap(r->second.host, r->second.size);
  const std::size_t size = r->second.size;
  d.regions.erase(r);
  free_address_range(d, va - d.va_base, size);
}

void release_region_part(state& g, int device, std::uintptr_t va, std::size_t bytes) {
  device_state& d = g.devices[static_cast<std::size_t>(device)];
  auto it = d.regions.upper_bound(va);
  if (it == d.regions.begin()) return;
  --it;
  const region whole = it->second;
  if (va + bytes > whole.va + whole.size) return;
  munmap(whole.host + (va - whole.va), bytes);
  d.regions.erase(it);
  if (va > whole.va) d.regions.emplace(whole.va, region{whole.va, va - whole.va, whole.host});
  const std::uintptr_t end = va + bytes;
  if (end < whole.va + whole.size)
    d.regions.emplace(end, region{end, whole.va + whole.size - end, whole.host + (end - whole.va)});
}

void release_region_range(state& g, int device, std::uintptr_t va, std::size_t bytes) {
  device_state& d = g.devices[static_cast<std::size_t>(device)];
  for (auto it = d.regions.lower_bound(va); it != d.regions.end() && it->first < va + bytes;) {
    munmap(it->second.host, it->second.size);
    it = d.regions.erase(it);
  }
  free_address_range(d, va - d.va_base, bytes);
}

bool device_backing::map(std::size_t bytes, mapped_memory& out) {
  if (delegate_ != nullptr) return delegate_->map(bytes, out);
  device_state& d = g_->devices[static_cast<std::size_t>(device_)];
  if (device_free_bytes(*g_, d) < bytes) return false;
  if (share_ != nullptr) return ipc_map(*g_, device_, *share_, bytes, out);
  region r;
  if (!reserve_region(d, bytes, r)) return false;
  out = mapped_memory{r.va, r.size, r.host};
  return true;
}

bool device_backing::can_map(std::size_t bytes) const noexcept {
  if (delegate_ != nullptr) return delegate_->can_map(bytes);
  return device_free_bytes(*g_, g_->devices[static_cast<std::size_t>(device_)]) >= bytes;
}

void device_backing::release_part(const mapped_memory& memory, std::size_t offset,
                                  std::size_t bytes) noexcept {
  if (delegate_ != nullptr) return delegate_->release_part(memory, offset, bytes);
  release_region_part(*g_, device_, memory.va + offset, bytes);
  if (share_ != nullptr) ipc_release(*share_, memory, offset, bytes);
}

void device_backing::unmap(const mapped_memory& memory) noexcept {
  if (delegate_ != nullptr) return delegate_->unmap(memory);
  release_region_range(*g_, device_, memory.va, memory.size);
  if (share_ != nullptr) ipc_unmap(*share_, memory);
}

std::byte* translate(state& g, std::uintptr_t address, std::size_t bytes) {
  for (device_state& d : g.devices) {
    if (address < d.va_base || address >= d.va_base + d.va_size) continue;
    auto it = d.regions.upper_bound(address);
    if (it == d.regions.begin()) return nullptr;
    const region& r = std::prev(it)->second;
    if (address + bytes > r.va + r.size || address + bytes < address) return nullptr;
    return r.host + (address - r.va);
  }
  return nullptr;
}

void poison(std::byte* p, std::size_t bytes) {
  if (p != nullptr) std::memset(p, poison_byte, bytes);
}

const device_allocation* find_allocation_containing(const state& g, std::uintptr_t p,
                                                    std::size_t bytes) {
  auto it = g.device_allocs.upper_bound(p);
  if (it == g.device_allocs.begin()) return nullptr;
  const device_allocation& a = std::prev(it)->second;
  if (p + bytes < p || p + bytes > a.ptr + a.size) return nullptr;
  return &a;
}

const host_allocation* find_host_containing(const state& g, std::uintptr_t p, std::size_t bytes) {
  auto it = g.host_allocs.upper_bound(p);
  if (it == g.host_allocs.begin()) return nullptr;
  const host_allocation& h = std::prev(it)->second;
  if (p + bytes < p || p + bytes > h.ptr + h.size) return nullptr;
  return &h;
}

void revoke(state& g, std::uintptr_t p, std::size_t bytes, const char* api) {
  // Only work enqueued before now can still touch the memory; ranges whose earlier work has all
  // run are forgotten.
  std::uint64_t oldest = g.next_ticket;
  for (const auto& s : g.streams)
    if (!s->pending.empty()) oldest = std::min(oldest, s->pending.front().ticket);
  g.revoked.erase(std::remove_if(g.revoked.begin(), g.revoked.end(),
                                 [&](const revoked_range& r) { return r.ticket <= oldest; }),
                  g.revoked.end());
  if (oldest == g.next_ticket || bytes == 0) return;
  g.revoked.push_back({p, p + bytes, g.next_ticket, g.calls, api});
}

const revoked_range* revoked_for(const state& g, std::uintptr_t p, std::size_t bytes,
                                 std::uint64_t ticket) {
  for (const revoked_range& r : g.revoked)
    if (ticket < r.ticket && p < r.end && p + bytes > r.begin) return &r;
  return nullptr;
}

void remember_free(state& g, const device_allocation& a, const char* api) {
  constexpr std::size_t kept = 4096;
  g.recent_frees[a.ptr] = freed_allocation{a.size, a.call, a.api, g.calls, api};
  g.recent_free_order.emplace_back(a.ptr, g.calls);
  if (g.recent_free_order.size() > kept) {
    const auto [ptr, call] = g.recent_free_order.front();
    g.recent_free_order.pop_front();
    const auto it = g.recent_frees.find(ptr);
    if (it != g.recent_frees.end() && it->second.free_call == call) g.recent_frees.erase(it);
  }
}

void forget_free(state& g, std::uintptr_t ptr) {
  if (!g.recent_frees.empty()) g.recent_frees.erase(ptr);
}

cudaError_t invalid_free(state& g, const void* ptr, const char* api) {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  char line[400];
  if (const auto freed = g.recent_frees.find(p); freed != g.recent_frees.end()) {
    const freed_allocation& f = freed->second;
    std::snprintf(line, sizeof line,
                  "%s(%p) (call #%zu): a second free of the %zu bytes that %s (call #%" PRIu64
                  ") allocated and %s (call #%" PRIu64 ") freed\n",
                  api, ptr, g.calls, f.size, f.alloc_api, f.alloc_call, f.free_api, f.free_call);
  } else if (auto next = g.device_allocs.upper_bound(p);
             next != g.device_allocs.begin() &&
             p < std::prev(next)->second.ptr + std::prev(next)->second.size) {
    const device_allocation& a = std::prev(next)->second;
    std::snprintf(line, sizeof line,
                  "%s(%p) (call #%zu): the pointer is %zu bytes into the %zu bytes that %s "
                  "(call #%" PRIu64
                  ") allocated at %p; a free takes the pointer the allocation "
                  "returned\n",
                  api, ptr, g.calls, static_cast<std::size_t>(p - a.ptr), a.size, a.api, a.call,
                  reinterpret_cast<void*>(a.ptr));
  } else {
    std::snprintf(line, sizeof line,
                  "%s(%p) (call #%zu): not device memory that the simulated runtime allocated, "
                  "or freed so long ago that it no longer remembers it\n",
                  api, ptr, g.calls);
  }
  g.misuses_seen += line;
  return cudaErrorInvalidValue;
}

bool usable_by(state& g, std::uintptr_t p, std::size_t bytes, std::uint64_t ticket,
               const char* what) {
  if (const revoked_range* found = revoked_for(g, p, bytes, ticket)) {
    const revoked_range& r = *found;
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s of %zu bytes at %p was enqueued before %s (call #%" PRIu64
                  ") freed %p, and ran after it: %s does not wait for enqueued work\n",
                  what, bytes, reinterpret_cast<void*>(p), r.api, r.call,
                  reinterpret_cast<void*>(r.begin), r.api);
    g.faults_seen += line;
    g.sticky = cudaErrorIllegalAddress;
    return false;
  }
  return true;
}

void release_malloc(state& g, std::uintptr_t ptr, std::size_t footprint, int device) {
  g.devices[static_cast<std::size_t>(device)].malloc_bytes -= footprint;
  release_region(g, device, ptr);
}

namespace {

enum class memory { device, pinned, managed, pageable, invalid };

memory classify(const state& g, const void* p, std::size_t bytes) {
  if (p == nullptr) return memory::invalid;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  for (const device_state& d : g.devices) {
    if (address >= d.va_base && address < d.va_base + d.va_size)
      return find_allocation_containing(g, address, bytes) != nullptr ? memory::device
                                                                      : memory::invalid;
  }
  if (const host_allocation* h = find_host_containing(g, address, bytes))
    return h->managed ? memory::managed : memory::pinned;
  return memory::pageable;
}

// Managed memory is both: the host and the devices reach it at the same address.
bool is_host(memory m) {
  return m == memory::pinned || m == memory::pageable || m == memory::managed;
}

bool on_device(memory m) {
  return m == memory::device || m == memory::managed;
}

// Device memory for an operation at run time: the allocation may be gone by then (a misordered
// free), which a GPU reports as an illegal address.
std::byte* device_bytes(state& g, std::uintptr_t address, std::size_t bytes, std::uint64_t ticket,
                        const char* what) {
  if (!g.revoked.empty() && !usable_by(g, address, bytes, ticket, what)) return nullptr;
  std::byte* p = translate(g, address, bytes);
  if (p == nullptr) {
    char line[200];
    std::snprintf(line, sizeof line, "%s of %zu bytes at %p: the memory is not reserved\n", what,
                  bytes, reinterpret_cast<void*>(address));
    g.faults_seen += line;
    g.sticky = cudaErrorIllegalAddress;
  }
  return p;
}

// Host memory for an operation at run time: pinned memory freed since it was enqueued faults.
bool host_usable(state& g, const void* p, std::size_t bytes, std::uint64_t ticket,
                 const char* what) {
  return g.revoked.empty() ||
         usable_by(g, reinterpret_cast<std::uintptr_t>(p), bytes, ticket, what);
}

cudaError_t allocate_pinned(state& g, void** ptr, std::size_t bytes, unsigned flags,
                            const char* api_name) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  const unsigned known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if ((flags & ~known) != 0) return cudaErrorInvalidValue;
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return cudaErrorMemoryAllocation;
  poison(static_cast<std::byte*>(p), std::min(bytes, poison_limit));
  host_allocation h;
  h.ptr = reinterpret_cast<std::uintptr_t>(p);
  h.size = bytes;
  h.flags = flags;
  h.call = g.calls;
  h.device = this_thread().device;
  h.api = api_name;
  g.host_allocs.emplace(h.ptr, h);
  *ptr = p;
  return cudaSuccess;
}

}  // namespace

namespace api {

namespace {

// A copy in stream order. The synchronous form returns once the copy has run, except from device
// to device; the asynchronous form blocks only where the driver must (into pageable memory).
cudaError_t copy(state& g, void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                 cudaStream_t stream, bool ptds, bool synchronous_call) {
  CUstream_st* s = nullptr;
  if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
  if (const cudaError_t e =
          synchronous_call ? capture_check_sync(g, *s) : capture_check_enqueue(g, *s);
      e != cudaSuccess)
    return e;
  if (count == 0) return cudaSuccess;
  memory to = classify(g, dst, count);
  memory from = classify(g, src, count);
  if (to == memory::invalid || from == memory::invalid) return cudaErrorInvalidValue;
  switch (kind) {
    case cudaMemcpyHostToHost:
      if (!is_host(to) || !is_host(from)) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyHostToDevice:
      if (!on_device(to) || !is_host(from)) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDeviceToHost:
      if (!is_host(to) || !on_device(from)) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDeviceToDevice:
      if (!on_device(to) || !on_device(from)) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDefault:
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  // Managed memory has a host address: it is copied like pinned memory, in stream order.
  if (to == memory::managed) to = memory::pinned;
  if (from == memory::managed) from = memory::pinned;
  const auto d_addr = reinterpret_cast<std::uintptr_t>(dst);
  const auto s_addr = reinterpret_cast<std::uintptr_t>(src);
  const std::uint64_t ticket = g.next_ticket;  // the copy's, given by enqueue below
  bool wait = synchronous_call;
  work_fn work;
  if (from == memory::pageable && to == memory::device) {
    // Pageable sources are staged when the call is made, as the driver does.
    auto staged = std::make_shared<std::vector<std::byte>>(
        static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + count);
    work = [&g, d_addr, staged, ticket] {
      if (std::byte* p = device_bytes(g, d_addr, staged->size(), ticket, "a copy"))
        std::memcpy(p, staged->data(), staged->size());
    };
  } else if (to == memory::device && from == memory::device) {
    wait = false;
    work = [&g, d_addr, s_addr, count, ticket] {
      std::byte* p = device_bytes(g, d_addr, count, ticket, "a copy");
      const std::byte* q = device_bytes(g, s_addr, count, ticket, "a copy");
      if (p != nullptr && q != nullptr) std::memmove(p, q, count);
    };
  } else if (to == memory::device) {
    work = [&g, d_addr, src, count, ticket] {
      std::byte* p = device_bytes(g, d_addr, count, ticket, "a copy");
      if (p != nullptr && host_usable(g, src, count, ticket, "a copy")) std::memcpy(p, src, count);
    };
  } else if (from == memory::device) {
    wait = wait || to == memory::pageable;
    work = [&g, dst, s_addr, count, ticket] {
      const std::byte* q = device_bytes(g, s_addr, count, ticket, "a copy");
      if (q != nullptr && host_usable(g, dst, count, ticket, "a copy")) std::memcpy(dst, q, count);
    };
  } else {
    wait = true;
    work = [&g, dst, src, count, ticket] {
      if (host_usable(g, dst, count, ticket, "a copy") &&
          host_usable(g, src, count, ticket, "a copy"))
        std::memmove(dst, src, count);
    };
  }
  const std::uint64_t seq = enqueue(g, *s, std::move(work));
  if (wait) drive_to(g, *s, seq);
  return sticky_or_success(g);
}

// cudaMemset is asynchronous except on pinned host memory; cudaMemsetAsync always is.
cudaError_t fill(state& g, void* dst, int value, std::size_t count, cudaStream_t stream, bool ptds,
                 bool synchronous_call) {
  CUstream_st* s = nullptr;
  if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
  if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  const memory to = classify(g, dst, count);
  const std::uint64_t ticket = g.next_ticket;  // the memset's, given by enqueue below
  if (to == memory::device) {
    const auto address = reinterpret_cast<std::uintptr_t>(dst);
    enqueue(g, *s, [&g, address, value, count, ticket] {
      if (std::byte* p = device_bytes(g, address, count, ticket, "a memset"))
        std::memset(p, value, count);
    });
    return cudaSuccess;
  }
  if (to != memory::pinned && to != memory::managed) return cudaErrorInvalidValue;
  const std::uint64_t seq = enqueue(g, *s, [&g, dst, value, count, ticket] {
    if (host_usable(g, dst, count, ticket, "a memset")) std::memset(dst, value, count);
  });
  if (synchronous_call && to == memory::pinned) drive_to(g, *s, seq);
  return cudaSuccess;
}

}  // namespace

// Row by row: each row is a copy of its own, in stream order.
cudaError_t memcpy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                      std::size_t width, std::size_t height, cudaMemcpyKind kind,
                      cudaStream_t stream, bool ptds, bool synchronous_call) {
  return call(synchronous_call ? "cudaMemcpy2D" : "cudaMemcpy2DAsync", [&](state& g) {
    if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
    if (width == 0 || height == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
    if (height > 1 && (dpitch > SIZE_MAX / (height - 1) || spitch > SIZE_MAX / (height - 1)))
      return cudaErrorInvalidValue;
    const std::size_t d_span = dpitch * (height - 1) + width;
    const std::size_t s_span = spitch * (height - 1) + width;
    // The whole of both areas first, so that a bad one enqueues nothing.
    if (classify(g, dst, d_span) == memory::invalid || classify(g, src, s_span) == memory::invalid)
      return cudaErrorInvalidValue;
    for (std::size_t row = 0; row < height; ++row) {
      const cudaError_t e = copy(g, static_cast<std::byte*>(dst) + row * dpitch,
                                 static_cast<const std::byte*>(src) + row * spitch, width, kind,
                                 synchronous_call ? nullptr : stream, ptds, synchronous_call);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  });
}

// On the stream (legacy for cudaMemcpyPeer), from device memory of one device to another's.
cudaError_t memcpy_peer(void* dst, int dst_device, const void* src, int src_device,
                        std::size_t count, cudaStream_t stream, const char* api_name) {
  return call(api_name, [&](state& g) -> cudaError_t {
    if (find_device(g, dst_device) == nullptr || find_device(g, src_device) == nullptr)
      return cudaErrorInvalidDevice;
    if (count == 0) return cudaSuccess;
    const device_allocation* to =
        find_allocation_containing(g, reinterpret_cast<std::uintptr_t>(dst), count);
    const device_allocation* from =
        find_allocation_containing(g, reinterpret_cast<std::uintptr_t>(src), count);
    if (to == nullptr || from == nullptr || to->device != dst_device || from->device != src_device)
      return cudaErrorInvalidValue;
    return copy(g, dst, src, count, cudaMemcpyDeviceToDevice, stream, false, false);
  });
}

cudaError_t mem_prefetch(const void* ptr, std::size_t count, int device, cudaStream_t stream,
                         bool ptds, const char* api_name) {
  return call(api_name, [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    if (device == cudaInvalidDeviceId) return cudaErrorInvalidValue;  // bad location or flags
    if (device != cudaCpuDeviceId && find_device(g, device) == nullptr)
      return cudaErrorInvalidDevice;
    if (count == 0) return cudaErrorInvalidValue;
    if (classify(g, ptr, count) != memory::managed) return cudaErrorInvalidValue;
    enqueue(g, *s, {});  // nothing moves: the simulation keeps managed memory in one place
    return cudaSuccess;
  });
}

cudaError_t memcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, bool ptds) {
  return call("cudaMemcpy",
              [&](state& g) { return copy(g, dst, src, count, kind, nullptr, ptds, true); });
}

cudaError_t memcpy_async(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                         cudaStream_t stream, bool ptds) {
  return call("cudaMemcpyAsync",
              [&](state& g) { return copy(g, dst, src, count, kind, stream, ptds, false); });
}

cudaError_t memset(void* dst, int value, std::size_t count, bool ptds) {
  return call("cudaMemset",
              [&](state& g) { return fill(g, dst, value, count, nullptr, ptds, true); });
}

cudaError_t memset_async(void* dst, int value, std::size_t count, cudaStream_t stream, bool ptds) {
  return call("cudaMemsetAsync",
              [&](state& g) { return fill(g, dst, value, count, stream, ptds, false); });
}

}  // namespace api
}  // namespace cuscope::sim::detail

using namespace cuscope::sim::detail;

#if CUDART_VERSION >= 13000
namespace cuscope::sim::detail::api {
int location_target(const cudaMemLocation& location) {
  switch (location.type) {
    case cudaMemLocationTypeDevice:
      return location.id;
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent:
      return cudaCpuDeviceId;
    default:
      return cudaInvalidDeviceId;
  }
}
}  // namespace cuscope::sim::detail::api
#endif

namespace {

cudaError_t allocate_device(state& g, void** ptr, std::size_t bytes, const char* api_name) {
  {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    if (bytes == 0) {
      *ptr = nullptr;
      return cudaSuccess;
    }
    if (bytes > std::numeric_limits<std::size_t>::max() / 2) return cudaErrorMemoryAllocation;
    const std::size_t footprint = round_up(bytes, allocation_alignment);
    if (device_free_bytes(g, *d) < footprint) return cudaErrorMemoryAllocation;
    region r;
    if (!reserve_region(*d, bytes, r)) return cudaErrorMemoryAllocation;
    poison(r.host, std::min(bytes, poison_limit));
    d->malloc_bytes += footprint;
    device_allocation a;
    a.ptr = r.va;
    a.size = bytes;
    a.footprint = footprint;
    a.device = d->index;
    a.kind = alloc_kind::malloc;
    a.call = g.calls;
    a.api = api_name;
    forget_free(g, a.ptr);
    g.device_allocs.emplace(a.ptr, a);
    *ptr = reinterpret_cast<void*>(r.va);
    return cudaSuccess;
  }
}

cudaError_t free_managed(state& g, std::map<std::uintptr_t, host_allocation>::iterator it) {
  if (g.config.free_synchronizes)
    drive_all(g);
  else
    revoke(g, it->second.ptr, it->second.size, "cudaFree");
  void* p = reinterpret_cast<void*>(it->second.ptr);
  g.host_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}

}  // namespace

extern "C" {

// Memory -----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t bytes) {
  return call("cudaMalloc", [&](state& g) {
    // "During stream capture ... some actions, such as a call to cudaMalloc, may be unsafe."
    if (const cudaError_t e = capture_check_unsafe(g); e != cudaSuccess) return e;
    return allocate_device(g, ptr, bytes, "cudaMalloc");
  });
}

cudaError_t CUDARTAPI cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  return call("cudaMallocPitch", [&](state& g) -> cudaError_t {
    if (ptr == nullptr || pitch == nullptr) return cudaErrorInvalidValue;
    const std::size_t row = round_up(width, g.config.pitch_alignment_bytes);
    if (row < width || (height != 0 && row > SIZE_MAX / height)) return cudaErrorMemoryAllocation;
    const cudaError_t e = allocate_device(g, ptr, row * height, "cudaMallocPitch");
    if (e == cudaSuccess) *pitch = row;
    return e;
  });
}

cudaError_t CUDARTAPI cudaMallocManaged(void** ptr, size_t bytes, unsigned int flags) {
  return call("cudaMallocManaged", [&](state& g) -> cudaError_t {
    if (ptr == nullptr || bytes == 0) return cudaErrorInvalidValue;
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) return cudaErrorInvalidValue;
    if (current_device(g) == nullptr) return cudaErrorNoDevice;
    void* p = nullptr;
    if (posix_memalign(&p, page_bytes, bytes) != 0) return cudaErrorMemoryAllocation;
    poison(static_cast<std::byte*>(p), std::min(bytes, poison_limit));
    host_allocation h;
    h.ptr = reinterpret_cast<std::uintptr_t>(p);
    h.size = bytes;
    h.flags = flags;
    h.managed = true;
    h.call = g.calls;
    h.device = this_thread().device;
    h.api = "cudaMallocManaged";
    g.host_allocs.emplace(h.ptr, h);
    *ptr = p;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  return call("cudaFree", [&](state& g) -> cudaError_t {
    if (ptr == nullptr) return cudaSuccess;
    const auto it = g.device_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g.device_allocs.end()) {
      const auto managed = g.host_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
      if (managed != g.host_allocs.end() && managed->second.managed)
        return free_managed(g, managed);
      return invalid_free(g, ptr, "cudaFree");
    }
    if (it->second.kind == alloc_kind::graph) return graph_free(g, it, nullptr);
    remember_free(g, it->second, "cudaFree");
    // CUDA promises no synchronization for stream-ordered memory and only allows it for the
    // rest: by default the memory goes at once, and earlier work that still touches it faults.
    if (g.config.free_synchronizes)
      drive_device(g, it->second.device);
    else
      revoke(g, it->second.ptr, it->second.size, "cudaFree");
    if (it->second.kind == alloc_kind::stream_ordered) return pool_free(g, it, nullptr);
    if (it->second.kind == alloc_kind::imported) return ipc_free_imported(g, it, nullptr);
    release_malloc(g, it->second.ptr, it->second.footprint, it->second.device);
    g.device_allocs.erase(it);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  return call("cudaHostAlloc",
              [&](state& g) { return allocate_pinned(g, ptr, bytes, flags, "cudaHostAlloc"); });
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t bytes) {
  return call("cudaMallocHost",
              [&](state& g) { return allocate_pinned(g, ptr, bytes, 0, "cudaMallocHost"); });
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  return call("cudaFreeHost", [&](state& g) -> cudaError_t {
    if (ptr == nullptr) return cudaSuccess;
    const auto it = g.host_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g.host_allocs.end() || it->second.registered || it->second.managed ||
        it->second.pool_chunk)
      return cudaErrorInvalidValue;
    // GPUs have been seen to synchronize here; CUDA does not say so.
    if (g.config.free_host_synchronizes)
      drive_all(g);
    else
      revoke(g, it->second.ptr, it->second.size, "cudaFreeHost");
    g.host_allocs.erase(it);
    std::free(ptr);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaHostRegister(void* ptr, size_t bytes, unsigned int flags) {
  return call("cudaHostRegister", [&](state& g) -> cudaError_t {
    if (ptr == nullptr || bytes == 0) return cudaErrorInvalidValue;
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    for (const device_state& d : g.devices)
      if (p < d.va_base + d.va_size && p + bytes > d.va_base) return cudaErrorInvalidValue;
    const auto next = g.host_allocs.lower_bound(p);
    if (next != g.host_allocs.end() && next->first < p + bytes)
      return cudaErrorHostMemoryAlreadyRegistered;
    if (next != g.host_allocs.begin()) {
      const host_allocation& prev = std::prev(next)->second;
      if (prev.ptr + prev.size > p) return cudaErrorHostMemoryAlreadyRegistered;
    }
    host_allocation h;
    h.ptr = p;
    h.size = bytes;
    h.flags = flags;
    h.registered = true;
    h.call = g.calls;
    h.device = this_thread().device;
    h.api = "cudaHostRegister";
    g.host_allocs.emplace(p, h);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaHostUnregister(void* ptr) {
  return call("cudaHostUnregister", [&](state& g) -> cudaError_t {
    const auto it = g.host_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g.host_allocs.end() || !it->second.registered)
      return cudaErrorHostMemoryNotRegistered;
    if (g.config.free_host_synchronizes)
      drive_all(g);
    else
      revoke(g, it->second.ptr, it->second.size, "cudaHostUnregister");
    g.host_allocs.erase(it);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return call("cudaMemGetInfo", [&](state& g) -> cudaError_t {
    if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    *free_bytes = device_free_bytes(g, *d);
    *total_bytes = g.config.total_bytes;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  return call("cudaPointerGetAttributes", [&](state& g) -> cudaError_t {
    if (attributes == nullptr) return cudaErrorInvalidValue;
    std::memset(attributes, 0, sizeof *attributes);
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    for (const device_state& d : g.devices) {
      if (p < d.va_base || p >= d.va_base + d.va_size) continue;
      if (translate(g, p, 1) == nullptr) break;
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = d.index;
      attributes->devicePointer = const_cast<void*>(ptr);
      return cudaSuccess;
    }
    if (const host_allocation* h = find_host_containing(g, p, 1)) {
      attributes->type = h->managed ? cudaMemoryTypeManaged : cudaMemoryTypeHost;
      attributes->device = h->device;
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->hostPointer = const_cast<void*>(ptr);
      return cudaSuccess;
    }
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return api::memcpy(dst, src, count, kind, false);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                      cudaStream_t stream) {
  return api::memcpy_async(dst, src, count, kind, stream, false);
}

cudaError_t CUDARTAPI cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, cudaMemcpyKind kind) {
  return api::memcpy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, false, true);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, cudaMemcpyKind kind,
                                        cudaStream_t stream) {
  return api::memcpy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false, false);
}

cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src,
                                          int src_device, size_t count, cudaStream_t stream) {
  return api::memcpy_peer(dst, dst_device, src, src_device, count, stream, "cudaMemcpyPeerAsync");
}

cudaError_t CUDARTAPI cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                                     size_t count) {
  return api::memcpy_peer(dst, dst_device, src, src_device, count, nullptr, "cudaMemcpyPeer");
}

#if CUDART_VERSION >= 13000

cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void* ptr, size_t count, cudaMemLocation location,
                                           unsigned int flags, cudaStream_t stream) {
  const int target = flags == 0 ? api::location_target(location) : cudaInvalidDeviceId;
  return api::mem_prefetch(ptr, count, target, stream, false, "cudaMemPrefetchAsync");
}

cudaError_t CUDARTAPI cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise advice,
                                    cudaMemLocation location) {
  return call("cudaMemAdvise", [&](state& g) -> cudaError_t {
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
      return cudaErrorInvalidValue;
    const int target = api::location_target(location);
    if (target == cudaInvalidDeviceId) return cudaErrorInvalidValue;
    if (target != cudaCpuDeviceId && find_device(g, target) == nullptr)
      return cudaErrorInvalidDevice;
    if (count == 0 || classify(g, ptr, count) != memory::managed) return cudaErrorInvalidValue;
    return cudaSuccess;  // advice changes where pages live, which the simulation does not model
  });
}
#else
cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void* ptr, size_t count, int device,
                                           cudaStream_t stream) {
  return api::mem_prefetch(ptr, count, device, stream, false, "cudaMemPrefetchAsync");
}

cudaError_t CUDARTAPI cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise advice,
                                    int device) {
  return call("cudaMemAdvise", [&](state& g) -> cudaError_t {
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
      return cudaErrorInvalidValue;
    if (device != cudaCpuDeviceId && find_device(g, device) == nullptr)
      return cudaErrorInvalidDevice;
    if (count == 0 || classify(g, ptr, count) != memory::managed) return cudaErrorInvalidValue;
    return cudaSuccess;  // advice changes where pages live, which the simulation does not model
  });
}
#endif

cudaError_t CUDARTAPI cudaMemset(void* dst, int value, size_t count) {
  return api::memset(dst, value, count, false);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return api::memset_async(dst, value, count, stream, false);
}

}  // extern "C"
