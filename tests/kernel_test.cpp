// SPDX-License-Identifier: Apache-2.0
#include <cuscope/kernel.hpp>
// <cuscope/kernel.hpp> first: it compiles alone (the header check's kernel_light.cpp also checks
// that it brings no heavy standard header), and check_launch comes with <cuscope/error.hpp>.
#include <cuscope/error.hpp>
#include <string>
#include <type_traits>

#include "test_support.hpp"

using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(std::is_trivially_copyable_v<cuscope::launch_status>);
static_assert(std::is_trivially_copyable_v<cuscope::device_span<float>>);

namespace {

// A launcher as a kernel file writes it, with a failing runtime call in place of a launch that
// failed (a launch leaves its error for cudaGetLastError() in the same way).
cuscope::launch_status launch_that_fails() {
  (void)cudaSetDevice(12345);
  return CUSCOPE_LAUNCH_STATUS(scale<float, 2>);
}

}  // namespace

TEST_CASE(
    "kernel: CUSCOPE_LAUNCH_STATUS takes and clears the thread's last error and names the "
    "launch",
    "[kernel]") {
  device_guard device;
  const cuscope::launch_status s = launch_that_fails();
  CHECK_FALSE(s.ok());
  CHECK(s.status == cudaErrorInvalidDevice);
  CHECK(std::string(s.launch) == "scale<float, 2>");
  CHECK_THAT(std::string(s.file), contains("kernel_test.cpp"));
  CHECK(s.line > 0);
  CHECK(cudaGetLastError() == cudaSuccess);

  const cuscope::launch_status fine = CUSCOPE_LAUNCH_STATUS(nothing);
  CHECK(fine.ok());
  CHECK(fine.status == cudaSuccess);
}

TEST_CASE("kernel: check_launch throws cuda_error naming the launch, the error and the place",
          "[kernel]") {
  device_guard device;
  try {
    cuscope::check_launch(launch_that_fails());
    FAIL("no exception");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidDevice);
    const std::string what = e.what();
    CHECK_THAT(what, contains("kernel launch: scale<float, 2> failed with cudaErrorInvalidDevice"));
    CHECK_THAT(what, contains("kernel_test.cpp:"));
  }
  CHECK_NOTHROW(cuscope::check_launch(cuscope::launch_status{}));
  const cuscope::launch_status oom{cudaErrorMemoryAllocation, "big", "kernels.cu", 7};
  CHECK_THROWS_AS(cuscope::check_launch(oom), cuscope::out_of_memory);
}
