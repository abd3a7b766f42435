// SPDX-License-Identifier: Apache-2.0
// A session's index of memory freed by pointer, when its tables cannot grow (std::nothrow new[]
// refuses): frees by pointer still find every allocation once, by a scan.
#include <algorithm>
#include <atomic>
#include <cuscope/detail/ledger.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <new>
#include <random>
#include <stdexcept>
#include <vector>

#include "test_support.hpp"

namespace {
std::atomic<bool> refuse_nothrow_arrays{false};
std::atomic<long> refused{0};
}  // namespace

void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  if (refuse_nothrow_arrays.load()) {
    refused.fetch_add(1);
    return nullptr;
  }
  try {
    return ::operator new[](n);  // freed by the usual delete[]
  } catch (...) {
    return nullptr;
  }
}

using cuscope::memory_pool;
using cuscope::session;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;

TEST_CASE("session: frees by pointer find their allocations when the index cannot grow",
          "[session]") {
  device_guard device;
  memory_pool pool;
  stream s;
  session work(pool, s, "no index");
  std::vector<void*> all;
  constexpr std::size_t n = 300;
  // The first half indexed, the second half (and the tables' growth) refused.
  for (std::size_t i = 0; i < n; ++i) {
    if (i == n / 2) refuse_nothrow_arrays.store(true);
    all.push_back(work.allocate(s, 512));
  }
  CHECK(refused.load() > 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(3));
  for (std::size_t i = 0; i < n; ++i) {
    work.deallocate(s, all[i], 512);
    if (i % 5 == 0)
      CHECK_THROWS_WITH(work.deallocate(s, all[i], 512),
                        contains("not live memory from this session's allocate()"));
    if (i == n / 2) refuse_nothrow_arrays.store(false);
  }
  CHECK(work.live_allocations() == 0);
  CHECK_FALSE(work.finish().leaked());
}
