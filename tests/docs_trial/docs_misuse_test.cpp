// SPDX-License-Identifier: Apache-2.0
// Every row of docs/concepts.md's table "Misuses and what they get", each checked for the
// documented exception (or report) and a message naming the object and the misuse.
// A plain C++ compiler: Thrust's CPP device system (storage management only, docs/interop.md).
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <cuscope/cuscope.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/thrust.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using cuscope::test::contains;
using cuscope::test::device_guard;

// Misuses that do not compile (docs/concepts.md, "Streams" and "Buffers").
static_assert(!std::is_constructible_v<cuscope::stream_ref, int>, "a literal 0 is refused");
static_assert(!std::is_constructible_v<cuscope::stream_ref, std::nullptr_t>);
static_assert(!std::is_copy_constructible_v<cuscope::device_buffer<float>>);
static_assert(!std::is_copy_constructible_v<cuscope::memory_pool>);
static_assert(!std::is_copy_constructible_v<cuscope::session>);

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<std::string> cleanup_reports;

void collect(const cuscope::cleanup_error& e) noexcept {
  cleanup_reports.push_back(std::string(e.operation) + " for " + e.object + ": " + e.message);
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

}  // namespace

TEST_CASE("finish() on a session while a nested one is open", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session request(pool, s, "request");
  cuscope::session decode(request, "decode");
  try {
    request.finish();
    FAIL("finish() with a nested session open did not throw");
  } catch (const std::logic_error& e) {
    CHECK_THAT(e.what(), contains("session 'request'"));
    CHECK_THAT(e.what(), contains("'decode'"));
    CHECK_THAT(e.what(), contains("finish()"));
  }
  // Nothing else happened: both go on.
  { auto x = decode.make_buffer<int>(16); }
  CHECK_FALSE(decode.finish().leaked());
  CHECK_FALSE(request.finish().leaked());
}

TEST_CASE("destroying a session before the one nested in it", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cleanup_reports.clear();
  cuscope::scoped_cleanup_handler handler(&collect);
  cuscope::session_options o;
  o.name = "parent";
  o.budget_bytes = MiB;
  std::optional<cuscope::session> parent(std::in_place, pool, s, o);
  cuscope::session child(*parent, "child");
  parent.reset();
  REQUIRE(cleanup_reports.size() == 1);
  CHECK_THAT(cleanup_reports[0], contains("'parent'"));
  CHECK_THAT(cleanup_reports[0], contains("'child'"));
  // The nested one goes on without touching it, still under the parent's budget.
  { auto x = child.make_buffer<int>(16); }
  CHECK_THROWS_AS(child.make_buffer<std::byte>(2 * MiB), cuscope::out_of_memory);
  const cuscope::session_report& r = child.finish();
  CHECK_FALSE(r.leaked());
  CHECK(r.budget_refusals == 1);
}

TEST_CASE("nesting a session in a finished one", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session request(pool, s, "request");
  request.finish();
  try {
    cuscope::session late(request, "late");
    FAIL("a session nested in a finished one began");
  } catch (const std::logic_error& e) {
    CHECK_THAT(e.what(), contains("'request'"));
    CHECK_THAT(e.what(), contains("'late'"));
  }
}

TEST_CASE("make_buffer or allocate after finish()", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session done(pool, s, "done");
  done.finish();
  try {
    (void)done.make_buffer<int>(16);
    FAIL("make_buffer after finish() did not throw");
  } catch (const std::logic_error& e) {
    CHECK_THAT(e.what(), contains("session 'done'"));
  }
  try {
    (void)done.allocate(s, 64);
    FAIL("allocate after finish() did not throw");
  } catch (const std::logic_error& e) {
    CHECK_THAT(e.what(), contains("session 'done'"));
  }
}

TEST_CASE("allocating through a finished session's adaptors", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  std::vector<float> data(64, 1.0f);
  cuscope::session done(pool, s, "done");
  cuscope::thrust_allocator<int> allocator(done);
  cuscope::pool_resource resource(done);
  done.finish();

  CHECK_THROWS_AS(allocator.allocate(16), std::logic_error);
  CHECK_THROWS_WITH(allocator.allocate(16), contains("session 'done'"));
  CHECK_THROWS_AS(thrust::get_temporary_buffer<int>(cuscope::thrust_policy(done), 16),
                  std::logic_error);
  CHECK_THROWS_AS(resource.allocate_sync(256, 256), std::logic_error);
  CHECK_THROWS_WITH(resource.allocate_sync(256, 256), contains("session 'done'"));
  CHECK_THROWS_AS(cuscope::batches(done, data, 16), std::logic_error);
  CHECK_THROWS_WITH(cuscope::batches(done, data, 16), contains("session 'done'"));
}

TEST_CASE("memory on a stream the session was not given", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s, other;
  cuscope::session step(pool, s, "step");
  { auto x = step.make_buffer<float>(other, 1024); }
  const cuscope::session_report& r = step.finish();
  CHECK(r.synchronized_device);
  CHECK_FALSE(r.leaked());

  // Listed, it is synchronized alone.
  cuscope::session_options o;
  o.name = "listed";
  o.streams = {other};
  cuscope::session listed(pool, s, o);
  { auto x = listed.make_buffer<float>(other, 1024); }
  CHECK_FALSE(listed.finish().synchronized_device);
}

