// SPDX-License-Identifier: Apache-2.0
// Stream capture and CUDA graphs: capture sequences and the rules that invalidate them, graphs of
// captured work with memory allocation and free nodes, instantiation, launch, and the device's
// graph memory (its attributes and trim). docs/simulated-device.md, "Stream capture and graphs".
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "api.hpp"
#include "internal.hpp"

namespace cuscope::sim::detail {

struct graph_allocation {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t footprint = 0;  // bytes of graph memory it maps
  int device = 0;
  bool in_graph = true;   // its graph has not been destroyed
  int execs = 0;          // executable graphs of its graph that are not settled
  bool mapped = false;    // physical memory mapped for it (counted as graph memory in use)
  bool unfreed = false;   // a launch allocated it and the host has not freed it yet
  int pending_frees = 0;  // frees enqueued outside a graph that have not run
  bool freed_in_graph = false;
  bool retired = false;
};

}  // namespace cuscope::sim::detail

using cuscope::sim::detail::graph_allocation;
using cuscope::sim::detail::work_fn;

struct CUgraphNode_st {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  std::shared_ptr<work_fn> work;  // kernels, copies, memsets, markers (replayed at each launch)
  cudaHostFn_t host_fn = nullptr;
  void* host_data = nullptr;
  graph_allocation* allocation = nullptr;  // allocation and free nodes
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in capture order, a topological order
  std::uint64_t created_by_call = 0;
  int device = 0;
  bool destroyed = false;
  int execs = 0;  // live executable graphs instantiated from it
  bool has_memory_nodes() const {
    return std::any_of(nodes.begin(), nodes.end(), [](const auto& n) {
      return n->type == cudaGraphNodeTypeMemAlloc || n->type == cudaGraphNodeTypeMemFree;
    });
  }
};

struct CUgraphExec_st {
  CUgraph_st* graph = nullptr;                 // null once the graph is destroyed
  std::vector<CUgraphNode_st> nodes;           // copies of the graph's nodes at instantiation
  std::vector<graph_allocation*> allocations;  // of its allocation nodes
  unsigned long long flags = 0;
  std::uint64_t created_by_call = 0;
  int device = 0;
  bool destroyed = false;
  std::size_t pending_launches = 0;  // launches enqueued whose work has not all run
};

