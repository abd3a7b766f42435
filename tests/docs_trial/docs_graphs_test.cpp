// SPDX-License-Identifier: Apache-2.0
// A captured training step as docs/graphs.md shows it: a session around a CUDA graph whose
// buffers are allocation and free nodes, launched 100 times, with the graph memory reported and
// trimmed at the session's end; and the rows of its table that refuse what cannot work.
#include <cuscope/cuscope.hpp>
#include <cuscope/graph.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"

using cuscope::test::contains;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;

// The step's "kernel" on a device without kernels: a host node counting the launches.
void count_launch(void* counter) {
  static_cast<std::atomic<int>*>(counter)->fetch_add(1);
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

std::vector<cuscope::cleanup_error> cleanups;
std::vector<std::string> cleanup_objects;
void collect(const cuscope::cleanup_error& e) noexcept {
  cleanups.push_back(e);
  cleanup_objects.emplace_back(std::string(e.operation) + " | " + e.object + " | " + e.message);
}

}  // namespace

TEST_CASE("graphs: a session around a captured step launched 100 times trims the graph memory",
          "[docs][graph][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  constexpr std::size_t n = 1000;  // 4000 bytes: a graph allocation of 4096 (256-byte units)

  const cuscope::graph_memory_stats before = cuscope::graph_memory(0);
  CHECK(before.used_bytes == 0);
  CHECK(before.reserved_bytes == 0);

  cuscope::session_options o;
  o.name = "epoch";
  o.trim_graph_memory = true;
  cuscope::session epoch(pool, s, o);

  // The step's output outlives the graph: allocated before the capture, from the pool.
  auto out = epoch.make_buffer<float>(n, "output");
  std::vector<float> zeros(n, 0.0f);
  out.copy_from(s, zeros);
  const cuscope::pool_stats pool_before = pool.stats();

  std::atomic<int> launches{0};
  CHECK_FALSE(cuscope::is_capturing(s));
  CHECK(cuscope::stream_capture_status(s) == cuscope::capture_status::none);
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cuscope::is_capturing(s));
  CHECK(cuscope::stream_capture_status(s) == cuscope::capture_status::active);
  {
    auto scratch = epoch.make_buffer<float>(n);  // an allocation node
    // Nothing is enqueued for real: the pool neither reserves nor counts the graph allocation.
    CHECK(pool.stats().used_bytes == pool_before.used_bytes);
    CHECK(pool.stats().reserved_bytes == pool_before.reserved_bytes);
    REQUIRE(cudaMemsetAsync(scratch.data(), 0x3f, n * sizeof(float), s.get()) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(out.data(), scratch.data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                            s.get()) == cudaSuccess);
    REQUIRE(cudaLaunchHostFunc(s.get(), count_launch, &launches) == cudaSuccess);
  }  // a free node
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  CHECK_FALSE(cuscope::is_capturing(s));
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  CHECK(launches.load() == 0);  // captured, not run

  for (int i = 0; i < 100; ++i)
    REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(launches.load() == 100);
  const std::vector<float> back = out.to_vector(s);
  float expected = 0.0f;
  const unsigned char pattern[4] = {0x3f, 0x3f, 0x3f, 0x3f};
  std::memcpy(&expected, pattern, sizeof expected);
  CHECK(back.front() == expected);
  CHECK(back.back() == expected);

  // The graph's memory is the device's, not the pool's, and stays mapped after its free node.
  CHECK(pool.stats().used_bytes == pool_before.used_bytes);
  CHECK(pool.stats().reserved_bytes == pool_before.reserved_bytes);
  const cuscope::graph_memory_stats held = cuscope::graph_memory(0);
  CHECK(held.reserved_bytes >= 4 * KiB);
  CHECK(held.reserved_high_bytes >= held.reserved_bytes);
  CHECK(held.used_high_bytes >= 4 * KiB);
  if (cuscope::test::simulated) {
    CHECK(held.used_bytes == 4 * KiB);  // one 256-byte-rounded allocation, kept mapped
    CHECK(held.reserved_bytes == 4 * KiB);
  }

  // memory_report: a graph member and its own line, apart from "other".
  const auto mr = cuscope::memory_report(0, cuscope::named_pool{"epoch", pool});
  INFO(mr.to_string());
  CHECK(mr.graph.reserved_bytes == held.reserved_bytes);
  CHECK_THAT(mr.to_string(), contains("graph memory (CUDA graphs)"));
  CHECK(mr.other_bytes() == mr.taken_bytes() - pool.stats().reserved_bytes - held.reserved_bytes);
  cuscope::reset_graph_memory_peaks(0);  // the peaks fall to what is held now
  CHECK(cuscope::graph_memory(0).used_high_bytes == held.used_bytes);

  out = cuscope::device_buffer<float>();  // the session's buffers end before it does
  const cuscope::session_report& r = epoch.finish();
  INFO(r.to_string());
  CHECK_FALSE(r.leaked());
  CHECK(r.allocations == 2);  // the output and the graph's scratch, counted once at capture
  CHECK(r.frees == 2);
  CHECK(r.graph_trimmed);
  CHECK(r.graph_returned_bytes == held.reserved_bytes);
  // What the device's graph memory holds at the end, after that trim.
  CHECK(r.graph_used_bytes == 0);
  CHECK(r.graph_reserved_bytes == 0);
  const cuscope::graph_memory_stats after = cuscope::graph_memory(0);
  CHECK(after.reserved_bytes == 0);
  CHECK(after.used_bytes == 0);
  // The pool's side: the output's reserve went back, the graph's never was in it.
  CHECK(r.peak_used_bytes == pool_before.used_bytes);    // the output alone, as the pool rounds it
  CHECK(r.tracked_peak_bytes == 2 * n * sizeof(float));  // the session counted both
  CHECK(r.returned_bytes == pool_before.reserved_bytes);
  CHECK(pool.stats().reserved_bytes == 0);

  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("graphs: the session's budget applies to a buffer made in a capture",
          "[docs][graph][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "bounded";
  o.budget_bytes = 64 * KiB;
  cuscope::session bounded(pool, s, o);

  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  {
    auto fits = bounded.make_buffer<char>(32 * KiB);
    try {
      auto too_big = bounded.make_buffer<char>(64 * KiB);
      FAIL("a buffer over the budget in a capture was allocated");
    } catch (const cuscope::out_of_memory& e) {
      CHECK(e.status() == cudaSuccess);
      CHECK(e.requested_bytes() == 64 * KiB);
      CHECK_THAT(e.what(), contains("bounded"));
    }
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  const cuscope::session_report& r = bounded.finish();
  CHECK(r.budget_refusals == 1);
  CHECK(r.allocations == 1);
  CHECK_FALSE(r.leaked());
}

TEST_CASE("graphs: a buffer allocated in a capture and destroyed after it is freed outside",
          "[docs][graph]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session epoch(pool, s, "kept");

  cuscope::device_buffer<int> kept;
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  kept = epoch.make_buffer<int>(256);
  REQUIRE(cudaMemsetAsync(kept.data(), 0, kept.size() * sizeof(int), s.get()) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);  // allocates it
  s.synchronize();
  CHECK(cuscope::graph_memory(0).used_bytes >= 1 * KiB);
  const std::vector<int> zeros = kept.to_vector(s);
  CHECK(zeros == std::vector<int>(256, 0));
  {
    cuscope::scoped_cleanup_handler quiet(&collect);
    cleanups.clear();
    kept = cuscope::device_buffer<int>();  // cudaFreeAsync outside the graph: valid now
    CHECK(cleanups.empty());
  }
  s.synchronize();
  const cuscope::session_report& r = epoch.finish();
  CHECK_FALSE(r.leaked());
  CHECK(r.frees == 1);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("graphs: what a capture refuses, as the table says", "[docs][graph][misuse]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;

  // A buffer allocated before the capture and destroyed in it.
  auto early = cuscope::device_buffer<float>(s, 1024, pool);
  void* const early_ptr = early.data();
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  {
    cuscope::scoped_cleanup_handler quiet(&collect);
    cleanups.clear();
    cleanup_objects.clear();
    early = cuscope::device_buffer<float>();
    REQUIRE(cleanups.size() == 1);
    INFO(cleanup_objects[0]);
    CHECK_THAT(cleanup_objects[0], contains("freed in a stream capture that did not allocate it"));
  }
  // A session whose stream captures cannot finish, by finish() or by its destructor.
  {
    cuscope::scoped_cleanup_handler quiet(&collect);
    cleanups.clear();
    cleanup_objects.clear();
    cuscope::session during(pool, s, "during");
    try {
      during.finish();
      FAIL("finish() during a capture did not throw");
    } catch (const std::logic_error& e) {
      CHECK_THAT(e.what(), contains("during"));
      CHECK_THAT(e.what(), contains("cannot finish while stream " + hex(s.get()) +
                                    " is capturing a CUDA graph"));
    }
    CHECK(cuscope::is_capturing(s));  // the capture is left intact
  }
  CHECK(cuscope::is_capturing(s));
  {
    cuscope::scoped_cleanup_handler quiet(&collect);
    cleanups.clear();
    cleanup_objects.clear();
    { cuscope::session ended_by_destructor(pool, s, "destroyed"); }
    REQUIRE(cleanups.size() == 1);
    INFO(cleanup_objects[0]);
    CHECK_THAT(cleanup_objects[0], contains("destroyed"));
    CHECK_THAT(cleanup_objects[0], contains("is capturing a CUDA graph"));
    CHECK(cuscope::is_capturing(s));
  }
  // A batch range on a capturing stream.
  const std::vector<float> host(4096, 1.0f);
  try {
    auto range = cuscope::batches(s, host, 1024, pool);
    FAIL("batches() on a capturing stream did not throw");
  } catch (const std::logic_error& e) {
    CHECK_THAT(e.what(), contains("is capturing a CUDA graph"));
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);

  // The memory stayed allocated: free it as the docs say, after the capture.
  s.synchronize();
  REQUIRE(cudaFreeAsync(early_ptr, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("graphs: an allocation that fails in a capture is not retried after a trim",
          "[docs][graph][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "retrying";
  o.on_pool_full = cuscope::alloc_policy::retry_after_trim;
  cuscope::session retrying(pool, s, o);
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
#if CUSCOPE_TEST_SIMULATED
  cuscope::sim::fail_api("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  CHECK_THROWS_AS(retrying.make_buffer<float>(1024), cuscope::out_of_memory);
  // The retry would have synchronized the device and invalidated the capture.
  CHECK(cuscope::stream_capture_status(s) == cuscope::capture_status::active);
#endif
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  const cuscope::session_report& r = retrying.finish();
  CHECK(r.retries == 0);
  if (cuscope::test::simulated) CHECK(r.pool_refusals == 1);
}

TEST_CASE("graphs: synchronizing a capturing stream fails and invalidates the capture",
          "[docs][graph]") {
  cuscope::test::device_guard device;
  cuscope::stream s;
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  try {
    s.synchronize();
    FAIL("synchronizing a capturing stream succeeded");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorStreamCaptureUnsupported);
  }
  CHECK(cuscope::stream_capture_status(s) == cuscope::capture_status::invalidated);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s.get(), &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  (void)cudaGetLastError();
  CHECK(cuscope::stream_capture_status(s) == cuscope::capture_status::none);
}

TEST_CASE("graphs: a buffer allocated in a capture cannot be freed before a launch allocated it",
          "[docs][graph]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::device_buffer<int> early;
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  early = cuscope::device_buffer<int>(s, 64, pool);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  {
    cuscope::scoped_cleanup_handler quiet(&collect);
    cleanups.clear();
    cleanup_objects.clear();
    early = cuscope::device_buffer<int>();  // no launch has allocated it: CUDA refuses the free
    REQUIRE(cleanups.size() == 1);
    INFO(cleanup_objects[0]);
    CHECK(cleanups[0].status == cudaErrorInvalidValue);
    CHECK_THAT(cleanup_objects[0], contains("not yet allocated by a launch of its graph"));
  }
  (void)cudaGetLastError();
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}
