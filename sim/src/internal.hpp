// SPDX-License-Identifier: Apache-2.0
// Internal state of the simulated CUDA runtime. Nothing here is part of the public interface.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cuscope/sim.hpp"

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
  work_fn work;  // empty for markers
};

struct region;      // device memory reserved from a device: a pool chunk or a cudaMalloc block
struct pool_chunk;  // a region owned by a pool, cut into segments

struct segment {
  std::size_t size = 0;
  bool used = false;
  // For a free segment: the free that returned it, until that free has run.
  bool free_pending = false;
  CUstream_st* free_stream = nullptr;
  std::uint64_t free_seq = 0;
};

// A chunk's segments by offset. Its nodes stay put while they exist, so the index and live
// allocations keep iterators to their segments instead of looking them up.
using segment_map = std::map<std::size_t, segment>;

// A free segment of a pool, ordered as allocations prefer it among those of equal reuse rank:
// smallest first, then the oldest chunk, then the lowest offset.
struct free_entry {
  std::size_t size = 0;
  std::uint64_t chunk_serial = 0;
  std::size_t offset = 0;
  pool_chunk* chunk = nullptr;
  segment_map::iterator where{};  // not part of the order

  bool operator<(const free_entry& o) const noexcept {
    if (size != o.size) return size < o.size;
    if (chunk_serial != o.chunk_serial) return chunk_serial < o.chunk_serial;
    return offset < o.offset;
  }
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
};

struct CUmemPoolHandle_st {
  int device = 0;
  bool is_default = false;
  bool destroyed = false;
  std::uint64_t created_by_call = 0;
  std::size_t max_size = 0;  // 0: bounded by the device only
  std::uint64_t release_threshold = 0;
  bool follow_event_dependencies = true;
  bool allow_opportunistic = true;
  bool allow_internal_dependencies = true;
  std::size_t reserved = 0;
  std::size_t reserved_high = 0;
  std::size_t used = 0;
  std::size_t used_high = 0;
  std::size_t pending_frees = 0;
  std::vector<std::unique_ptr<cuscope::sim::detail::pool_chunk>> chunks;  // oldest first
  std::uint64_t next_chunk_serial = 0;
  std::map<int, cudaMemAccessFlags> peer_access;  // granted by cudaMemPoolSetAccess
  // Every free segment of every chunk, so that an allocation finds its best fit without a scan.
  std::set<cuscope::sim::detail::free_entry> free_segments;
};

namespace cuscope::sim::detail {

struct region {
  std::uintptr_t va = 0;  // device address
  std::size_t size = 0;   // bytes of device address space
  std::byte* host = nullptr;
  int device = 0;
};

struct pool_chunk {
  region mem;
  segment_map segments;
  std::uint64_t serial = 0;  // creation order within its pool
  std::size_t used_segments = 0;
  std::size_t pending_frees = 0;  // enqueued frees of its memory that have not run
  // No two neighbouring segments could merge under this value of the pool's opportunistic reuse
  // flag (true also implies it for false), so a change needs coalescing only around itself.
  bool coalesced_opportunistic = true;
};

enum class alloc_kind { malloc, stream_ordered };

struct device_allocation {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;       // requested
  std::size_t footprint = 0;  // bytes counted against the pool or the device
  int device = 0;
  alloc_kind kind = alloc_kind::malloc;
  CUmemPoolHandle_st* pool = nullptr;
  pool_chunk* chunk = nullptr;
  segment_map::iterator where{};  // its segment in chunk, which a used segment never leaves
  std::uint64_t stream_id = 0;
  std::uint64_t call = 0;
  const char* api = "";
};

struct host_allocation {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  unsigned flags = 0;
  bool registered = false;  // cudaHostRegister rather than cudaMallocHost/cudaHostAlloc
  int device = 0;           // current when it was allocated or registered
  std::uint64_t call = 0;
  const char* api = "";
};

struct device_state {
  int index = 0;
  std::uintptr_t va_base = 0;
  std::size_t va_size = 0;
  std::map<std::size_t, std::size_t> free_ranges;  // offset -> size, in va
  std::map<std::uintptr_t, region*> regions;       // by va, for address translation
  std::size_t malloc_bytes = 0;
  CUmemPoolHandle_st* default_pool = nullptr;
  CUmemPoolHandle_st* current_pool = nullptr;
  CUstream_st* legacy = nullptr;
  std::vector<CUstream_st*> streams;  // every stream of the device, legacy included
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
  std::unordered_map<std::uintptr_t, std::unique_ptr<region>> malloc_regions;  // cudaMalloc
  std::uint64_t next_stream_id = 1;
  std::uint64_t next_ticket = 1;
  std::size_t calls = 0;
  std::vector<std::size_t> calls_by_api;  // by index of the simulated function
  std::vector<fault> faults;
  cudaError_t sticky = cudaSuccess;
};

state& global();

// Thread-local view of the simulated process.
struct thread_state {
  std::uint64_t generation = 0;
  int device = 0;
  cudaError_t last_error = cudaSuccess;
  std::unordered_map<int, CUstream_st*> per_thread_streams;
};
thread_state& this_thread();
bool& in_host_function();

// Call bookkeeping: every simulated function runs through call().
bool is_simulated_api(const std::string& name);
std::size_t api_index(const char* name);  // any_api when name is not a simulated function
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
  if (result != cudaSuccess && result != cudaErrorNotReady) return record_error(result);
  return result;
}

