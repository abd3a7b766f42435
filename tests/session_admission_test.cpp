// SPDX-License-Identifier: Apache-2.0
// session_options::admission: memory that must be available when a session begins.
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::admission_error;
using cuscope::admission_policy;
using cuscope::memory_pool;
using cuscope::session;
using cuscope::session_options;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(std::is_base_of_v<cuscope::out_of_memory, admission_error>);

TEST_CASE("session: admission options that make no sense are refused with the field named",
          "[session][admission]") {
  device_guard device;
  memory_pool pool;
  stream s;
  session_options o;
  o.name = "bad";
  o.admission.device_fraction = 1.5;
  CHECK_THROWS_WITH(session(pool, s, o), contains("session 'bad': admission.device_fraction 1.5") &&
                                             contains("is not a fraction in [0, 1]"));
  o.admission.device_fraction = 0;
  o.admission.pool_fraction = -0.25;
  CHECK_THROWS_AS(session(pool, s, o), std::invalid_argument);
  o.admission.pool_fraction = 0.5;
  CHECK_THROWS_WITH(session(pool, s, o),
                    contains("admission.pool_fraction needs a pool with a limit"));
  CHECK(pool.stats().reserved_bytes == 0);
}

#if CUSCOPE_TEST_SIMULATED

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Device memory taken by someone else (another tenant of the GPU), freed at the end of the scope.
class other_tenant {
 public:
  explicit other_tenant(std::size_t bytes) { REQUIRE(cudaMalloc(&p_, bytes) == cudaSuccess); }
  other_tenant(const other_tenant&) = delete;
  other_tenant& operator=(const other_tenant&) = delete;
  ~other_tenant() { (void)cudaFree(p_); }

 private:
  void* p_ = nullptr;
};

// Leaves bytes cached in pool: allocated and freed on s, synchronized.
void cache(memory_pool& pool, stream& s, std::size_t bytes) {
  void* p = pool.allocate(s, bytes);
  pool.deallocate(s, p, bytes);
  s.synchronize();
}

session_options admit(std::size_t bytes, admission_policy policy) {
  session_options o;
  o.name = "request";
  o.admission.bytes = bytes;
  o.admission.on_shortfall = policy;
  return o;
}

}  // namespace

TEST_CASE(
    "session: admission refuses when too little is available, naming what was asked, what was "
    "available and who holds the rest",
    "[session][admission]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 1024 * MiB;
  setup.context_bytes = 256 * MiB;
  device_guard device(setup);
  memory_pool pool;
  stream s;
  cache(pool, s, 256 * MiB);
  const other_tenant tenant(384 * MiB);
  // Free: 1024 - 256 (context) - 256 (the pool) - 384 (the tenant) = 128 MiB; the pool's 256 MiB
  // of cache count as available too.
  try {
    session refused(pool, s, admit(512 * MiB, admission_policy::refuse));
    FAIL("the session was admitted");
  } catch (const admission_error& e) {
    CHECK(e.requested_bytes() == 512 * MiB);
    CHECK(e.available_bytes() == 384 * MiB);
    CHECK(e.shortfall_bytes() == 128 * MiB);
    CHECK(e.status() == cudaSuccess);  // refused before CUDA was asked for memory
    const std::string m = e.what();
    CHECK_THAT(m, contains("session 'request': admission refused: 512.00 MiB must be available "
                           "at entry, 384.00 MiB is (128.00 MiB short)"));
    CHECK_THAT(m, contains("Device 0 has 128.00 MiB free of 1.00 GiB"));
    CHECK_THAT(m, contains("reserves 256.00 MiB (0 B in use)"));
    CHECK_THAT(m, contains("graph memory reserves 0 B"));
    CHECK_THAT(m, contains("other processes) holds 640.00 MiB"));
    CHECK_THAT(m, !contains("trimming"));
  }
  CHECK(pool.stats().reserved_bytes == 256 * MiB);  // refuse does not trim

  session admitted(pool, s, admit(384 * MiB, admission_policy::refuse));
  auto b = admitted.make_buffer<char>(256 * MiB);  // from the cache
  b = {};
  const session_report& r = admitted.finish();
  CHECK(r.admission_required_bytes == 384 * MiB);
  CHECK(r.admission_available_bytes == 384 * MiB);
  CHECK_FALSE(r.admission_trimmed);
  CHECK_THAT(r.to_string(), contains("admitted: 384.00 MiB asked, 384.00 MiB available at entry"));
  const std::string json = cuscope::to_json(r);
  CHECK(cuscope::test::json_error(json).empty());
  CHECK(cuscope::test::json_field(json, "admission_required_bytes") == std::to_string(384 * MiB));
  CHECK(cuscope::test::json_field(json, "admission_trimmed") == "false");
}

