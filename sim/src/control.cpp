// SPDX-License-Identifier: Apache-2.0
// The simulated process and its control API: start-up, configuration, reset, the bookkeeping of
// every call (counts, faults, sticky errors) and the reports. docs/simulated-device.md, "The
// control API".
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>

#include "internal.hpp"

namespace cuscope::sim::detail {

namespace {

constexpr std::size_t page_bytes = 4096;

const char* const simulated_apis[] = {
    "cudaGetDeviceCount",
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaGetDeviceProperties",
    "cudaDeviceGetAttribute",
    "cudaDeviceSynchronize",
    "cudaDriverGetVersion",
    "cudaRuntimeGetVersion",
    "cudaDeviceGetStreamPriorityRange",
    "cudaDeviceCanAccessPeer",
    "cudaDeviceEnablePeerAccess",
    "cudaDeviceDisablePeerAccess",
    "cudaMalloc",
    "cudaFree",
    "cudaMallocHost",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cudaMemGetInfo",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaMemset",
    "cudaMemsetAsync",
    "cudaPointerGetAttributes",
    "cudaMallocAsync",
    "cudaMallocFromPoolAsync",
    "cudaFreeAsync",
    "cudaMallocManaged",
    "cudaMemPrefetchAsync",
    "cudaMemAdvise",
    "cudaMallocPitch",
    "cudaMemcpy2D",
    "cudaMemcpy2DAsync",
    "cudaMemcpyPeer",
    "cudaMemcpyPeerAsync",
    "cudaMemGetDefaultMemPool",
    "cudaMemGetMemPool",
    "cudaMemSetMemPool",
    "cudaStreamGetId",
    "cudaMemPoolCreate",
    "cudaMemPoolDestroy",
    "cudaMemPoolSetAttribute",
    "cudaMemPoolGetAttribute",
    "cudaMemPoolTrimTo",
    "cudaMemPoolSetAccess",
    "cudaMemPoolGetAccess",
    "cudaMemPoolExportToShareableHandle",
    "cudaMemPoolImportFromShareableHandle",
    "cudaMemPoolExportPointer",
    "cudaMemPoolImportPointer",
    "cudaIpcGetEventHandle",
    "cudaIpcOpenEventHandle",
    "cudaDeviceGetDefaultMemPool",
    "cudaDeviceGetMemPool",
    "cudaDeviceSetMemPool",
    "cudaStreamCreate",
    "cudaStreamCreateWithFlags",
    "cudaStreamCreateWithPriority",
    "cudaStreamDestroy",
    "cudaStreamSynchronize",
    "cudaStreamQuery",
    "cudaStreamWaitEvent",
    "cudaStreamGetFlags",
    "cudaStreamGetPriority",
    "cudaStreamGetDevice",
    "cudaLaunchHostFunc",
    "cudaEventCreate",
    "cudaEventCreateWithFlags",
    "cudaEventRecord",
    "cudaEventRecordWithFlags",
    "cudaEventSynchronize",
    "cudaEventQuery",
    "cudaEventElapsedTime",
    "cudaEventDestroy",
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaFuncGetAttributes",
    "cudaFuncSetAttribute",
    "cudaStreamBeginCapture",
    "cudaStreamEndCapture",
    "cudaStreamIsCapturing",
    "cudaStreamGetCaptureInfo",
    "cudaThreadExchangeStreamCaptureMode",
    "cudaGraphGetNodes",
    "cudaGraphNodeGetType",
    "cudaGraphInstantiate",
    "cudaGraphLaunch",
    "cudaGraphExecDestroy",
    "cudaGraphDestroy",
    "cudaDeviceGetGraphMemAttribute",
    "cudaDeviceSetGraphMemAttribute",
    "cudaDeviceGraphMemTrim",
};

bool real_cuda_allowed() {
  const char* env = std::getenv("CUSCOPE_SIM_ALLOW_CUDART");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

// The real runtime (libcudart.so*) or driver library (libcuda.so*) that path names, or nullptr.
const char* real_cuda_library(const char* path) {
  if (path == nullptr) return nullptr;
  const char* slash = std::strrchr(path, '/');
  const char* base = slash != nullptr ? slash + 1 : path;
  if (std::strncmp(base, "libcudart", 9) == 0) return "the real CUDA runtime";
  if (std::strncmp(base, "libcuda.so", 10) == 0) return "the CUDA driver library";
  return nullptr;
}

int find_real_runtime(dl_phdr_info* info, std::size_t, void* found) {
  if (real_cuda_library(info->dlpi_name) != nullptr) {
    *static_cast<const char**>(found) = info->dlpi_name;
    return 1;
  }
  return 0;
}

// A program linked with the simulated device must not also load the real runtime: calls the
// simulation does not implement would reach the real driver and mix the two devices.
void check_no_real_runtime() {
  if (real_cuda_allowed()) return;
  const char* found = nullptr;
  dl_iterate_phdr(find_real_runtime, &found);
  if (found == nullptr) return;
  std::fprintf(stderr,
               "cuscope::sim: this program runs on the simulated CUDA device, but %s (%s) is "
               "loaded too.\n"
               "A program links either cuscope::sim or CUDA::cudart, never both. The usual cause "
               "is a CUDA function the simulated device does not provide (a kernel launch, for "
               "instance), which the linker then took from libcudart.\n",
               real_cuda_library(found), found);
  std::fflush(stderr);
  std::_Exit(70);
}

void validate(const device_config& c) {
  if (c.device_count < 0 || c.device_count > 64)
    throw std::invalid_argument("cuscope::sim::reset: device_count must be between 0 and 64");
  const std::size_t g = c.pool_granularity_bytes;
  if (g < page_bytes || (g & (g - 1)) != 0)
    throw std::invalid_argument(
        "cuscope::sim::reset: pool_granularity_bytes must be a power of two of at least 4096");
  if (c.total_bytes <= c.context_bytes || c.total_bytes < g)
    throw std::invalid_argument(
        "cuscope::sim::reset: total_bytes must exceed context_bytes and the pool granularity");
  const std::size_t r = c.pool_rounding_bytes;
  if (r < allocation_alignment || (r & (r - 1)) != 0 || r > (std::size_t{64} << 10))
    throw std::invalid_argument(
        "cuscope::sim::reset: pool_rounding_bytes must be a power of two from 256 to 64 KiB");
  const std::size_t pitch = c.pitch_alignment_bytes;
  if (pitch == 0 || (pitch & (pitch - 1)) != 0 || pitch > (std::size_t{1} << 20))
    throw std::invalid_argument(
        "cuscope::sim::reset: pitch_alignment_bytes must be a power of two up to 1 MiB");
  if (c.total_bytes > (std::size_t{1} << 44))
    throw std::invalid_argument("cuscope::sim::reset: total_bytes is limited to 16 TiB");
  if (c.ipc_timeout.count() <= 0)
    throw std::invalid_argument("cuscope::sim::reset: ipc_timeout must be positive");
  if (c.nvml_init_error < 0)
    throw std::invalid_argument("cuscope::sim::reset: nvml_init_error must be 0 or an NVML error");
}

void build(state& g) {
  g.calls_by_api.assign(std::size(simulated_apis), 0);
  g.devices.resize(static_cast<std::size_t>(g.config.device_count));
  for (int i = 0; i < g.config.device_count; ++i) {
    device_state& d = g.devices[static_cast<std::size_t>(i)];
    d.index = i;
    d.va_size = round_up(g.config.total_bytes * 2, g.config.pool_granularity_bytes);
    void* va =
        mmap(nullptr, d.va_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED) {
      std::fprintf(stderr, "cuscope::sim: cannot reserve %zu bytes of address space\n", d.va_size);
      std::abort();
    }
    d.va_base = reinterpret_cast<std::uintptr_t>(va);
    d.free_ranges.emplace(0, d.va_size);
    d.legacy = create_stream(g, i, 0, 0, CUstream_st::kind_t::legacy);
    d.default_pool = create_pool(g, i, 0, true);
    d.current_pool = d.default_pool;
  }
}

void teardown(state& g) {
  graphs_teardown(g);
  for (auto& p : g.pools)
    p->allocator.release_all();
  for (device_state& d : g.devices)
    while (!d.regions.empty())
      release_region(g, d.index, d.regions.begin()->first);
  for (auto& [ptr, h] : g.host_allocs)
    if (!h.registered && !h.pool_chunk) std::free(reinterpret_cast<void*>(ptr));
  for (const CUevent_st* e : g.event_handles)
    delete e;
  for (device_state& d : g.devices)
    munmap(reinterpret_cast<void*>(d.va_base), d.va_size);
  g.devices.clear();
  g.streams.clear();
  g.stream_handles.clear();
  g.event_handles.clear();
  g.destroyed_events.clear();
  g.pools.clear();
  g.pool_handles.clear();
  g.device_allocs.clear();
  g.host_allocs.clear();
  g.next_stream_id = 1;
  g.next_ticket = 1;
  g.calls = 0;
  g.calls_by_api.clear();
  g.faults.clear();
  g.sticky = cudaSuccess;
  g.revoked.clear();
  g.faults_seen.clear();
  g.misuses_seen.clear();
  g.recent_frees.clear();
  g.recent_free_order.clear();
  g.nvml_initialized = 0;
  for (std::size_t& n : g.nvml_calls)
    n = 0;
}

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

std::string report(const state& g) {
  std::string out;
  char line[512];
  for (const auto& [ptr, a] : g.device_allocs) {
    std::snprintf(line, sizeof line,
                  "%s %p: %zu bytes on device %d from %s%s%s, stream %" PRIu64 ", call #%" PRIu64
                  " (%s)\n",
                  a.kind == alloc_kind::imported ? "imported allocation" : "device allocation",
                  reinterpret_cast<void*>(ptr), a.size, a.device,
                  a.pool                        ? "pool "
                  : a.kind == alloc_kind::graph ? "graph memory"
                                                : "cudaMalloc",
                  a.pool ? pointer_text(a.pool).c_str() : "",
                  a.pool && a.pool->is_default     ? " (default pool)"
                  : a.kind == alloc_kind::imported ? " (imported from another process)"
                                                   : "",
                  a.stream_id, a.call, a.api);
    out += line;
  }
  for (const auto& [ptr, h] : g.host_allocs) {
    if (h.pool_chunk) continue;
    std::snprintf(line, sizeof line, "%s %p: %zu bytes, call #%" PRIu64 " (%s)\n",
                  h.registered ? "registered host memory"
                  : h.managed  ? "managed allocation"
                               : "pinned host allocation",
                  reinterpret_cast<void*>(ptr), h.size, h.call, h.api);
    out += line;
  }
  for (const auto& s : g.streams) {
    if (s->kind != CUstream_st::kind_t::created || s->destroyed) continue;
    std::snprintf(line, sizeof line,
                  "stream %p (id %" PRIu64 ", device %d) created by call #%" PRIu64
                  " is not destroyed\n",
                  static_cast<const void*>(s.get()), s->id, s->device, s->created_by_call);
    out += line;
  }
  std::vector<const CUevent_st*> events(g.event_handles.begin(), g.event_handles.end());
  std::sort(events.begin(), events.end(), [](const CUevent_st* a, const CUevent_st* b) {
    return a->created_by_call < b->created_by_call;
  });
  for (const CUevent_st* e : events) {
    if (e->destroyed) continue;
    std::snprintf(line, sizeof line,
                  "event %p (device %d) created by call #%" PRIu64 " is not destroyed\n",
                  static_cast<const void*>(e), e->device, e->created_by_call);
    out += line;
  }
  graphs_report(g, out);
  for (const auto& p : g.pools) {
    if (p->is_default || p->destroyed) continue;
    std::snprintf(
        line, sizeof line, "%s %p (device %d) created by call #%" PRIu64 " is not destroyed\n",
        p->share != nullptr && p->share->imported ? "imported memory pool" : "memory pool",
        static_cast<const void*>(p.get()), p->device, p->created_by_call);
    out += line;
  }
  return out;
}

}  // namespace

state& global() {
  static state* const g = [] {
    check_no_real_runtime();
    auto* s = new state();  // never destroyed: objects with static lifetime may outlive it
    build(*s);
    return s;
  }();
  return *g;
}

thread_state& this_thread() {
  thread_local thread_state t;
  const state& g = global();
  if (t.generation != g.generation) {
    t = thread_state{};
    t.generation = g.generation;
  }
  return t;
}

bool& in_host_function() {
  thread_local bool inside = false;
  return inside;
}

std::size_t api_index(const char* name) {
  for (std::size_t i = 0; i < std::size(simulated_apis); ++i)
    if (std::strcmp(simulated_apis[i], name) == 0) return i;
  return any_api;
}

bool is_simulated_api(const std::string& name) {
  return api_index(name.c_str()) != any_api;
}

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      break;
  }
  // cudaErrorContained, cudaErrorTensorMemoryLeak, cudaErrorMpsClientTerminated and
  // cudaErrorExternalDevice, by number: not every supported toolkit names them all.
  const int code = static_cast<int>(e);
  return code == 226 || code == 721 || code == 810 || code == 911;
}

