// SPDX-License-Identifier: Apache-2.0
// CUDA graphs with cuscope: buffers and sessions in a stream capture, graph memory in reports and
// trims, and what refuses a capture (docs/graphs.md).
#include <cuda_runtime_api.h>

#include <cuscope/batch.hpp>
#include <cuscope/graph.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/report.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"

using cuscope::capture_status;
using cuscope::device_buffer;
using cuscope::memory_pool;
using cuscope::session;
using cuscope::session_options;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

void count_call(void* p) {
  ++*static_cast<std::atomic<int>*>(p);
}

// An instantiated graph captured from stream s by body(), destroyed with it.
class captured {
 public:
  template <class Body>
  captured(cudaStream_t s, Body&& body) {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    body();
    REQUIRE(cudaStreamEndCapture(s, &graph_) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec_, graph_, 0) == cudaSuccess);
  }
  captured(const captured&) = delete;
  captured& operator=(const captured&) = delete;
  ~captured() {
    CHECK(cudaGraphExecDestroy(exec_) == cudaSuccess);
    CHECK(cudaGraphDestroy(graph_) == cudaSuccess);
  }
  void launch(cudaStream_t s) { REQUIRE(cudaGraphLaunch(exec_, s) == cudaSuccess); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

TEST_CASE(
    "graph: a loop body captured once and replayed 100 times in a session; the session reports "
    "and trims the graph memory",
    "[graph][session]") {
  device_guard device;
  memory_pool pool;
  stream s;
  cuscope::pinned_buffer<int> host(2);
  host.data()[0] = 41;
  host.data()[1] = 0;
  std::atomic<int> steps{0};
  session_options options;
  options.name = "graphs";
  options.trim_graph_memory = true;
  session_report report;
  {
    session work(pool, s, options);
    captured step(s.get(), [&] {
      // The loop body: a buffer that lives for one step, as in a training loop.
      device_buffer<int> scratch = work.make_buffer<int>(1024);
      CHECK(work.live_allocations() == 1);
      REQUIRE(cudaMemcpyAsync(scratch.data(), host.data(), sizeof(int), cudaMemcpyHostToDevice,
                              s.get()) == cudaSuccess);
      REQUIRE(cudaMemcpyAsync(host.data() + 1, scratch.data(), sizeof(int), cudaMemcpyDeviceToHost,
                              s.get()) == cudaSuccess);
      REQUIRE(cudaLaunchHostFunc(s.get(), count_call, &steps) == cudaSuccess);
    });
    CHECK(work.live_allocations() == 0);
    // The graph allocates from graph memory, not from the pool.
    CHECK(pool.stats().used_high_bytes == 0);
    for (int i = 0; i < 100; ++i)
      step.launch(s.get());
    report = work.finish();
  }
  CHECK(steps.load() == 100);
  CHECK(host.data()[1] == 41);
  CHECK_FALSE(report.leaked());
  CHECK(report.graph_trimmed);
  CHECK(report.graph_returned_bytes >= 1024 * sizeof(int));
  CHECK(report.graph_reserved_bytes == 0);
  CHECK(report.graph_used_bytes == 0);
  CHECK_THAT(report.to_string(), contains("graph memory"));
  CHECK(cuscope::graph_memory(0).reserved_bytes == 0);
}

TEST_CASE(
    "session: finish() on a capturing stream throws std::logic_error naming the session and the "
    "stream, and leaves the capture intact",
    "[graph][session]") {
  device_guard device;
  memory_pool pool;
  stream s;
  session work(pool, s, "epoch 7");
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  try {
    (void)work.finish();
    FAIL("finish() did not throw");
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, contains("session 'epoch 7'"));
    CHECK_THAT(what, contains(s.ref().describe()));
    CHECK_THAT(what, contains("capturing a CUDA graph"));
  }
  CHECK(work.finished());
  CHECK_FALSE(work.report().trimmed);
  CHECK(cuscope::stream_capture_status(s) == capture_status::active);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("graph: stream_capture_status tells none, active and invalidated apart", "[graph]") {
  device_guard device;
  stream s;
  CHECK(cuscope::stream_capture_status(s) == capture_status::none);
  CHECK_FALSE(cuscope::is_capturing(s));
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cuscope::stream_capture_status(s) == capture_status::active);
  CHECK(cuscope::is_capturing(s));
  CHECK_THROWS_AS(s.synchronize(), cuscope::cuda_error);
  CHECK(cuscope::stream_capture_status(s) == capture_status::invalidated);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s.get(), &graph) == cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  CHECK(cuscope::stream_capture_status(s) == capture_status::none);
}

