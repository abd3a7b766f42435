// SPDX-License-Identifier: Apache-2.0
#include <cuscope/event.hpp>
#include <cuscope/stream.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "test_support.hpp"

using cuscope::event;
using cuscope::event_ref;
using cuscope::stream;
using cuscope::stream_ref;
using cuscope::test::contains;
using cuscope::test::device_guard;

// A view is trivially copyable and never takes a literal 0 or nullptr.
static_assert(std::is_trivially_copyable_v<event_ref>);
static_assert(std::is_convertible_v<cudaEvent_t, event_ref>);
static_assert(!std::is_constructible_v<event_ref, int>);
static_assert(!std::is_constructible_v<event_ref, std::nullptr_t>);
static_assert(std::is_nothrow_copy_constructible_v<event_ref>);
// An owner is move-only with noexcept moves, and gives a reference only while it lives.
static_assert(!std::is_copy_constructible_v<event>);
static_assert(!std::is_copy_assignable_v<event>);
static_assert(std::is_nothrow_move_constructible_v<event>);
static_assert(std::is_nothrow_move_assignable_v<event>);
static_assert(std::is_nothrow_destructible_v<event>);
static_assert(std::is_convertible_v<event&, event_ref>);
static_assert(!std::is_convertible_v<event, event_ref>);

namespace {

struct order_probe {
  bool first_ran = false;
  bool second_saw_first = false;
};

void run_first(void* p) {
  static_cast<order_probe*>(p)->first_ran = true;
}
void run_second(void* p) {
  auto* probe = static_cast<order_probe*>(p);
  probe->second_saw_first = probe->first_ran;
}

}  // namespace

TEST_CASE("event: record, synchronize and ready follow the work the event captured", "[event]") {
  device_guard device;
  stream s;
  event e;
  CHECK_FALSE(e.empty());
  CHECK(e.device() == 0);
  CHECK(e.ready());  // never recorded
  order_probe probe;
  REQUIRE(cudaLaunchHostFunc(s.get(), &run_first, &probe) == cudaSuccess);
  e.record(s);
  e.synchronize();
  CHECK(probe.first_ran);
  CHECK(e.ready());
  CHECK_THAT(e.ref().describe(), contains("event 0x"));
  CHECK(e.ref() == event_ref(e.get()));
}

TEST_CASE("event: a moved-from or released event is empty and refuses use", "[event]") {
  device_guard device;
  event a;
  const cudaEvent_t handle = a.get();
  event b(std::move(a));
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(b.get() == handle);
  CHECK_THROWS_WITH(a.ref(), contains("empty (moved-from or released) event"));
  CHECK_THROWS_AS(a.synchronize(), std::logic_error);
  a = std::move(b);
  CHECK(a.get() == handle);
  const cudaEvent_t raw = a.release();
  CHECK(a.empty());
  event adopted = event::adopt(raw, 0);
  CHECK(adopted.get() == handle);
  CHECK_THROWS_AS(event::adopt(nullptr, 0), std::invalid_argument);
}

TEST_CASE("event: elapsed_ms measures timing events and refuses events without timing", "[event]") {
  device_guard device;
  stream s;
  cuscope::event_options timed;
  timed.timing = true;
  const event start(timed);
  const event end(timed);
  start.record(s);
  end.record(s);
  end.synchronize();
  CHECK(cuscope::elapsed_ms(start, end) >= 0.0f);
  const event plain;
  plain.record(s);
  plain.synchronize();
  CHECK_THROWS_AS(cuscope::elapsed_ms(start, plain), cuscope::cuda_error);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("event: an event for another device is made there and leaves the current device",
          "[event]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::event_options o;
  o.device = 1;
  const event e(o);
  CHECK(e.device() == 1);
  CHECK(cuscope::current_device() == 0);
  o.device = 7;
  CHECK_THROWS_WITH(event(o), contains("device 7 is not valid"));
}

TEST_CASE("event: a negative device other than -1 is refused", "[event]") {
  device_guard device;
  cuscope::event_options o;
  o.device = -2;
  CHECK_THROWS_WITH(event(o), contains("device -2 is not valid"));
  CHECK_THROWS_AS(event(o), std::invalid_argument);
}

TEST_CASE("stream_ref: wait(event_ref) and wait(stream_ref) order the later work after the earlier",
          "[event][stream]") {
  device_guard device;
  stream first;
  stream second;
  {
    order_probe probe;
    const event e;
    REQUIRE(cudaLaunchHostFunc(first.get(), &run_first, &probe) == cudaSuccess);
    e.record(first);
    second.ref().wait(e);
    REQUIRE(cudaLaunchHostFunc(second.get(), &run_second, &probe) == cudaSuccess);
    second.synchronize();
    CHECK(probe.second_saw_first);
  }
  {
    order_probe probe;
    REQUIRE(cudaLaunchHostFunc(first.get(), &run_first, &probe) == cudaSuccess);
    second.wait(first);
    REQUIRE(cudaLaunchHostFunc(second.get(), &run_second, &probe) == cudaSuccess);
    second.synchronize();
    CHECK(probe.second_saw_first);
  }
  second.wait(stream_ref(second));  // waiting for itself is nothing to do
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("event: ready() is false on cudaErrorNotReady and clears it as the last error",
          "[event][stream][sim]") {
  device_guard device;
  stream s;
  const event e;
  // An injected fault becomes the thread's last error, as cudaErrorNotReady does on a GPU.
  cuscope::sim::fail_api("cudaEventQuery", 1, cudaErrorNotReady);
  CHECK_FALSE(e.ready());
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  cuscope::sim::fail_api("cudaStreamQuery", 1, cudaErrorNotReady);
  CHECK_FALSE(s.ready());
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK(s.ready());
}

TEST_CASE("event: a failed record or wait is a cuda_error naming the event and the stream",
          "[event][sim]") {
  device_guard device;
  stream s;
  const event e;
  cuscope::sim::fail_api("cudaEventRecord", 1, cudaErrorUnknown);
  CHECK_THROWS_WITH(e.record(s), contains("event 0x") && contains("on stream 0x"));
  cuscope::sim::fail_api("cudaStreamWaitEvent", 1, cudaErrorUnknown);
  CHECK_THROWS_WITH(s.wait(e), contains("waiting for event 0x"));
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("event: a failing cudaEventDestroy goes to the cleanup handler", "[event][sim]") {
  device_guard device;
  static int reports = 0;
  static cudaError_t status = cudaSuccess;
  reports = 0;
  const cuscope::scoped_cleanup_handler scope([](const cuscope::cleanup_error& e) noexcept {
    ++reports;
    status = e.status;
  });
  cudaEvent_t handle = nullptr;
  {
    const event e;
    handle = e.get();
    cuscope::sim::fail_api("cudaEventDestroy", 1, cudaErrorInvalidResourceHandle);
  }
  CHECK(reports == 1);
  CHECK(status == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventDestroy(handle) == cudaSuccess);
}
#endif
