// SPDX-License-Identifier: Apache-2.0
// pinned_memory_pool: page-locked host memory from a pool, with memory_pool's options and
// statistics; pinned_buffer and batch staging from it; pool access from other devices.
#include <cuda_runtime_api.h>

#include <cuscope/batch.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/pinned_memory_pool.hpp>
#include <cuscope/stream.hpp>

#include <numeric>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using cuscope::access_flags;
using cuscope::memory_pool;
using cuscope::pinned_buffer;
using cuscope::pinned_memory_pool;
using cuscope::pool_options;
using cuscope::stream;
using cuscope::test::device_guard;

static_assert(!std::is_copy_constructible_v<pinned_memory_pool>);
static_assert(std::is_nothrow_move_constructible_v<pinned_memory_pool>);
static_assert(std::is_nothrow_move_assignable_v<pinned_memory_pool>);

TEST_CASE(
    "pinned_memory_pool: pinned_buffers from it are host memory with the pool's statistics, and "
    "trim gives it back",
    "[pinned_memory_pool]") {
  device_guard device;
  if (!pinned_memory_pool::supported(0)) {
    WARN("skipped: host memory pools are not supported here");
    return;
  }
  pinned_memory_pool pool;
  stream s;
  {
    pinned_buffer<int> a(s, 1024, pool);
    CHECK(a.pooled());
    std::iota(a.begin(), a.end(), 0);  // the host may use it at once
    CHECK(a[1023] == 1023);
    const cuscope::pool_stats st = pool.stats();
    CHECK(st.used_bytes >= 1024 * sizeof(int));
    CHECK(st.reserved_bytes >= st.used_bytes);
    // A copy through the device and back.
    int* d = nullptr;
    REQUIRE(cudaMallocAsync(reinterpret_cast<void**>(&d), a.size_bytes(), s.get()) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(d, a.data(), a.size_bytes(), cudaMemcpyHostToDevice, s.get()) ==
            cudaSuccess);
    pinned_buffer<int> b(s, 1024, pool);
    REQUIRE(cudaMemcpyAsync(b.data(), d, b.size_bytes(), cudaMemcpyDeviceToHost, s.get()) ==
            cudaSuccess);
    REQUIRE(cudaFreeAsync(d, s.get()) == cudaSuccess);
    s.synchronize();
    CHECK(b[0] == 0);
    CHECK(b[1023] == 1023);
  }
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
  CHECK(pool.stats().reserved_bytes > 0);  // kept: the default threshold keeps everything
  pool.trim_to(0);
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK(pool.access(0) == access_flags::read_write);
}

TEST_CASE("pinned_memory_pool: initial_bytes are reserved, and never counted as in use",
          "[pinned_memory_pool]") {
  device_guard device;
  if (!pinned_memory_pool::supported(0)) {
    WARN("skipped: host memory pools are not supported here");
    return;
  }
  pool_options o;
  o.initial_bytes = std::size_t{8} << 20;
  pinned_memory_pool pool(o);
  const cuscope::pool_stats st = pool.stats();
  CHECK(st.reserved_bytes >= o.initial_bytes);
  CHECK(st.used_bytes == 0);
  CHECK(st.used_high_bytes == 0);
  CHECK(st.reserved_high_bytes == st.reserved_bytes);
}

TEST_CASE("pinned_memory_pool: batches stage through it", "[pinned_memory_pool][batch]") {
  device_guard device;
  if (!pinned_memory_pool::supported(0)) {
    WARN("skipped: host memory pools are not supported here");
    return;
  }
  pinned_memory_pool staging;
  memory_pool pool;
  stream s;
  std::vector<int> data(4096);
  std::iota(data.begin(), data.end(), 1);
  cuscope::batch_options options;
  options.staging_pool = staging.ref();
  long long sum = 0;
  std::size_t seen = 0;
  for (auto batch : cuscope::batches(s, data, 1000, pool, options)) {
    std::vector<int> back(batch.size());
    REQUIRE(cudaMemcpyAsync(back.data(), batch.span().data(), batch.size() * sizeof(int),
                            cudaMemcpyDeviceToHost, batch.stream().get()) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(batch.stream().get()) == cudaSuccess);
    for (int v : back)
      sum += v;
    seen += batch.size();
    CHECK(staging.stats().used_bytes > 0);
  }
  CHECK(seen == data.size());
  CHECK(sum == 4096LL * 4097 / 2);
  s.synchronize();
  CHECK(staging.stats().used_bytes == 0);
}

TEST_CASE("memory_pool: access from another device, as an option and as members",
          "[memory_pool][peer]") {
  cuscope::test::device_setup two;
  two.device_count = 2;
  device_guard device(two);
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess);
  if (can == 0) {
    WARN("skipped: device 1 cannot access device 0");
    return;
  }
  pool_options o;
  o.device = 0;
  o.access_from = {1};
  memory_pool pool(o);
  CHECK(pool.access(0) == access_flags::read_write);
  CHECK(pool.access(1) == access_flags::read_write);
  pool.set_access(1, access_flags::none);
  CHECK(pool.access(1) == access_flags::none);
  pool.set_access(1, access_flags::read);
  CHECK(pool.access(1) == access_flags::read);
  CHECK_THROWS_AS(pool.set_access(7, access_flags::read), std::invalid_argument);
  memory_pool plain(pool_options{});
  CHECK(plain.access(1) == access_flags::none);
}