TEST_CASE("batches: a capturing stream is refused with std::logic_error", "[graph][batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<int> data(64, 1);
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  try {
    (void)cuscope::batches(s, data, 16, pool);
    FAIL("batches() did not throw");
  } catch (const std::logic_error& e) {
    CHECK_THAT(std::string(e.what()), contains("capturing a CUDA graph"));
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("memory_report: shows the device's graph memory beside the pools", "[graph][report]") {
  device_guard device;
  stream s;
  cuscope::report_options no_nvml;
  no_nvml.query_nvml = false;
  {
    captured g(s.get(), [&] {
      device_buffer<char> b(s, 4096, cuscope::memory_pool_ref::device_default(0));
      REQUIRE(cudaMemsetAsync(b.data(), 0, 4096, s.get()) == cudaSuccess);
    });
    g.launch(s.get());
    s.synchronize();
    const cuscope::device_memory_report r = cuscope::memory_report(0, {}, no_nvml);
    CHECK(r.graph.reserved_bytes >= 4096);
    CHECK(r.graph.used_bytes >= 4096);
    CHECK(r.taken_bytes() == r.pool_reserved_bytes() + r.graph.reserved_bytes + r.other_bytes());
    CHECK_THAT(r.to_string(), contains("graph memory (CUDA graphs)"));
  }
  cuscope::trim_graph_memory(0);
  CHECK(cuscope::graph_memory(0).reserved_bytes == 0);
  cuscope::reset_graph_memory_peaks(0);
  CHECK_THROWS_AS(cuscope::graph_memory(cuscope::test::device_count()), std::invalid_argument);
}

namespace {

std::vector<std::string> cleanup_objects;

void record_cleanup(const cuscope::cleanup_error& e) noexcept {
  cleanup_objects.emplace_back(e.object);
}

}  // namespace

TEST_CASE(
    "session: destroyed on a capturing stream, it reports the refusal through the cleanup "
    "handler and leaves the capture intact",
    "[graph][session]") {
  device_guard device;
  memory_pool pool;
  stream s;
  cleanup_objects.clear();
  const cuscope::scoped_cleanup_handler handler(&record_cleanup);
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  { session work(pool, s, "request 3"); }
  REQUIRE(cleanup_objects.size() == 1);
  CHECK(cuscope::stream_capture_status(s) == capture_status::active);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE(
    "device_buffer: freed in a capture that did not allocate it, the failure names the capture",
    "[graph][device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  cleanup_objects.clear();
  const cuscope::scoped_cleanup_handler handler(&record_cleanup);
  std::optional<device_buffer<int>> outside(std::in_place, s, 256, pool);
  void* const memory = outside->data();
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  outside.reset();  // on a GPU this also invalidates the capture
  REQUIRE(cleanup_objects.size() == 1);
  CHECK_THAT(cleanup_objects[0], contains("freed in a stream capture that did not allocate it"));
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(s.get(), &graph) == cudaSuccess) {
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  (void)cudaGetLastError();
  // The memory was not freed: free it now, outside the capture.
  CHECK(pool.stats().used_bytes >= 256 * sizeof(int));
  CHECK(cudaFreeAsync(memory, s.get()) == cudaSuccess);
  s.synchronize();
}
