// SPDX-License-Identifier: Apache-2.0
// NVTX turned on, as a program built with CUSCOPE_ENABLE_NVTX=1 (or the CMake option CUSCOPE_NVTX)
// has it. Without a tool attached (Nsight Systems sets NVTX_INJECTION64_PATH) the ranges go
// nowhere; what is checked is that they compile in, need no library, and open and close.
#define CUSCOPE_ENABLE_NVTX 1

#include <cuscope/nvtx.hpp>
#include <string>
#include <utility>

#include "test_support.hpp"

static_assert(cuscope::nvtx_enabled, "this test turns NVTX on");

TEST_CASE("nvtx_range: a range is open until it ends, once", "[nvtx]") {
  cuscope::nvtx_range r(std::string("epoch 1"));
  CHECK(r.open());
  r.end();
  CHECK_FALSE(r.open());
  r.end();
  CHECK_FALSE(r.open());
}

TEST_CASE("nvtx_range: moves hand the range over", "[nvtx]") {
  cuscope::nvtx_range a("request");
  cuscope::nvtx_range b(std::move(a));
  CHECK_FALSE(a.open());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  CHECK(b.open());
  cuscope::nvtx_range c;
  CHECK_FALSE(c.open());
  c = std::move(b);
  CHECK(c.open());
  CHECK_FALSE(b.open());  // NOLINT(bugprone-use-after-move)
}
