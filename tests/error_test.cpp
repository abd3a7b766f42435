// SPDX-License-Identifier: Apache-2.0
#include <cuscope/error.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(std::is_base_of_v<std::runtime_error, cuscope::cuda_error>);
static_assert(std::is_base_of_v<std::bad_alloc, cuscope::out_of_memory>);
static_assert(std::is_nothrow_copy_constructible_v<cuscope::out_of_memory>);
static_assert(std::is_nothrow_copy_constructible_v<cuscope::cuda_error>);
static_assert(
    std::is_same_v<cuscope::cleanup_handler, void (*)(const cuscope::cleanup_error&) noexcept>);
static_assert(!std::is_copy_constructible_v<cuscope::scoped_cleanup_handler>);

namespace {

// What the recording handler saw: the strings are copied, as the handler's pointers die with it.
struct recorded_cleanup {
  std::string operation;
  std::string object;
  const void* handle = nullptr;
  cudaError_t status = cudaSuccess;
  std::string message;
  std::string file;
};
std::vector<recorded_cleanup> recorded;

void record_cleanup(const cuscope::cleanup_error& e) noexcept {
  recorded.push_back({e.operation, e.object, e.handle, e.status, e.message, e.file});
}

void other_handler(const cuscope::cleanup_error&) noexcept {}

}  // namespace

