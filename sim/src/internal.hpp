// SPDX-License-Identifier: Apache-2.0
// Internal state of the simulated CUDA runtime. Nothing here is part of the public interface.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cuscope/sim.hpp"
#include "ipc.hpp"
#include "pool_allocator.hpp"

namespace cuscope::sim::detail {

/// Work of other streams known to be ordered before the next operation of a stream or event:
/// stream id -> sequence number of its last ordered operation.
using order_clock = std::unordered_map<std::uint64_t, std::uint64_t>;

struct dependency {
  CUstream_st* stream;
  std::uint64_t seq;
};

// The work of an operation, held in place: every closure the simulation enqueues fits, so
// enqueuing allocates nothing (std::function would, for most of them).
class work_fn {
 public:
  work_fn() noexcept = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, work_fn>>>
  work_fn(F&& f) {  // implicit, so that call sites pass lambdas as they would a std::function
    using T = std::decay_t<F>;
    static_assert(sizeof(T) <= capacity && alignof(T) <= alignof(std::max_align_t),
                  "closure too large for work_fn: raise its capacity");
    static_assert(std::is_nothrow_move_constructible_v<T>, "work_fn moves closures noexcept");
    ::new (static_cast<void*>(storage_)) T(std::forward<F>(f));
    ops_ = &table<T>;
  }
  work_fn(work_fn&& other) noexcept { take(other); }
  work_fn& operator=(work_fn&& other) noexcept {
    if (this != &other) {
      clear();
      take(other);
    }
    return *this;
  }
  work_fn(const work_fn&) = delete;
  work_fn& operator=(const work_fn&) = delete;
  ~work_fn() { clear(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  void operator()() { ops_->invoke(storage_); }

 private:
  static constexpr std::size_t capacity = 56;
  struct vtable {
    void (*invoke)(void*);
    void (*relocate)(void* from, void* to) noexcept;
    void (*destroy)(void*) noexcept;
  };
  template <class T>
  static void invoke_as(void* p) {
    (*static_cast<T*>(p))();
  }
  template <class T>
  static void relocate_as(void* from, void* to) noexcept {
    T* f = static_cast<T*>(from);
    ::new (to) T(std::move(*f));
    f->~T();
  }
  template <class T>
  static void destroy_as(void* p) noexcept {
    static_cast<T*>(p)->~T();
  }
  template <class T>
  static constexpr vtable table{&invoke_as<T>, &relocate_as<T>, &destroy_as<T>};

  void take(work_fn& other) noexcept {
    if (other.ops_ == nullptr) return;
    other.ops_->relocate(other.storage_, storage_);
    ops_ = other.ops_;
    other.ops_ = nullptr;
  }
  void clear() noexcept {
    if (ops_ != nullptr) ops_->destroy(storage_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char storage_[capacity];
  const vtable* ops_ = nullptr;
};

struct operation {
  std::uint64_t seq = 0;     // position in its stream, from 1
  std::uint64_t ticket = 0;  // global enqueue order
  std::vector<dependency> deps;
  work_fn work;                    // empty for markers and host functions
  cudaHostFn_t host_fn = nullptr;  // a host function, run on the runtime's thread
  void* host_data = nullptr;
};

struct host_thread;  // the runtime's own thread for host functions (streams.cpp)

struct capture_sequence;  // a stream capture in progress (graphs.cpp)
struct graph_state;       // graphs, executable graphs and graph memory (graphs.cpp)

struct state;

// Maps pool memory from a device's memory and address range (memory.cpp).
class device_backing final : public pool_backing {
 public:
  device_backing(state& g, int device) noexcept : g_(&g), device_(device) {}
  bool map(std::size_t bytes, mapped_memory& out) override;
  [[nodiscard]] bool can_map(std::size_t bytes) const noexcept override;
  void release_part(const mapped_memory& memory, std::size_t offset,
                    std::size_t bytes) noexcept override;
  void unmap(const mapped_memory& memory) noexcept override;
  // An exportable pool maps its memory from its shared file (ipc.cpp).
  void share(ipc_share* s) noexcept { share_ = s; }
  // A host-located pool maps its memory from the host (host_pools.cpp).
  void delegate_to(pool_backing* b) noexcept { delegate_ = b; }

 private:
  state* g_;
  int device_;
  ipc_share* share_ = nullptr;
  pool_backing* delegate_ = nullptr;
};

}  // namespace cuscope::sim::detail

// The runtime's opaque handle types, completed by the simulation.
struct CUstream_st {
  enum class kind_t { created, legacy, per_thread };
  std::uint64_t id = 0;
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  kind_t kind = kind_t::created;
  bool destroyed = false;
  std::uint64_t created_by_call = 0;
  std::deque<cuscope::sim::detail::operation> pending;
  std::uint64_t enqueued = 0;   // seq of the last enqueued operation
  std::uint64_t completed = 0;  // seq of the last operation that ran
  std::uint64_t observed = 0;   // seq of the last operation a synchronization saw complete
  cuscope::sim::detail::order_clock known;
  // The capture this stream takes part in (begun on it or joined through an event), or null.
  cuscope::sim::detail::capture_sequence* capture = nullptr;
};

struct CUevent_st {
  unsigned flags = 0;
  int device = 0;
  bool destroyed = false;
  std::uint64_t created_by_call = 0;
  std::uint64_t generation = 0;            // records so far
  std::uint64_t completed_generation = 0;  // latest record that has run
  std::size_t pending_records = 0;
  CUstream_st* stream = nullptr;  // stream of the latest record
  std::uint64_t seq = 0;          // its operation
  cuscope::sim::detail::order_clock known;
  std::chrono::steady_clock::time_point time{};
  // An interprocess event's shared state (ipc.cpp); null for other events.
  std::shared_ptr<cuscope::sim::detail::ipc_event> ipc;
  std::uint64_t captured_in = 0;  // id of the capture its latest record was captured by, or 0
};

struct CUmemPoolHandle_st {
  CUmemPoolHandle_st(cuscope::sim::detail::state& g, int owner, std::size_t granularity,
                     std::size_t max_bytes)
      : device(owner), backing(g, owner), allocator(backing, granularity, max_bytes) {}
  CUmemPoolHandle_st(const CUmemPoolHandle_st&) = delete;
  CUmemPoolHandle_st& operator=(const CUmemPoolHandle_st&) = delete;

  int device = 0;
  bool is_default = false;
  bool destroyed = false;
  std::uint64_t created_by_call = 0;
  std::uint64_t release_threshold = 0;
  std::size_t max_size = 0;  // as cudaMemPoolAttrMaxPoolSize reads it: rounded up, 0 for none
  cudaMemAllocationHandleType handle_types = cudaMemHandleTypeNone;
  bool hw_decompress = false;  // cudaMemPoolCreateUsageHwDecompress
  bool follow_event_dependencies = true;
  bool allow_internal_dependencies = true;
  // A free of its memory on a stream of another device ran since the last release at a
  // synchronization.
  bool foreign_frees_ran = false;
  std::map<int, cudaMemAccessFlags> peer_access;  // granted by cudaMemPoolSetAccess
  // A host-located pool (cudaMemLocationTypeHost or HostNuma): its memory is pinned host memory,
  // which devices reach only where cudaMemPoolSetAccess granted it. device is then 0.
  bool host = false;
  cudaMemLocationType location_type = cudaMemLocationTypeDevice;
  int location_id = 0;
  std::unique_ptr<cuscope::sim::detail::pool_backing> host_memory;
  // The shared file of an exportable or imported pool (ipc.cpp); null for other pools.
  std::unique_ptr<cuscope::sim::detail::ipc_share> share;
  cuscope::sim::detail::device_backing backing;
  cuscope::sim::detail::pool_allocator allocator;  // after backing, which it uses
};

namespace cuscope::sim::detail {

// Device memory reserved from a device: a pool chunk or a cudaMalloc block.
struct region {
  std::uintptr_t va = 0;  // device address
  std::size_t size = 0;   // bytes of device address space
  std::byte* host = nullptr;
};

// imported: mapped from another process's pool by cudaMemPoolImportPointer (ipc.cpp); graph: a
// graph allocation node's address (graphs.cpp).
enum class alloc_kind { malloc, stream_ordered, imported, graph };

struct device_allocation {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;       // requested
  std::size_t footprint = 0;  // bytes counted against the pool or the device
  int device = 0;
  alloc_kind kind = alloc_kind::malloc;
  CUmemPoolHandle_st* pool = nullptr;
  pool_placement place;  // where a stream-ordered allocation lies in its pool
  std::uint64_t stream_id = 0;
  std::uint64_t call = 0;
  const char* api = "";
};

// A device allocation freed recently, kept to name a second free of its pointer.
struct freed_allocation {
  std::size_t size = 0;
  std::uint64_t alloc_call = 0;
  const char* alloc_api = "";
  std::uint64_t free_call = 0;
  const char* free_api = "";
};

struct host_allocation {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  unsigned flags = 0;
  bool registered = false;  // cudaHostRegister rather than cudaMallocHost/cudaHostAlloc
  bool managed = false;     // cudaMallocManaged
  bool pool_chunk = false;  // memory of a host-located pool, not an allocation (host_pools.cpp)
  int device = 0;           // current when it was allocated or registered
  std::uint64_t call = 0;
  const char* api = "";
};

struct device_state {
  int index = 0;
  std::uintptr_t va_base = 0;
  std::size_t va_size = 0;
  std::map<std::size_t, std::size_t> free_ranges;  // offset -> size, in va
  std::map<std::uintptr_t, region> regions;        // by va, for address translation
  std::size_t malloc_bytes = 0;
  CUmemPoolHandle_st* default_pool = nullptr;
  CUmemPoolHandle_st* current_pool = nullptr;
  CUstream_st* legacy = nullptr;
  std::vector<CUstream_st*> streams;  // every stream of the device, legacy included
  std::set<int> peers;                // cudaDeviceEnablePeerAccess from this device
  // Graph memory (cudaDeviceGetGraphMemAttribute): bytes mapped for graphs, and bytes the graph
  // allocator holds from the device (mapped or cached for later launches).
  std::size_t graph_used = 0;
  std::size_t graph_used_high = 0;
  std::size_t graph_reserved = 0;
  std::size_t graph_reserved_high = 0;
  // Memory another process holds on the device (set_other_process_bytes): taken from the free
  // memory, listed by NVML under that process.
  std::size_t other_process_bytes = 0;
};

// Memory that cudaFree, cudaFreeHost or cudaHostUnregister took away while work enqueued before
// them (tickets below ticket) was still pending: that work must not touch it.
struct revoked_range {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  std::uint64_t ticket = 0;
  std::uint64_t call = 0;
  const char* api = "";
};

constexpr std::size_t any_api = static_cast<std::size_t>(-1);

struct fault {
  std::size_t api;        // index of the simulated function, or any_api
  std::size_t countdown;  // fires when it reaches 1 at a matching call
  cudaError_t error;
};

struct state {
  std::recursive_mutex mutex;
  std::uint64_t generation = 1;  // bumped by reset, invalidates thread-local caches
  device_config config;
  std::vector<device_state> devices;
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::unordered_set<const CUstream_st*> stream_handles;
  std::unordered_set<const CUevent_st*> event_handles;
  std::deque<CUevent_st*> destroyed_events;  // kept for a while so stale handles are caught
  std::vector<std::unique_ptr<CUmemPoolHandle_st>> pools;
  std::unordered_set<const CUmemPoolHandle_st*> pool_handles;
  std::map<std::uintptr_t, device_allocation> device_allocs;
  std::map<std::uintptr_t, host_allocation> host_allocs;
  std::uint64_t next_stream_id = 1;
  std::uint64_t next_ticket = 1;
  std::size_t calls = 0;
  std::vector<std::size_t> calls_by_api;  // by index of the simulated function
  std::vector<fault> faults;
  cudaError_t sticky = cudaSuccess;
  std::vector<revoked_range> revoked;
  // One thread at a time runs enqueued work (it holds the token); it lets go of the lock only
  // while a host function runs on the runtime's thread.
  std::thread::id driver{};
  unsigned driver_depth = 0;
  std::condition_variable_any driver_free;
  host_thread* host = nullptr;          // started at the first host function
  std::vector<host_thread*> abandoned;  // threads left running a host function by reset()
  bool resetting = false;
  std::string abandoned_report;  // what reset() abandoned
  std::string faults_seen;       // fault_report()
  std::string misuses_seen;      // misuse_report()
  // The last frees of device memory, by pointer, until the address is allocated again.
  std::map<std::uintptr_t, freed_allocation> recent_frees;
  std::deque<std::pair<std::uintptr_t, std::uint64_t>> recent_free_order;  // pointer, free call
  graph_state* graphs = nullptr;  // created at the first capture (graphs.cpp)
  // NVML (nvml.cpp): nvmlInit_v2 calls not yet matched by nvmlShutdown, as NVML counts them, and
  // the calls of each simulated NVML function since the last reset (sim::call_count).
  int nvml_initialized = 0;
  std::size_t nvml_calls[5] = {};
};

state& global();

}  // namespace cuscope::sim::detail

/// The simulated devices' NVML entry points by name, for cuscope's NVML loader (nvml.cpp); null
/// for names it does not provide and when device_config::nvml is off.
extern "C" void* cuscope_sim_nvml_symbol(const char* name);
/// The simulated process the simulated devices belong to: a number (from 1) that every reset
/// changes, so that cuscope's NVML loader, which loads and initializes NVML once per process,
/// does so again for a fresh simulated process.
extern "C" unsigned long long cuscope_sim_nvml_process();

namespace cuscope::sim::detail {

// Thread-local view of the simulated process.
struct thread_state {
  std::uint64_t generation = 0;
  int device = 0;
  cudaError_t last_error = cudaSuccess;
  std::unordered_map<int, CUstream_st*> per_thread_streams;
  int capture_mode = cudaStreamCaptureModeGlobal;  // cudaThreadExchangeStreamCaptureMode
};
thread_state& this_thread();
bool& in_host_function();

// Call bookkeeping: every simulated function runs through call().
bool is_simulated_api(const std::string& name);
std::size_t api_index(const char* name);  // any_api when name is not a simulated function
// The count of calls of the simulated NVML function name (nvml.cpp); null for any other name.
std::size_t* nvml_call_counter(state& g, const char* name);
bool is_sticky(cudaError_t error);
cudaError_t record_error(cudaError_t error);
cudaError_t begin_call(state& g, std::size_t api);

template <class F>
cudaError_t call(const char* api, F&& body) {
  if (in_host_function()) return record_error(cudaErrorNotPermitted);
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  // Every call site has a lambda of its own type, hence its own copy of these: the name is looked
  // up once per site (again only where one site passes several names). Guarded by the lock.
  static const char* site_api = nullptr;
  static std::size_t site_index = any_api;
  if (api != site_api) {
    site_index = api_index(api);
    site_api = api;
  }
  if (const cudaError_t early = begin_call(g, site_index); early != cudaSuccess) return early;
  const cudaError_t result = body(g);
  // Every failure becomes the last error, cudaErrorNotReady from a query included, as on a GPU.
  if (result != cudaSuccess) return record_error(result);
  return result;
}

// Devices and errors (devices.cpp).
device_state* find_device(state& g, int device);

inline device_state* current_device(state& g) {
  return find_device(g, this_thread().device);
}

// Memory (memory.cpp).
std::size_t device_free_bytes(const state& g, const device_state& d);
// Reserves bytes of device address space with host memory behind it; false when none is left.
// With a file, the memory is the file's from file_offset on, shared with other processes.
bool reserve_region(device_state& d, std::size_t bytes, region& out, int fd = -1,
                    std::size_t file_offset = 0);
// Gives back the region that starts at va.
void release_region(state& g, int device, std::uintptr_t va);
// Gives back the memory of [va, va + bytes), which lies inside one region, and keeps its
// addresses reserved: the region is split around it.
void release_region_part(state& g, int device, std::uintptr_t va, std::size_t bytes);
// Gives back every region inside [va, va + bytes) and the addresses of the whole range.
void release_region_range(state& g, int device, std::uintptr_t va, std::size_t bytes);
std::byte* translate(state& g, std::uintptr_t device_address, std::size_t bytes);
void poison(std::byte* p, std::size_t bytes);
const device_allocation* find_allocation_containing(const state& g, std::uintptr_t p,
                                                    std::size_t bytes);
const host_allocation* find_host_containing(const state& g, std::uintptr_t p, std::size_t bytes);
// [p, p + bytes) is freed now, before the work already enqueued has run.
void revoke(state& g, std::uintptr_t p, std::size_t bytes, const char* api);
// The revoked range that the operation enqueued as ticket must no longer touch, or nullptr.
const revoked_range* revoked_for(const state& g, std::uintptr_t p, std::size_t bytes,
                                 std::uint64_t ticket);
// Whether the operation enqueued as ticket may still touch [p, p + bytes) when it runs; if not,
// records the fault and sets the sticky cudaErrorIllegalAddress.
bool usable_by(state& g, std::uintptr_t p, std::size_t bytes, std::uint64_t ticket,
               const char* what);
// Gives memory from cudaMalloc back to its device.
void release_malloc(state& g, std::uintptr_t ptr, std::size_t footprint, int device);
// Remembers that api freed allocation a, to name a later second free of its pointer.
void remember_free(state& g, const device_allocation& a, const char* api);
// The address ptr holds a new allocation: a free of it is no longer a second free.
void forget_free(state& g, std::uintptr_t ptr);
// A free by api of ptr, which is no live allocation: reports the misuse in misuse_report() and
// returns cudaErrorInvalidValue.
cudaError_t invalid_free(state& g, const void* ptr, const char* api);

// Streams, events, execution and host functions (streams.cpp).
CUstream_st* create_stream(state& g, int device, unsigned flags, int priority,
                           CUstream_st::kind_t kind);
cudaError_t resolve_stream(state& g, cudaStream_t handle, bool per_thread_default,
                           CUstream_st*& out);
std::uint64_t enqueue(state& g, CUstream_st& s, work_fn work, std::vector<dependency> deps = {},
                      cudaHostFn_t host_fn = nullptr, void* host_data = nullptr);
void drive(state& g, std::vector<dependency> targets);
void drive_to(state& g, CUstream_st& s, std::uint64_t seq);  // drive(g, {{&s, seq}}), faster
void drive_stream(state& g, CUstream_st& s);
void drive_device(state& g, int device);
void drive_all(state& g);
void merge(order_clock& into, const order_clock& from);

// Reuse of freed memory (reuse.cpp).
// How an allocation on s from pool may reuse memory that the free tagged freed_by returned.
reuse_rank rank_for(const state& g, const CUmemPoolHandle_st& pool, const CUstream_st& s,
                    const free_tag& freed_by, bool free_pending);
// A stream, event or device synchronization has shown the host the work of s up to seq complete,
// and with it the work of other streams that known orders before it: the frees in that work
// become reusable by any stream, whatever the pool's reuse policies.
void observe(state& g, CUstream_st& s, std::uint64_t seq, const order_clock& known);

// Memory pools (pools.cpp).
cudaError_t pool_allocate(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, CUstream_st& s,
                          const char* api, void** out);
// Frees a live stream-ordered allocation on s, or at once when s is null (cudaFree).
cudaError_t pool_free(state& g, std::map<std::uintptr_t, device_allocation>::iterator allocation,
                      CUstream_st* s);
void pool_release_if_destroyed(CUmemPoolHandle_st& pool);
// max_size: as the props asked, 0 for none; the pool rounds it up to its granularity.
CUmemPoolHandle_st* create_pool(state& g, int device, std::size_t max_size, bool is_default);
void after_synchronize(state& g, int device);  // release thresholds

// Memory and events across processes (ipc.cpp).
bool ipc_map(state& g, int device, ipc_share& share, std::size_t bytes, mapped_memory& out);
void ipc_release(ipc_share& share, const mapped_memory& memory, std::size_t offset,
                 std::size_t bytes) noexcept;
void ipc_unmap(ipc_share& share, const mapped_memory& memory) noexcept;
// An exportable pool's share, made when the pool is created; false when it cannot be made.
bool ipc_share_pool(state& g, CUmemPoolHandle_st& pool);
// The export slot of an allocation of an exportable pool whose free is enqueued, or -1 when it
// was not exported. Taken then, not when the free runs: stream order lets a new allocation at the
// same address be made and exported before the free has run, and it must get a slot of its own.
std::int32_t ipc_take_export(CUmemPoolHandle_st& pool, std::uintptr_t ptr) noexcept;
// The exporting process's free of an allocation taken by ipc_take_export runs.
void ipc_exporter_freed(state& g, CUmemPoolHandle_st& pool, std::int32_t slot, std::uintptr_t ptr,
                        const char* api);
// Frees an imported allocation on s, or at once when s is null (cudaFree).
cudaError_t ipc_free_imported(state& g,
                              std::map<std::uintptr_t, device_allocation>::iterator allocation,
                              CUstream_st* s);
void ipc_release_imported_pool_if_done(CUmemPoolHandle_st& pool) noexcept;
// Interprocess events: the shared block is made when the event is created.
bool ipc_event_create(CUevent_st& e);
void ipc_event_recorded(state& g, CUevent_st& e, CUstream_st& s);
cudaError_t ipc_stream_wait(state& g, CUstream_st& s, CUevent_st& e);
cudaError_t ipc_event_query(state& g, CUevent_st& e);
cudaError_t ipc_event_synchronize(state& g, CUevent_st& e);
// Stream capture and graphs (graphs.cpp). docs/simulated-device.md, "Stream capture and graphs".
// Work enqueued on a capturing stream becomes a node of its capture's graph instead of running.
void capture_work(state& g, CUstream_st& s, work_fn work, cudaHostFn_t host_fn, void* host_data);
// Before enqueuing on s: an error when s belongs to an invalidated capture, or when s is the
// legacy stream while a blocking stream of its device captures (which invalidates that capture).
cudaError_t capture_check_enqueue(state& g, CUstream_st& s);
// Before synchronizing with or querying s (or a synchronous copy on it).
cudaError_t capture_check_sync(state& g, CUstream_st& s);
// Before a synchronization of the whole device.
cudaError_t capture_check_device_sync(state& g, int device);
// Before a call that stream capture cannot see (cudaMalloc): refused where the calling thread's
// capture interaction mode prohibits it.
cudaError_t capture_check_unsafe(state& g);
// Before querying or synchronizing an event: refused when its latest record was captured.
cudaError_t capture_check_event(state& g, CUevent_st& e);
// cudaMallocAsync on a capturing stream: an allocation node, with its address fixed now.
cudaError_t capture_allocate(state& g, CUstream_st& s, const CUmemPoolHandle_st& pool,
                             std::size_t bytes, void** out);
// Frees a graph allocation: a free node when s captures, else in stream order (or at once when s
// is null, for cudaFree).
cudaError_t graph_free(state& g, std::map<std::uintptr_t, device_allocation>::iterator allocation,
                       CUstream_st* s);
// cudaEventRecord on a capturing stream.
cudaError_t capture_event_record(state& g, CUstream_st& s, CUevent_st& e);
// cudaStreamWaitEvent where s captures or the event was captured; handled is false when neither.
cudaError_t capture_wait_event(state& g, CUstream_st& s, CUevent_st& e, unsigned flags,
                               bool& handled);
void graphs_teardown(state& g);
// Host-located pools (host_pools.cpp).
cudaError_t create_host_pool(state& g, const cudaMemPoolProps& props, cudaMemPool_t* out);
void graphs_report(const state& g, std::string& out);

inline bool valid_pool(const state& g, cudaMemPool_t pool) {
  return pool != nullptr && g.pool_handles.count(pool) != 0 && !pool->destroyed;
}

inline bool valid_event(const state& g, cudaEvent_t e) {
  return e != nullptr && g.event_handles.count(e) != 0 && !e->destroyed;
}

// The sticky error, or success: what a call that did its work returns.
inline cudaError_t sticky_or_success(const state& g) {
  return g.sticky;
}

inline std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
constexpr std::size_t allocation_alignment = 256;
constexpr std::size_t poison_limit = std::size_t{64} << 20;
constexpr std::size_t destroyed_events_kept = 4096;
// Stream priorities, as cudaDeviceGetStreamPriorityRange reports them.
constexpr int least_priority = 0;
constexpr int greatest_priority = -5;

}  // namespace cuscope::sim::detail
