// SPDX-License-Identifier: Apache-2.0
// The host cost of a 256-byte allocate/free pair from an explicit pool, through cuscope and
// through its peers, in one program: the raw runtime API, cuscope's memory_pool, device_buffer,
// session::make_buffer and pool_resource (direct and behind CCCL's resource_ref), a minimal CCCL
// resource behind the same resource_ref, and RMM 25.04's cuda_async_view_memory_resource and
// device_buffer, alone and through the adaptors that count what a session counts
// (statistics_resource_adaptor) and record each allocation as a session's leak report does
// (tracking_resource_adaptor). RMM is compiled in only with CUSCOPE_PEER_RMM (host_cost.py
// defines it when it found or installed RMM).
//
// Then two threads at once, each with its own stream: on private pools, on one shared pool, in
// private sessions and in one shared session.
//
// Built and run by benchmarks/peers/host_cost.py, on the simulated device (eager mode, -O2), and
// linked a second time with -Wl,--wrap against the no-op runtime (noop_runtime.cpp beside this
// file) whose cudaMallocFromPoolAsync and cudaFreeAsync do almost nothing, so that the time left
// is the libraries' own: under callgrind with --only NAME --pairs N, counting the instructions
// inside host_cost_<NAME>_pairs (in every thread); and on its own, timing every function with the
// host clock, interleaved in rounds.
//
// CCCL 3.0 names the stream-ordered members allocate_async/deallocate_async and the reference
// async_resource_ref; CCCL 3.1+ names them allocate/deallocate (stream first) and resource_ref.
// The same source builds against both; RMM 25.04 needs CCCL 3.0.
// Thrust's CPP device system: thrust.hpp and RMM's thrust_allocator build with the plain C++
// compiler, and nothing here touches elements (pool memory is device memory).
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuscope/cuscope.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/sim.hpp>
#include <cuscope/thrust.hpp>
#include <string>
#include <thread>
#include <vector>

#if CCCL_VERSION >= 3001000
#  define HOST_COST_CCCL_31 1
#else
#  define HOST_COST_CCCL_31 0
#endif

#if CUSCOPE_PEER_RMM && HOST_COST_CCCL_31
#  error "host_cost_bench: RMM 25.04 builds against CCCL 3.0 only"
#endif

#if CUSCOPE_PEER_RMM
#  include <rmm/cuda_stream_view.hpp>
#  include <rmm/device_buffer.hpp>
#  include <rmm/mr/device/cuda_async_view_memory_resource.hpp>
#  include <rmm/mr/device/statistics_resource_adaptor.hpp>
#  include <rmm/mr/device/thrust_allocator_adaptor.hpp>
#  include <rmm/mr/device/tracking_resource_adaptor.hpp>
#endif

#include "bench.hpp"

#if defined(__GNUC__)
#  define HOST_COST_MEASURED __attribute__((noinline, noclone))
#else
#  define HOST_COST_MEASURED
#endif

namespace {

namespace cb = cuscope_bench;

// The raw loop's error check, inlined as a library's would be: one compare, and a cold call that
// builds the message.
[[noreturn]] __attribute__((cold, noinline)) void raw_failed(cudaError_t status, const char* what) {
  std::fprintf(stderr, "host_cost_bench: %s failed: %s\n", what, cudaGetErrorName(status));
  std::exit(1);
}

inline void raw_check(cudaError_t status, const char* what) {
  if (__builtin_expect(status != cudaSuccess, 0)) raw_failed(status, what);
}

// What a user of CCCL writes to draw from a pool through cuda::mr: the least a resource can be,
// with the members of the CCCL version it is built against. The same error check as the raw
// loop.
struct minimal_resource {
  cudaMemPool_t pool;
  cudaStream_t sync;

