// SPDX-License-Identifier: Apache-2.0
// The simulated process: devices, address space, streams, execution, pools and control.
#include <link.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
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
    "cudaMemPoolCreate",
    "cudaMemPoolDestroy",
    "cudaMemPoolSetAttribute",
    "cudaMemPoolGetAttribute",
    "cudaMemPoolTrimTo",
    "cudaMemPoolSetAccess",
    "cudaMemPoolGetAccess",
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
};

int find_real_runtime(dl_phdr_info* info, std::size_t, void* found) {
  if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcudart") != nullptr) {
    *static_cast<const char**>(found) = info->dlpi_name;
    return 1;
  }
  return 0;
}

// A program linked with the simulated device must not also load the real runtime: calls the
// simulation does not implement would reach the real driver and mix the two devices.
void check_no_real_runtime() {
  const char* env = std::getenv("CUSCOPE_SIM_ALLOW_CUDART");
  if (env != nullptr && std::strcmp(env, "1") == 0) return;
  const char* found = nullptr;
  dl_iterate_phdr(find_real_runtime, &found);
  if (found == nullptr) return;
  std::fprintf(stderr,
               "cuscope::sim: this program runs on the simulated CUDA device, but the real CUDA "
               "runtime (%s) is loaded too.\n"
               "A program links either cuscope::sim or CUDA::cudart, never both. The usual cause "
               "is a CUDA function the simulated device does not provide (a kernel launch, for "
               "instance), which the linker then took from libcudart.\n",
               found);
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
  if (c.total_bytes > (std::size_t{1} << 44))
    throw std::invalid_argument("cuscope::sim::reset: total_bytes is limited to 16 TiB");
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
  for (auto& p : g.pools) {
    for (auto& c : p->chunks)
      release_region(g, c->mem);
    p->chunks.clear();
  }
  for (auto& [va, r] : g.malloc_regions)
    release_region(g, *r);
  g.malloc_regions.clear();
  for (auto& [ptr, h] : g.host_allocs)
    if (!h.registered) std::free(reinterpret_cast<void*>(ptr));
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
                  "device allocation %p: %zu bytes on device %d from %s%s%s, stream %" PRIu64
                  ", call #%" PRIu64 " (%s)\n",
                  reinterpret_cast<void*>(ptr), a.size, a.device, a.pool ? "pool " : "cudaMalloc",
                  a.pool ? pointer_text(a.pool).c_str() : "",
                  a.pool && a.pool->is_default ? " (default pool)" : "", a.stream_id, a.call,
                  a.api);
    out += line;
  }
  for (const auto& [ptr, h] : g.host_allocs) {
    std::snprintf(line, sizeof line, "%s %p: %zu bytes, call #%" PRIu64 " (%s)\n",
                  h.registered ? "registered host memory" : "pinned host allocation",
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
  for (const auto& p : g.pools) {
    if (p->is_default || p->destroyed) continue;
    std::snprintf(line, sizeof line,
                  "memory pool %p (device %d) created by call #%" PRIu64 " is not destroyed\n",
                  static_cast<const void*>(p.get()), p->device, p->created_by_call);
    out += line;
  }
  return out;
}

// A free whose completion has not run still points into its chunk: releasing the chunk then
// would leave that completion writing to memory that is gone, even when the segment it freed has
// since been reused and freed again on another stream.
bool releasable(const pool_chunk& c) {
  return c.used_segments == 0 && c.pending_frees == 0;
}

void index_insert(CUmemPoolHandle_st& pool, pool_chunk& c, segment_map::iterator seg) {
  pool.free_segments.insert(free_entry{seg->second.size, c.serial, seg->first, &c, seg});
}

free_entry index_key(const pool_chunk& c, segment_map::const_iterator seg) {
  return free_entry{seg->second.size, c.serial, seg->first, nullptr, {}};
}

// Whether allocations may treat two neighbouring free segments as one. Under a fixed value of the
// pool's opportunistic flag this is an equivalence between free segments, which is what lets a
// change be coalesced around itself only.
bool mergeable(const CUmemPoolHandle_st& pool, const segment& a, const segment& b) {
  const bool same_free = a.free_stream == b.free_stream && a.free_seq == b.free_seq;
  const bool both_done = !a.free_pending && !b.free_pending;
  return !a.used && !b.used &&
         ((both_done && (pool.allow_opportunistic || same_free)) ||
          (a.free_pending && b.free_pending && same_free));
}

// Merges neighbouring free segments that allocations may treat as one, from `it` onwards, until
// the segment at offset `last` has been passed: the left segment absorbs the right one and keeps
// its own free.
void coalesce_from(CUmemPoolHandle_st& pool, pool_chunk& c, segment_map::iterator it,
                   std::size_t last) {
  while (it != c.segments.end() && it->first <= last) {
    auto next = std::next(it);
    if (next != c.segments.end() && mergeable(pool, it->second, next->second)) {
      segment& a = it->second;
      // The index entry moves to the merged size; its node is reused rather than reallocated.
      auto entry = pool.free_segments.extract(index_key(c, it));
      do {
        pool.free_segments.erase(index_key(c, next));
        a.size += next->second.size;
        next = c.segments.erase(next);
      } while (next != c.segments.end() && mergeable(pool, a, next->second));
      entry.value().size = a.size;
      pool.free_segments.insert(std::move(entry));
    }
    it = next;
  }
}

// Coalesces a chunk after the segments from first to offset last changed (first is end() when
// none did), with the result of a pass over the whole chunk. Where no neighbours could merge
// before the change, only the changed segments and their neighbours can merge now; a chunk
// coalesced while opportunistic reuse was off may hold done neighbours that can merge once it is
// on, and gets the whole pass.
void coalesce(CUmemPoolHandle_st& pool, pool_chunk& c, segment_map::iterator first,
              std::size_t last) {
  if (!c.coalesced_opportunistic && pool.allow_opportunistic) {
    coalesce_from(pool, c, c.segments.begin(), std::numeric_limits<std::size_t>::max());
  } else if (first != c.segments.end()) {
    if (first != c.segments.begin()) --first;
    coalesce_from(pool, c, first, last);
  }
  c.coalesced_opportunistic = pool.allow_opportunistic;
}

// 0: usable as is; 1: usable once the allocation waits for the free; -1: not usable.
int reuse_rank(const CUmemPoolHandle_st& pool, const segment& seg, const CUstream_st& s) {
  if (seg.free_stream == nullptr || seg.free_stream == &s) return 0;
  if (!seg.free_pending && pool.allow_opportunistic) return 0;
  if (seg.free_stream->observed >= seg.free_seq) return 0;
  if (pool.follow_event_dependencies) {
    const auto it = s.known.find(seg.free_stream->id);
    if (it != s.known.end() && it->second >= seg.free_seq) return 0;
  }
  if (pool.allow_internal_dependencies) return 1;
  return -1;
}

void complete_free(state& g, CUmemPoolHandle_st* pool, pool_chunk* chunk, std::size_t offset,
                   std::size_t size, CUstream_st* s, std::uint64_t seq) {
  poison(chunk->mem.host + offset, std::min(size, poison_limit));
  // Segments of the freed block that were not reused since, as one or cut by reuses.
  auto first = chunk->segments.end();
  std::size_t last = 0;
  for (auto it = chunk->segments.lower_bound(offset);
       it != chunk->segments.end() && it->first < offset + size; ++it) {
    segment& seg = it->second;
    if (!seg.used && seg.free_pending && seg.free_stream == s && seg.free_seq == seq) {
      seg.free_pending = false;
      if (first == chunk->segments.end()) first = it;
      last = it->first;
    }
  }
  --pool->pending_frees;
  --chunk->pending_frees;
  coalesce(*pool, *chunk, first, last);
  pool_release_if_destroyed(g, *pool);
}

void release_chunk(state& g, CUmemPoolHandle_st& pool, std::size_t index) {
  pool_chunk& c = *pool.chunks[index];
  for (auto it = c.segments.begin(); it != c.segments.end(); ++it)
    if (!it->second.used) pool.free_segments.erase(index_key(c, it));
  pool.reserved -= c.mem.size;
  release_region(g, c.mem);
  pool.chunks.erase(pool.chunks.begin() + static_cast<std::ptrdiff_t>(index));
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
      if (is_sticky(fired)) g.sticky = fired;
      return record_error(fired);
    }
  }
  if (g.sticky != cudaSuccess) return record_error(g.sticky);
  return cudaSuccess;
}

