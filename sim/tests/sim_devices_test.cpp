// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for devices and errors, one test case per
// rule (docs/simulated-device.md). Rules that hold on any CUDA device also run against the real
// runtime; the simulation's own controls are tested in the simulated build only.
#include <cuda_runtime_api.h>

#include <string>
#include <thread>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

TEST_CASE("sim: cudaSetDevice rejects an invalid ordinal with cudaErrorInvalidDevice", "[sim]") {
  device_guard device;
  const int n = cuscope::test::device_count();
  REQUIRE(n >= 1);
  CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
}

TEST_CASE("sim: a device supports memory pools and reports its total memory", "[sim]") {
  device_guard device;
  int pools = 0;
  REQUIRE(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0) == cudaSuccess);
  CHECK(pools == 1);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  std::size_t free = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(prop.totalGlobalMem == total);
  CHECK(free < total);
  CHECK(prop.memoryPoolsSupported == 1);
}

TEST_CASE("sim: the current device is a property of the host thread", "[sim]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  int other = -1;
  std::thread([&] { (void)cudaGetDevice(&other); }).join();
  CHECK(other == 0);
  int mine = -1;
  REQUIRE(cudaGetDevice(&mine) == cudaSuccess);
  CHECK(mine == 1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

// Errors -----------------------------------------------------------------------------------------

TEST_CASE("sim: a non-sticky error is the last error until cudaGetLastError clears it", "[sim]") {
  device_guard device;
  void* p = nullptr;
  CHECK(cudaMalloc(nullptr, 16) == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaMalloc(&p, 16) == cudaSuccess);  // success does not clear it
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
}

TEST_CASE("sim: error names and strings are those of the runtime", "[sim]") {
  CHECK(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) == "cudaErrorMemoryAllocation");
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
  CHECK(std::string(cudaGetErrorName(cudaErrorInvalidValue)) == "cudaErrorInvalidValue");
  CHECK(std::string(cudaGetErrorName(cudaSuccess)) == "cudaSuccess");
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: the last error belongs to the thread that made the call", "[sim]") {
  device_guard device;
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaGetLastError(); }).join();
  CHECK(other == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
}

TEST_CASE("sim: a sticky error fails every later call until the process is reset", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cuscope::sim::fail_api("cudaStreamSynchronize", 1, cudaErrorIllegalAddress);
  CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);      // cannot be cleared
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);  // the stream could not be destroyed
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("sim: an access to memory that is no longer reserved raises a sticky illegal address",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4096, pool, a) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 1, 4096, a) == cudaSuccess);
  // The free on b is not ordered after the memset on a: it runs first, the pool releases its
  // memory at the synchronization, and the memset then touches memory that is gone.
  REQUIRE(cudaFreeAsync(p, b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(cudaStreamSynchronize(a) == cudaErrorIllegalAddress);
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);
}

#endif
