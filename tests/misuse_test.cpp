// SPDX-License-Identifier: Apache-2.0
// Misuses that CUDA cannot name by itself, and the out-of-memory handler: each message names the
// object and the misuse (docs/concepts.md, "Misuses and what they get").
#include <cstddef>
#include <cuscope/detail/pool_directory.hpp>
#include <cuscope/device_buffer.hpp>
#include <cuscope/error.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"

using cuscope::memory_pool;
using cuscope::memory_pool_ref;
using cuscope::pool_options;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

pool_options named(const char* name) {
  pool_options o;
  o.name = name;
  return o;
}

}  // namespace

TEST_CASE("misuse: a pool's name appears in its messages and in those of every reference",
          "[misuse]") {
  device_guard device;
  memory_pool pool(named("requests"));
  CHECK_THAT(pool.describe(), contains("pool 'requests' 0x"));
  const memory_pool_ref r = pool;
  CHECK_THAT(r.describe(), contains("pool 'requests' 0x"));
  CHECK_THAT(r.describe(), contains("on device 0"));
  memory_pool plain;
  CHECK_THAT(plain.describe(), !contains("'"));
  memory_pool moved = std::move(pool);
  CHECK_THAT(moved.describe(), contains("'requests'"));
}

TEST_CASE("misuse: pool_options::from_env names the pool after its variables", "[misuse]") {
  device_guard device;
  const pool_options o = pool_options::from_env("cuscope_misuse_test_pool");
  CHECK(o.name == "cuscope_misuse_test_pool");
  pool_options given;
  given.name = "kept";
  CHECK(pool_options::from_env("cuscope_misuse_test_pool", given).name == "kept");
}

#if CUSCOPE_HAS_POOL_MAX_SIZE
TEST_CASE("misuse: out_of_memory names the pool", "[misuse]") {
  device_guard device;
  pool_options o = named("small");
  o.max_bytes = 32 * MiB;
  memory_pool pool(o);
  cuscope::stream s;
  CHECK_THROWS_WITH((void)pool.allocate(s, 64 * MiB), contains("pool 'small' 0x"));
}
#endif

#if CUSCOPE_TEST_SIMULATED
// What a GPU answers for a pool handle after cudaMemPoolDestroy is not documented; the
// simulated device answers cudaErrorInvalidValue, as for any unknown handle.
TEST_CASE("misuse: a reference used after its memory_pool was destroyed says so", "[misuse][sim]") {
  device_guard device;
  std::optional<memory_pool> pool(std::in_place, named("gone"));
  const memory_pool_ref r = *pool;
  pool.reset();
  cuscope::stream s;
  try {
    (void)r.stats();
    FAIL("no exception");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidValue);
    const std::string what = e.what();
    CHECK_THAT(what, contains("pool 'gone' 0x"));
    CHECK_THAT(what, contains("was destroyed"));
    CHECK_THAT(what, contains("cudaMemPoolGetAttribute"));
  }
  CHECK_THROWS_WITH(r.trim_to(0), contains("was destroyed"));
  CHECK_THROWS_WITH(r.set_release_threshold(0), contains("was destroyed"));
  CHECK_THROWS_WITH((void)r.allocate(s, 64), contains("was destroyed"));
  CHECK(cudaGetLastError() == cudaSuccess);
  // A pool the driver later gives the same handle is a live pool again.
  memory_pool next;
  if (next.get() == r.get()) CHECK_NOTHROW((void)r.stats());
}

