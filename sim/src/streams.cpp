// SPDX-License-Identifier: Apache-2.0
// Streams, events, execution and host functions: the queues of enqueued work, the order between
// them, when work runs (deferred or eager), and the stream and event functions of the runtime.
// docs/simulated-device.md, "Streams", "Events", "Host functions" and "Deferred and eager
// execution".
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "api.hpp"
#include "internal.hpp"

namespace cuscope::sim::detail {

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

// The runtime's own thread, on which host functions run, as on a GPU's driver thread: never on
// the thread that synchronizes, and without the simulation's lock.
struct host_thread {
  std::mutex mutex;
  std::condition_variable changed;
  cudaHostFn_t fn = nullptr;
  void* data = nullptr;
  bool job = false;        // handed over, not yet taken
  bool done = false;       // the job has returned
  bool abandoned = false;  // reset() stopped waiting: the thread ends when the job does
  pid_t pid = 0;           // a forked child starts a thread of its own
  std::thread thread;

  void loop() {
    in_host_function() = true;  // CUDA calls from here are refused
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return job; });
      job = false;
      const cudaHostFn_t f = fn;
      void* const d = data;
      lock.unlock();
      try {
        f(d);
      } catch (...) {
        const std::lock_guard<std::mutex> guard(mutex);
        if (abandoned) return;  // it may have used a simulated process that is gone
        std::fprintf(stderr,
                     "cuscope::sim: a host function enqueued with cudaLaunchHostFunc "
                     "threw an exception; CUDA host functions must not throw\n");
        std::abort();
      }
      lock.lock();
      if (abandoned) return;
      done = true;
      changed.notify_all();
    }
  }
};

namespace {

host_thread& runtime_thread(state& g) {
  if (g.host == nullptr || g.host->pid != getpid()) {
    auto* h = new host_thread();  // never destroyed: it runs until the process ends
    h->pid = getpid();
    h->thread = std::thread([h] { h->loop(); });
    g.host = h;
  }
  return *g.host;
}

// Runs fn(data) on the runtime's thread and waits for it with the simulation's lock released
// (the caller holds it once, and holds the token, so no other thread runs work meanwhile).
// reset() waits at most host_function_timeout, then abandons the function and its thread.
void run_host_function(state& g, CUstream_st& s, cudaHostFn_t fn, void* data) {
  host_thread& h = runtime_thread(g);
  const bool bounded = g.resetting;
  const auto timeout = g.config.host_function_timeout;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.fn = fn;
    h.data = data;
    h.done = false;
    h.job = true;
  }
  h.changed.notify_all();
  bool returned = true;
  g.mutex.unlock();
  {
    std::unique_lock<std::mutex> lock(h.mutex);
    if (bounded)
      returned = h.changed.wait_for(lock, timeout, [&] { return h.done; });
    else
      h.changed.wait(lock, [&] { return h.done; });
  }
  g.mutex.lock();
  if (returned) return;
  char line[256];
  std::snprintf(line, sizeof line,
                "host function %p (data %p) on stream id %" PRIu64
                " did not return within %lld ms; abandoned on its thread\n",
                reinterpret_cast<void*>(fn), data, s.id, static_cast<long long>(timeout.count()));
  g.abandoned_report += line;
  std::fputs("cuscope::sim::reset: ", stderr);
  std::fputs(line, stderr);
  {
    const std::lock_guard<std::mutex> lock(h.mutex);
    h.abandoned = true;
  }
  h.thread.detach();
  g.abandoned.push_back(&h);
  g.host = nullptr;
}

// Makes the calling thread the one that runs work, waiting while another one is in a host
// function. Reentrant.
class drive_token {
 public:
  explicit drive_token(state& g) : g_(g) {
    const std::thread::id me = std::this_thread::get_id();
    if (g.driver != me) {
      std::unique_lock<std::recursive_mutex> lock(g.mutex, std::adopt_lock);
      g.driver_free.wait(lock, [&] { return g.driver == std::thread::id(); });
      lock.release();
      g.driver = me;
    }
    ++g.driver_depth;
  }
  drive_token(const drive_token&) = delete;
  drive_token& operator=(const drive_token&) = delete;
  ~drive_token() {
    if (--g_.driver_depth == 0) {
      g_.driver = std::thread::id();
      g_.driver_free.notify_all();
    }
  }

 private:
  state& g_;
};

void run_work(work_fn& work) {
  bool& inside = in_host_function();
  inside = true;
  work();
  inside = false;
}

void run_op(state& g, CUstream_st& s, operation& op) {
  if (op.host_fn != nullptr)
    run_host_function(g, s, op.host_fn, op.host_data);
  else if (op.work)
    run_work(op.work);
}

bool all_done(const std::vector<dependency>& deps) {
  for (const dependency& d : deps)
    if (d.stream->completed < d.seq) return false;
  return true;
}

}  // namespace