TEST_CASE("session: admission with trim_and_retry gives the pools' cache back, then admits",
          "[session][admission]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 1024 * MiB;
  setup.context_bytes = 256 * MiB;
  device_guard device(setup);
  memory_pool pool;
  memory_pool other;  // another cache of the service
  stream s;
  stream t;
  cache(other, s, 256 * MiB);
  {
    // Freed on another stream and not waited for: only a synchronization lets a trim return it.
    void* p = pool.allocate(t, 128 * MiB);
    pool.deallocate(t, p, 128 * MiB);
  }
  const other_tenant tenant(256 * MiB);
  // Free: 1024 - 256 - 256 (other) - 128 (pool) - 256 (tenant) = 128 MiB, +128 MiB cached.

  SECTION("trimming the session's pool alone is not enough: refused, saying it trimmed") {
    try {
      session refused(pool, s, admit(384 * MiB, admission_policy::trim_and_retry));
      FAIL("the session was admitted");
    } catch (const admission_error& e) {
      CHECK(e.available_bytes() == 256 * MiB);
      CHECK_THAT(e.what(), contains("after synchronizing the device and trimming the pool "
                                    "(128.00 MiB returned)"));
    }
    CHECK(pool.stats().reserved_bytes == 0);
    CHECK(other.stats().reserved_bytes == 256 * MiB);
  }
  SECTION("with the other pool in also_trim: admitted") {
    session_options o = admit(384 * MiB, admission_policy::trim_and_retry);
    o.admission.also_trim.push_back(other);
    session admitted(pool, s, o);
    CHECK(pool.stats().reserved_bytes == 0);
    CHECK(other.stats().reserved_bytes == 0);
    { auto b = admitted.make_buffer<char>(384 * MiB); }
    const session_report& r = admitted.finish();
    CHECK(r.admission_trimmed);
    CHECK(r.admission_returned_bytes == 128 * MiB);  // the session's pool's
    CHECK(r.admission_available_bytes == 512 * MiB);
    CHECK(r.reserved_at_entry_bytes == 0);  // entry is measured after the admission
    CHECK_THAT(r.to_string(), contains("after a trim that returned 128.00 MiB"));
  }
  SECTION("without the policy: refused, nothing trimmed") {
    CHECK_THROWS_AS(session(pool, s, admit(384 * MiB, admission_policy::refuse)), admission_error);
    s.synchronize();
    t.synchronize();
    CHECK(pool.stats().reserved_bytes == 128 * MiB);
  }
}

TEST_CASE("session: admission by fractions of the device and of the pool's limit",
          "[session][admission]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 1024 * MiB;
  setup.context_bytes = 256 * MiB;
  device_guard device(setup);
  cuscope::pool_options po;
  po.max_bytes = 256 * MiB;
  memory_pool pool(po);
  stream s;
  auto held = std::make_unique<session>(pool, s, "holder");
  auto live = held->make_buffer<char>(192 * MiB);
  session_options o;
  o.name = "half of the limit";
  o.admission.pool_fraction = 0.5;  // 128 MiB, and the limit leaves 64 MiB
  o.admission.on_shortfall = admission_policy::trim_and_retry;  // a trim cannot help
  try {
    session refused(*held, o);
    FAIL("the session was admitted");
  } catch (const admission_error& e) {
    CHECK(e.requested_bytes() == 128 * MiB);
    CHECK(e.available_bytes() == 64 * MiB);
    CHECK_THAT(e.what(), contains("reserves 192.00 MiB (192.00 MiB in use) under a limit of "
                                  "256.00 MiB"));
  }
  live = {};
  {
    session admitted(*held, o);  // a refused nested session left nothing open in its parent
    CHECK(admitted.report().admission_required_bytes == 128 * MiB);
    CHECK(admitted.report().admission_available_bytes == 256 * MiB);
  }
  const session_report& r = held->finish();
  CHECK_FALSE(r.leaked());
  held.reset();

  memory_pool unlimited;
  session_options d;
  d.admission.device_fraction = 0.75;  // 768 MiB of 1 GiB; 768 MiB are free
  { session admitted(unlimited, s, d); }
  d.admission.device_fraction = 0.8;
  CHECK_THROWS_AS(session(unlimited, s, d), admission_error);
  d.admission.device_fraction = 0.25;  // but the pool's limit leaves 256 MiB
  { session admitted(pool, s, d); }
  d.admission.device_fraction = 0.3;
  CHECK_THROWS_AS(session(pool, s, d), admission_error);
}

TEST_CASE("session: a refused request leaves its service session able to go on and finish",
          "[session][admission]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 1024 * MiB;
  setup.context_bytes = 256 * MiB;
  device_guard device(setup);
  memory_pool pool;
  stream s;
  session service(pool, s, "service");
  auto kv = service.make_buffer<char>(640 * MiB, "kv cache");
  CHECK_THROWS_AS(session(service, admit(256 * MiB, admission_policy::trim_and_retry)),
                  admission_error);
  {
    session small(service, admit(64 * MiB, admission_policy::refuse));
    auto b = small.make_buffer<char>(64 * MiB);
  }
  kv = {};
  const session_report& r = service.finish();
  CHECK_FALSE(r.leaked());
  CHECK(r.reserved_at_exit_bytes == 0);
}

#endif
