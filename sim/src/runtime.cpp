// SPDX-License-Identifier: Apache-2.0
// The CUDA runtime functions of the simulated device, under their real names.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "api.hpp"
#include "internal.hpp"

namespace cuscope::sim::detail {

namespace {

struct error_text {
  int code;
  const char* name;
  const char* text;
};

// Names and messages as libcudart reports them; codes are numbers so that the table compiles
// against every supported toolkit.
constexpr error_text error_texts[] = {
    {0, "cudaSuccess", "no error"},
    {1, "cudaErrorInvalidValue", "invalid argument"},
    {2, "cudaErrorMemoryAllocation", "out of memory"},
    {3, "cudaErrorInitializationError", "initialization error"},
    {4, "cudaErrorCudartUnloading", "driver shutting down"},
    {9, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {16, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {17, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {35, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {46, "cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"},
    {98, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {100, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {101, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {214, "cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"},
    {217, "cudaErrorPeerAccessUnsupported",
     "peer access is not supported between these two devices"},
    {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {401, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {500, "cudaErrorSymbolNotFound", "named symbol not found"},
    {600, "cudaErrorNotReady", "device not ready"},
    {700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {701, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {709, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {710, "cudaErrorAssert", "device-side assert triggered"},
    {712, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {713, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {714, "cudaErrorHardwareStackError", "hardware stack error"},
    {715, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {716, "cudaErrorMisalignedAddress", "misaligned address"},
    {717, "cudaErrorInvalidAddressSpace", "operation not supported on global/shared address space"},
    {718, "cudaErrorInvalidPc", "invalid program counter"},
    {719, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {800, "cudaErrorNotPermitted", "operation not permitted"},
    {801, "cudaErrorNotSupported", "operation not supported"},
    {900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {909, "cudaErrorTimeout", "wait operation timed out"},
    {999, "cudaErrorUnknown", "unknown error"},
};

const error_text* find_error(cudaError_t e) {
  for (const error_text& t : error_texts)
    if (t.code == static_cast<int>(e)) return &t;
  return nullptr;
}

thread_state& current() {
  return this_thread();
}

device_state* current_device(state& g) {
  return find_device(g, current().device);
}

bool valid_pool(const state& g, cudaMemPool_t pool) {
  return pool != nullptr && g.pool_handles.count(pool) != 0 && !pool->destroyed;
}

bool valid_event(const state& g, cudaEvent_t e) {
  return e != nullptr && g.event_handles.count(e) != 0 && !e->destroyed;
}

enum class memory { device, pinned, pageable, invalid };

memory classify(const state& g, const void* p, std::size_t bytes) {
  if (p == nullptr) return memory::invalid;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  for (const device_state& d : g.devices) {
    if (address >= d.va_base && address < d.va_base + d.va_size)
      return find_allocation_containing(g, address, bytes) != nullptr ? memory::device
                                                                      : memory::invalid;
  }
  return find_host_containing(g, address, bytes) != nullptr ? memory::pinned : memory::pageable;
}

bool is_host(memory m) {
  return m == memory::pinned || m == memory::pageable;
}

// Copies device memory at run time: the allocation may be gone by then (a misordered free), which
// a GPU reports as an illegal address.
std::byte* device_bytes(state& g, std::uintptr_t address, std::size_t bytes) {
  std::byte* p = translate(g, address, bytes);
  if (p == nullptr) g.sticky = cudaErrorIllegalAddress;
  return p;
}

cudaError_t sticky_or_success(const state& g) {
  return g.sticky;
}

void fill_properties(const state& g, int device, cudaDeviceProp& p) {
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.name, "cuscope simulated device", sizeof p.name - 1);
  p.totalGlobalMem = g.config.total_bytes;
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = std::numeric_limits<int>::max();
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = std::numeric_limits<int>::max();
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.multiProcessorCount = 132;
  p.canMapHostMemory = 1;
  p.concurrentKernels = 1;
  p.pciBusID = device;
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.maxThreadsPerMultiProcessor = 2048;
  p.streamPrioritiesSupported = 1;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1;
  p.sharedMemPerBlockOptin = 227 * 1024;
  p.maxBlocksPerMultiProcessor = 32;
  p.hostRegisterSupported = 1;
  p.memoryPoolsSupported = 1;
  p.memoryPoolSupportedHandleTypes = 0;
}

bool device_attribute(cudaDeviceAttr attr, int& value) {
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      value = 1024;
      return true;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      value = 48 * 1024;
      return true;
    case cudaDevAttrWarpSize:
      value = 32;
      return true;
    case cudaDevAttrMultiProcessorCount:
      value = 132;
      return true;
    case cudaDevAttrIntegrated:
      value = 0;
      return true;
    case cudaDevAttrCanMapHostMemory:
      value = 1;
      return true;
    case cudaDevAttrGlobalMemoryBusWidth:
      value = 5120;
      return true;
    case cudaDevAttrL2CacheSize:
      value = 50 * 1024 * 1024;
      return true;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      value = 2048;
      return true;
    case cudaDevAttrAsyncEngineCount:
      value = 2;
      return true;
    case cudaDevAttrUnifiedAddressing:
      value = 1;
      return true;
    case cudaDevAttrComputeCapabilityMajor:
      value = 9;
      return true;
    case cudaDevAttrComputeCapabilityMinor:
      value = 0;
      return true;
    case cudaDevAttrStreamPrioritiesSupported:
      value = 1;
      return true;
    case cudaDevAttrManagedMemory:
      value = 1;
      return true;
    case cudaDevAttrPageableMemoryAccess:
      value = 0;
      return true;
    case cudaDevAttrConcurrentManagedAccess:
      value = 0;
      return true;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      value = 227 * 1024;
      return true;
    case cudaDevAttrHostRegisterSupported:
      value = 1;
      return true;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      value = 32;
      return true;
    case cudaDevAttrMemoryPoolsSupported:
      value = 1;
      return true;
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
      value = 0;
      return true;
    default:
      return false;
  }
}

constexpr int least_priority = 0;
constexpr int greatest_priority = -5;

cudaError_t create_stream_handle(state& g, cudaStream_t* out, unsigned flags, int priority) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return cudaErrorInvalidValue;
  device_state* d = current_device(g);
  if (d == nullptr) return cudaErrorNoDevice;
  priority = std::min(least_priority, std::max(greatest_priority, priority));
  *out = create_stream(g, d->index, flags, priority, CUstream_st::kind_t::created);
  return cudaSuccess;
}

cudaError_t create_event(state& g, cudaEvent_t* event, unsigned flags) {
  if (event == nullptr) return cudaErrorInvalidValue;
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) != 0) return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0)
    return cudaErrorInvalidValue;
  device_state* d = current_device(g);
  if (d == nullptr) return cudaErrorNoDevice;
  auto* e = new CUevent_st();
  e->flags = flags;
  e->device = d->index;
  e->created_by_call = g.calls;
  g.event_handles.insert(e);
  *event = e;
  return cudaSuccess;
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
  h.device = current().device;
  h.api = api_name;
  g.host_allocs.emplace(h.ptr, h);
  *ptr = p;
  return cudaSuccess;
}

// Gives memory from cudaMalloc back to its device.
void release_malloc(state& g, std::uintptr_t ptr, std::size_t footprint, int device) {
  g.devices[static_cast<std::size_t>(device)].malloc_bytes -= footprint;
  const auto r = g.malloc_regions.find(ptr);
  if (r == g.malloc_regions.end() || !r->second) return;  // every allocation has its region
  release_region(g, *r->second);
  g.malloc_regions.erase(r);
}

// Destroyed events are kept for a while so that a stale handle is reported, not reused.
void forget_destroyed_events(state& g) {
  std::size_t scan = g.destroyed_events.size();
  while (g.destroyed_events.size() > destroyed_events_kept && scan-- > 0) {
    CUevent_st* e = g.destroyed_events.front();
    g.destroyed_events.pop_front();
    if (e->pending_records == 0) {
      g.event_handles.erase(e);
      delete e;
    } else {
      g.destroyed_events.push_back(e);
    }
  }
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
  if (count == 0) return cudaSuccess;
  const memory to = classify(g, dst, count);
  const memory from = classify(g, src, count);
  if (to == memory::invalid || from == memory::invalid) return cudaErrorInvalidValue;
  switch (kind) {
    case cudaMemcpyHostToHost:
      if (!is_host(to) || !is_host(from)) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyHostToDevice:
      if (to != memory::device || !is_host(from)) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDeviceToHost:
      if (!is_host(to) || from != memory::device) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDeviceToDevice:
      if (to != memory::device || from != memory::device) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDefault:
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  const auto d_addr = reinterpret_cast<std::uintptr_t>(dst);
  const auto s_addr = reinterpret_cast<std::uintptr_t>(src);
  bool wait = synchronous_call;
  work_fn work;
  if (from == memory::pageable && to == memory::device) {
    // Pageable sources are staged when the call is made, as the driver does.
    auto staged = std::make_shared<std::vector<std::byte>>(
        static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + count);
    work = [&g, d_addr, staged] {
      if (std::byte* p = device_bytes(g, d_addr, staged->size()))
        std::memcpy(p, staged->data(), staged->size());
    };
  } else if (to == memory::device && from == memory::device) {
    wait = false;
    work = [&g, d_addr, s_addr, count] {
      std::byte* p = device_bytes(g, d_addr, count);
      const std::byte* q = device_bytes(g, s_addr, count);
      if (p != nullptr && q != nullptr) std::memmove(p, q, count);
    };
  } else if (to == memory::device) {
    work = [&g, d_addr, src, count] {
      if (std::byte* p = device_bytes(g, d_addr, count)) std::memcpy(p, src, count);
    };
  } else if (from == memory::device) {
    wait = wait || to == memory::pageable;
    work = [&g, dst, s_addr, count] {
      if (const std::byte* q = device_bytes(g, s_addr, count)) std::memcpy(dst, q, count);
    };
  } else {
    wait = true;
    work = [dst, src, count] { std::memmove(dst, src, count); };
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
  if (count == 0) return cudaSuccess;
  const memory to = classify(g, dst, count);
  if (to == memory::device) {
    const auto address = reinterpret_cast<std::uintptr_t>(dst);
    enqueue(g, *s, [&g, address, value, count] {
      if (std::byte* p = device_bytes(g, address, count)) std::memset(p, value, count);
    });
    return cudaSuccess;
  }
  if (to != memory::pinned) return cudaErrorInvalidValue;
  const std::uint64_t seq = enqueue(g, *s, [dst, value, count] { std::memset(dst, value, count); });
  if (synchronous_call) drive_to(g, *s, seq);
  return cudaSuccess;
}

}  // namespace

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

cudaError_t stream_query(cudaStream_t stream, bool ptds) {
  return call("cudaStreamQuery", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    drive_stream(g, *s);
    return sticky_or_success(g);
  });
}

cudaError_t stream_synchronize(cudaStream_t stream, bool ptds) {
  return call("cudaStreamSynchronize", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    drive_stream(g, *s);
    observe(g, *s, s->completed, s->known);
    after_synchronize(g, s->device);
    return sticky_or_success(g);
  });
}

cudaError_t stream_get_flags(cudaStream_t stream, unsigned* flags, bool ptds) {
  return call("cudaStreamGetFlags", [&](state& g) -> cudaError_t {
    if (flags == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    *flags = s->flags;
    return cudaSuccess;
  });
}

cudaError_t stream_get_priority(cudaStream_t stream, int* priority, bool ptds) {
  return call("cudaStreamGetPriority", [&](state& g) -> cudaError_t {
    if (priority == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    *priority = s->priority;
    return cudaSuccess;
  });
}

cudaError_t stream_get_device(cudaStream_t stream, int* device, bool ptds) {
  return call("cudaStreamGetDevice", [&](state& g) -> cudaError_t {
    if (device == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    *device = s->device;
    return cudaSuccess;
  });
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptds) {
  return call("cudaStreamWaitEvent", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    if ((flags & ~static_cast<unsigned>(cudaEventWaitExternal)) != 0) return cudaErrorInvalidValue;
    if (event->generation == 0) return cudaSuccess;  // never recorded: nothing to wait for
    if (event->completed_generation < event->generation)
      enqueue(g, *s, {}, {{event->stream, event->seq}});
    merge(s->known, event->known);
    return cudaSuccess;
  });
}

cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool ptds,
                         const char* api_name) {
  return call(api_name, [&](state& g) -> cudaError_t {
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    if (flags != 0) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (s->device != event->device) return cudaErrorInvalidResourceHandle;
    const std::uint64_t generation = ++event->generation;
    ++event->pending_records;
    event->stream = s;
    event->seq = s->enqueued + 1;
    CUevent_st* e = event;
    enqueue(g, *s, [e, generation] {
      --e->pending_records;
      if (generation > e->completed_generation) {
        e->completed_generation = generation;
        e->time = std::chrono::steady_clock::now();
      }
    });
    event->known = s->known;
    event->known[s->id] = event->seq;
    return cudaSuccess;
  });
}

cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* data, bool ptds) {
  return call("cudaLaunchHostFunc", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (fn == nullptr) return cudaErrorInvalidValue;
    enqueue(g, *s, [fn, data] { fn(data); });
    return cudaSuccess;
  });
}

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

// Errors -----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetLastError(void) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (g.sticky != cudaSuccess) return g.sticky;
  thread_state& t = this_thread();
  const cudaError_t e = t.last_error;
  t.last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (g.sticky != cudaSuccess) return g.sticky;
  return this_thread().last_error;
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  const error_text* t = find_error(error);
  return t != nullptr ? t->name : "unrecognized error code";
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  const error_text* t = find_error(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

// Devices ----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  return call("cudaGetDeviceCount", [&](state& g) -> cudaError_t {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = static_cast<int>(g.devices.size());
    return g.devices.empty() ? cudaErrorNoDevice : cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  return call("cudaGetDevice", [&](state& g) -> cudaError_t {
    if (device == nullptr) return cudaErrorInvalidValue;
    if (g.devices.empty()) return cudaErrorNoDevice;
    *device = current().device;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return call("cudaSetDevice", [&](state& g) -> cudaError_t {
    if (g.devices.empty()) return cudaErrorNoDevice;
    if (find_device(g, device) == nullptr) return cudaErrorInvalidDevice;
    current().device = device;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  return call("cudaGetDeviceProperties", [&](state& g) -> cudaError_t {
    if (prop == nullptr) return cudaErrorInvalidValue;
    if (find_device(g, device) == nullptr) return cudaErrorInvalidDevice;
    fill_properties(g, device, *prop);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  return call("cudaDeviceGetAttribute", [&](state& g) -> cudaError_t {
    if (value == nullptr) return cudaErrorInvalidValue;
    if (find_device(g, device) == nullptr) return cudaErrorInvalidDevice;
    if (attr == cudaDevAttrPciBusId) {
      *value = device;
      return cudaSuccess;
    }
    return device_attribute(attr, *value) ? cudaSuccess : cudaErrorInvalidValue;
  });
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  return call("cudaDeviceSynchronize", [&](state& g) -> cudaError_t {
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    drive_device(g, d->index);
    for (CUstream_st* s : d->streams)
      observe(g, *s, s->completed, s->known);
    after_synchronize(g, d->index);
    return sticky_or_success(g);
  });
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int* version) {
  return call("cudaDriverGetVersion", [&](state&) -> cudaError_t {
    if (version == nullptr) return cudaErrorInvalidValue;
    *version = CUDART_VERSION;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* version) {
  return call("cudaRuntimeGetVersion", [&](state&) -> cudaError_t {
    if (version == nullptr) return cudaErrorInvalidValue;
    *version = CUDART_VERSION;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return call("cudaDeviceGetStreamPriorityRange", [&](state& g) -> cudaError_t {
    if (g.devices.empty()) return cudaErrorNoDevice;
    if (least != nullptr) *least = least_priority;
    if (greatest != nullptr) *greatest = greatest_priority;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  return call("cudaDeviceCanAccessPeer", [&](state& g) -> cudaError_t {
    if (can == nullptr) return cudaErrorInvalidValue;
    if (find_device(g, device) == nullptr || find_device(g, peer) == nullptr)
      return cudaErrorInvalidDevice;
    *can = device != peer ? 1 : 0;
    return cudaSuccess;
  });
}

// Memory -----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t bytes) {
  return call("cudaMalloc", [&](state& g) -> cudaError_t {
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
    auto r = std::make_unique<region>();
    if (!reserve_region(*d, bytes, *r)) return cudaErrorMemoryAllocation;
    poison(r->host, std::min(bytes, poison_limit));
    d->malloc_bytes += footprint;
    device_allocation a;
    a.ptr = r->va;
    a.size = bytes;
    a.footprint = footprint;
    a.device = d->index;
    a.kind = alloc_kind::malloc;
    a.call = g.calls;
    a.api = "cudaMalloc";
    g.device_allocs.emplace(a.ptr, a);
    *ptr = reinterpret_cast<void*>(r->va);
    g.malloc_regions.emplace(r->va, std::move(r));
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  return call("cudaFree", [&](state& g) -> cudaError_t {
    if (ptr == nullptr) return cudaSuccess;
    const auto it = g.device_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g.device_allocs.end()) return cudaErrorInvalidValue;
    // cudaFree synchronizes with the device before it frees.
    drive_device(g, it->second.device);
    if (it->second.kind == alloc_kind::stream_ordered) return pool_free(g, it, nullptr);
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
    if (it == g.host_allocs.end() || it->second.registered) return cudaErrorInvalidValue;
    // Freeing page-locked memory synchronizes with the devices first.
    drive_all(g);
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
    h.device = current().device;
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
      attributes->type = cudaMemoryTypeHost;
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

cudaError_t CUDARTAPI cudaMemset(void* dst, int value, size_t count) {
  return api::memset(dst, value, count, false);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return api::memset_async(dst, value, count, stream, false);
}

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
    pool_release_if_destroyed(g, *pool);
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
        pool->allow_opportunistic = *static_cast<int*>(value) != 0;
        return cudaSuccess;
      case cudaMemPoolReuseAllowInternalDependencies:
        pool->allow_internal_dependencies = *static_cast<int*>(value) != 0;
        return cudaSuccess;
      case cudaMemPoolAttrReleaseThreshold:
        pool->release_threshold = *static_cast<std::uint64_t*>(value);
        return cudaSuccess;
      case cudaMemPoolAttrReservedMemHigh:
        if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
        pool->reserved_high = pool->reserved;
        return cudaSuccess;
      case cudaMemPoolAttrUsedMemHigh:
        if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
        pool->used_high = pool->used;
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
        return flag(pool->allow_opportunistic);
      case cudaMemPoolReuseAllowInternalDependencies:
        return flag(pool->allow_internal_dependencies);
      case cudaMemPoolAttrReleaseThreshold:
        return u64(pool->release_threshold);
      case cudaMemPoolAttrReservedMemCurrent:
        return u64(pool->reserved);
      case cudaMemPoolAttrReservedMemHigh:
        return u64(pool->reserved_high);
      case cudaMemPoolAttrUsedMemCurrent:
        return u64(pool->used);
      case cudaMemPoolAttrUsedMemHigh:
        return u64(pool->used_high);
      default:
        return cudaErrorInvalidValue;
    }
  });
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  return call("cudaMemPoolTrimTo", [&](state& g) -> cudaError_t {
    if (!valid_pool(g, pool)) return cudaErrorInvalidValue;
    pool_trim(g, *pool, min_bytes_to_keep, trim_mode::keep_at_least);
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

// Streams ----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* stream) {
  return call("cudaStreamCreate",
              [&](state& g) { return create_stream_handle(g, stream, cudaStreamDefault, 0); });
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return call("cudaStreamCreateWithFlags",
              [&](state& g) { return create_stream_handle(g, stream, flags, 0); });
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags,
                                                   int priority) {
  return call("cudaStreamCreateWithPriority",
              [&](state& g) { return create_stream_handle(g, stream, flags, priority); });
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  return call("cudaStreamDestroy", [&](state& g) -> cudaError_t {
    if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
      return cudaErrorInvalidResourceHandle;
    if (g.stream_handles.count(stream) == 0 || stream->destroyed ||
        stream->kind != CUstream_st::kind_t::created)
      return cudaErrorInvalidResourceHandle;
    // Work still queued runs all the same; the stream is released after it.
    stream->destroyed = true;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  return api::stream_synchronize(stream, false);
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  return api::stream_query(stream, false);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  return api::stream_wait_event(stream, event, flags, false);
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  return api::stream_get_flags(stream, flags, false);
}

cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  return api::stream_get_priority(stream, priority, false);
}

#if CUDART_VERSION >= 12080
cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t stream, int* device) {
  return api::stream_get_device(stream, device, false);
}
#endif

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  return api::launch_host_func(stream, fn, data, false);
}

// Events -----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return call("cudaEventCreateWithFlags", [&](state& g) { return create_event(g, event, flags); });
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  return call("cudaEventCreate",
              [&](state& g) { return create_event(g, event, cudaEventDefault); });
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  return call("cudaEventDestroy", [&](state& g) -> cudaError_t {
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    event->destroyed = true;
    g.destroyed_events.push_back(event);
    forget_destroyed_events(g);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return api::event_record(event, stream, 0, false, "cudaEventRecord");
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  return api::event_record(event, stream, flags, false, "cudaEventRecordWithFlags");
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  return call("cudaEventQuery", [&](state& g) -> cudaError_t {
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    if (event->completed_generation < event->generation) drive(g, {{event->stream, event->seq}});
    return sticky_or_success(g);
  });
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  return call("cudaEventSynchronize", [&](state& g) -> cudaError_t {
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    if (event->completed_generation < event->generation) drive(g, {{event->stream, event->seq}});
    if (event->stream != nullptr) observe(g, *event->stream, event->seq, event->known);
    after_synchronize(g, event->device);
    return sticky_or_success(g);
  });
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return call("cudaEventElapsedTime", [&](state& g) -> cudaError_t {
    if (ms == nullptr) return cudaErrorInvalidValue;
    if (!valid_event(g, start) || !valid_event(g, end)) return cudaErrorInvalidResourceHandle;
    if (((start->flags | end->flags) & cudaEventDisableTiming) != 0)
      return cudaErrorInvalidResourceHandle;
    if (start->generation == 0 || end->generation == 0) return cudaErrorInvalidResourceHandle;
    if (start->completed_generation < start->generation ||
        end->completed_generation < end->generation)
      return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
    return cudaSuccess;
  });
}

}  // extern "C"