std::uint64_t enqueue(state& g, CUstream_st& s, work_fn work, std::vector<dependency> deps,
                      cudaHostFn_t host_fn, void* host_data) {
  if (s.capture != nullptr) {
    capture_work(g, s, std::move(work), host_fn, host_data);
    return 0;  // nothing to wait for: the work runs when a launch of the graph does
  }
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
  if (g.config.mode == execution::eager && host_fn == nullptr && s.pending.empty() &&
      s.completed + 1 == seq && g.driver == std::thread::id() && all_done(deps)) {
    if (work) run_work(work);
    s.completed = seq;
    return seq;
  }
  operation op;
  op.seq = seq;
  op.ticket = ticket;
  op.deps = std::move(deps);
  op.work = std::move(work);
  op.host_fn = host_fn;
  op.host_data = host_data;
  s.pending.push_back(std::move(op));
  if (g.config.mode == execution::eager) drive_to(g, s, seq);
  return seq;
}

void drive_to(state& g, CUstream_st& s, std::uint64_t seq) {
  if (seq <= s.completed) return;
  const drive_token token(g);
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
    run_op(g, s, op);
    s.completed = op.seq;
  }
}

void drive(state& g, std::vector<dependency> targets) {
  const drive_token token(g);
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
    run_op(g, *next, op);
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

namespace {

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
  if ((flags & cudaEventInterprocess) != 0 && !ipc_event_create(*e)) {
    delete e;
    return cudaErrorMemoryAllocation;
  }
  g.event_handles.insert(e);
  *event = e;
  return cudaSuccess;
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

namespace {

// A query finds the work up to seq of s pending or done. Pending work is started by the query
// (it runs now) but was not complete when the query looked: cudaErrorNotReady, unless the work
// set a sticky error.
cudaError_t query(state& g, CUstream_st& s, std::uint64_t seq) {
  if (s.completed >= seq) return sticky_or_success(g);
  drive_to(g, s, seq);
  return g.sticky != cudaSuccess ? g.sticky : cudaErrorNotReady;
}

}  // namespace

namespace api {

cudaError_t stream_query(cudaStream_t stream, bool ptds) {
  return call("cudaStreamQuery", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (const cudaError_t e = capture_check_sync(g, *s); e != cudaSuccess) return e;
    return query(g, *s, s->enqueued);
  });
}

cudaError_t stream_synchronize(cudaStream_t stream, bool ptds) {
  return call("cudaStreamSynchronize", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (const cudaError_t e = capture_check_sync(g, *s); e != cudaSuccess) return e;
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

cudaError_t stream_get_id(cudaStream_t stream, unsigned long long* id, bool ptds) {
  return call("cudaStreamGetId", [&](state& g) -> cudaError_t {
    if (id == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    *id = s->id;
    return cudaSuccess;
  });
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptds) {
  return call("cudaStreamWaitEvent", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    if ((flags & ~static_cast<unsigned>(cudaEventWaitExternal)) != 0) return cudaErrorInvalidValue;
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    bool captured = false;
    if (const cudaError_t e = capture_wait_event(g, *s, *event, flags, captured);
        captured || e != cudaSuccess)
      return e;
    if (event->ipc != nullptr) return ipc_stream_wait(g, *s, *event);
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
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    if (s->capture != nullptr) return capture_event_record(g, *s, *event);
    event->captured_in = 0;
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
    if (event->ipc != nullptr) ipc_event_recorded(g, *event, *s);
    return cudaSuccess;
  });
}

cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* data, bool ptds) {
  return call("cudaLaunchHostFunc", [&](state& g) -> cudaError_t {
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (fn == nullptr) return cudaErrorInvalidValue;
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    enqueue(g, *s, {}, {}, fn, data);
    return cudaSuccess;
  });
}

}  // namespace api
}  // namespace cuscope::sim::detail

using namespace cuscope::sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  return call("cudaDeviceSynchronize", [&](state& g) -> cudaError_t {
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    if (const cudaError_t e = capture_check_device_sync(g, d->index); e != cudaSuccess) return e;
    drive_device(g, d->index);
    for (CUstream_st* s : d->streams)
      observe(g, *s, s->completed, s->known);
    after_synchronize(g, d->index);
    return sticky_or_success(g);
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

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  return api::stream_get_id(stream, id, false);
}

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
    event->ipc.reset();  // waits still queued keep the shared state alive
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
    if (const cudaError_t e = capture_check_event(g, *event); e != cudaSuccess) return e;
    if (event->ipc != nullptr) return ipc_event_query(g, *event);
    if (event->completed_generation >= event->generation) return sticky_or_success(g);
    return query(g, *event->stream, event->seq);
  });
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  return call("cudaEventSynchronize", [&](state& g) -> cudaError_t {
    if (!valid_event(g, event)) return cudaErrorInvalidResourceHandle;
    if (const cudaError_t e = capture_check_event(g, *event); e != cudaSuccess) return e;
    if (event->ipc != nullptr) {
      if (const cudaError_t e = ipc_event_synchronize(g, *event); e != cudaSuccess) return e;
    }
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