  void* allocate_stream(std::size_t bytes, ::cuda::stream_ref stream) {
    void* p = nullptr;
    raw_check(cudaMallocFromPoolAsync(&p, bytes, pool, stream.get()), "cudaMallocFromPoolAsync");
    return p;
  }
  void* allocate_now(std::size_t bytes) {
    void* p = allocate_stream(bytes, ::cuda::stream_ref(sync));
    raw_check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
    return p;
  }
#if HOST_COST_CCCL_31
  void* allocate_sync(std::size_t bytes, std::size_t) {
    return allocate_now(bytes);
  }
  void deallocate_sync(void* p, std::size_t, std::size_t) noexcept {
    (void)cudaFreeAsync(p, sync);
  }
  void* allocate(::cuda::stream_ref stream, std::size_t bytes, std::size_t) {
    return allocate_stream(bytes, stream);
  }
  void deallocate(::cuda::stream_ref stream, void* p, std::size_t, std::size_t) noexcept {
    (void)cudaFreeAsync(p, stream.get());
  }
#else
  void* allocate(std::size_t bytes, std::size_t) {
    return allocate_now(bytes);
  }
  void deallocate(void* p, std::size_t, std::size_t) noexcept {
    (void)cudaFreeAsync(p, sync);
  }
  void* allocate_async(std::size_t bytes, std::size_t, ::cuda::stream_ref stream) {
    return allocate_stream(bytes, stream);
  }
  void deallocate_async(void* p, std::size_t, std::size_t, ::cuda::stream_ref stream) noexcept {
    (void)cudaFreeAsync(p, stream.get());
  }
#endif
  friend bool operator==(const minimal_resource& a, const minimal_resource& b) noexcept {
    return a.pool == b.pool;
  }
  friend bool operator!=(const minimal_resource& a, const minimal_resource& b) noexcept {
    return a.pool != b.pool;
  }
  friend void get_property(const minimal_resource&, ::cuda::mr::device_accessible) noexcept {}
};

// The least a Thrust allocator over a pool can be: a pool, a stream, the raw calls and the same
// error check as the raw loop.
template <class T>
struct minimal_thrust_allocator {
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  cudaMemPool_t pool;
  cudaStream_t stream;

  pointer allocate(std::size_t n) {
    void* p = nullptr;
    raw_check(cudaMallocFromPoolAsync(&p, n * sizeof(T), pool, stream), "cudaMallocFromPoolAsync");
    return pointer(static_cast<T*>(p));
  }
  void deallocate(pointer p, std::size_t) noexcept { (void)cudaFreeAsync(p.get(), stream); }
};

#if HOST_COST_CCCL_31
using async_ref = ::cuda::mr::resource_ref<::cuda::mr::device_accessible>;

// The stream-ordered pair through a resource or a reference, in the names of this CCCL.
template <class R>
inline __attribute__((always_inline)) void* allocate_on(R& r, ::cuda::stream_ref s, std::size_t b) {
  return r.allocate(s, b, 256);
}
template <class R>
inline __attribute__((always_inline)) void deallocate_on(R& r, ::cuda::stream_ref s, void* p,
                                                         std::size_t b) {
  r.deallocate(s, p, b, 256);
}
#else
using async_ref = ::cuda::mr::async_resource_ref<::cuda::mr::device_accessible>;

template <class R>
inline __attribute__((always_inline)) void* allocate_on(R& r, ::cuda::stream_ref s, std::size_t b) {
  return r.allocate_async(b, 256, s);
}
template <class R>
inline __attribute__((always_inline)) void deallocate_on(R& r, ::cuda::stream_ref s, void* p,
                                                         std::size_t b) {
  r.deallocate_async(p, b, 256, s);
}
#endif

// The measured functions; host_cost.py finds them by name.

HOST_COST_MEASURED void host_cost_raw_pairs(cudaMemPool_t pool, cudaStream_t stream,
                                            std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = nullptr;
    raw_check(cudaMallocFromPoolAsync(&p, bytes, pool, stream), "cudaMallocFromPoolAsync");
    raw_check(cudaFreeAsync(p, stream), "cudaFreeAsync");
  }
}

HOST_COST_MEASURED void host_cost_pool_pairs(const cuscope::memory_pool& pool,
                                             cuscope::stream_ref stream, std::size_t bytes,
                                             std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = pool.allocate(stream, bytes);
    pool.deallocate(stream, p, bytes);
  }
}

HOST_COST_MEASURED void host_cost_buffer_pairs(const cuscope::memory_pool& pool,
                                               cuscope::stream_ref stream, std::size_t bytes,
                                               std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const cuscope::device_buffer<std::byte> b(stream, bytes, pool);
  }
}

