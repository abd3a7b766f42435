// SPDX-License-Identifier: Apache-2.0
#include <cuscope/device_allocation.hpp>
#include <cuscope/device_buffer.hpp>
#include <cuscope/session.hpp>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "test_support.hpp"

using cuscope::device_allocation;
using cuscope::device_buffer;
using cuscope::test::contains;
using cuscope::test::device_guard;

// The typed layer adds nothing to the untyped owner that a hand-written move could forget.
static_assert(sizeof(device_buffer<double>) == sizeof(device_allocation));
static_assert(std::is_nothrow_default_constructible_v<device_allocation>);

TEST_CASE("device_allocation: bytes from a pool, freed on its stream with the object",
          "[device_allocation]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  {
    const device_allocation a(s, 1000, pool);
    CHECK(a.get() != nullptr);
    CHECK(a.size_bytes() == 1000);
    CHECK(a.stream() == s.ref());
    CHECK(a.device() == 0);
    CHECK(a.pool() == pool.ref());
    CHECK(pool.stats().used_bytes >= 1000);
  }
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
  // Zero bytes: no memory, but the stream and pool are remembered.
  const device_allocation none(s, 0, pool);
  CHECK(none.empty());
  CHECK(none.pool() == pool.ref());
  const device_allocation moved_from;
  CHECK_FALSE(moved_from.has_pool());
  CHECK_THROWS_WITH(moved_from.pool(), contains("has no pool"));
}

TEST_CASE("device_allocation: allocate_like takes the same pool and the same session's count",
          "[device_allocation][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session work(pool, s, "counted");
  const device_buffer<int> b = work.make_buffer<int>(256);
  CHECK(work.live_bytes() == 1024);
  {
    const device_allocation more = b.allocation().allocate_like(s, 4096);
    CHECK(more.pool() == pool.ref());
    CHECK(work.live_allocations() == 2);
    CHECK(work.live_bytes() == 1024 + 4096);
  }
  CHECK(work.live_allocations() == 1);
  const device_allocation plain(s, 64, pool);  // made without the session: not counted
  CHECK(work.live_allocations() == 1);
}

TEST_CASE("device_buffer: takes over an allocation of whole elements, and refuses another",
          "[device_allocation][device_buffer]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  device_allocation odd(s, 10, pool);
  const void* p = odd.get();
  CHECK_THROWS_WITH(device_buffer<int>(std::move(odd)),
                    contains("10 bytes is not a whole number of elements of 4 bytes"));
  CHECK(odd.get() == p);  // left as it was
  device_allocation one(s, 1, pool);
  CHECK_THROWS_WITH(device_buffer<int>(std::move(one)),
                    contains("an allocation of 1 byte is not a whole number of elements of 4 "
                             "bytes"));
  device_allocation whole(s, 12, pool);
  const device_buffer<int> b(std::move(whole));
  CHECK(b.size() == 3);
  CHECK(b.data() == static_cast<const int*>(b.allocation().get()));
  CHECK(whole.empty());  // NOLINT(bugprone-use-after-move)
}
