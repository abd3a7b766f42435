// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for streams, events, execution and host
// functions, one test case per rule (docs/simulated-device.md). Rules that hold on any CUDA device
// also run against the real runtime; the simulation's own controls are tested in the simulated
// build only.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

TEST_CASE("sim: work on one stream runs in the order it was enqueued", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  trace t;
  for (int i = 0; i < 10; ++i)
    t.add(s, i);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: cudaStreamWaitEvent orders work after the event's record", "[sim]") {
  device_guard device;
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  trace t;
  t.add(a, 1);
  REQUIRE(cudaEventRecord(e, a) == cudaSuccess);
  t.add(a, 3);  // after the record: not waited for
  REQUIRE(cudaStreamWaitEvent(b, e, 0) == cudaSuccess);
  t.add(b, 2);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  const std::vector<int> seen = t.seen();
  REQUIRE(seen.size() >= 2);
  CHECK(seen[0] == 1);
  // 3 is on a after the record: on a GPU it may run before 2 or after it, and synchronizing b
  // need not wait for it. The simulated device runs only what b waits for.
  const auto two = std::find(seen.begin(), seen.end(), 2);
  CHECK(two != seen.end());
  if (cuscope::test::simulated) CHECK(seen == std::vector<int>{1, 2});
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  CHECK(t.seen().size() == 3);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
}

TEST_CASE("sim: the legacy default stream waits for blocking streams and they for it", "[sim]") {
  device_guard device;
  cudaStream_t blocking = make_stream(cudaStreamDefault);
  trace t;
  t.add(blocking, 1);
  t.add(cudaStreamLegacy, 2);
  t.add(blocking, 3);
  REQUIRE(cudaStreamSynchronize(blocking) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{1, 2, 3});
  REQUIRE(cudaStreamDestroy(blocking) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

// The per-thread variants of the runtime, as a program compiled with
// CUDA_API_PER_THREAD_DEFAULT_STREAM calls them.
extern "C" cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t, cudaHostFn_t, void*);
extern "C" cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);

TEST_CASE("sim: deferred work runs only when the host synchronizes with it", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  trace t;
  t.add(s, 1);
  CHECK(t.seen().empty());
  CHECK(cuscope::sim::pending_operations() == 1);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{1});
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: eager work runs when it is enqueued", "[sim]") {
  device_guard device({1, std::size_t{4} << 30, std::size_t{256} << 20, 2 * MiB, true});
  cudaStream_t s = make_stream();
  trace t;
  t.add(s, 1);
  CHECK(t.seen() == std::vector<int>{1});
  CHECK(cuscope::sim::pending_operations() == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a non-blocking stream is not ordered with the legacy default stream", "[sim]") {
  device_guard device;
  cudaStream_t quiet = make_stream(cudaStreamNonBlocking);
  trace t;
  t.add(quiet, 1);
  t.add(cudaStreamLegacy, 2);
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{2});
  REQUIRE(cudaStreamSynchronize(quiet) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(quiet) == cudaSuccess);
}

TEST_CASE("sim: the per-thread default stream does not wait for other blocking streams", "[sim]") {
  device_guard device;
  cudaStream_t blocking = make_stream(cudaStreamDefault);
  trace t;
  t.add(blocking, 1);
  t.marks.emplace_back(&t, 2);
  REQUIRE(cudaLaunchHostFunc_ptsz(nullptr, &trace::record, &t.marks.back()) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize_ptsz(nullptr) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{2});
  t.add(cudaStreamLegacy, 3);  // legacy: waits for both
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{2, 1, 3});
  REQUIRE(cudaStreamDestroy(blocking) == cudaSuccess);
}

TEST_CASE("sim: a host function may not call the runtime", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaError_t seen = cudaSuccess;
  REQUIRE(cudaLaunchHostFunc(
              s,
              [](void* p) {
                void* ptr = nullptr;
                *static_cast<cudaError_t*>(p) = cudaMalloc(&ptr, 16);
              },
              &seen) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(seen == cudaErrorNotPermitted);
  CHECK(cudaGetLastError() == cudaSuccess);  // the error was the runtime thread's
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a destroyed stream finishes its work and its handle becomes invalid", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  trace t;
  t.add(s, 1);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(t.seen().empty());
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{1});
}

#endif