cudaError_t record_error(cudaError_t error) {
  this_thread().last_error = error;
  return error;
}

cudaError_t begin_call(state& g, std::size_t api) {
  ++g.calls;
  if (api < g.calls_by_api.size()) ++g.calls_by_api[api];
  if (!g.faults.empty()) {
    cudaError_t fired = cudaSuccess;
    for (auto it = g.faults.begin(); it != g.faults.end();) {
      if (it->api == any_api || it->api == api) {
        if (--it->countdown == 0) {
          if (fired == cudaSuccess) fired = it->error;
          it = g.faults.erase(it);
          continue;
        }
      }
      ++it;
    }
    if (fired != cudaSuccess) {
      // A runtime that has begun to unload stays unloading: every later call fails the same way.
      if (is_sticky(fired) || fired == cudaErrorCudartUnloading) g.sticky = fired;
      return record_error(fired);
    }
  }
  if (g.sticky != cudaSuccess) return record_error(g.sticky);
  return cudaSuccess;
}

}  // namespace cuscope::sim::detail

namespace cuscope::sim {

using namespace detail;

void reset(const device_config& c) {
  if (in_host_function())
    throw std::logic_error("cuscope::sim::reset: called from a host function");
  validate(c);
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  g.resetting = true;
  drive_all(g);
  g.resetting = false;
  const std::string outstanding = g.abandoned_report + report(g);
  g.abandoned_report.clear();
  teardown(g);
  g.config = c;
  ++g.generation;
  build(g);
  if (!outstanding.empty())
    throw std::logic_error("cuscope::sim::reset: outstanding at reset:\n" + outstanding);
}

device_config config() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.config;
}