TEST_CASE("misuse: the pool directory names live pools and the latest destroyed ones",
          "[misuse][sim]") {
  device_guard device;
  memory_pool kept(named("kept"));
  // More destroyed pools than the directory keeps: the oldest are forgotten.
  constexpr std::size_t made = cuscope::detail::pool_directory::destroyed_kept + 8;
  std::vector<memory_pool_ref> gone;
  for (std::size_t i = 0; i < made; ++i) {
    std::optional<memory_pool> pool(std::in_place, named("short-lived"));
    gone.push_back(*pool);
  }
  CHECK_THAT(kept.describe(), contains("pool 'kept' 0x"));
  CHECK_THROWS_WITH((void)gone.back().stats(), contains("was destroyed"));
  CHECK_THAT(gone.back().describe(), contains("pool 'short-lived' 0x"));
  bool distinct = true;  // the driver gave every pool a handle of its own
  for (std::size_t i = 0; i < made; ++i)
    for (std::size_t j = 0; j < i; ++j)
      distinct = distinct && gone[i].get() != gone[j].get();
  if (distinct) {
    CHECK_THROWS_WITH((void)gone.front().stats(), !contains("was destroyed"));
    CHECK_THAT(gone.front().describe(), !contains("short-lived"));
    CHECK_THROWS_WITH((void)gone[made - cuscope::detail::pool_directory::destroyed_kept].stats(),
                      contains("was destroyed"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK_THAT(kept.describe(), contains("pool 'kept' 0x"));
}

TEST_CASE("misuse: a pointer deallocated twice from a pool names the misuse", "[misuse][sim]") {
  device_guard device;
  memory_pool pool(named("twice"));
  cuscope::stream s;
  void* p = pool.allocate(s, 4096);
  pool.deallocate(s, p, 4096);
  try {
    pool.deallocate(s, p, 4096);
    FAIL("no exception");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidValue);
    const std::string what = e.what();
    CHECK_THAT(what, contains("pool 'twice'"));
    CHECK_THAT(what, contains("freed twice"));
    CHECK_THAT(what, contains("4.00 KiB"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);
  s.synchronize();
}

namespace {

std::vector<std::string> cleanup_messages;

void record_cleanup(const cuscope::cleanup_error& e) noexcept {
  try {
    cleanup_messages.push_back(std::string(e.operation) + " | " + e.object + " | " + e.message);
  } catch (...) {
  }
}

}  // namespace

TEST_CASE("misuse: one pointer adopted by two buffers reports the second free as such",
          "[misuse][sim]") {
  device_guard device;
  cleanup_messages.clear();
  const cuscope::scoped_cleanup_handler handler(&record_cleanup);
  memory_pool pool;
  cuscope::stream s;
  auto* p = static_cast<int*>(pool.allocate(s, 256 * sizeof(int)));
  {
    auto a = cuscope::device_buffer<int>::adopt(s, p, 256, pool);
    auto b = cuscope::device_buffer<int>::adopt(s, p, 256, pool);
  }
  s.synchronize();
  REQUIRE(cleanup_messages.size() == 1);
  CHECK_THAT(cleanup_messages[0], contains("cudaFreeAsync"));
  CHECK_THAT(cleanup_messages[0], contains("adopted by two owners"));
  CHECK(cudaGetLastError() == cudaSuccess);
}
#endif

TEST_CASE("misuse: a session refuses to deallocate memory it did not hand out", "[misuse]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "request";
  cuscope::session session(pool, s, o);
  void* p = session.allocate(s, 8192);
  session.deallocate(s, p, 8192);
  // The second deallocate frees nothing: on a GPU the pointer may already belong to another
  // allocation.
  try {
    session.deallocate(s, p, 8192);
    FAIL("no exception");
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, contains("session 'request'"));
    CHECK_THAT(what, contains("deallocated twice"));
  }
  void* other = pool.allocate(s, 4096);
  CHECK_THROWS_WITH(session.deallocate(s, other, 4096), contains("allocated elsewhere"));
  pool.deallocate(s, other, 4096);
  // A buffer's memory is its buffer's to free: deallocate leaves it, and it stays counted.
  {
    auto buffer = session.make_buffer<char>(2048);
    CHECK_THROWS_WITH(session.deallocate(s, buffer.data(), 2048), contains("allocate()"));
    CHECK(session.live_allocations() == 1);
  }
  const cuscope::session_report& r = session.finish();
  CHECK(r.leaked_allocations == 0);
  CHECK(r.leaked_bytes == 0);
}

TEST_CASE(
    "misuse: memory from session::allocate freed by the pool stays counted, and is named as a "
    "leak",
    "[misuse]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "request";
  o.on_leak = cuscope::leak_policy::ignore;
  cuscope::session session(pool, s, o);
  void* p = session.allocate(s, 8192, "scratch");
  pool.deallocate(s, p, 8192);  // the session is not told: CUDA cannot say the pointer is free
  const cuscope::session_report& r = session.finish();
  CHECK(r.leaked_allocations == 1);
  REQUIRE(r.leaks.size() == 1);
  CHECK(r.leaks[0].tag == "scratch");
  CHECK(r.leaks[0].bytes == 8192);
  CHECK(r.frees == 0);
}

namespace {

struct oom_state {
  std::vector<unsigned> attempts;
  std::optional<cuscope::device_buffer<char>>* cache = nullptr;
  bool free_on = true;
  unsigned give_up_after = 1;
  std::size_t bytes = 0;
};

bool free_cache(const cuscope::out_of_memory_info& info) noexcept {
  auto* st = static_cast<oom_state*>(info.user);
  st->attempts.push_back(info.attempt);
  st->bytes = info.bytes;
  if (info.attempt > st->give_up_after) return false;
  if (st->free_on && st->cache != nullptr && st->cache->has_value()) {
    const cuscope::stream_ref s = (*st->cache)->stream();
    st->cache->reset();
    (void)cudaStreamSynchronize(s.get());
  }
  return true;
}

}  // namespace

#if CUSCOPE_HAS_POOL_MAX_SIZE
TEST_CASE("misuse: the out-of-memory handler may free memory and have the allocation retried",
          "[misuse][oom]") {
  device_guard device;
  pool_options o;
  o.max_bytes = 64 * MiB;
  memory_pool pool(o);
  cuscope::stream s;
  std::optional<cuscope::device_buffer<char>> cache;
  cache.emplace(s, 48 * MiB, pool);
  oom_state st;
  st.cache = &cache;

  SECTION("a handler that frees a cache lets the allocation succeed") {
    const cuscope::scoped_out_of_memory_handler handler(&free_cache, &st);
    cuscope::device_buffer<char> b(s, 40 * MiB, pool);
    CHECK(b.size() == 40 * MiB);
    CHECK(st.attempts == std::vector<unsigned>{1});
    CHECK(st.bytes == 40 * MiB);
    CHECK_FALSE(cache.has_value());
  }
  SECTION("a handler that cannot help is asked again until it gives up, then out_of_memory") {
    st.free_on = false;
    st.give_up_after = 2;
    const cuscope::scoped_out_of_memory_handler handler(&free_cache, &st);
    CHECK_THROWS_AS(cuscope::device_buffer<char>(s, 40 * MiB, pool), cuscope::out_of_memory);
    CHECK(st.attempts == std::vector<unsigned>{1, 2, 3});
    CHECK(cache.has_value());
  }
  SECTION("without a handler nothing is retried") {
    CHECK(cuscope::set_out_of_memory_handler(nullptr) == nullptr);
    CHECK_THROWS_AS(cuscope::device_buffer<char>(s, 40 * MiB, pool), cuscope::out_of_memory);
    CHECK(st.attempts.empty());
  }
  CHECK(cuscope::set_out_of_memory_handler(nullptr) == nullptr);  // the scope restored it
  cache.reset();
  s.synchronize();
}
#endif
