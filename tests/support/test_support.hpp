// SPDX-License-Identifier: Apache-2.0
// What every test needs: a fresh device per test case and a check that nothing leaked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <exception>
#include <string>

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
  std::size_t pool_granularity_bytes = std::size_t{2} << 20;
  bool eager = false;
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
    c.mode = setup.eager ? sim::execution::eager : sim::execution::deferred;
    sim::reset(c);
#else
    (void)setup;
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
#else
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaGetLastError() == cudaSuccess);
#endif
  }

 private:
  int exceptions_;
};

/// Number of devices present (the simulated ones, or the real ones).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace cuscope::test