void fail_call(std::size_t n, cudaError_t error) {
  if (n == 0) throw std::invalid_argument("cuscope::sim::fail_call: n counts from 1");
  if (error == cudaSuccess)
    throw std::invalid_argument("cuscope::sim::fail_call: cudaSuccess is not a fault");
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  g.faults.push_back({any_api, n, error});
}

void fail_api(const char* api, std::size_t nth, cudaError_t error) {
  if (api == nullptr || !is_simulated_api(api))
    throw std::invalid_argument(std::string("cuscope::sim::fail_api: '") + (api ? api : "") +
                                "' is not a function of the simulated runtime");
  if (nth == 0) throw std::invalid_argument("cuscope::sim::fail_api: nth counts from 1");
  if (error == cudaSuccess)
    throw std::invalid_argument("cuscope::sim::fail_api: cudaSuccess is not a fault");
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  g.faults.push_back({api_index(api), nth, error});
}

void clear_faults() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  g.faults.clear();
}

std::size_t call_count() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.calls;
}

std::size_t call_count(const char* api) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (api != nullptr)
    if (const std::size_t* nvml = nvml_call_counter(g, api)) return *nvml;
  if (api == nullptr || !is_simulated_api(api))
    throw std::invalid_argument(std::string("cuscope::sim::call_count: '") + (api ? api : "") +
                                "' is not a function of the simulated runtime or of its NVML");
  return g.calls_by_api[api_index(api)];
}

