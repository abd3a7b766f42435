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
// Built and run by benchmarks/peers/host_cost.py, on the simulated device (eager mode, -O2): under
// callgrind with --only NAME --pairs N, counting the instructions inside host_cost_<NAME>_pairs;
// and on its own, timing every function with the host clock, interleaved in rounds.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuscope/cuscope.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/sim.hpp>
#include <string>
#include <vector>

#if CUSCOPE_PEER_RMM
#  include <rmm/cuda_stream_view.hpp>
#  include <rmm/device_buffer.hpp>
#  include <rmm/mr/device/cuda_async_view_memory_resource.hpp>
#  include <rmm/mr/device/statistics_resource_adaptor.hpp>
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

// What a user of CCCL 3.0 writes to draw from a pool through cuda::mr: the least a resource can
// be. The same error check as the raw loop.
struct minimal_resource {
  cudaMemPool_t pool;
  cudaStream_t sync;

  void* allocate(std::size_t bytes, std::size_t) {
    void* p = nullptr;
    raw_check(cudaMallocFromPoolAsync(&p, bytes, pool, sync), "cudaMallocFromPoolAsync");
    raw_check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
    return p;
  }
  void deallocate(void* p, std::size_t, std::size_t) noexcept { (void)cudaFreeAsync(p, sync); }
  void* allocate_async(std::size_t bytes, std::size_t, ::cuda::stream_ref stream) {
    void* p = nullptr;
    raw_check(cudaMallocFromPoolAsync(&p, bytes, pool, stream.get()), "cudaMallocFromPoolAsync");
    return p;
  }
  void deallocate_async(void* p, std::size_t, std::size_t, ::cuda::stream_ref stream) noexcept {
    (void)cudaFreeAsync(p, stream.get());
  }
  friend bool operator==(const minimal_resource& a, const minimal_resource& b) noexcept {
    return a.pool == b.pool;
  }
  friend bool operator!=(const minimal_resource& a, const minimal_resource& b) noexcept {
    return a.pool != b.pool;
  }
  friend void get_property(const minimal_resource&, ::cuda::mr::device_accessible) noexcept {}
};

using async_ref = ::cuda::mr::async_resource_ref<::cuda::mr::device_accessible>;

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

HOST_COST_MEASURED void host_cost_pool_resource_pairs(cuscope::pool_resource& r,
                                                      ::cuda::stream_ref stream, std::size_t bytes,
                                                      std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = r.allocate_async(bytes, 256, stream);
    r.deallocate_async(p, bytes, 256, stream);
  }
}