TEST_CASE("error: CUSCOPE_CUDA_TRY throws cuda_error naming the call, the error and the place",
          "[error]") {
  device_guard device;
  try {
    CUSCOPE_CUDA_TRY(cudaSetDevice(12345));
    FAIL("no exception");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidDevice);
    const std::string what = e.what();
    CHECK_THAT(what, contains("cudaSetDevice(12345)"));
    CHECK_THAT(what, contains("cudaErrorInvalidDevice"));
    CHECK_THAT(what, contains("invalid device ordinal"));
    CHECK_THAT(what, contains("error_test.cpp:"));
  }
  // The non-sticky error was cleared, so a later check is not confused by it.
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("error: CUSCOPE_CUDA_TRY reports an allocation failure as out_of_memory", "[error]") {
  device_guard device;
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  void* p = nullptr;
  try {
    CUSCOPE_CUDA_TRY(cudaMalloc(&p, total * 2));
    FAIL("no exception");
  } catch (const std::bad_alloc& e) {
    const auto* oom = dynamic_cast<const cuscope::out_of_memory*>(&e);
    REQUIRE(oom != nullptr);
    CHECK(oom->status() == cudaErrorMemoryAllocation);
    CHECK_THAT(std::string(e.what()), contains("cudaErrorMemoryAllocation"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("error: CUSCOPE_CUDA_TRY passes a successful call through", "[error]") {
  device_guard device;
  int count = 0;
  CHECK_NOTHROW([&] { CUSCOPE_CUDA_TRY(cudaGetDeviceCount(&count)); }());
  CHECK(count >= 1);
}

TEST_CASE("error: CUSCOPE_CUDA_TRY_NOTHROW returns the error and treats unloading as success",
          "[error]") {
  device_guard device;
  CHECK(CUSCOPE_CUDA_TRY_NOTHROW(cudaSetDevice(12345)) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cuscope::detail::check_nothrow(cudaErrorCudartUnloading) == cudaSuccess);
  CHECK(cuscope::detail::check_nothrow(cudaSuccess) == cudaSuccess);
  static_assert(noexcept(cuscope::detail::check_nothrow(cudaSuccess)));
}

TEST_CASE("error: out_of_memory carries the requested bytes and its message", "[error]") {
  const cuscope::out_of_memory e(1234, "cuscope: out of memory: 1234 bytes");
  CHECK(e.requested_bytes() == 1234);
  CHECK(std::string(e.what()) == "cuscope: out of memory: 1234 bytes");
  const cuscope::out_of_memory copy = e;
  CHECK(std::string(copy.what()) == e.what());
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("error: CUSCOPE_CUDA_TRY does not clear a sticky error", "[error][sim]") {
  device_guard device;
  cuscope::sim::fail_api("cudaDeviceSynchronize", 1, cudaErrorIllegalAddress);
  CHECK_THROWS_AS([] { CUSCOPE_CUDA_TRY(cudaDeviceSynchronize()); }(), cuscope::cuda_error);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  cuscope::sim::reset();
}
#endif

TEST_CASE("cleanup_handler: set, get and scoped_cleanup_handler restore the previous handler",
          "[error]") {
  CHECK(cuscope::get_cleanup_handler() == &cuscope::default_cleanup_handler);
  {
    const cuscope::scoped_cleanup_handler scope(&record_cleanup);
    CHECK(cuscope::get_cleanup_handler() == &record_cleanup);
    {
      const cuscope::scoped_cleanup_handler inner(&other_handler);
      CHECK(cuscope::get_cleanup_handler() == &other_handler);
    }
    CHECK(cuscope::get_cleanup_handler() == &record_cleanup);
  }
  CHECK(cuscope::get_cleanup_handler() == &cuscope::default_cleanup_handler);
  CHECK(cuscope::set_cleanup_handler(&other_handler) == &cuscope::default_cleanup_handler);
  // nullptr restores the default rather than leaving no handler at all.
  CHECK(cuscope::set_cleanup_handler(nullptr) == &other_handler);
  CHECK(cuscope::get_cleanup_handler() == &cuscope::default_cleanup_handler);
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE(
    "cleanup_handler: a failed cudaStreamDestroy reaches the handler with the call, the "
    "object and the status",
    "[error][sim]") {
  device_guard device;
  const cuscope::scoped_cleanup_handler scope(&record_cleanup);
  recorded.clear();
  cudaStream_t handle = nullptr;
  {
    cuscope::stream s;
    handle = s.get();
    cuscope::sim::fail_api("cudaStreamDestroy", 1, cudaErrorInvalidResourceHandle);
  }
  REQUIRE(recorded.size() == 1);
  CHECK_THAT(recorded[0].operation, contains("cudaStreamDestroy"));
  CHECK(recorded[0].object == "cuscope::stream");
  CHECK(recorded[0].handle == static_cast<const void*>(handle));
  CHECK(recorded[0].status == cudaErrorInvalidResourceHandle);
  CHECK(recorded[0].message == cudaGetErrorString(cudaErrorInvalidResourceHandle));
  CHECK_THAT(recorded[0].file, contains("stream.hpp"));
  // The non-sticky error was cleared; the stream the failed call left behind is destroyed here.
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaStreamDestroy(handle) == cudaSuccess);
}

TEST_CASE("cleanup_handler: cudaErrorCudartUnloading at cleanup counts as success",
          "[error][sim]") {
  device_guard device;
  const cuscope::scoped_cleanup_handler scope(&record_cleanup);
  recorded.clear();
  void* p = nullptr;
  {
    cuscope::pinned_buffer<int> b(16);
    p = b.data();
    cuscope::sim::fail_api("cudaFreeHost", 1, cudaErrorCudartUnloading);
  }
  CHECK(recorded.empty());
  // A runtime that unloads stays unloading, and the memory goes with the process: what a fresh
  // simulated process leaves of it is the report of the allocation never freed.
  CHECK(cudaGetLastError() == cudaErrorCudartUnloading);
  CHECK(cudaFreeHost(p) == cudaErrorCudartUnloading);
  CHECK_THROWS_WITH(cuscope::sim::reset(), contains("pinned host allocation"));
}

TEST_CASE("cleanup_handler: a session ended by its destructor reports a failed synchronization",
          "[error][sim]") {
  device_guard device;
  const cuscope::scoped_cleanup_handler scope(&record_cleanup);
  recorded.clear();
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const void* address = nullptr;
  {
    cuscope::session work(pool, stream, "reported");
    address = &work;
    cuscope::sim::fail_api("cudaStreamSynchronize", 1, cudaErrorUnknown);
  }
  REQUIRE(recorded.size() == 1);
  CHECK(recorded[0].operation == "session::finish");
  CHECK(recorded[0].object == "cuscope::session");
  CHECK(recorded[0].handle == address);
  CHECK(recorded[0].status == cudaErrorUnknown);
  CHECK_THAT(recorded[0].message, contains("cudaStreamSynchronize"));
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("cleanup_handler: a session whose on_finish throws in its destructor reports it",
          "[error][sim]") {
  device_guard device;
  const cuscope::scoped_cleanup_handler scope(&record_cleanup);
  recorded.clear();
  cuscope::memory_pool pool;
  cuscope::stream stream;
  {
    cuscope::session_options o;
    o.name = "throwing callback";
    o.on_finish = [](const cuscope::session_report&) { throw std::runtime_error("log is full"); };
    cuscope::session work(pool, stream, o);
  }
  REQUIRE(recorded.size() == 1);
  CHECK(recorded[0].status == cudaSuccess);
  CHECK(recorded[0].message == "log is full");
}
#endif