std::size_t outstanding_allocations() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  std::size_t n = g.device_allocs.size();
  for (const auto& [p, h] : g.host_allocs)
    n += h.pool_chunk ? 0 : 1;  // a host pool's memory, counted by the pool's allocations
  return n;
}

std::size_t outstanding_bytes() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  std::size_t bytes = 0;
  for (const auto& [p, a] : g.device_allocs)
    bytes += a.size;
  for (const auto& [p, h] : g.host_allocs)
    bytes += h.pool_chunk ? 0 : h.size;
  return bytes;
}

std::string outstanding_report() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return report(g);
}

void* host_view(const void* device_ptr, std::size_t bytes) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  std::byte* p = translate(g, reinterpret_cast<std::uintptr_t>(device_ptr), bytes);
  if (p == nullptr) {
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "cuscope::sim::host_view: %p (%zu bytes) is not inside simulated device memory",
                  device_ptr, bytes);
    throw std::out_of_range(msg);
  }
  return p;
}

std::string fault_report() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.faults_seen;
}

std::string misuse_report() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.misuses_seen;
}

void set_other_process_bytes(int device, std::size_t bytes) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  device_state* d = find_device(g, device);
  if (d == nullptr)
    throw std::invalid_argument("cuscope::sim::set_other_process_bytes: device " +
                                std::to_string(device) + " does not exist");
  const std::size_t free_bytes = device_free_bytes(g, *d) + d->other_process_bytes;
  if (bytes > free_bytes)
    throw std::invalid_argument("cuscope::sim::set_other_process_bytes: " + std::to_string(bytes) +
                                " bytes on device " + std::to_string(device) + ", which has " +
                                std::to_string(free_bytes) + " free beside this process");
  d->other_process_bytes = bytes;
}