HOST_COST_MEASURED void host_cost_session_pairs(cuscope::session& session, std::size_t bytes,
                                                std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto b = session.make_buffer<std::byte>(bytes);
  }
}

// Memory a session hands out by pointer (session::allocate, what its adaptors use), freed by
// pointer: once with nothing else live, once with thousands of other allocations live in the
// session (the free looks its record up by address).
inline __attribute__((always_inline)) void session_allocate_pairs(cuscope::session& session,
                                                                  cuscope::stream_ref stream,
                                                                  std::size_t bytes,
                                                                  std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = session.allocate(stream, bytes);
    session.deallocate(stream, p, bytes);
  }
}

HOST_COST_MEASURED void host_cost_session_allocate_pairs(cuscope::session& session,
                                                         cuscope::stream_ref stream,
                                                         std::size_t bytes, std::size_t pairs) {
  session_allocate_pairs(session, stream, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_session_allocate_4k_live_pairs(cuscope::session& session,
                                                                 cuscope::stream_ref stream,
                                                                 std::size_t bytes,
                                                                 std::size_t pairs) {
  session_allocate_pairs(session, stream, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_pool_resource_pairs(cuscope::pool_resource& r,
                                                      ::cuda::stream_ref stream, std::size_t bytes,
                                                      std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = allocate_on(r, stream, bytes);
    deallocate_on(r, stream, p, bytes);
  }
}

// The same loop through a resource_ref, once per resource behind it: callgrind counts each
// function by its name.
inline __attribute__((always_inline)) void ref_pairs(async_ref r, ::cuda::stream_ref stream,
                                                     std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = allocate_on(r, stream, bytes);
    deallocate_on(r, stream, p, bytes);
  }
}

HOST_COST_MEASURED void host_cost_pool_resource_ref_pairs(async_ref r, ::cuda::stream_ref stream,
                                                          std::size_t bytes, std::size_t pairs) {
  ref_pairs(r, stream, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_session_resource_ref_pairs(async_ref r, ::cuda::stream_ref stream,
                                                             std::size_t bytes, std::size_t pairs) {
  ref_pairs(r, stream, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_cccl_minimal_ref_pairs(async_ref r, ::cuda::stream_ref stream,
                                                         std::size_t bytes, std::size_t pairs) {
  ref_pairs(r, stream, bytes, pairs);
}

// A Thrust allocator's pair, once per allocator type (callgrind counts each function by its name).
template <class Allocator>
inline __attribute__((always_inline)) void thrust_pairs(Allocator& a, std::size_t bytes,
                                                        std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    auto p = a.allocate(bytes);
    a.deallocate(p, bytes);
  }
}

HOST_COST_MEASURED void host_cost_thrust_allocator_pairs(cuscope::thrust_allocator<std::byte>& a,
                                                         std::size_t bytes, std::size_t pairs) {
  thrust_pairs(a, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_thrust_minimal_pairs(minimal_thrust_allocator<std::byte>& a,
                                                       std::size_t bytes, std::size_t pairs) {
  thrust_pairs(a, bytes, pairs);
}

// What each of two threads runs, one function per configuration so that callgrind counts each by
// its name (in both threads). The raw loop on two threads shows how far the machine runs two
// threads at once at all.
HOST_COST_MEASURED void host_cost_two_raw_pairs(cudaMemPool_t pool, cudaStream_t stream,
                                                std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = nullptr;
    raw_check(cudaMallocFromPoolAsync(&p, bytes, pool, stream), "cudaMallocFromPoolAsync");
    raw_check(cudaFreeAsync(p, stream), "cudaFreeAsync");
  }
}

HOST_COST_MEASURED void host_cost_two_private_pools_pairs(const cuscope::memory_pool& pool,
                                                          cuscope::stream_ref stream,
                                                          std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const cuscope::device_buffer<std::byte> b(stream, bytes, pool);
  }
}

HOST_COST_MEASURED void host_cost_two_shared_pool_pairs(const cuscope::memory_pool& pool,
                                                        cuscope::stream_ref stream,
                                                        std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const cuscope::device_buffer<std::byte> b(stream, bytes, pool);
  }
}

HOST_COST_MEASURED void host_cost_two_private_sessions_pairs(cuscope::session& session,
                                                             cuscope::stream_ref stream,
                                                             std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto b = session.make_buffer<std::byte>(stream, bytes);
  }
}

HOST_COST_MEASURED void host_cost_two_shared_session_pairs(cuscope::session& session,
                                                           cuscope::stream_ref stream,
                                                           std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto b = session.make_buffer<std::byte>(stream, bytes);
  }
}

// Runs body(0) on this thread and body(1) on another, released together; returns the
// nanoseconds from the first start to the last end (without creating and joining the thread).
template <class Body>
double on_two_threads(Body body) {
  std::atomic<int> ready{0};
  cb::steady::time_point start[2], end[2];
  const auto run = [&](int t) {
    ready.fetch_add(1);
    while (ready.load() < 2)
      std::this_thread::yield();
    start[t] = cb::steady::now();
    body(t);
    end[t] = cb::steady::now();
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  return cb::ns_between(std::min(start[0], start[1]), std::max(end[0], end[1]));
}

#if CUSCOPE_PEER_RMM
HOST_COST_MEASURED void host_cost_rmm_resource_pairs(rmm::mr::cuda_async_view_memory_resource& mr,
                                                     rmm::cuda_stream_view stream,
                                                     std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = mr.allocate(bytes, stream);
    mr.deallocate(p, bytes, stream);
  }
}

inline __attribute__((always_inline)) void rmm_buffer_pairs(rmm::device_async_resource_ref mr,
                                                            rmm::cuda_stream_view stream,
                                                            std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const rmm::device_buffer b(bytes, stream, mr);
  }
}

HOST_COST_MEASURED void host_cost_rmm_buffer_pairs(rmm::device_async_resource_ref mr,
                                                   rmm::cuda_stream_view stream, std::size_t bytes,
                                                   std::size_t pairs) {
  rmm_buffer_pairs(mr, stream, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_rmm_thrust_allocator_pairs(
    rmm::mr::thrust_allocator<std::byte>& a, std::size_t bytes, std::size_t pairs) {
  thrust_pairs(a, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_rmm_statistics_buffer_pairs(rmm::device_async_resource_ref mr,
                                                              rmm::cuda_stream_view stream,
                                                              std::size_t bytes,
                                                              std::size_t pairs) {
  rmm_buffer_pairs(mr, stream, bytes, pairs);
}

HOST_COST_MEASURED void host_cost_rmm_tracking_buffer_pairs(rmm::device_async_resource_ref mr,
                                                            rmm::cuda_stream_view stream,
                                                            std::size_t bytes, std::size_t pairs) {
  rmm_buffer_pairs(mr, stream, bytes, pairs);
}
#endif

// name, what it measures. The order is the order of the tables.
struct function_info {
  const char* name;
  const char* what;
  int threads;
};
const std::vector<function_info>& functions() {
  static const std::vector<function_info> f = {
    {"raw", "cudaMallocFromPoolAsync + cudaFreeAsync, status checked inline", 1},
    {"pool", "cuscope memory_pool::allocate + deallocate", 1},
    {"buffer", "cuscope device_buffer<std::byte>", 1},
    {"session", "cuscope session::make_buffer<std::byte> (counted, leak-checked)", 1},
    {"session_allocate", "cuscope session::allocate + deallocate (freed by pointer)", 1},
    {"session_allocate_4k_live", "the same, with 4096 other allocations live in the session", 1},
#if HOST_COST_CCCL_31
    {"pool_resource", "cuscope pool_resource::allocate + deallocate (stream first)", 1},
    {"pool_resource_ref", "cuscope pool_resource behind cuda::mr::resource_ref", 1},
    {"session_resource_ref", "cuscope pool_resource(session) behind resource_ref", 1},
    {"cccl_minimal_ref", "CCCL resource_ref over a minimal pool resource", 1},
#else
    {"pool_resource", "cuscope pool_resource::allocate_async + deallocate_async", 1},
    {"pool_resource_ref", "cuscope pool_resource behind cuda::mr::async_resource_ref", 1},
    {"session_resource_ref", "cuscope pool_resource(session) behind async_resource_ref", 1},
    {"cccl_minimal_ref", "CCCL async_resource_ref over a minimal pool resource", 1},
#endif
    {"thrust_allocator", "cuscope thrust_allocator<std::byte>::allocate + deallocate", 1},
    {"thrust_minimal", "a minimal Thrust allocator over a pool (device_ptr, raw calls)", 1},
    {"two_raw", "2 threads, the raw loop, each on its own pool", 2},
    {"two_private_pools", "2 threads, device_buffer, each on its own memory_pool", 2},
    {"two_shared_pool", "2 threads, device_buffer, one memory_pool", 2},
    {"two_private_sessions", "2 threads, make_buffer, each in its own session", 2},
    {"two_shared_session", "2 threads, make_buffer, one session", 2},
#if CUSCOPE_PEER_RMM
    {"rmm_resource", "RMM cuda_async_view_memory_resource::allocate + deallocate", 1},
    {"rmm_buffer", "RMM device_buffer on cuda_async_view_memory_resource", 1},
    {"rmm_thrust_allocator", "RMM mr::thrust_allocator<std::byte> on the view resource", 1},
    {"rmm_statistics_buffer", "RMM device_buffer through statistics_resource_adaptor", 1},
    {"rmm_tracking_buffer", "RMM device_buffer through tracking_resource_adaptor", 1},
#endif
  };
  return f;
}

struct fixture {
  cuscope::memory_pool pool;
  cuscope::stream stream;
  cuscope::session session{pool, stream, "host cost"};
  cuscope::memory_pool session_pool;
  cuscope::session resource_session{session_pool, stream, "host cost, resource"};
  cuscope::pool_resource resource{pool};
  cuscope::pool_resource session_resource{resource_session};
  minimal_resource minimal{pool.get(), stream.get()};
  // The two threads': a stream each, a pool each, a session each on its own pool, one session.
  cuscope::stream thread_streams[2];
  cuscope::memory_pool thread_pools[2];
  cuscope::session thread_sessions[2] = {
      {thread_pools[0], thread_streams[0], "host cost, thread 0"},
      {thread_pools[1], thread_streams[1], "host cost, thread 1"}};
  cuscope::memory_pool shared_pool;
  cuscope::session shared_session{shared_pool, stream, "host cost, shared"};
  cuscope::memory_pool live_pool;
  cuscope::session live_session{live_pool, stream, "host cost, 4096 live"};
  std::vector<void*> live;  // live_session's other allocations, made on first use
  cuscope::thrust_allocator<std::byte> thrust_alloc{stream, pool};
  minimal_thrust_allocator<std::byte> thrust_minimal{pool.get(), stream.get()};
  std::size_t bytes = 256;
#if CUSCOPE_PEER_RMM
  rmm::mr::cuda_async_view_memory_resource rmm_view{pool.get()};
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_async_view_memory_resource> rmm_statistics{
      &rmm_view};
  rmm::mr::tracking_resource_adaptor<rmm::mr::cuda_async_view_memory_resource> rmm_tracking{
      &rmm_view};
  rmm::mr::thrust_allocator<std::byte> rmm_thrust{rmm::cuda_stream_view(stream.get()), &rmm_view};
#endif

  // Runs f; returns the nanoseconds it measured itself (the two-thread functions), or 0.
  double run(const std::string& f, std::size_t pairs) {
    const ::cuda::stream_ref s(stream.get());
    if (f == "raw") {
      host_cost_raw_pairs(pool.get(), stream.get(), bytes, pairs);
    } else if (f == "pool") {
      host_cost_pool_pairs(pool, stream, bytes, pairs);
    } else if (f == "buffer") {
      host_cost_buffer_pairs(pool, stream, bytes, pairs);
    } else if (f == "session") {
      host_cost_session_pairs(session, bytes, pairs);
    } else if (f == "session_allocate") {
      host_cost_session_allocate_pairs(resource_session, stream, bytes, pairs);
    } else if (f == "session_allocate_4k_live") {
      while (live.size() < 4096)
        live.push_back(live_session.allocate(stream, bytes));
      host_cost_session_allocate_4k_live_pairs(live_session, stream, bytes, pairs);
    } else if (f == "pool_resource") {
      host_cost_pool_resource_pairs(resource, s, bytes, pairs);
    } else if (f == "pool_resource_ref") {
      host_cost_pool_resource_ref_pairs(async_ref(resource), s, bytes, pairs);
    } else if (f == "session_resource_ref") {
      host_cost_session_resource_ref_pairs(async_ref(session_resource), s, bytes, pairs);
    } else if (f == "cccl_minimal_ref") {
      host_cost_cccl_minimal_ref_pairs(async_ref(minimal), s, bytes, pairs);
    } else if (f == "thrust_allocator") {
      host_cost_thrust_allocator_pairs(thrust_alloc, bytes, pairs);
    } else if (f == "thrust_minimal") {
      host_cost_thrust_minimal_pairs(thrust_minimal, bytes, pairs);
    } else if (f == "two_raw") {
      return on_two_threads([&](int t) {
        host_cost_two_raw_pairs(thread_pools[t].get(), thread_streams[t].get(), bytes, pairs);
        thread_streams[t].synchronize();
      });
    } else if (f == "two_private_pools") {
      return on_two_threads([&](int t) {
        host_cost_two_private_pools_pairs(thread_pools[t], thread_streams[t], bytes, pairs);
        thread_streams[t].synchronize();
      });
    } else if (f == "two_shared_pool") {
      return on_two_threads([&](int t) {
        host_cost_two_shared_pool_pairs(shared_pool, thread_streams[t], bytes, pairs);
        thread_streams[t].synchronize();
      });
    } else if (f == "two_private_sessions") {
      return on_two_threads([&](int t) {
        host_cost_two_private_sessions_pairs(thread_sessions[t], thread_streams[t], bytes, pairs);
        thread_streams[t].synchronize();
      });
    } else if (f == "two_shared_session") {
      return on_two_threads([&](int t) {
        host_cost_two_shared_session_pairs(shared_session, thread_streams[t], bytes, pairs);
        thread_streams[t].synchronize();
      });
#if CUSCOPE_PEER_RMM
    } else if (f == "rmm_resource") {
      host_cost_rmm_resource_pairs(rmm_view, rmm::cuda_stream_view(stream.get()), bytes, pairs);
    } else if (f == "rmm_buffer") {
      host_cost_rmm_buffer_pairs(&rmm_view, rmm::cuda_stream_view(stream.get()), bytes, pairs);
    } else if (f == "rmm_thrust_allocator") {
      host_cost_rmm_thrust_allocator_pairs(rmm_thrust, bytes, pairs);
    } else if (f == "rmm_statistics_buffer") {
      host_cost_rmm_statistics_buffer_pairs(&rmm_statistics, rmm::cuda_stream_view(stream.get()),
                                            bytes, pairs);
    } else if (f == "rmm_tracking_buffer") {
      host_cost_rmm_tracking_buffer_pairs(&rmm_tracking, rmm::cuda_stream_view(stream.get()), bytes,
                                          pairs);
#endif
    } else {
      std::fprintf(stderr, "host_cost_bench: no function %s\n", f.c_str());
      std::exit(2);
    }
    return 0;
  }

  // Every path gave everything back: the pools hold no live allocation, the sessions no leak.
  void synchronize() {
    stream.synchronize();
    for (const cuscope::stream& s : thread_streams)
      s.synchronize();
  }

  int finish() {
    for (void* p : live)
      live_session.deallocate(stream, p, bytes);
    synchronize();
    int failures = 0;
    for (cuscope::session* s : {&session, &resource_session, &thread_sessions[0],
                                &thread_sessions[1], &shared_session, &live_session})
      if (s->finish().leaked()) ++failures;
    for (const cuscope::memory_pool* p :
         {&pool, &session_pool, &thread_pools[0], &thread_pools[1], &shared_pool, &live_pool})
      if (p->stats().used_bytes != 0) ++failures;
#if CUSCOPE_PEER_RMM
    if (rmm_statistics.get_bytes_counter().value != 0) ++failures;
    if (rmm_tracking.get_allocated_bytes() != 0) ++failures;
#endif
    if (failures != 0) std::fprintf(stderr, "host_cost_bench: memory left allocated\n");
    return failures == 0 ? 0 : 1;
  }
};

int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "host_cost_bench: the host cost of an allocate/free pair through cuscope, "
                   "CCCL and RMM (run by benchmarks/peers/host_cost.py)",
                   {{"--only", "run only this function once (the callgrind mode)"},
                    {"--pairs", "pairs per call"},
                    {"--rounds", "rounds of interleaved timed calls (timing mode)"},
                    {"--functions", "time only these, comma-separated (timing mode)"},
                    {"--list", "print the functions (any value)"}});
  if (a.has("--list")) {
    for (const function_info& f : functions())
      std::printf("%s\t%d\t%s\n", f.name, f.threads, f.what);
    return 0;
  }
  // Eager execution: every operation runs when it is enqueued, so that nothing piles up.
  cuscope::sim::device_config config;
  config.mode = cuscope::sim::execution::eager;
  cuscope::sim::reset(config);
  const std::size_t pairs = a.count("--pairs", a.quick() ? 1000 : 20000);
  fixture fx;
  // Warm-up outside the measured functions: the pools reserve their first block.
  for (cudaMemPool_t p : {fx.pool.get(), fx.session_pool.get(), fx.thread_pools[0].get(),
                          fx.thread_pools[1].get(), fx.shared_pool.get()}) {
    void* ptr = nullptr;
    CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&ptr, fx.bytes, p, fx.stream.get()));
    CUSCOPE_BENCH_CHECK(cudaFreeAsync(ptr, fx.stream.get()));
  }
  fx.synchronize();

  if (a.has("--only")) {
    const std::string only = a.get("--only", "");
    fx.run(only, pairs);
    const int rc = fx.finish();
    std::printf("ran %zu pairs through %s\n", pairs, only.c_str());
    return rc;
  }

  // The functions timed: all, or those --functions names.
  std::vector<function_info> fs;
  const std::string wanted = "," + a.get("--functions", "") + ",";
  for (const function_info& f : functions())
    if (wanted == ",," || wanted.find("," + std::string(f.name) + ",") != std::string::npos)
      fs.push_back(f);
  if (fs.empty() || std::string(fs[0].name) != "raw") {
    std::fprintf(
        stderr,
        "host_cost_bench: --functions names no function, or leaves out raw (the baseline)\n");
    return 2;
  }
  const std::size_t rounds = a.count("--rounds", a.quick() ? 3 : 21);
  cb::report rep("host_cost_timing", a);
  rep.config.set("pairs", pairs);
  rep.config.set("rounds", rounds);
  rep.config.set("bytes", fx.bytes);
  for (const function_info& f : fs)
    fx.run(f.name, pairs / 10 + 1);  // warm-up
  std::vector<std::vector<double>> samples(fs.size());
  for (std::size_t r = 0; r < rounds; ++r) {
    for (const std::size_t f : cb::round_order(fs.size(), r)) {
      const auto start = cb::steady::now();
      double ns = fx.run(fs[f].name, pairs);
      fx.synchronize();
      if (ns == 0) ns = cb::ns_between(start, cb::steady::now());
      samples[f].push_back(ns / static_cast<double>(pairs));
    }
  }
  cb::table t("host time per 256-byte pair (each thread's pairs; median ±spread), ratio to raw",
              {"function", "time per pair", "ratio"});
  const cb::summary raw = cb::summarize(samples[0]);
  for (std::size_t f = 0; f < fs.size(); ++f) {
    const cb::summary s = cb::summarize(samples[f]);
    t.add_row({fs[f].name, cb::format_ns_spread(s), cb::format_ratio(s.median / raw.median)});
    cb::json row = s.to_json();
    row.set("function", fs[f].name);
    row.set("what", fs[f].what);
    row.set("threads", fs[f].threads);
    row.set("unit", "ns per pair");
    row.set("ratio_to_raw", s.median / raw.median);
    rep.results.push(std::move(row));
  }
  rep.add_table(t);
  if (fx.finish() != 0) return 1;
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("host_cost_bench", [&] { return run(argc, argv); });
}