TEST_CASE("sim: cudaStreamGetId gives each stream its own id", "[sim]") {
  device_guard device;
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  unsigned long long ia = 0;
  unsigned long long ib = 0;
  unsigned long long legacy = 0;
  REQUIRE(cudaStreamGetId(a, &ia) == cudaSuccess);
  REQUIRE(cudaStreamGetId(b, &ib) == cudaSuccess);
  REQUIRE(cudaStreamGetId(cudaStreamLegacy, &legacy) == cudaSuccess);
  CHECK(ia != ib);
  CHECK(legacy != ia);
  CHECK(cudaStreamGetId(a, nullptr) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
}

TEST_CASE("sim: elapsed time needs two completed events that record timing", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEvent_t untimed = nullptr;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&stop) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  float ms = -1;
  REQUIRE(cudaEventRecord(start, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(stop, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(untimed, s) == cudaSuccess);
  // untimed is recorded after stop: waiting for it waits for both (waiting for stop alone
  // would leave cudaEventQuery(untimed) free to answer cudaErrorNotReady on a GPU).
  REQUIRE(cudaEventSynchronize(untimed) == cudaSuccess);
  REQUIRE(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  CHECK(ms >= 0);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CHECK(cudaEventQuery(untimed) == cudaSuccess);
  REQUIRE(cudaEventDestroy(start) == cudaSuccess);
  REQUIRE(cudaEventDestroy(stop) == cudaSuccess);
  REQUIRE(cudaEventDestroy(untimed) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: cudaEventElapsedTime is not ready before both events have run", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&stop) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorInvalidResourceHandle);  // unrecorded
  (void)cudaGetLastError();
  REQUIRE(cudaEventRecord(start, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(stop, s) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  REQUIRE(cudaEventSynchronize(stop) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  REQUIRE(cudaEventDestroy(start) == cudaSuccess);
  REQUIRE(cudaEventDestroy(stop) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a query of pending work answers cudaErrorNotReady, kept as the last error",
          "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  int* p = nullptr;
  REQUIRE(cudaMallocAsync(reinterpret_cast<void**>(&p), 256, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  // Not sticky: other calls succeed and leave it, cudaPeekAtLastError reads it,
  // cudaGetLastError clears it.
  CHECK(cudaMemsetAsync(p, 0, 256, s) == cudaSuccess);
  CHECK(cudaPeekAtLastError() == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);
  // The query started the work: a later query finds it done, without a synchronization.
  CHECK(cudaEventQuery(e) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // the memset was still pending
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: in eager mode work is done when enqueued, so queries answer cudaSuccess", "[sim]") {
  cuscope::test::device_setup eager;
  eager.eager = true;
  device_guard device(eager);
  cudaStream_t s = make_stream();
  int* p = nullptr;
  REQUIRE(cudaMallocAsync(reinterpret_cast<void**>(&p), 256, s) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

#endif

namespace {

thread_local int thread_mark = 0;

struct host_function_view {
  std::thread::id thread;
  int mark = -1;
  bool got_lock = true;
  std::recursive_mutex* held = nullptr;
};

}  // namespace

TEST_CASE("sim: a host function runs on a thread of the runtime's own, not the waiting one",
          "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  host_function_view seen;
  std::recursive_mutex held;
  seen.held = &held;
  thread_mark = 1;
  REQUIRE(cudaLaunchHostFunc(
              s,
              [](void* p) {
                auto* v = static_cast<host_function_view*>(p);
                v->thread = std::this_thread::get_id();
                v->mark = thread_mark;
                // The waiting thread holds it: another thread cannot take it.
                v->got_lock = v->held->try_lock();
                if (v->got_lock) v->held->unlock();
              },
              &seen) == cudaSuccess);
  {
    const std::lock_guard<std::recursive_mutex> lock(held);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  }
  CHECK(seen.thread != std::this_thread::get_id());
  CHECK(seen.mark == 0);
  CHECK_FALSE(seen.got_lock);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: a host function may wait for a thread that calls the runtime meanwhile", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaStream_t other = make_stream();
  std::promise<void> go;
  std::shared_future<void> started = go.get_future().share();
  REQUIRE(cudaLaunchHostFunc(
              s, [](void* p) { static_cast<std::shared_future<void>*>(p)->wait(); }, &started) ==
          cudaSuccess);
  std::thread helper([&] {
    // Runs while the host function waits for it: the simulation's lock is free.
    void* p = nullptr;
    CHECK(cudaMallocAsync(&p, 256, other) == cudaSuccess);
    CHECK(cudaFreeAsync(p, other) == cudaSuccess);
    go.set_value();
  });
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  helper.join();
  REQUIRE(cudaStreamSynchronize(other) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(other) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: reset abandons a host function that does not return, and says so", "[sim]") {
  device_guard device;
  cuscope::sim::device_config c = cuscope::sim::config();
  c.host_function_timeout = std::chrono::milliseconds(50);
  cuscope::sim::reset(c);
  cudaStream_t s = make_stream();
  auto release = std::make_shared<std::promise<void>>();
  auto* blocked = new std::shared_future<void>(release->get_future().share());
  REQUIRE(cudaLaunchHostFunc(
              s,
              [](void* p) {
                auto* f = static_cast<std::shared_future<void>*>(p);
                f->wait();
                delete f;
              },
              blocked) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  try {
    cuscope::sim::reset();
    FAIL("reset did not report the host function");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("did not return within 50 ms") != std::string::npos);
  }
  release->set_value();  // its thread ends when it returns
  // The fresh process runs host functions on a new thread.
  s = make_stream();
  int ran = 0;
  REQUIRE(cudaLaunchHostFunc(
              s, [](void* p) { *static_cast<int*>(p) = 1; }, &ran) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(ran == 1);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

#endif