std::size_t pending_operations() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  std::size_t n = 0;
  for (const auto& s : g.streams)
    n += s->pending.size();
  return n;
}

}  // namespace cuscope::sim

// Loading the real runtime or driver at run time mixes the two devices as linking it would:
// CCCL's and cuda-api-wrappers' driver-API calls would reach a real GPU, or fail without one.
// The simulation defines dlopen in the program (it is linked as a whole archive), refuses those
// two libraries and passes every other call on to the C library's dlopen.
extern "C" void* dlopen(const char* file, int mode) noexcept {
  using namespace cuscope::sim::detail;
  if (const char* what = real_cuda_library(file); what != nullptr && !real_cuda_allowed()) {
    std::fprintf(stderr,
                 "cuscope::sim: this program runs on the simulated CUDA device, but it loads %s "
                 "(dlopen(\"%s\")) at run time.\n"
                 "The simulated device implements the CUDA runtime API only; calls through the "
                 "real runtime or the driver API (cuGetProcAddress, cuMemPool*, ...) would reach a "
                 "real GPU or none. Run such a program on the real runtime, or set "
                 "CUSCOPE_SIM_ALLOW_CUDART=1 to load it anyway.\n",
                 what, file);
    std::fflush(stderr);
    std::_Exit(70);
  }
  using dlopen_fn = void* (*)(const char*, int);
  static const auto next = reinterpret_cast<dlopen_fn>(dlsym(RTLD_NEXT, "dlopen"));
  if (next == nullptr) return nullptr;
  return next(file, mode);
}