TEST_CASE("a device id below -1", "[docs][misuse]") {
  device_guard device;
  cuscope::pool_options po;
  po.device = -7;
  CHECK_THROWS_AS(cuscope::memory_pool(po), std::invalid_argument);
  CHECK_THROWS_WITH(cuscope::memory_pool(po), contains("device -7 is not valid"));
  cuscope::stream_options so;
  so.device = -3;
  CHECK_THROWS_AS(cuscope::stream(so), std::invalid_argument);
  CHECK_THROWS_WITH(cuscope::stream(so), contains("device -3 is not valid"));
  cuscope::event_options eo;
  eo.device = -2;
  CHECK_THROWS_AS(cuscope::event(eo), std::invalid_argument);
  CHECK_THROWS_WITH(cuscope::event(eo), contains("device -2 is not valid"));
}

TEST_CASE("more than 64 devices in access_from, or an index past its end", "[docs][misuse]") {
  cuscope::pool_options po;
  po.access_from = {1, 2, 3};
  CHECK_THROWS_AS(po.access_from[3], std::out_of_range);
  CHECK_THROWS_WITH(po.access_from[3], contains("index 3 of a list of 3 devices"));
  const std::vector<int> many(65, 1);
  CHECK_THROWS_AS(po.access_from = many, std::length_error);
  CHECK_THROWS_WITH(po.access_from = many, contains("cuscope::device_list: more than 64 devices"));
  CHECK(po.access_from.size() == 3);  // the assignment that threw changed nothing
}

TEST_CASE("copying into or out of a moved-from device_buffer", "[docs][misuse]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::device_buffer<float> a(s, 16, pool);
  auto b = std::move(a);
  std::vector<float> host(16, 1.0f);
  CHECK_THROWS_AS(a.copy_from(s, host), std::logic_error);  // NOLINT(bugprone-use-after-move)
  CHECK(a.size() == 0);
  CHECK(a.to_vector(s).empty());
}

TEST_CASE("using a moved-from memory_pool, stream or event", "[docs][misuse]") {
  device_guard device;
  cuscope::memory_pool pool;
  auto pool2 = std::move(pool);
  CHECK_THROWS_AS(pool.stats(), std::logic_error);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_WITH(pool.stats(), contains("empty (moved-from or released)"));
  cuscope::stream s;
  auto s2 = std::move(s);
  CHECK_THROWS_AS(s.synchronize(), std::logic_error);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_WITH(s.synchronize(), contains("empty (moved-from or released)"));
  cuscope::event e;
  auto e2 = std::move(e);
  CHECK_THROWS_AS(e.record(s2), std::logic_error);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_WITH(e.record(s2), contains("empty (moved-from or released)"));
}

TEST_CASE("using a reference, buffer or session after its memory_pool was destroyed",
          "[docs][misuse]") {
  device_guard device;
  if (!cuscope::test::simulated) {
    WARN("what a GPU answers for a destroyed pool's handle is not documented: simulated only");
    return;
  }
  cuscope::stream s;
  cuscope::pool_options po;
  po.name = "gone";
  std::optional<cuscope::memory_pool> pool(std::in_place, po);
  cuscope::memory_pool_ref ref = *pool;
  cuscope::device_buffer<float> b(s, 16, *pool);
  pool.reset();
  const auto names_misuse = [](const cuscope::cuda_error& e) {
    CHECK_THAT(e.what(), contains("pool 'gone'"));
    CHECK_THAT(e.what(), contains("a memory_pool with this handle was destroyed"));
  };
  try {
    (void)ref.stats();
    FAIL("stats() of a destroyed pool did not throw");
  } catch (const cuscope::cuda_error& e) {
    names_misuse(e);
  }
  try {
    b.resize(s, 1 << 20);
    FAIL("resize() of a buffer of a destroyed pool did not throw");
  } catch (const cuscope::cuda_error& e) {
    names_misuse(e);
  }
  try {
    cuscope::session late(ref, s, "late");
    FAIL("a session on a destroyed pool began");
  } catch (const cuscope::cuda_error& e) {
    names_misuse(e);
  }
  // Freeing buffers of a destroyed pool is allowed.
  cleanup_reports.clear();
  cuscope::scoped_cleanup_handler handler(&collect);
  b = cuscope::device_buffer<float>();
  s.synchronize();
  CHECK(cleanup_reports.empty());
}

TEST_CASE("pool.deallocate of a pointer freed already", "[docs][misuse]") {
  device_guard device;
  cuscope::pool_options po;
  po.name = "twice";
  cuscope::memory_pool pool(po);
  cuscope::stream s;
  void* p = pool.allocate(s, MiB);
  pool.deallocate(s, p, MiB);
  try {
    pool.deallocate(s, p, MiB);
    FAIL("a second deallocate did not throw");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidValue);
    CHECK_THAT(e.what(), contains("pool 'twice'"));
    CHECK_THAT(e.what(), contains(hex(p)));
    CHECK_THAT(e.what(), contains("1.00 MiB"));
    CHECK_THAT(e.what(),
               contains("freed twice, owned by two objects, or not the address an allocation "
                        "returned"));
  }
}

