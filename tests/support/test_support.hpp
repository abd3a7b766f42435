// SPDX-License-Identifier: Apache-2.0
// What every test needs: a fresh device per test case and a check that nothing leaked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include <cuscope/error.hpp>

#include "catch.hpp"

#if CUSCOPE_TEST_SIMULATED
#  include <cuscope/sim.hpp>
#endif

namespace cuscope::test {

/// True in the build linked with the simulated device.
inline constexpr bool simulated = CUSCOPE_TEST_SIMULATED != 0;

/// Devices a test asks for; ignored by the real runtime, which has what it has.
struct device_setup {
  int device_count = 1;
  std::size_t total_bytes = std::size_t{4} << 30;
  std::size_t context_bytes = std::size_t{256} << 20;
  std::size_t pool_granularity_bytes = std::size_t{32} << 20;  // the simulation's default
  bool eager = false;
  std::size_t pool_rounding_bytes = 256;  // the simulation's default
};

/// Opens a test case on a fresh device and closes it with a check that nothing is outstanding.
/// On the simulated device: a reset (deferred execution unless asked otherwise), then at the end
/// every allocation, stream, event and pool must be gone. On a GPU: the device is synchronized
/// before and after and must report no error.
class device_guard {
 public:
  explicit device_guard(const device_setup& setup = {}) : exceptions_(std::uncaught_exceptions()) {
#if CUSCOPE_TEST_SIMULATED
    sim::device_config c;
    c.device_count = setup.device_count;
    c.total_bytes = setup.total_bytes;
    c.context_bytes = setup.context_bytes;
    c.pool_granularity_bytes = setup.pool_granularity_bytes;
    c.pool_rounding_bytes = setup.pool_rounding_bytes;
    c.mode = setup.eager ? sim::execution::eager : sim::execution::deferred;
    sim::reset(c);
#else
    (void)setup;
    // A test that failed half-way may have left another pool current for cudaMallocAsync.
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    for (int d = 0; d < devices; ++d) {
      cudaMemPool_t default_pool = nullptr;
      REQUIRE(cudaDeviceGetDefaultMemPool(&default_pool, d) == cudaSuccess);
      REQUIRE(cudaDeviceSetMemPool(d, default_pool) == cudaSuccess);
    }
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    (void)cudaGetLastError();
#endif
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

  ~device_guard() {
    if (std::uncaught_exceptions() > exceptions_) return;  // the test failed already
#if CUSCOPE_TEST_SIMULATED
    sim::clear_faults();
    CHECK(sim::outstanding_report() == std::string());
    // As on a GPU (below): a test must not leave an error for the next one to find.
    CHECK(cudaGetLastError() == cudaSuccess);
#else
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaGetLastError() == cudaSuccess);
#endif
  }

 private:
  int exceptions_;
};

#if CUSCOPE_TEST_SIMULATED

/// The runtime functions cuscope calls, for fault sweeps.
inline const std::vector<const char*>& runtime_functions() {
  static const std::vector<const char*> names = {
      "cudaGetDeviceCount",
      "cudaGetDevice",
      "cudaSetDevice",
      "cudaGetDeviceProperties",
      "cudaDeviceSynchronize",
      "cudaMalloc",
      "cudaHostAlloc",
      "cudaMallocHost",
      "cudaMemGetInfo",
      "cudaMemcpy",
      "cudaMemcpyAsync",
      "cudaMemsetAsync",
      "cudaMallocAsync",
      "cudaMallocFromPoolAsync",
      "cudaMemPoolCreate",
      "cudaMemPoolSetAttribute",
      "cudaMemPoolGetAttribute",
      "cudaMemPoolTrimTo",
      "cudaDeviceGetDefaultMemPool",
      "cudaDeviceGetMemPool",
      "cudaStreamCreateWithPriority",
      "cudaStreamCreateWithFlags",
      "cudaStreamSynchronize",
      "cudaStreamQuery",
      "cudaStreamWaitEvent",
      "cudaStreamGetPriority",
      "cudaStreamGetFlags",
      "cudaLaunchHostFunc",
      "cudaEventCreateWithFlags",
      "cudaEventRecord",
      "cudaEventSynchronize",
      "cudaEventQuery",
      "cudaHostRegister",
  };
  return names;
}

/// The point in a test where a fault sweep makes one runtime call fail. A clean run counts the
/// calls the armed region makes; each faulty run fails one of them.
class fault_point {
 public:
  fault_point() = default;  // the clean run
  fault_point(std::string api, std::size_t nth, cudaError_t error)
      : api_(std::move(api)), nth_(nth), error_(error) {}