// The same loop through a resource_ref, once per resource behind it: callgrind counts each
// function by its name.
inline __attribute__((always_inline)) void ref_pairs(async_ref r, ::cuda::stream_ref stream,
                                                     std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = r.allocate_async(bytes, 256, stream);
    r.deallocate_async(p, bytes, 256, stream);
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
};
const std::vector<function_info>& functions() {
  static const std::vector<function_info> f = {
    {"raw", "cudaMallocFromPoolAsync + cudaFreeAsync, status checked inline"},
    {"pool", "cuscope memory_pool::allocate + deallocate"},
    {"buffer", "cuscope device_buffer<std::byte>"},
    {"session", "cuscope session::make_buffer<std::byte> (counted, leak-checked)"},
    {"pool_resource", "cuscope pool_resource::allocate_async + deallocate_async"},
    {"pool_resource_ref", "cuscope pool_resource behind cuda::mr::async_resource_ref"},
    {"session_resource_ref", "cuscope pool_resource(session) behind async_resource_ref"},
    {"cccl_minimal_ref", "CCCL async_resource_ref over a minimal pool resource"},
#if CUSCOPE_PEER_RMM
    {"rmm_resource", "RMM cuda_async_view_memory_resource::allocate + deallocate"},
    {"rmm_buffer", "RMM device_buffer on cuda_async_view_memory_resource"},
    {"rmm_statistics_buffer", "RMM device_buffer through statistics_resource_adaptor"},
    {"rmm_tracking_buffer", "RMM device_buffer through tracking_resource_adaptor"},
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
  std::size_t bytes = 256;
#if CUSCOPE_PEER_RMM
  rmm::mr::cuda_async_view_memory_resource rmm_view{pool.get()};
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_async_view_memory_resource> rmm_statistics{
      &rmm_view};
  rmm::mr::tracking_resource_adaptor<rmm::mr::cuda_async_view_memory_resource> rmm_tracking{
      &rmm_view};
#endif

  void run(const std::string& f, std::size_t pairs) {
    const ::cuda::stream_ref s(stream.get());
    if (f == "raw") {
      host_cost_raw_pairs(pool.get(), stream.get(), bytes, pairs);
    } else if (f == "pool") {
      host_cost_pool_pairs(pool, stream, bytes, pairs);
    } else if (f == "buffer") {
      host_cost_buffer_pairs(pool, stream, bytes, pairs);
    } else if (f == "session") {
      host_cost_session_pairs(session, bytes, pairs);
    } else if (f == "pool_resource") {
      host_cost_pool_resource_pairs(resource, s, bytes, pairs);
    } else if (f == "pool_resource_ref") {
      host_cost_pool_resource_ref_pairs(async_ref(resource), s, bytes, pairs);
    } else if (f == "session_resource_ref") {
      host_cost_session_resource_ref_pairs(async_ref(session_resource), s, bytes, pairs);
    } else if (f == "cccl_minimal_ref") {
      host_cost_cccl_minimal_ref_pairs(async_ref(minimal), s, bytes, pairs);
#if CUSCOPE_PEER_RMM
    } else if (f == "rmm_resource") {
      host_cost_rmm_resource_pairs(rmm_view, rmm::cuda_stream_view(stream.get()), bytes, pairs);
    } else if (f == "rmm_buffer") {
      host_cost_rmm_buffer_pairs(&rmm_view, rmm::cuda_stream_view(stream.get()), bytes, pairs);
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
  }

  // Every path gave everything back: the pools hold no live allocation, the sessions no leak.
  int finish() {
    stream.synchronize();
    int failures = 0;
    if (session.finish().leaked()) ++failures;
    if (resource_session.finish().leaked()) ++failures;
    if (pool.stats().used_bytes != 0 || session_pool.stats().used_bytes != 0) ++failures;
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
                    {"--list", "print the functions (any value)"}});
  if (a.has("--list")) {
    for (const function_info& f : functions())
      std::printf("%s\t%s\n", f.name, f.what);
    return 0;
  }
  // Eager execution: every operation runs when it is enqueued, so that nothing piles up.
  cuscope::sim::device_config config;
  config.mode = cuscope::sim::execution::eager;
  cuscope::sim::reset(config);
  const std::size_t pairs = a.count("--pairs", a.quick() ? 1000 : 20000);
  fixture fx;
  // Warm-up outside the measured functions: the pools reserve their first block.
  for (cudaMemPool_t p : {fx.pool.get(), fx.session_pool.get()}) {
    void* ptr = nullptr;
    CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&ptr, fx.bytes, p, fx.stream.get()));
    CUSCOPE_BENCH_CHECK(cudaFreeAsync(ptr, fx.stream.get()));
  }
  fx.stream.synchronize();

  if (a.has("--only")) {
    const std::string only = a.get("--only", "");
    fx.run(only, pairs);
    const int rc = fx.finish();
    std::printf("ran %zu pairs through %s\n", pairs, only.c_str());
    return rc;
  }

  const std::vector<function_info>& fs = functions();
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
      fx.run(fs[f].name, pairs);
      fx.stream.synchronize();
      samples[f].push_back(cb::ns_between(start, cb::steady::now()) / static_cast<double>(pairs));
    }
  }
  cb::table t("host time per 256-byte pair on the simulated device (median ±spread), ratio to raw",
              {"function", "time per pair", "ratio"});
  const cb::summary raw = cb::summarize(samples[0]);
  for (std::size_t f = 0; f < fs.size(); ++f) {
    const cb::summary s = cb::summarize(samples[f]);
    t.add_row({fs[f].name, cb::format_ns_spread(s), cb::format_ratio(s.median / raw.median)});
    cb::json row = s.to_json();
    row.set("function", fs[f].name);
    row.set("what", fs[f].what);
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
