// SPDX-License-Identifier: Apache-2.0
#include <array>
#include <cstddef>
#include <cuscope/device_buffer.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

using cuscope::alloc_policy;
using cuscope::memory_pool;
using cuscope::memory_pool_ref;
using cuscope::pool_options;
using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(!std::is_copy_constructible_v<memory_pool>);
static_assert(!std::is_copy_assignable_v<memory_pool>);
static_assert(std::is_nothrow_move_constructible_v<memory_pool>);
static_assert(std::is_nothrow_move_assignable_v<memory_pool>);
static_assert(std::is_nothrow_destructible_v<memory_pool>);
static_assert(std::is_trivially_copyable_v<memory_pool_ref>);
static_assert(!std::is_constructible_v<memory_pool_ref, std::nullptr_t, int>);
static_assert(std::is_convertible_v<const memory_pool&, memory_pool_ref>);
static_assert(!std::is_convertible_v<memory_pool, memory_pool_ref>);  // a temporary pool

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

}  // namespace

TEST_CASE("memory_pool: a new pool keeps its memory across synchronization until trimmed",
          "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  CHECK(pool.device() == 0);
  CHECK(pool.release_threshold() == pool_options::keep_all);
  cuscope::stream s;
  void* p = pool.allocate(s, 32 * MiB);
  REQUIRE(p != nullptr);
  pool.deallocate(s, p, 32 * MiB);
  s.synchronize();
  CHECK(pool.stats().reserved_bytes >= 32 * MiB);
  pool.trim_to(0);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("memory_pool: trim_to keeps at least the requested bytes", "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  void* blocks[4];
  for (void*& p : blocks)
    p = pool.allocate(s, 16 * MiB);
  for (void* p : blocks)
    pool.deallocate(s, p, 16 * MiB);
  s.synchronize();
  const std::size_t reserved = pool.stats().reserved_bytes;
  REQUIRE(reserved >= 64 * MiB);
  pool.trim_to(20 * MiB);
  const std::size_t kept = pool.stats().reserved_bytes;
  CHECK(kept >= 20 * MiB);
  CHECK(kept <= reserved);
  // Whether some of the reserve can go without going under 20 MiB depends on the size of the
  // pool's chunks, which CUDA leaves to the driver (cudaMemPoolTrimTo: "The OS allocations may
  // happen at different granularity from the user allocations").
  if (cuscope::test::simulated) CHECK(kept < reserved);
}

TEST_CASE("memory_pool: stats count used and reserved bytes and reset_peaks restarts the peaks",
          "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  void* a = pool.allocate(s, 4 * MiB);
  void* b = pool.allocate(s, 4 * MiB);
  cuscope::pool_stats st = pool.stats();
  CHECK(st.used_bytes == 8 * MiB);
  CHECK(st.reserved_bytes >= 8 * MiB);
  pool.deallocate(s, b, 4 * MiB);
  st = pool.stats();
  CHECK(st.used_bytes == 4 * MiB);
  CHECK(st.used_high_bytes == 8 * MiB);
  pool.reset_peaks();
  st = pool.stats();
  CHECK(st.used_high_bytes == 4 * MiB);
  CHECK(st.reserved_high_bytes == st.reserved_bytes);
  pool.deallocate(s, a, 4 * MiB);
  s.synchronize();
}

TEST_CASE("memory_pool: the release threshold decides what a synchronization gives back",
          "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.release_threshold_bytes = 0;
  memory_pool pool(o);
  CHECK(pool.release_threshold() == 0);
  cuscope::stream s;
  pool.deallocate(s, pool.allocate(s, 8 * MiB), 8 * MiB);
  s.synchronize();
  CHECK(pool.stats().reserved_bytes == 0);
  pool.set_release_threshold(64 * MiB);
  CHECK(pool.release_threshold() == 64 * MiB);
  pool.deallocate(s, pool.allocate(s, 8 * MiB), 8 * MiB);
  s.synchronize();
  CHECK(pool.stats().reserved_bytes >= 8 * MiB);
}

TEST_CASE("memory_pool: initial_bytes are reserved at construction", "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.initial_bytes = 64 * MiB;
  memory_pool pool(o);
  const cuscope::pool_stats st = pool.stats();
  CHECK(st.reserved_bytes >= 64 * MiB);
  CHECK(st.used_bytes == 0);
  // The reserve was never in use: the peaks start from the pool as it is.
  CHECK(st.used_high_bytes == 0);
  CHECK(st.reserved_high_bytes == st.reserved_bytes);
}

TEST_CASE("memory_pool: the reuse policy is set and read back", "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.reuse.allow_internal_dependencies = false;
  memory_pool pool(o);
  cuscope::reuse_policy r = pool.reuse();
  CHECK(r.follow_event_dependencies);
  CHECK(r.allow_opportunistic);
  CHECK_FALSE(r.allow_internal_dependencies);
  r.allow_opportunistic = false;
  pool.set_reuse(r);
  CHECK_FALSE(pool.reuse().allow_opportunistic);
}

TEST_CASE("memory_pool: inconsistent options and invalid devices are refused", "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.initial_bytes = 64 * MiB;
  o.release_threshold_bytes = 32 * MiB;
  CHECK_THROWS_WITH(memory_pool(o), contains("exceeds release_threshold_bytes"));
#if CUSCOPE_HAS_POOL_MAX_SIZE
  o.release_threshold_bytes = pool_options::keep_all;
  o.max_bytes = 16 * MiB;
  CHECK_THROWS_WITH(memory_pool(o), contains("exceeds max_bytes"));
#endif
  pool_options bad;
  bad.device = 5;
  CHECK_THROWS_WITH(memory_pool(bad), contains("device 5 is not valid"));
  CHECK_THROWS_AS(memory_pool(bad), std::invalid_argument);
  bad.device = -7;  // only -1 means the current device
  CHECK_THROWS_WITH(memory_pool(bad), contains("device -7 is not valid"));
  CHECK_THROWS_AS(memory_pool(bad), std::invalid_argument);
}

#if CUSCOPE_HAS_POOL_MAX_SIZE
TEST_CASE("memory_pool: max_bytes is a hard limit and the failure explains the pool",
          "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.max_bytes = 64 * MiB;
  memory_pool pool(o);
  CHECK(pool.max_bytes() == 64 * MiB);
  cuscope::stream s;
  void* a = pool.allocate(s, 48 * MiB);
  try {
    (void)pool.allocate(s, 32 * MiB);
    FAIL("no exception");
  } catch (const cuscope::out_of_memory& e) {
    CHECK(e.requested_bytes() == 32 * MiB);
    const std::string what = e.what();
    CHECK_THAT(what, contains("32.00 MiB"));
    CHECK_THAT(what, contains("on device 0"));
    CHECK_THAT(what, contains("48.00 MiB in use"));
    CHECK_THAT(what, contains("limit of 64.00 MiB"));
    CHECK_THAT(what, contains("free of"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK_THROWS_WITH((void)pool.allocate(s, 128 * MiB), contains("less than the request"));
  pool.deallocate(s, a, 48 * MiB);
  s.synchronize();
}

TEST_CASE("memory_pool: max_bytes() is the limit the driver enforces, at least the one asked",
          "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.max_bytes = 8 * MiB;
  memory_pool pool(o);
  CHECK(pool.max_bytes() >= 8 * MiB);
  cuscope::stream s;
  if (cuscope::test::simulated) {
    // The simulated driver rounds the limit up to its 32 MiB units and says so, as CUDA 13.2
    // drivers do: 16 MiB fits, and the message names the limit in force.
    CHECK(pool.max_bytes() == 32 * MiB);
    void* p = pool.allocate(s, 16 * MiB);
    CHECK_THROWS_WITH((void)pool.allocate(s, 20 * MiB), contains("limit of 32.00 MiB"));
    pool.deallocate(s, p, 16 * MiB);
  }
  s.synchronize();
}

#  if CUSCOPE_TEST_SIMULATED
// The block layout is the simulated driver's (docs/simulated-device.md, "Chunks").
TEST_CASE(
    "memory_pool: a request within the limit by its bytes that the pool's blocks refuse says so",
    "[memory_pool][sim]") {
  device_guard device;
  pool_options o;
  o.max_bytes = 64 * MiB;
  memory_pool pool(o);
  cuscope::stream s;
  // Two blocks of 32 MiB, 12 MiB free in each: 16 MiB fits the limit by bytes, not in a block.
  void* a = pool.allocate(s, 20 * MiB);
  void* b = pool.allocate(s, 20 * MiB);
  CHECK(pool.stats().reserved_bytes == 64 * MiB);
  try {
    (void)pool.allocate(s, 16 * MiB);
    FAIL("no exception");
  } catch (const cuscope::out_of_memory& e) {
    const std::string what = e.what();
    CHECK_THAT(what, contains("40.00 MiB in use"));
    CHECK_THAT(what, contains("fits the limit by its bytes, but a pool reserves memory in blocks"));
  }
  // Beyond the limit by bytes: no such note.
  try {
    (void)pool.allocate(s, 30 * MiB);
    FAIL("no exception");
  } catch (const cuscope::out_of_memory& e) {
    CHECK_THAT(std::string(e.what()), !contains("by its bytes"));
  }
  pool.deallocate(s, a, 20 * MiB);
  pool.deallocate(s, b, 20 * MiB);
  s.synchronize();
}
#  endif

TEST_CASE("memory_pool: retry_after_trim recovers memory freed on another stream",
          "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.max_bytes = 64 * MiB;
  // No cross-stream reuse before the free has run: only a synchronization frees the memory.
  o.reuse = {false, true, false};
  SECTION("without the retry the allocation fails") {
    memory_pool pool(o);
    cuscope::stream a;
    cuscope::stream b;
    pool.deallocate(a, pool.allocate(a, 48 * MiB), 48 * MiB);
    void* p = nullptr;
    if (cuscope::test::simulated) {
      CHECK_THROWS_AS(p = pool.allocate(b, 48 * MiB), cuscope::out_of_memory);
    }
    a.synchronize();
    if (p != nullptr) pool.deallocate(b, p, 48 * MiB);
    b.synchronize();
  }
  SECTION("with it the allocation succeeds") {
    memory_pool pool(o);
    cuscope::stream a;
    cuscope::stream b;
    pool.deallocate(a, pool.allocate(a, 48 * MiB), 48 * MiB);
    void* p = pool.allocate(b, 48 * MiB, alloc_policy::retry_after_trim);
    CHECK(p != nullptr);
    pool.deallocate(b, p, 48 * MiB);
    b.synchronize();
  }
  SECTION("a reference, a buffer and a session retry when asked") {
    memory_pool pool(o);
    cuscope::stream a;
    cuscope::stream b;
    // Each request follows a free of 48 MiB still pending on the other stream.
    const memory_pool_ref r = pool;
    r.deallocate(a, r.allocate(a, 48 * MiB), 48 * MiB);
    void* p = r.allocate(b, 48 * MiB, alloc_policy::retry_after_trim);
    CHECK(p != nullptr);
    r.deallocate(b, p, 48 * MiB);
    {
      const cuscope::device_buffer<std::byte> buf(a, 48 * MiB, r, alloc_policy::retry_after_trim);
      CHECK(buf.size() == 48 * MiB);
    }
    cuscope::session_options so;
    so.on_pool_full = alloc_policy::retry_after_trim;
    so.streams = {a};
    cuscope::session s(pool, b, so);
    { const auto on_b = s.make_buffer<std::byte>(48 * MiB); }
    { const auto on_a = s.make_buffer<std::byte>(a, 48 * MiB); }
    CHECK(s.finish().leaked_allocations == 0);
    if (cuscope::test::simulated) {
      so.on_pool_full = alloc_policy::fail_fast;
      cuscope::session t(pool, b, so);
      { const auto on_b = t.make_buffer<std::byte>(48 * MiB); }
      CHECK_THROWS_AS((void)t.make_buffer<std::byte>(a, 48 * MiB), cuscope::out_of_memory);
    }
  }
}
#endif

TEST_CASE("memory_pool: out_of_memory from the device says what the device had free",
          "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  try {
    (void)pool.allocate(s, total + 64 * MiB);
    FAIL("no exception");
  } catch (const std::bad_alloc& e) {
    const std::string what = e.what();
    CHECK_THAT(what, contains("requested from pool 0x"));
    CHECK_THAT(what, contains("the device has"));
  }
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("memory_pool: zero bytes allocate nothing and a null pointer frees nothing",
          "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  CHECK(pool.allocate(s, 0) == nullptr);
  CHECK_NOTHROW(pool.deallocate(s, nullptr, 0));
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("memory_pool: a moved-from pool is empty and every use of it throws", "[memory_pool]") {
  device_guard device;
  memory_pool a;
  const cudaMemPool_t handle = a.get();
  memory_pool b(std::move(a));
  CHECK(b.get() == handle);
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  cuscope::stream s;
  CHECK_THROWS_WITH(a.stats(), contains("empty (moved-from or released) pool"));
  CHECK_THROWS_AS(a.trim_to(0), std::logic_error);
  CHECK_THROWS_AS((void)a.allocate(s, 16), std::logic_error);
  CHECK_THROWS_AS(a.ref(), std::logic_error);
  CHECK(a.describe() == "empty memory_pool");
  a = std::move(b);
  CHECK(a.get() == handle);
}

TEST_CASE("memory_pool: release hands the pool over and adopt takes one", "[memory_pool]") {
  device_guard device;
  memory_pool a;
  const cudaMemPool_t raw = a.release();
  CHECK(a.empty());
  memory_pool b = memory_pool::adopt(raw, 0);
  CHECK(b.get() == raw);
  CHECK(b.stats().used_bytes == 0);
  CHECK_THROWS_AS(memory_pool::adopt(nullptr, 0), std::invalid_argument);
}

TEST_CASE("memory_pool_ref: device_default refers to the shared default pool", "[memory_pool]") {
  device_guard device;
  const memory_pool_ref def = memory_pool_ref::device_default(0);
  cudaMemPool_t raw = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&raw, 0) == cudaSuccess);
  CHECK(def.get() == raw);
  CHECK(def.describe() == "the default pool of device 0");
  CHECK(memory_pool_ref::device_current(0) == def);
  CHECK(def.release_threshold() == 0);  // CUDA's default, left alone
  CHECK_THROWS_WITH(memory_pool_ref::device_default(9), contains("device 9 is not valid"));
  CHECK_THROWS_AS(memory_pool_ref(static_cast<cudaMemPool_t>(nullptr), 0), std::invalid_argument);
}

TEST_CASE("memory_pool_ref: a reference is the pool's handle and device, compared by both",
          "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  const memory_pool_ref r = pool;
  CHECK(r.get() == pool.get());
  CHECK(r.device() == pool.device());
  CHECK(r == pool.ref());
  CHECK(r != memory_pool_ref(pool.get(), pool.device() + 1));
  CHECK(r != memory_pool_ref::device_default(0));
  CHECK_THAT(r.describe(), contains("pool 0x"));
  if (cuscope::test::simulated) CHECK(r.max_bytes() == 0);  // no limit; a GPU may say otherwise
}

#if CUSCOPE_HAS_POOL_MAX_SIZE
TEST_CASE("memory_pool_ref: max_bytes() asks the driver", "[memory_pool]") {
  device_guard device;
  pool_options o;
  o.max_bytes = 8 * MiB;
  memory_pool pool(o);
  const memory_pool_ref r = pool;
  if (cuscope::test::simulated) {
    // The simulated driver answers cudaMemPoolAttrMaxPoolSize, as CUDA 13.2 drivers do.
    CHECK(r.max_bytes() == pool.max_bytes());
    CHECK(r.max_bytes() == 32 * MiB);
  } else {
    // Older drivers do not say (0); newer ones report at least the limit asked.
    CHECK((r.max_bytes() == 0 || r.max_bytes() >= 8 * MiB));
  }
}
#endif

TEST_CASE("device_list: devices in the order given, within its capacity", "[memory_pool]") {
  cuscope::device_list none;
  CHECK(none.empty());
  CHECK(none.size() == 0);
  CHECK(none.begin() == none.end());

  cuscope::device_list l = {2, 0, 1};
  REQUIRE(l.size() == 3);
  CHECK(l[0] == 2);
  CHECK(l[1] == 0);
  CHECK(l[2] == 1);
  std::vector<int> seen;
  for (const int d : l)
    seen.push_back(d);
  CHECK(seen == std::vector<int>{2, 0, 1});
  try {
    (void)l[3];
    FAIL("index 3 of a list of 3 was read");
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()) == "cuscope::device_list: index 3 of a list of 3 devices");
  }

  // From a range, as a std::vector<int> assigned to pool_options::access_from.
  const std::vector<int> v{2, 0, 1};
  pool_options o;
  o.access_from = v;
  CHECK(o.access_from == l);
  o.access_from = std::array<int, 2>{2, 0};
  CHECK(o.access_from != l);
  CHECK(o.access_from.size() == 2);
  o.access_from.push_back(1);
  CHECK(o.access_from == l);
  o.access_from.clear();
  CHECK(o.access_from.empty());

  for (std::size_t i = 0; i < cuscope::device_list::max_size; ++i)
    o.access_from.push_back(static_cast<int>(i));
  CHECK(o.access_from.size() == cuscope::device_list::max_size);
  try {
    o.access_from.push_back(0);
    FAIL("a 65th device was added");
  } catch (const std::length_error& e) {
    CHECK(std::string(e.what()) ==
          "cuscope::device_list: more than 64 devices (device_list::max_size)");
  }
  CHECK(o.access_from.size() == cuscope::device_list::max_size);
  std::vector<int> too_many(cuscope::device_list::max_size + 1, 0);
  CHECK_THROWS_AS(cuscope::device_list(too_many), std::length_error);
}

TEST_CASE("memory_pool: a pool on another device leaves the current device alone",
          "[memory_pool]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  pool_options o;
  o.device = 1;
  o.initial_bytes = 8 * MiB;
  memory_pool pool(o);
  CHECK(pool.device() == 1);
  CHECK(cuscope::current_device() == 0);
  cuscope::stream_options so;
  so.device = 1;
  cuscope::stream s(so);
  void* p = pool.allocate(s, MiB);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, p) == cudaSuccess);
  CHECK(attr.device == 1);
  pool.deallocate(s, p, MiB);
  s.synchronize();
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("memory_pool_ref: a reference to a destroyed pool fails with an error naming it",
          "[memory_pool][sim]") {
  device_guard device;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t raw = nullptr;
  REQUIRE(cudaMemPoolCreate(&raw, &props) == cudaSuccess);
  const memory_pool_ref r(raw, 0);
  REQUIRE(cudaMemPoolDestroy(raw) == cudaSuccess);
  cuscope::stream s;
  try {
    (void)r.stats();
    FAIL("no exception");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidValue);
    CHECK_THAT(std::string(e.what()), contains("pool 0x"));
  }
  CHECK_THROWS_AS((void)r.allocate(s, 64), cuscope::cuda_error);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("memory_pool: a failing runtime call during construction leaves nothing allocated",
          "[memory_pool][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep([](cuscope::test::fault_point& fault) {
    pool_options o;
    o.initial_bytes = 8 * MiB;
    o.reuse.allow_opportunistic = false;
    std::optional<memory_pool> pool;
    if (fault.run([&] { pool.emplace(o); })) {
      CHECK(pool->stats().used_bytes == 0);
    }
  });
  CHECK(runs > 10);
}

TEST_CASE(
    "memory_pool: a failing runtime call during an allocation or a trim leaves the pool "
    "usable",
    "[memory_pool][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep([](cuscope::test::fault_point& fault) {
    memory_pool pool;
    cuscope::stream s;
    void* p = nullptr;
    (void)fault.run([&] {
      p = pool.allocate(s, 4 * MiB, alloc_policy::retry_after_trim);
      pool.trim_to(0);
      (void)pool.stats();
    });
    if (p != nullptr) pool.deallocate(s, p, 4 * MiB);
    void* q = pool.allocate(s, MiB);
    pool.deallocate(s, q, MiB);
    s.synchronize();
  });
  CHECK(runs > 4);
}

#endif

TEST_CASE("memory_pool: describe leaves the caller's pending error in place", "[memory_pool]") {
  device_guard device;
  memory_pool pool;
  // A failed call leaves its error for cudaGetLastError; naming the pool in a log line must not
  // take it away from the caller.
  REQUIRE(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  CHECK_THAT(pool.describe(), contains("pool 0x"));
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);
}