device_state* find_device(state& g, int device) {
  if (device < 0 || device >= static_cast<int>(g.devices.size())) return nullptr;
  return &g.devices[static_cast<std::size_t>(device)];
}

std::size_t device_free_bytes(const state& g, const device_state& d) {
  std::size_t held = g.config.context_bytes + d.malloc_bytes;
  for (const auto& p : g.pools)
    if (p->device == d.index) held += p->reserved;
  return held >= g.config.total_bytes ? 0 : g.config.total_bytes - held;
}

bool reserve_region(device_state& d, std::size_t bytes, region& out) {
  const std::size_t size = round_up(bytes, page_bytes);
  auto it = std::find_if(d.free_ranges.begin(), d.free_ranges.end(),
                         [&](const auto& r) { return r.second >= size; });
  if (it == d.free_ranges.end()) return false;
  void* host = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (host == MAP_FAILED) return false;
  const std::size_t offset = it->first;
  const std::size_t left = it->second - size;
  d.free_ranges.erase(it);
  if (left > 0) d.free_ranges.emplace(offset + size, left);
  out.va = d.va_base + offset;
  out.size = size;
  out.host = static_cast<std::byte*>(host);
  out.device = d.index;
  d.regions.emplace(out.va, &out);
  return true;
}

void release_region(state& g, region& r) {
  device_state& d = g.devices[static_cast<std::size_t>(r.device)];
  munmap(r.host, r.size);
  d.regions.erase(r.va);
  std::size_t offset = r.va - d.va_base;
  std::size_t size = r.size;
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
  r.host = nullptr;
  r.size = 0;
}