  /// Runs action with the fault armed. Returns true when action completed; when it threw, the
  /// exception must be the injected error, as cuda_error or out_of_memory.
  template <class Action>
  bool run(Action&& action) {
    arm();
    try {
      action();
      disarm();
      return true;
    } catch (const cuscope::out_of_memory& e) {
      disarm();
      CHECK(fired());
      CHECK(error_ == cudaErrorMemoryAllocation);
      CHECK(std::string(e.what()).find("out of memory") != std::string::npos);
    } catch (const cuscope::cuda_error& e) {
      disarm();
      CHECK(fired());
      CHECK(e.status() == error_);
      CHECK(std::string(e.what()).find(cudaGetErrorName(error_)) != std::string::npos);
    }
    return false;
  }

  /// Calls per runtime function in the armed region (the clean run).
  const std::map<std::string, std::size_t>& calls() const { return calls_; }

 private:
  void arm() {
    before_.clear();
    for (const char* api : runtime_functions())
      before_[api] = sim::call_count(api);
    if (!api_.empty()) sim::fail_api(api_.c_str(), nth_, error_);
  }
  void disarm() {
    sim::clear_faults();
    if (!api_.empty()) return;
    for (const char* api : runtime_functions()) {
      const std::size_t n = sim::call_count(api) - before_[api];
      if (n != 0) calls_[api] = n;
    }
  }
  bool fired() const { return sim::call_count(api_.c_str()) >= before_.at(api_) + nth_; }

  std::string api_;
  std::size_t nth_ = 0;
  cudaError_t error_ = cudaSuccess;
  std::map<std::string, std::size_t> before_;
  std::map<std::string, std::size_t> calls_;
};

/// Runs body(fault_point&) once cleanly, then once for every runtime call its armed region makes,
/// with that call failing (as cudaErrorMemoryAllocation and as cudaErrorUnknown), each time on a
/// fresh simulated device that must end with nothing outstanding. Calls that free or destroy are
/// not failed: a failed free cannot give memory back. Returns the number of faulty runs.
template <class Body>
std::size_t fault_sweep(Body body, const device_setup& setup = {}) {
  std::map<std::string, std::size_t> calls;
  {
    device_guard clean(setup);
    fault_point point;
    body(point);
    calls = point.calls();
  }
  std::size_t runs = 0;
  for (const auto& [api, count] : calls) {
    for (std::size_t nth = 1; nth <= count; ++nth) {
      for (const cudaError_t error : {cudaErrorMemoryAllocation, cudaErrorUnknown}) {
        INFO(api << " call " << nth << " of " << count << " fails with "
                 << cudaGetErrorName(error));
        device_guard faulty(setup);
        fault_point point(api, nth, error);
        body(point);
        ++runs;
      }
    }
  }
  return runs;
}

#endif

/// Number of devices present (the simulated ones, or the real ones).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

/// How far a reading of cudaMemGetInfo's free memory may stray from the one a test expects. The
/// simulated device counts exactly. A GPU's driver promises no exact figure: it counts in pages
/// and may keep memory of its own (page tables, pool bookkeeping) after a free. Other processes
/// do not count here: the gpu tests hold the device one at a time (RESOURCE_LOCK in
/// tests/CMakeLists.txt). See docs/gpu-checklist.md.
inline constexpr std::size_t driver_free_slack = simulated ? 0 : std::size_t{8} << 20;

}  // namespace cuscope::test

/// Checks a reading of the driver's free memory against the expected one: exactly on the simulated
/// device, within cuscope::test::driver_free_slack on a GPU.
#define CUSCOPE_CHECK_DRIVER_FREE(actual, expected)                                           \
  do {                                                                                        \
    const std::size_t cuscope_free_actual = (actual);                                         \
    const std::size_t cuscope_free_expected = (expected);                                     \
    INFO("driver free " << cuscope_free_actual << " B, expected " << cuscope_free_expected    \
                        << " B, slack " << ::cuscope::test::driver_free_slack << " B");       \
    CHECK(cuscope_free_actual + ::cuscope::test::driver_free_slack >= cuscope_free_expected); \
    CHECK(cuscope_free_actual <= cuscope_free_expected + ::cuscope::test::driver_free_slack); \
  } while (false)

/// Ends a test case written for n devices, saying so, on a machine with fewer (a GPU machine with
/// one device; the simulated tests ask for the devices they need). Catch2 v3 reports the test case
/// as skipped; Catch2 2.13, which has no SKIP, prints a warning.
#if defined(SKIP)
#  define CUSCOPE_TEST_NEEDS_DEVICES(n)                                                         \
    do {                                                                                        \
      if (::cuscope::test::device_count() < (n))                                                \
        SKIP("needs " << (n) << " devices, " << ::cuscope::test::device_count() << " present"); \
    } while (false)
#else
#  define CUSCOPE_TEST_NEEDS_DEVICES(n)                                                  \
    do {                                                                                 \
      if (::cuscope::test::device_count() < (n)) {                                       \
        WARN("skipped: needs " << (n) << " devices, " << ::cuscope::test::device_count() \
                               << " present");                                           \
        return;                                                                          \
      }                                                                                  \
    } while (false)
#endif