namespace cuscope::sim::detail {

struct capture_sequence {
  std::uint64_t id = 0;
  CUstream_st* origin = nullptr;
  std::unique_ptr<CUgraph_st> graph;
  int mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  std::vector<CUstream_st*> streams;  // origin first, then the streams that joined
  bool invalidated = false;
};

struct graph_state {
  std::uint64_t next_capture_id = 1;
  std::vector<std::unique_ptr<capture_sequence>> captures;  // in progress
  std::vector<std::unique_ptr<CUgraph_st>> graphs;
  std::vector<std::unique_ptr<CUgraphExec_st>> execs;
  std::vector<std::unique_ptr<graph_allocation>> allocations;
};

namespace {

graph_state& graphs_of(state& g) {
  if (g.graphs == nullptr) g.graphs = new graph_state();
  return *g.graphs;
}

bool valid_graph(state& g, cudaGraph_t graph) {
  if (graph == nullptr || g.graphs == nullptr) return false;
  for (const auto& p : g.graphs->graphs)
    if (p.get() == graph) return !graph->destroyed;
  return false;
}

bool valid_exec(state& g, cudaGraphExec_t exec) {
  if (exec == nullptr || g.graphs == nullptr) return false;
  for (const auto& p : g.graphs->execs)
    if (p.get() == exec) return !exec->destroyed;
  return false;
}

capture_sequence* find_capture(state& g, std::uint64_t id) {
  if (g.graphs == nullptr || id == 0) return nullptr;
  for (const auto& c : g.graphs->captures)
    if (c->id == id) return c.get();
  return nullptr;
}

bool blocking(const CUstream_st& s) {
  return s.kind != CUstream_st::kind_t::legacy && (s.flags & cudaStreamNonBlocking) == 0;
}

// Invalidates every capture that a blocking stream of the device takes part in; true if any.
bool invalidate_blocking_captures(state& g, int device) {
  bool any = false;
  for (CUstream_st* s : g.devices[static_cast<std::size_t>(device)].streams) {
    if (s->capture == nullptr || !blocking(*s)) continue;
    s->capture->invalidated = true;
    any = true;
  }
  return any;
}

void map_allocation(device_state& d, graph_allocation& a) {
  if (a.mapped) return;
  a.mapped = true;
  d.graph_used += a.footprint;
  d.graph_used_high = std::max(d.graph_used_high, d.graph_used);
  d.graph_reserved = std::max(d.graph_reserved, d.graph_used);
  d.graph_reserved_high = std::max(d.graph_reserved_high, d.graph_reserved);
}

void unmap_allocation(device_state& d, graph_allocation& a) {
  if (!a.mapped) return;
  a.mapped = false;
  d.graph_used -= a.footprint;  // the memory stays reserved, cached for later launches
}

// Retires what nothing refers to any more: allocations whose graph and executable graphs are gone
// and that are neither live nor mapped, and executable graphs destroyed with no launch pending.
void settle(state& g) {
  graph_state& gs = graphs_of(g);
  for (auto& e : gs.execs) {
    if (!e->destroyed || e->pending_launches != 0 || e->allocations.empty()) continue;
    for (graph_allocation* a : e->allocations) {
      --a->execs;
      if (!a->unfreed && a->pending_frees == 0)
        unmap_allocation(g.devices[static_cast<std::size_t>(a->device)], *a);
    }
    e->allocations.clear();
  }
  gs.execs.erase(
      std::remove_if(gs.execs.begin(), gs.execs.end(),
                     [](const auto& e) { return e->destroyed && e->pending_launches == 0; }),
      gs.execs.end());
  for (auto& a : gs.allocations) {
    if (a->in_graph || a->execs != 0 || a->unfreed || a->pending_frees != 0) continue;
    device_state& d = g.devices[static_cast<std::size_t>(a->device)];
    unmap_allocation(d, *a);
    g.device_allocs.erase(a->ptr);
    release_region(g, a->device, a->ptr);
    a->retired = true;
  }
  gs.allocations.erase(std::remove_if(gs.allocations.begin(), gs.allocations.end(),
                                      [](const auto& a) { return a->retired; }),
                       gs.allocations.end());
}

graph_allocation* allocation_at(state& g, std::uintptr_t ptr) {
  if (g.graphs == nullptr) return nullptr;
  for (const auto& a : g.graphs->allocations)
    if (a->ptr == ptr) return a.get();
  return nullptr;
}

// Ends the capture: its streams leave capture mode; returns its graph (null if invalidated).
std::unique_ptr<CUgraph_st> end_capture(state& g, capture_sequence& c) {
  for (CUstream_st* s : c.streams)
    s->capture = nullptr;
  std::unique_ptr<CUgraph_st> graph = std::move(c.graph);
  const bool invalid = c.invalidated;
  graph_state& gs = graphs_of(g);
  gs.captures.erase(std::find_if(gs.captures.begin(), gs.captures.end(),
                                 [&](const auto& p) { return p.get() == &c; }));
  if (!invalid) return graph;
  // The addresses handed out to the invalidated capture's allocations go with its graph.
  for (const auto& n : graph->nodes)
    if (n->type == cudaGraphNodeTypeMemAlloc) n->allocation->in_graph = false;
  settle(g);
  return nullptr;
}

CUgraphNode_st& add_node(capture_sequence& c, cudaGraphNodeType type) {
  c.graph->nodes.push_back(std::make_unique<CUgraphNode_st>());
  CUgraphNode_st& n = *c.graph->nodes.back();
  n.type = type;
  return n;
}

cudaError_t capture_status(state& g, cudaStream_t stream, bool ptds,
                           cudaStreamCaptureStatus& status, CUstream_st*& s) {
  if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
  if (s->kind == CUstream_st::kind_t::legacy) {
    for (CUstream_st* other : g.devices[static_cast<std::size_t>(s->device)].streams)
      if (other->capture != nullptr && blocking(*other)) return cudaErrorStreamCaptureImplicit;
  }
  status = s->capture == nullptr     ? cudaStreamCaptureStatusNone
           : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                     : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

}  // namespace

void capture_work(state& g, CUstream_st& s, work_fn work, cudaHostFn_t host_fn, void* host_data) {
  (void)g;
  capture_sequence& c = *s.capture;
  if (host_fn != nullptr) {
    CUgraphNode_st& n = add_node(c, cudaGraphNodeTypeHost);
    n.host_fn = host_fn;
    n.host_data = host_data;
    return;
  }
  CUgraphNode_st& n = add_node(c, work ? cudaGraphNodeTypeKernel : cudaGraphNodeTypeEmpty);
  if (work) n.work = std::make_shared<work_fn>(std::move(work));
}

cudaError_t capture_check_enqueue(state& g, CUstream_st& s) {
  if (s.capture != nullptr)
    return s.capture->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  if (s.kind == CUstream_st::kind_t::legacy && invalidate_blocking_captures(g, s.device))
    return cudaErrorStreamCaptureImplicit;
  return cudaSuccess;
}

cudaError_t capture_check_sync(state& g, CUstream_st& s) {
  if (s.capture != nullptr) {
    if (s.capture->invalidated) return cudaErrorStreamCaptureInvalidated;
    s.capture->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (s.kind == CUstream_st::kind_t::legacy && invalidate_blocking_captures(g, s.device))
    return cudaErrorStreamCaptureImplicit;
  return cudaSuccess;
}

cudaError_t capture_check_device_sync(state& g, int device) {
  bool any = false;
  for (CUstream_st* s : g.devices[static_cast<std::size_t>(device)].streams) {
    if (s->capture == nullptr) continue;
    s->capture->invalidated = true;
    any = true;
  }
  return any ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t capture_check_unsafe(state& g) {
  if (g.graphs == nullptr || g.graphs->captures.empty()) return cudaSuccess;
  const int mode = this_thread().capture_mode;
  if (mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id me = std::this_thread::get_id();
  bool prohibited = false;
  for (const auto& c : g.graphs->captures) {
    const bool mine = c->thread == me && c->mode != cudaStreamCaptureModeRelaxed;
    const bool others_global = c->thread != me && c->mode == cudaStreamCaptureModeGlobal &&
                               mode == cudaStreamCaptureModeGlobal;
    if (!mine && !others_global) continue;
    c->invalidated = true;
    prohibited = true;
  }
  return prohibited ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t capture_check_event(state& g, CUevent_st& e) {
  if (e.captured_in == 0) return cudaSuccess;
  if (capture_sequence* c = find_capture(g, e.captured_in)) c->invalidated = true;
  return cudaErrorCapturedEvent;
}

cudaError_t capture_allocate(state& g, CUstream_st& s, const CUmemPoolHandle_st& pool,
                             std::size_t bytes, void** out) {
  capture_sequence& c = *s.capture;
  if (bytes > std::numeric_limits<std::size_t>::max() / 2) return cudaErrorMemoryAllocation;
  const std::size_t footprint = round_up(std::max<std::size_t>(bytes, 1), allocation_alignment);
  device_state& d = g.devices[static_cast<std::size_t>(pool.device)];
  // The address is fixed at capture, for every instantiation and launch; memory comes at launch.
  region r;
  if (!reserve_region(d, footprint, r)) return cudaErrorMemoryAllocation;
  graph_state& gs = graphs_of(g);
  gs.allocations.push_back(std::make_unique<graph_allocation>());
  graph_allocation& a = *gs.allocations.back();
  a.ptr = r.va;
  a.size = bytes;
  a.footprint = footprint;
  a.device = d.index;
  device_allocation entry;
  entry.ptr = r.va;
  entry.size = bytes;
  entry.footprint = footprint;
  entry.device = d.index;
  entry.kind = alloc_kind::graph;
  entry.stream_id = s.id;
  entry.call = g.calls;
  entry.api = "cudaMallocAsync (graph allocation node)";
  g.device_allocs.emplace(r.va, entry);
  forget_free(g, r.va);
  add_node(c, cudaGraphNodeTypeMemAlloc).allocation = &a;
  *out = reinterpret_cast<void*>(r.va);
  return cudaSuccess;
}

cudaError_t graph_free(state& g, std::map<std::uintptr_t, device_allocation>::iterator allocation,
                       CUstream_st* s) {
  graph_allocation* a = allocation_at(g, allocation->first);
  if (a == nullptr) return cudaErrorInvalidValue;
  if (s != nullptr && s->capture != nullptr) {
    // A free node: of an allocation of this capture not yet freed in it, or of one that a
    // launched graph left live.
    bool ours = false;
    for (const auto& n : s->capture->graph->nodes) {
      if (n->allocation != a) continue;
      if (n->type == cudaGraphNodeTypeMemFree) return cudaErrorInvalidValue;  // freed twice
      ours = true;
    }
    if (!ours && !a->unfreed) return cudaErrorInvalidValue;
    if (ours) a->freed_in_graph = true;
    add_node(*s->capture, cudaGraphNodeTypeMemFree).allocation = a;
    return cudaSuccess;
  }
  // Outside a graph, only an allocation that a launch left live can be freed.
  if (!a->unfreed) return cudaErrorInvalidValue;
  a->unfreed = false;
  if (s == nullptr) {
    poison(translate(g, a->ptr, a->footprint), std::min(a->footprint, poison_limit));
    settle(g);
    return cudaSuccess;
  }
  ++a->pending_frees;
  enqueue(g, *s, [&g, a] {
    poison(translate(g, a->ptr, a->footprint), std::min(a->footprint, poison_limit));
    --a->pending_frees;
  });
  return cudaSuccess;
}

cudaError_t capture_event_record(state& g, CUstream_st& s, CUevent_st& e) {
  (void)g;
  e.captured_in = s.capture->id;
  return cudaSuccess;
}

cudaError_t capture_wait_event(state& g, CUstream_st& s, CUevent_st& e, unsigned flags,
                               bool& handled) {
  handled = s.capture != nullptr || e.captured_in != 0;
  if (!handled) return cudaSuccess;
  if (s.capture != nullptr) {
    if (s.capture->invalidated) return cudaErrorStreamCaptureInvalidated;
    if (e.generation == 0) return cudaSuccess;
    if (e.captured_in == s.capture->id) return cudaSuccess;  // nodes run in capture order
    // An event of another capture would merge the two; one recorded outside any capture would
    // make the graph depend on work that is not in it.
    const cudaError_t error = e.captured_in != 0 ? cudaErrorStreamCaptureMerge
                              : (flags & cudaEventWaitExternal) != 0
                                  ? cudaErrorStreamCaptureUnsupported  // not simulated
                                  : cudaErrorStreamCaptureIsolation;
    s.capture->invalidated = true;
    return error;
  }
  // A stream that waits for an event recorded in a capture joins that capture.
  capture_sequence* c = find_capture(g, e.captured_in);
  if (c == nullptr) return cudaErrorCapturedEvent;  // the capture has ended
  if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
  s.capture = c;
  c->streams.push_back(&s);
  return cudaSuccess;
}

void graphs_teardown(state& g) {
  delete g.graphs;
  g.graphs = nullptr;
}

void graphs_report(const state& g, std::string& out) {
  if (g.graphs == nullptr) return;
  char line[256];
  for (const auto& c : g.graphs->captures) {
    std::snprintf(line, sizeof line,
                  "stream capture %" PRIu64 " on stream id %" PRIu64 " has not ended\n", c->id,
                  c->origin->id);
    out += line;
  }
  for (const auto& p : g.graphs->graphs) {
    if (p->destroyed) continue;
    std::snprintf(line, sizeof line,
                  "graph %p (%zu nodes) created by call #%" PRIu64 " is not destroyed\n",
                  static_cast<const void*>(p.get()), p->nodes.size(), p->created_by_call);
    out += line;
  }
  for (const auto& e : g.graphs->execs) {
    if (e->destroyed) continue;
    std::snprintf(line, sizeof line,
                  "executable graph %p created by call #%" PRIu64 " is not destroyed\n",
                  static_cast<const void*>(e.get()), e->created_by_call);
    out += line;
  }
}

namespace api {

cudaError_t stream_begin_capture(cudaStream_t stream, int mode, bool ptds) {
  return call("cudaStreamBeginCapture", [&](state& g) -> cudaError_t {
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
      return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    // "Capture may not be initiated if stream is cudaStreamLegacy."
    if (s->kind == CUstream_st::kind_t::legacy) return cudaErrorStreamCaptureUnsupported;
    if (s->capture != nullptr) return cudaErrorIllegalState;
    graph_state& gs = graphs_of(g);
    auto c = std::make_unique<capture_sequence>();
    c->id = gs.next_capture_id++;
    c->origin = s;
    c->graph = std::make_unique<CUgraph_st>();
    c->graph->created_by_call = g.calls;
    c->graph->device = s->device;
    c->mode = mode;
    c->thread = std::this_thread::get_id();
    c->streams.push_back(s);
    s->capture = c.get();
    gs.captures.push_back(std::move(c));
    return cudaSuccess;
  });
}

cudaError_t stream_end_capture(cudaStream_t stream, cudaGraph_t* graph, bool ptds) {
  return call("cudaStreamEndCapture", [&](state& g) -> cudaError_t {
    if (graph == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (s->capture == nullptr) return cudaErrorIllegalState;
    capture_sequence& c = *s->capture;
    if (c.origin != s) return cudaErrorStreamCaptureUnmatched;
    if (c.mode != cudaStreamCaptureModeRelaxed && c.thread != std::this_thread::get_id())
      return cudaErrorStreamCaptureWrongThread;
    std::unique_ptr<CUgraph_st> ended = end_capture(g, c);
    if (ended == nullptr) {
      *graph = nullptr;
      return cudaErrorStreamCaptureInvalidated;
    }
    *graph = ended.get();
    graphs_of(g).graphs.push_back(std::move(ended));
    return cudaSuccess;
  });
}

cudaError_t stream_is_capturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool ptds) {
  return call("cudaStreamIsCapturing", [&](state& g) -> cudaError_t {
    if (status == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    return capture_status(g, stream, ptds, *status, s);
  });
}

cudaError_t stream_get_capture_info(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                    unsigned long long* id, cudaGraph_t* graph,
                                    const cudaGraphNode_t** dependencies, std::size_t* count,
                                    bool ptds) {
  return call("cudaStreamGetCaptureInfo", [&](state& g) -> cudaError_t {
    if (status == nullptr) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = capture_status(g, stream, ptds, *status, s); e != cudaSuccess)
      return e;
    if (*status != cudaStreamCaptureStatusActive) return cudaSuccess;
    if (id != nullptr) *id = s->capture->id;
    if (graph != nullptr) *graph = s->capture->graph.get();
    // Nodes run in capture order: the next node depends on everything before it, which the
    // simulation does not list.
    if (dependencies != nullptr) *dependencies = nullptr;
    if (count != nullptr) *count = 0;
    return cudaSuccess;
  });
}

cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream, bool ptds) {
  return call("cudaGraphLaunch", [&](state& g) -> cudaError_t {
    if (!valid_exec(g, exec)) return cudaErrorInvalidValue;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    if (s->capture != nullptr) {
      // A launch under capture would become a child graph node: not simulated.
      s->capture->invalidated = true;
      return cudaErrorStreamCaptureUnsupported;
    }
    const bool auto_free = (exec->flags & cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0;
    for (graph_allocation* a : exec->allocations)
      if (a->unfreed && !auto_free) return cudaErrorInvalidValue;
    device_state& d = g.devices[static_cast<std::size_t>(exec->device)];
    std::size_t need = 0;
    for (graph_allocation* a : exec->allocations)
      if (!a->mapped) need += a->footprint;
    const std::size_t cached = d.graph_reserved - d.graph_used;
    if (need > cached && device_free_bytes(g, d) < need - cached) return cudaErrorMemoryAllocation;
    for (graph_allocation* a : exec->allocations) {
      map_allocation(d, *a);
      a->unfreed = false;  // an automatic free, where the flag asked for one
    }
    ++exec->pending_launches;
    for (const CUgraphNode_st& n : exec->nodes) {
      switch (n.type) {
        case cudaGraphNodeTypeMemAlloc:
        case cudaGraphNodeTypeMemFree: {
          // Fresh memory holds garbage, and so does freed memory.
          graph_allocation* a = n.allocation;
          enqueue(g, *s, [&g, a] {
            poison(translate(g, a->ptr, a->footprint), std::min(a->footprint, poison_limit));
          });
          break;
        }
        case cudaGraphNodeTypeHost:
          enqueue(g, *s, {}, {}, n.host_fn, n.host_data);
          break;
        default: {
          std::shared_ptr<work_fn> w = n.work;
          if (w)
            enqueue(g, *s, [w] { (*w)(); });
          else
            enqueue(g, *s, {});
        }
      }
    }
    for (graph_allocation* a : exec->allocations)
      if (!a->freed_in_graph) a->unfreed = true;
    CUgraphExec_st* e = exec;
    enqueue(g, *s, [&g, e] {
      --e->pending_launches;
      if (e->destroyed && e->pending_launches == 0) settle(g);
    });
    return cudaSuccess;
  });
}

}  // namespace api
}  // namespace cuscope::sim::detail

using namespace cuscope::sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return api::stream_begin_capture(stream, mode, false);
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return api::stream_end_capture(stream, graph, false);
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return api::stream_is_capturing(stream, status, false);
}

#if CUDART_VERSION >= 13000
cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                               unsigned long long* id, cudaGraph_t* graph,
                                               const cudaGraphNode_t** dependencies,
                                               const cudaGraphEdgeData** edge_data, size_t* count) {
  if (edge_data != nullptr) *edge_data = nullptr;
  return api::stream_get_capture_info(stream, status, id, graph, dependencies, count, false);
}
#else
cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                               unsigned long long* id, cudaGraph_t* graph,
                                               const cudaGraphNode_t** dependencies,
                                               size_t* count) {
  return api::stream_get_capture_info(stream, status, id, graph, dependencies, count, false);
}
#endif

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  return call("cudaThreadExchangeStreamCaptureMode", [&](state&) -> cudaError_t {
    if (mode == nullptr) return cudaErrorInvalidValue;
    if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
        *mode != cudaStreamCaptureModeRelaxed)
      return cudaErrorInvalidValue;
    int& current = this_thread().capture_mode;
    const int previous = current;
    current = *mode;
    *mode = static_cast<cudaStreamCaptureMode>(previous);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return call("cudaGraphGetNodes", [&](state& g) -> cudaError_t {
    if (!valid_graph(g, graph) || count == nullptr) return cudaErrorInvalidValue;
    if (nodes != nullptr) {
      const std::size_t n = std::min(*count, graph->nodes.size());
      for (std::size_t i = 0; i < n; ++i)
        nodes[i] = graph->nodes[i].get();
      for (std::size_t i = n; i < *count; ++i)
        nodes[i] = nullptr;
    }
    *count = graph->nodes.size();
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  return call("cudaGraphNodeGetType", [&](state& g) -> cudaError_t {
    if (node == nullptr || type == nullptr || g.graphs == nullptr) return cudaErrorInvalidValue;
    for (const auto& p : g.graphs->graphs) {
      if (p->destroyed) continue;
      for (const auto& n : p->nodes)
        if (n.get() == node) {
          *type = n->type;
          return cudaSuccess;
        }
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                           unsigned long long flags) {
  return call("cudaGraphInstantiate", [&](state& g) -> cudaError_t {
    if (exec == nullptr || !valid_graph(g, graph)) return cudaErrorInvalidValue;
    const unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                     cudaGraphInstantiateFlagUpload |
                                     cudaGraphInstantiateFlagUseNodePriority;
    if ((flags & ~known) != 0) return cudaErrorInvalidValue;
    // "If graph contains any allocation or free nodes, there can be at most one executable graph
    // in existence for that graph at a time."
    if (graph->execs != 0 && graph->has_memory_nodes()) return cudaErrorInvalidValue;
    auto e = std::make_unique<CUgraphExec_st>();
    e->graph = graph;
    e->flags = flags;
    e->created_by_call = g.calls;
    e->device = graph->device;
    for (const auto& n : graph->nodes) {
      e->nodes.push_back(*n);
      if (n->type == cudaGraphNodeTypeMemAlloc) {
        e->allocations.push_back(n->allocation);
        ++n->allocation->execs;
      }
    }
    ++graph->execs;
    *exec = e.get();
    graphs_of(g).execs.push_back(std::move(e));
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return api::graph_launch(exec, stream, false);
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return call("cudaGraphExecDestroy", [&](state& g) -> cudaError_t {
    if (!valid_exec(g, exec)) return cudaErrorInvalidValue;
    exec->destroyed = true;
    if (exec->graph != nullptr) --exec->graph->execs;
    settle(g);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  return call("cudaGraphDestroy", [&](state& g) -> cudaError_t {
    if (!valid_graph(g, graph)) return cudaErrorInvalidValue;
    graph->destroyed = true;
    for (const auto& n : graph->nodes)
      if (n->type == cudaGraphNodeTypeMemAlloc) n->allocation->in_graph = false;
    for (const auto& e : g.graphs->execs)
      if (e->graph == graph) e->graph = nullptr;
    graph_state& gs = *g.graphs;
    gs.graphs.erase(std::find_if(gs.graphs.begin(), gs.graphs.end(),
                                 [&](const auto& p) { return p.get() == graph; }));
    settle(g);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType attr,
                                                     void* value) {
  return call("cudaDeviceGetGraphMemAttribute", [&](state& g) -> cudaError_t {
    device_state* d = find_device(g, device);
    if (d == nullptr) return cudaErrorInvalidDevice;
    if (value == nullptr) return cudaErrorInvalidValue;
    std::uint64_t v = 0;
    switch (attr) {
      case cudaGraphMemAttrUsedMemCurrent:
        v = d->graph_used;
        break;
      case cudaGraphMemAttrUsedMemHigh:
        v = d->graph_used_high;
        break;
      case cudaGraphMemAttrReservedMemCurrent:
        v = d->graph_reserved;
        break;
      case cudaGraphMemAttrReservedMemHigh:
        v = d->graph_reserved_high;
        break;
      default:
        return cudaErrorInvalidValue;
    }
    *static_cast<std::uint64_t*>(value) = v;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceSetGraphMemAttribute(int device, cudaGraphMemAttributeType attr,
                                                     void* value) {
  return call("cudaDeviceSetGraphMemAttribute", [&](state& g) -> cudaError_t {
    device_state* d = find_device(g, device);
    if (d == nullptr) return cudaErrorInvalidDevice;
    if (value == nullptr) return cudaErrorInvalidValue;
    // "High watermark can only be reset to zero"; the current values are read-only.
    if (*static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
    switch (attr) {
      case cudaGraphMemAttrUsedMemHigh:
        d->graph_used_high = d->graph_used;
        return cudaSuccess;
      case cudaGraphMemAttrReservedMemHigh:
        d->graph_reserved_high = d->graph_reserved;
        return cudaSuccess;
      default:
        return cudaErrorInvalidValue;
    }
  });
}

cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device) {
  return call("cudaDeviceGraphMemTrim", [&](state& g) -> cudaError_t {
    device_state* d = find_device(g, device);
    if (d == nullptr) return cudaErrorInvalidDevice;
    if (g.graphs != nullptr) {
      // "Blocks which are not in use by a graph that is either currently executing or scheduled
      // to execute are freed": live allocations and pending launches keep theirs.
      for (const auto& e : g.graphs->execs) {
        if (e->device != device || e->pending_launches != 0) continue;
        for (graph_allocation* a : e->allocations)
          if (!a->unfreed && a->pending_frees == 0) unmap_allocation(*d, *a);
      }
    }
    d->graph_reserved = d->graph_used;
    return cudaSuccess;
  });
}

}  // extern "C"
