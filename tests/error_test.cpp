// SPDX-License-Identifier: Apache-2.0
#include <cuscope/error.hpp>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "test_support.hpp"

using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(std::is_base_of_v<std::runtime_error, cuscope::cuda_error>);
static_assert(std::is_base_of_v<std::bad_alloc, cuscope::out_of_memory>);
static_assert(std::is_nothrow_copy_constructible_v<cuscope::out_of_memory>);
static_assert(std::is_nothrow_copy_constructible_v<cuscope::cuda_error>);

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