// Devices and memory.
device_state* find_device(state& g, int device);
std::size_t device_free_bytes(const state& g, const device_state& d);
// Reserves device memory into out, which must stay where it is until release_region.
bool reserve_region(device_state& d, std::size_t bytes, region& out);
void release_region(state& g, region& r);
std::byte* translate(state& g, std::uintptr_t device_address, std::size_t bytes);
void poison(std::byte* p, std::size_t bytes);
const device_allocation* find_allocation_containing(const state& g, std::uintptr_t p,
                                                    std::size_t bytes);
const host_allocation* find_host_containing(const state& g, std::uintptr_t p, std::size_t bytes);

// Streams and execution.
CUstream_st* create_stream(state& g, int device, unsigned flags, int priority,
                           CUstream_st::kind_t kind);
cudaError_t resolve_stream(state& g, cudaStream_t handle, bool per_thread_default,
                           CUstream_st*& out);
std::uint64_t enqueue(state& g, CUstream_st& s, work_fn work, std::vector<dependency> deps = {});
void drive(state& g, std::vector<dependency> targets);
void drive_to(state& g, CUstream_st& s, std::uint64_t seq);  // drive(g, {{&s, seq}}), faster
void drive_stream(state& g, CUstream_st& s);
void drive_device(state& g, int device);
void drive_all(state& g);
void merge(order_clock& into, const order_clock& from);
// A stream, event or device synchronization has shown the host the work of s up to seq complete,
// and with it the work of other streams that known orders before it: the frees in that work
// become reusable by any stream, whatever the pool's reuse policies.
void observe(state& g, CUstream_st& s, std::uint64_t seq, const order_clock& known);
void after_synchronize(state& g, int device);  // release thresholds

// Pools.
cudaError_t pool_allocate(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, CUstream_st& s,
                          const char* api, void** out);
// Frees a live stream-ordered allocation on s, or at once when s is null (cudaFree).
cudaError_t pool_free(state& g, std::map<std::uintptr_t, device_allocation>::iterator allocation,
                      CUstream_st* s);
// keep_at_least: cudaMemPoolTrimTo, the pool keeps at least bytes reserved.
// down_to: the release threshold, the pool holds at most bytes where it can.
enum class trim_mode { keep_at_least, down_to };
void pool_trim(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, trim_mode mode);
void pool_release_if_destroyed(state& g, CUmemPoolHandle_st& pool);
CUmemPoolHandle_st* create_pool(state& g, int device, std::size_t max_size, bool is_default);

inline std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
constexpr std::size_t allocation_alignment = 256;
constexpr std::size_t poison_limit = std::size_t{64} << 20;
constexpr std::size_t destroyed_events_kept = 4096;

}  // namespace cuscope::sim::detail