std::byte* translate(state& g, std::uintptr_t address, std::size_t bytes) {
  for (device_state& d : g.devices) {
    if (address < d.va_base || address >= d.va_base + d.va_size) continue;
    auto it = d.regions.upper_bound(address);
    if (it == d.regions.begin()) return nullptr;
    const region& r = *std::prev(it)->second;
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

CUstream_st* create_stream(state& g, int device, unsigned flags, int priority,
                           CUstream_st::kind_t kind) {
  auto s = std::make_unique<CUstream_st>();
  s->id = g.next_stream_id++;
  s->device = device;
  s->flags = flags;
  s->priority = priority;
  s->kind = kind;
  s->created_by_call = g.calls;
  CUstream_st* raw = s.get();
  g.streams.push_back(std::move(s));
  g.stream_handles.insert(raw);
  g.devices[static_cast<std::size_t>(device)].streams.push_back(raw);
  return raw;
}

cudaError_t resolve_stream(state& g, cudaStream_t handle, bool per_thread_default,
                           CUstream_st*& out) {
  if (handle == nullptr) handle = per_thread_default ? cudaStreamPerThread : cudaStreamLegacy;
  if (handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    thread_state& t = this_thread();
    device_state* d = find_device(g, t.device);
    if (d == nullptr) return cudaErrorNoDevice;
    if (handle == cudaStreamLegacy) {
      out = d->legacy;
    } else {
      CUstream_st*& s = t.per_thread_streams[t.device];
      if (s == nullptr) s = create_stream(g, t.device, 0, 0, CUstream_st::kind_t::per_thread);
      out = s;
    }
    return cudaSuccess;
  }
  // The default streams' own objects are never handed out, so a handle equal to one is stale.
  if (g.stream_handles.count(handle) == 0 || handle->destroyed ||
      handle->kind != CUstream_st::kind_t::created)
    return cudaErrorInvalidResourceHandle;
  out = handle;
  return cudaSuccess;
}

void merge(order_clock& into, const order_clock& from) {
  for (const auto& [id, seq] : from) {
    std::uint64_t& mine = into[id];
    mine = std::max(mine, seq);
  }
}

namespace {

void run_work(work_fn& work) {
  bool& inside = in_host_function();
  inside = true;
  try {
    work();
  } catch (...) {
    std::fprintf(stderr,
                 "cuscope::sim: a host function enqueued with cudaLaunchHostFunc "
                 "threw an exception; CUDA host functions must not throw\n");
    std::abort();
  }
  inside = false;
}

bool all_done(const std::vector<dependency>& deps) {
  for (const dependency& d : deps)
    if (d.stream->completed < d.seq) return false;
  return true;
}

}  // namespace

std::uint64_t enqueue(state& g, CUstream_st& s, work_fn work, std::vector<dependency> deps) {
  device_state& d = g.devices[static_cast<std::size_t>(s.device)];
  const auto order_after = [&](CUstream_st& other) {
    if (other.enqueued > other.completed) deps.push_back({&other, other.enqueued});
    merge(s.known, other.known);
    std::uint64_t& seen = s.known[other.id];
    seen = std::max(seen, other.enqueued);
  };
  // The legacy default stream waits for all blocking streams of its device, and they for it.
  if (s.kind == CUstream_st::kind_t::legacy) {
    for (CUstream_st* other : d.streams)
      if (other != &s && (other->flags & cudaStreamNonBlocking) == 0) order_after(*other);
  } else if ((s.flags & cudaStreamNonBlocking) == 0) {
    order_after(*d.legacy);
  }
  const std::uint64_t seq = ++s.enqueued;
  const std::uint64_t ticket = g.next_ticket++;
  // Eager work with nothing before it runs at once, as queuing and driving it would run it.
  if (g.config.mode == execution::eager && s.pending.empty() && all_done(deps)) {
    if (work) run_work(work);
    s.completed = seq;
    return seq;
  }
  operation op;
  op.seq = seq;
  op.ticket = ticket;
  op.deps = std::move(deps);
  op.work = std::move(work);
  s.pending.push_back(std::move(op));
  if (g.config.mode == execution::eager) drive_to(g, s, seq);
  return seq;
}

void drive_to(state& g, CUstream_st& s, std::uint64_t seq) {
  if (seq <= s.completed) return;
  // Usually the work up to seq waits for nothing but its own stream: then it runs in stream
  // order, as drive would run it, without the search through other streams.
  for (const operation& op : s.pending) {
    if (op.seq > seq) break;
    for (const dependency& d : op.deps) {
      if (d.stream->completed >= d.seq || (d.stream == &s && d.seq < op.seq)) continue;
      drive(g, {{&s, seq}});
      return;
    }
  }
  while (!s.pending.empty() && s.pending.front().seq <= seq) {
    operation op = std::move(s.pending.front());
    s.pending.pop_front();
    if (op.work) run_work(op.work);
    s.completed = op.seq;
  }
}

void drive(state&, std::vector<dependency> targets) {
  // Everything the targets need, then run it in enqueue order: dependencies always point to
  // earlier operations, so enqueue order respects every stream and every dependency.
  std::unordered_map<CUstream_st*, std::uint64_t> need;
  while (!targets.empty()) {
    const dependency t = targets.back();
    targets.pop_back();
    std::uint64_t& have = need[t.stream];
    const std::uint64_t from = std::max(have, t.stream->completed);
    if (t.seq <= from) continue;
    for (const operation& op : t.stream->pending) {
      if (op.seq <= from) continue;
      if (op.seq > t.seq) break;
      targets.insert(targets.end(), op.deps.begin(), op.deps.end());
    }
    have = t.seq;
  }
  for (;;) {
    CUstream_st* next = nullptr;
    for (const auto& [s, upto] : need) {
      if (s->completed >= upto || s->pending.empty()) continue;
      if (next == nullptr || s->pending.front().ticket < next->pending.front().ticket) next = s;
    }
    if (next == nullptr) break;
    operation op = std::move(next->pending.front());
    next->pending.pop_front();
    if (op.work) run_work(op.work);
    next->completed = op.seq;
  }
}

void drive_stream(state& g, CUstream_st& s) {
  drive_to(g, s, s.enqueued);
}

void drive_device(state& g, int device) {
  std::vector<dependency> all;
  for (CUstream_st* s : g.devices[static_cast<std::size_t>(device)].streams)
    if (s->enqueued > s->completed) all.push_back({s, s->enqueued});
  drive(g, std::move(all));
}

void drive_all(state& g) {
  for (const device_state& d : g.devices)
    drive_device(g, d.index);
}

void observe(state& g, CUstream_st& s, std::uint64_t seq, const order_clock& known) {
  const auto see = [](CUstream_st& t, std::uint64_t upto) {
    t.observed = std::max(t.observed, std::min(upto, t.completed));
  };
  see(s, seq);
  // Streams get their ids in creation order, from 1, and live until the next reset.
  for (const auto& [id, upto] : known)
    if (id >= 1 && id <= g.streams.size()) see(*g.streams[id - 1], upto);
}

void after_synchronize(state& g, int device) {
  for (auto& p : g.pools) {
    if (p->device != device) continue;
    if (p->reserved > p->release_threshold)
      pool_trim(g, *p,
                static_cast<std::size_t>(std::min<std::uint64_t>(
                    p->release_threshold, std::numeric_limits<std::size_t>::max())),
                trim_mode::down_to);
    pool_release_if_destroyed(g, *p);
  }
}

CUmemPoolHandle_st* create_pool(state& g, int device, std::size_t max_size, bool is_default) {
  auto p = std::make_unique<CUmemPoolHandle_st>();
  p->device = device;
  p->max_size = max_size;
  p->is_default = is_default;
  p->created_by_call = g.calls;
  CUmemPoolHandle_st* raw = p.get();
  g.pools.push_back(std::move(p));
  g.pool_handles.insert(raw);
  return raw;
}

namespace {

// A new chunk of the granularity that holds need bytes, as one free segment that is not in the
// index; null when the pool may not grow or the device has too little memory left.
pool_chunk* grow(state& g, CUmemPoolHandle_st& pool, std::size_t need) {
  device_state& d = g.devices[static_cast<std::size_t>(pool.device)];
  const std::size_t granularity = g.config.pool_granularity_bytes;
  if (need > std::numeric_limits<std::size_t>::max() - granularity) return nullptr;
  const std::size_t chunk_bytes = round_up(need, granularity);
  if (pool.max_size != 0 && pool.reserved + chunk_bytes > pool.max_size) return nullptr;
  if (device_free_bytes(g, d) < chunk_bytes) return nullptr;
  auto c = std::make_unique<pool_chunk>();
  if (!reserve_region(d, chunk_bytes, c->mem)) return nullptr;
  c->segments.emplace(0, segment{chunk_bytes, false, false, nullptr, 0});
  c->serial = pool.next_chunk_serial++;
  pool_chunk* raw = c.get();
  pool.chunks.push_back(std::move(c));
  pool.reserved += chunk_bytes;
  pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  return raw;
}

}  // namespace

cudaError_t pool_allocate(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, CUstream_st& s,
                          const char* api, void** out) {
  if (bytes == 0) return cudaErrorInvalidValue;
  if (bytes > std::numeric_limits<std::size_t>::max() - allocation_alignment)
    return cudaErrorMemoryAllocation;
  const std::size_t need = round_up(bytes, allocation_alignment);
  // Best fit: the lowest reuse rank, then the smallest segment, then the oldest chunk and the
  // lowest offset. The index is in the order of the last three, so the first segment of rank 0
  // wins, and without one the first of rank 1.
  auto best = pool.free_segments.end();
  int best_rank = 2;
  for (auto it = pool.free_segments.lower_bound(free_entry{need, 0, 0, nullptr, {}});
       it != pool.free_segments.end(); ++it) {
    const int rank = reuse_rank(pool, it->where->second, s);
    if (rank == 0) {
      best = it;
      best_rank = 0;
      break;
    }
    if (rank == 1 && best_rank == 2) {
      best = it;
      best_rank = 1;
    }
  }
  pool_chunk* best_chunk = nullptr;
  segment_map::iterator where;
  // Memory that is free now comes first, then more memory from the device; memory whose reuse
  // makes the allocation wait for a free on another stream is the last resort.
  if (best_rank != 0) {
    best_chunk = grow(g, pool, need);
    if (best_chunk != nullptr) {
      where = best_chunk->segments.begin();
      best_rank = 0;
    } else if (best == pool.free_segments.end()) {
      return cudaErrorMemoryAllocation;
    }
  }
  // The chosen segment leaves the index; its node serves what is cut off it, if anything.
  decltype(pool.free_segments)::node_type entry;
  if (best_chunk == nullptr) {
    best_chunk = best->chunk;
    where = best->where;
    entry = pool.free_segments.extract(best);
  }
  const std::size_t best_offset = where->first;
  segment& seg = where->second;
  std::vector<dependency> deps;
  if (best_rank == 1) deps.push_back({seg.free_stream, seg.free_seq});
  if (seg.size > need) {
    segment rest = seg;
    rest.size = seg.size - need;
    const auto cut = best_chunk->segments.emplace_hint(std::next(where), best_offset + need, rest);
    if (entry.empty()) {
      index_insert(pool, *best_chunk, cut);
    } else {
      entry.value() = free_entry{rest.size, best_chunk->serial, cut->first, best_chunk, cut};
      pool.free_segments.insert(std::move(entry));
    }
  }
  ++best_chunk->used_segments;
  seg.size = need;
  seg.used = true;
  seg.free_pending = false;
  seg.free_stream = nullptr;
  seg.free_seq = 0;
  pool.used += need;
  pool.used_high = std::max(pool.used_high, pool.used);
  const std::uintptr_t ptr = best_chunk->mem.va + best_offset;
  device_allocation a;
  a.ptr = ptr;
  a.size = bytes;
  a.footprint = need;
  a.device = pool.device;
  a.kind = alloc_kind::stream_ordered;
  a.pool = &pool;
  a.chunk = best_chunk;
  a.where = where;
  a.stream_id = s.id;
  a.call = g.calls;
  a.api = api;
  g.device_allocs.emplace(ptr, a);
  // Fresh memory holds garbage once the allocation runs in stream order.
  enqueue(
      g, s, [&g, ptr, bytes] { poison(translate(g, ptr, bytes), std::min(bytes, poison_limit)); },
      std::move(deps));
  *out = reinterpret_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t pool_free(state& g, std::map<std::uintptr_t, device_allocation>::iterator allocation,
                      CUstream_st* s) {
  const device_allocation a = allocation->second;
  CUmemPoolHandle_st* pool = a.pool;
  pool_chunk* chunk = a.chunk;
  const std::size_t offset = a.ptr - chunk->mem.va;
  segment& seg = a.where->second;
  seg.used = false;
  --chunk->used_segments;
  pool->used -= a.footprint;
  g.device_allocs.erase(allocation);
  if (s == nullptr) {
    poison(chunk->mem.host + offset, std::min(a.footprint, poison_limit));
    seg.free_pending = false;
    seg.free_stream = nullptr;
    seg.free_seq = 0;
    index_insert(*pool, *chunk, a.where);
    coalesce(*pool, *chunk, a.where, offset);
    pool_release_if_destroyed(g, *pool);
    return cudaSuccess;
  }
  const std::uint64_t seq = s->enqueued + 1;
  seg.free_pending = true;
  seg.free_stream = s;
  seg.free_seq = seq;
  ++pool->pending_frees;
  ++chunk->pending_frees;
  index_insert(*pool, *chunk, a.where);
  // No other segment waits for this free, so the segment can merge with none: only a chunk left
  // to coalesce whole needs a pass.
  coalesce(*pool, *chunk, chunk->segments.end(), 0);
  const std::size_t size = a.footprint;
  enqueue(g, *s, [&g, pool, chunk, offset, size, s, seq] {
    complete_free(g, pool, chunk, offset, size, s, seq);
  });
  return cudaSuccess;
}

void pool_trim(state& g, CUmemPoolHandle_st& pool, std::size_t bytes, trim_mode mode) {
  if (pool.reserved <= bytes) return;
  for (auto& c : pool.chunks)
    coalesce(pool, *c, c->segments.end(), 0);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < pool.chunks.size(); ++i)
    if (releasable(*pool.chunks[i])) order.push_back(i);
  // Largest first: the fewest releases that get there.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return pool.chunks[a]->mem.size > pool.chunks[b]->mem.size;
  });
  std::vector<std::size_t> release;
  std::size_t reserved = pool.reserved;
  for (std::size_t i : order) {
    const std::size_t size = pool.chunks[i]->mem.size;
    if (mode == trim_mode::keep_at_least) {
      if (reserved - size < bytes) continue;
    } else if (reserved <= bytes) {
      break;
    }
    reserved -= size;
    release.push_back(i);
  }
  std::sort(release.rbegin(), release.rend());
  for (std::size_t i : release)
    release_chunk(g, pool, i);
}

void pool_release_if_destroyed(state& g, CUmemPoolHandle_st& pool) {
  if (!pool.destroyed || pool.used != 0 || pool.pending_frees != 0) return;
  while (!pool.chunks.empty())
    release_chunk(g, pool, pool.chunks.size() - 1);
}

}  // namespace cuscope::sim::detail

namespace cuscope::sim {

using namespace detail;

void reset(const device_config& c) {
  validate(c);
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  drive_all(g);
  const std::string outstanding = report(g);
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
  if (api == nullptr || !is_simulated_api(api))
    throw std::invalid_argument(std::string("cuscope::sim::call_count: '") + (api ? api : "") +
                                "' is not a function of the simulated runtime");
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.calls_by_api[api_index(api)];
}

std::size_t outstanding_allocations() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.device_allocs.size() + g.host_allocs.size();
}

std::size_t outstanding_bytes() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  std::size_t bytes = 0;
  for (const auto& [p, a] : g.device_allocs)
    bytes += a.size;
  for (const auto& [p, h] : g.host_allocs)
    bytes += h.size;
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

std::size_t pending_operations() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  std::size_t n = 0;
  for (const auto& s : g.streams)
    n += s->pending.size();
  return n;
}

}  // namespace cuscope::sim
