// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for the control API, one test case per
// rule (docs/simulated-device.md). Rules that hold on any CUDA device also run against the real
// runtime; the simulation's own controls are tested in the simulated build only.
#include <cuda_runtime_api.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: fail_call makes the n-th call from now fail and nothing else", "[sim]") {
  device_guard device;
  cuscope::sim::fail_call(2, cudaErrorMemoryAllocation);
  int n = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 64) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  REQUIRE(cudaMalloc(&p, 64) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK_THROWS_AS(cuscope::sim::fail_call(0, cudaErrorUnknown), std::invalid_argument);
  CHECK_THROWS_AS(cuscope::sim::fail_call(1, cudaSuccess), std::invalid_argument);
}

TEST_CASE("sim: fail_api fails the nth call of one function and rejects unknown names", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cuscope::sim::fail_api("cudaMallocAsync", 2, cudaErrorMemoryAllocation);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMallocAsync(&a, 64, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  CHECK(cudaMallocAsync(&b, 64, s) == cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  CHECK(cuscope::sim::call_count("cudaMallocAsync") == 2);
  CHECK_THROWS_WITH(cuscope::sim::fail_api("cudaMallocAsyncc", 1, cudaErrorUnknown),
                    cuscope::test::contains("'cudaMallocAsyncc' is not a function"));
  cuscope::sim::fail_api("cudaStreamDestroy", 1, cudaErrorUnknown);
  cuscope::sim::clear_faults();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: call_count counts the runtime calls since the reset", "[sim]") {
  device_guard device;
  CHECK(cuscope::sim::call_count() == 0);
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  (void)cudaGetLastError();  // error queries are not counted
  CHECK(cuscope::sim::call_count() == 1);
  CHECK(cuscope::sim::call_count("cudaGetDeviceCount") == 1);
}

TEST_CASE("sim: reset names every allocation and handle still outstanding", "[sim]") {
  device_guard device;
  void* d = nullptr;
  void* h = nullptr;
  REQUIRE(cudaMalloc(&d, 1000) == cudaSuccess);
  REQUIRE(cudaMallocHost(&h, 24) == cudaSuccess);
  cudaStream_t s = make_stream();
  CHECK(cuscope::sim::outstanding_allocations() == 2);
  CHECK(cuscope::sim::outstanding_bytes() == 1024);
  const std::string report = cuscope::sim::outstanding_report();
  CHECK_THAT(report, cuscope::test::contains("1000 bytes"));
  CHECK_THAT(report, cuscope::test::contains("cudaMalloc"));
  CHECK_THAT(report, cuscope::test::contains("pinned host allocation"));
  CHECK_THAT(report, cuscope::test::contains("is not destroyed"));
  CHECK_THROWS_WITH(cuscope::sim::reset(), cuscope::test::contains("1000 bytes"));
  CHECK(cuscope::sim::outstanding_allocations() == 0);
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("sim: reset rejects an impossible configuration", "[sim]") {
  device_guard device;
  cuscope::sim::device_config c;
  c.pool_granularity_bytes = 3000;
  CHECK_THROWS_AS(cuscope::sim::reset(c), std::invalid_argument);
  c = {};
  c.total_bytes = c.context_bytes;
  CHECK_THROWS_AS(cuscope::sim::reset(c), std::invalid_argument);
}

TEST_CASE("sim: a process with no device reports cudaErrorNoDevice", "[sim]") {
  device_guard device({0});
  int n = -1;
  CHECK(cudaGetDeviceCount(&n) == cudaErrorNoDevice);
  CHECK(n == 0);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorNoDevice);
  (void)cudaGetLastError();
}

TEST_CASE("sim: the runtime can be called from several threads at once", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) ++failures;
      for (int i = 0; i < 200; ++i) {
        void* p = nullptr;
        if (cudaMallocFromPoolAsync(&p, 4096 + static_cast<std::size_t>(i), pool, s) !=
                cudaSuccess ||
            cudaMemsetAsync(p, i, 16, s) != cudaSuccess || cudaFreeAsync(p, s) != cudaSuccess)
          ++failures;
        if (i % 50 == 0 && cudaStreamSynchronize(s) != cudaSuccess) ++failures;
      }
      if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess)
        ++failures;
    });
  }
  for (std::thread& t : threads)
    t.join();
  CHECK(failures == 0);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#endif
