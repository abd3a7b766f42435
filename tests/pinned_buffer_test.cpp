// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cuscope/pinned_buffer.hpp>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "test_support.hpp"

using cuscope::pinned_buffer;
using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(!std::is_copy_constructible_v<pinned_buffer<int>>);
static_assert(!std::is_copy_assignable_v<pinned_buffer<int>>);
static_assert(std::is_nothrow_move_constructible_v<pinned_buffer<int>>);
static_assert(std::is_nothrow_move_assignable_v<pinned_buffer<int>>);
static_assert(std::is_nothrow_destructible_v<pinned_buffer<int>>);

TEST_CASE("pinned_buffer: the memory is page-locked host memory", "[pinned_buffer]") {
  device_guard device;
  pinned_buffer<int> b(256);
  REQUIRE(b.data() != nullptr);
  CHECK(b.size() == 256);
  CHECK(b.size_bytes() == 1024);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, b.data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  std::iota(b.begin(), b.end(), 0);
  CHECK(b[255] == 255);
  const pinned_buffer<int>& cb = b;
  CHECK(cb[10] == 10);
  CHECK(cb.end() - cb.begin() == 256);
}

TEST_CASE("pinned_buffer: copies to the device and back through pinned memory", "[pinned_buffer]") {
  device_guard device;
  pinned_buffer<float> in(64);
  pinned_buffer<float> out(64);
  for (std::size_t i = 0; i < 64; ++i)
    in[i] = static_cast<float>(i) * 0.5f;
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* d = nullptr;
  REQUIRE(cudaMallocAsync(&d, in.size_bytes(), s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(d, in.data(), in.size_bytes(), cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(out.data(), d, out.size_bytes(), cudaMemcpyDeviceToHost, s) ==
          cudaSuccess);
  REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(std::equal(in.begin(), in.end(), out.begin()));
}

TEST_CASE("pinned_buffer: empty, moved-from, released and adopted buffers", "[pinned_buffer]") {
  device_guard device;
  pinned_buffer<int> none(0);
  CHECK(none.data() == nullptr);
  CHECK(none.empty());
  pinned_buffer<int> a(8);
  int* const p = a.data();
  pinned_buffer<int> b(std::move(a));
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(b.data() == p);
  a = std::move(b);
  CHECK(a.data() == p);
  int* raw = a.release();
  CHECK(a.empty());
  pinned_buffer<int> c = pinned_buffer<int>::adopt(raw, 8);
  CHECK(c.data() == raw);
}

TEST_CASE("pinned_buffer: a byte count that overflows is refused", "[pinned_buffer]") {
  device_guard device;
  CHECK_THROWS_WITH(pinned_buffer<double>(std::numeric_limits<std::size_t>::max() / 4),
                    contains("overflow the byte count"));
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("pinned_buffer: a failed allocation throws out_of_memory and leaves nothing behind",
          "[pinned_buffer][sim]") {
  device_guard device;
  cuscope::sim::fail_api("cudaHostAlloc", 1, cudaErrorMemoryAllocation);
  CHECK_THROWS_WITH(pinned_buffer<int>(1024), contains("4.00 KiB of page-locked host memory"));
  cuscope::sim::fail_api("cudaHostAlloc", 1, cudaErrorInvalidValue);
  CHECK_THROWS_AS(pinned_buffer<int>(1024), cuscope::cuda_error);
}
#endif