TEST_CASE("one pointer adopted by two buffers", "[docs][misuse]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cleanup_reports.clear();
  cuscope::scoped_cleanup_handler handler(&collect);
  auto* p = static_cast<float*>(pool.allocate(s, 1024 * sizeof(float)));
  {
    auto a = cuscope::device_buffer<float>::adopt(s, p, 1024, pool);
    auto b = cuscope::device_buffer<float>::adopt(s, p, 1024, pool);
  }
  s.synchronize();
  REQUIRE(cleanup_reports.size() == 1);
  CHECK_THAT(cleanup_reports[0], contains("freed twice, or adopted by two owners"));
}

TEST_CASE("pool.deallocate of memory from session::allocate", "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session request(pool, s, "request");
  void* p = request.allocate(s, MiB, "raw scratch");
  const int line = __LINE__ - 1;
  pool.deallocate(s, p, MiB);
  const cuscope::session_report& r = request.finish();
  INFO(r.to_string());
  REQUIRE(r.leaks.size() == 1);
  CHECK(std::string(r.leaks[0].tag) == "raw scratch");
  CHECK(r.leaks[0].line == line);
  CHECK_THAT(r.to_string(), contains("'raw scratch', made at "));
}

TEST_CASE("pool_resource over a reference to a pool of page-locked host memory", "[docs][misuse]") {
  device_guard device;
  if (!cuscope::pinned_memory_pool::supported(0)) {
    WARN("skipped: host memory pools are not supported here");
    return;
  }
  cuscope::pool_options options;
  options.name = "staging";
  cuscope::pinned_memory_pool pool(options);
  CHECK_THROWS_AS(cuscope::pool_resource(pool.ref()), std::invalid_argument);
  CHECK_THROWS_WITH(cuscope::pool_resource(pool.ref()),
                    contains("pool 'staging'") && contains("holds page-locked host memory") &&
                        contains("use pinned_pool_resource"));
}

TEST_CASE("session::deallocate of a pointer the session did not hand out",
          "[docs][misuse][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session request(pool, s, "request");
  void* elsewhere = pool.allocate(s, 4096);
  CHECK_THROWS_AS(request.deallocate(s, elsewhere, 4096), std::logic_error);
  CHECK_THROWS_WITH(request.deallocate(s, elsewhere, 4096), contains("session 'request'"));
  auto buffer = request.make_buffer<std::byte>(4096);
  CHECK_THROWS_AS(request.deallocate(s, buffer.data(), 4096), std::logic_error);
  void* p = request.allocate(s, 4096);
  request.deallocate(s, p, 4096);
  CHECK_THROWS_AS(request.deallocate(s, p, 4096), std::logic_error);
  // Nothing was freed: the pool still counts the memory from elsewhere and the buffer.
  CHECK(pool.stats().used_bytes >= 2 * 4096);
  pool.deallocate(s, elsewhere, 4096);
  buffer = {};
  CHECK_FALSE(request.finish().leaked());
}

// Bad input elsewhere in docs/concepts.md ("Errors", "Running out").
TEST_CASE("a byte count that overflows, a copy that does not fit", "[docs][misuse]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  CHECK_THROWS_AS(cuscope::device_buffer<float>(s, SIZE_MAX / 2, pool), std::length_error);
  cuscope::device_buffer<float> b(s, 4, pool);
  const std::vector<float> host(8, 1.0f);
  CHECK_THROWS_AS(b.copy_from(s, host), std::out_of_range);
}

TEST_CASE("a request under the limit by its bytes, refused for a new block", "[docs][misuse]") {
  device_guard device;  // the simulated device's pools reserve 32 MiB blocks
  cuscope::pool_options po;
  po.name = "bounded";
  po.max_bytes = 40 * MiB;
  cuscope::memory_pool pool(po);
  if (cuscope::test::simulated) CHECK(pool.max_bytes() == 64 * MiB);  // rounded up to blocks
  cuscope::stream s;
  cuscope::device_buffer<std::byte> a(s, 20 * MiB, pool);  // one block
  cuscope::device_buffer<std::byte> b(s, 20 * MiB, pool);  // another: 64 MiB reserved
  try {
    cuscope::device_buffer<std::byte> c(s, 16 * MiB, pool);  // 56 MiB in use, 12 MiB per hole
    FAIL("a request that needs a block past the limit was not refused");
  } catch (const cuscope::out_of_memory& e) {
    CHECK(e.requested_bytes() == 16 * MiB);
    CHECK_THAT(e.what(), contains("pool 'bounded'"));
    CHECK_THAT(e.what(),
               contains("the request fits the limit by its bytes, but a pool reserves memory in "
                        "blocks"));
  }
}
