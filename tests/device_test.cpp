// SPDX-License-Identifier: Apache-2.0
#include <cuscope/device.hpp>
#include <stdexcept>
#include <type_traits>

#include "test_support.hpp"

using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(!std::is_copy_constructible_v<cuscope::scoped_device>);
static_assert(!std::is_copy_assignable_v<cuscope::scoped_device>);
static_assert(std::is_nothrow_destructible_v<cuscope::scoped_device>);

TEST_CASE("device: device_count and current_device describe the machine", "[device]") {
  device_guard device;
  CHECK(cuscope::device_count() == cuscope::test::device_count());
  CHECK(cuscope::current_device() == 0);
}

TEST_CASE("device: scoped_device switches and restores the current device", "[device]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  {
    cuscope::scoped_device on(1);
    CHECK(cuscope::current_device() == 1);
    {
      cuscope::scoped_device again(1);
      CHECK(cuscope::current_device() == 1);
    }
    CHECK(cuscope::current_device() == 1);
  }
  CHECK(cuscope::current_device() == 0);
}

TEST_CASE("device: scoped_device rejects a device that does not exist", "[device]") {
  device_guard device;
  CHECK_THROWS_WITH(cuscope::scoped_device(7), contains("device 7 is not valid"));
  CHECK_THROWS_AS(cuscope::scoped_device(-1), std::invalid_argument);
  CHECK(cuscope::current_device() == 0);
  CHECK(cudaGetLastError() == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("device: device_count is 0 on a machine without devices", "[device][sim]") {
  device_guard device({0});
  CHECK(cuscope::device_count() == 0);
  CHECK_THROWS_WITH(cuscope::scoped_device(0), contains("0 devices present"));
}
#endif
