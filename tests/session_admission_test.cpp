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

TEST_CASE(
    "session: an admission that asks NVML at every admission says where its figures came "
    "from, and they add up to the memory the driver counts as taken",
    "[session][admission]") {
  device_guard device;
  memory_pool pool;
  stream s;
  session_options o;
  o.name = "asks NVML";
  o.admission.bytes = 1;
  o.admission.query_nvml = cuscope::nvml_query::always;
  session admitted(pool, s, o);
  const session_report& r = admitted.report();
  INFO(r.admission_nvml);
  const std::size_t taken = r.driver_total_bytes - r.admission_free_bytes;
  if (cuscope::test::simulated) {
    CHECK(r.admission_nvml == "the simulated device's NVML");
    REQUIRE(r.admission_process_bytes);
    CHECK(*r.admission_process_bytes == taken);  // the context, this process's only memory
  } else {
    // On a GPU machine the driver installs libnvidia-ml.so.1; a container with its own process
    // ids may hide this process from it, which the report must then say.
    const bool answered = r.admission_nvml == "libnvidia-ml.so.1";
    CHECK((answered || r.admission_nvml.rfind("unavailable: ", 0) == 0));
    CHECK(answered == r.admission_process_bytes.has_value());
  }
  if (r.admission_process_bytes) {
    CHECK(*r.admission_process_bytes > 0);  // a CUDA context at least
    REQUIRE(r.admission_other_processes_bytes);
    // NVML and the driver are asked one after the other: what other processes hold is the taken
    // memory that NVML does not give this process.
    CHECK(*r.admission_process_bytes + *r.admission_other_processes_bytes >= taken);
  } else {
    CHECK_FALSE(r.admission_other_processes_bytes);
  }
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE(
    "session: sessions that ask NVML at every admission load and initialize it once, and each "
    "gets the device's answer",
    "[session][admission]") {
  device_guard device;
  memory_pool pool;
  stream s;
  session_options o;
  o.name = "asks NVML";
  o.admission.bytes = 1;
  o.admission.query_nvml = cuscope::nvml_query::always;
  constexpr std::size_t sessions = 100;
  for (std::size_t i = 0; i < sessions; ++i) {
    session admitted(pool, s, o);
    const session_report& r = admitted.report();
    CHECK(r.admission_nvml == "the simulated device's NVML");
    REQUIRE(r.admission_process_bytes);
    CHECK(*r.admission_process_bytes == r.driver_total_bytes - r.admission_free_bytes);
    CHECK(r.admission_other_processes_bytes == std::size_t{0});
  }
  CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
  CHECK(cuscope::sim::call_count("nvmlShutdown") == 0);
  CHECK(cuscope::sim::call_count("nvmlDeviceGetComputeRunningProcesses_v3") == sessions);
}

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Device memory held by another process (another tenant of the GPU) until the end of the scope.
class other_tenant {
 public:
  explicit other_tenant(std::size_t bytes) { cuscope::sim::set_other_process_bytes(0, bytes); }
  other_tenant(const other_tenant&) = delete;
  other_tenant& operator=(const other_tenant&) = delete;
  ~other_tenant() { cuscope::sim::set_other_process_bytes(0, 0); }
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
    CHECK_THAT(m, contains("reserves 256.00 MiB (0 B in use, 256.00 MiB cached, counted)"));
    CHECK_THAT(m, contains("graph memory reserves 0 B"));
    // NVML, asked on a refusal: this process is the context and the pool, the tenant is another.
    CHECK_THAT(m, contains("this process holds 512.00 MiB as NVML counts it (the simulated "
                           "device's NVML), 256.00 MiB of it outside the pool and graph memory"));
    CHECK_THAT(m, contains("other processes hold 384.00 MiB"));
    CHECK_THAT(m, !contains("trimming"));
    const session_report& r = e.report();
    CHECK(r.admission_refused);
    CHECK(r.name == "request");
    CHECK(r.admission_required_bytes == 512 * MiB);
    CHECK(r.admission_available_bytes == 384 * MiB);
    CHECK(r.admission_free_bytes == 128 * MiB);
    CHECK(r.admission_cached_bytes == 256 * MiB);
    CHECK(r.admission_process_bytes == 512 * MiB);
    CHECK(r.admission_other_processes_bytes == 384 * MiB);
    CHECK(r.admission_nvml == "the simulated device's NVML");
    const std::string json = cuscope::to_json(r);
    CHECK(cuscope::test::json_error(json).empty());
    CHECK(cuscope::test::json_field(json, "admission_other_processes_bytes") ==
          std::to_string(384 * MiB));
    CHECK(cuscope::test::json_field(json, "admission_refused") == "true");
    CHECK(r.to_string() ==
          "session 'request' on device 0, refused by its admission\n  REFUSED: 512.00 MiB asked, "
          "384.00 MiB available at entry (128.00 MiB free on the device and 256.00 MiB cached in "
          "the pool); this process holds 512.00 MiB, other processes 384.00 MiB (NVML: the "
          "simulated device's NVML)\n");
  }
  CHECK(pool.stats().reserved_bytes == 256 * MiB);  // refuse does not trim

  session admitted(pool, s, admit(384 * MiB, admission_policy::refuse));
  auto b = admitted.make_buffer<char>(256 * MiB);  // from the cache
  b = {};
  const session_report& r = admitted.finish();
  CHECK(r.admission_required_bytes == 384 * MiB);
  CHECK(r.admission_available_bytes == 384 * MiB);
  CHECK_FALSE(r.admission_trimmed);
  CHECK_FALSE(r.admission_process_bytes);  // NVML is asked on a refusal only, by default
  CHECK_THAT(r.to_string(), contains("admitted: 384.00 MiB asked, 384.00 MiB available at entry "
                                     "(128.00 MiB free on the device and 256.00 MiB cached in "
                                     "the pool); NVML not asked (admission_options::query_nvml)"));
  const std::string json = cuscope::to_json(r);
  CHECK(cuscope::test::json_error(json).empty());
  CHECK(cuscope::test::json_field(json, "admission_required_bytes") == std::to_string(384 * MiB));
  CHECK(cuscope::test::json_field(json, "admission_trimmed") == "false");
  CHECK(cuscope::test::json_field(json, "admission_cached_bytes") == std::to_string(256 * MiB));
  CHECK(cuscope::test::json_field(json, "admission_process_bytes") == "null");
  CHECK(cuscope::test::json_field(json, "admission_refused") == "false");
}

TEST_CASE(
    "session: admission names this process and other processes as NVML counts them, or "
    "says that NVML is unavailable",
    "[session][admission]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 1024 * MiB;
  setup.context_bytes = 256 * MiB;
  device_guard device(setup);

  SECTION("asked at every admission: in the report of an admitted session") {
    memory_pool pool;
    stream s;
    const other_tenant tenant(512 * MiB);
    void* raw = nullptr;
    REQUIRE(cudaMalloc(&raw, 64 * MiB) == cudaSuccess);  // this process's, outside any pool
    session_options o = admit(128 * MiB, admission_policy::refuse);
    o.admission.query_nvml = cuscope::nvml_query::always;
    {
      session admitted(pool, s, o);
      const session_report& r = admitted.report();
      CHECK(r.admission_free_bytes == 192 * MiB);
      CHECK(r.admission_process_bytes == 320 * MiB);  // the context and cudaMalloc
      CHECK(r.admission_other_processes_bytes == 512 * MiB);
      CHECK_THAT(r.to_string(), contains("; this process holds 320.00 MiB, other processes "
                                         "512.00 MiB (NVML: the simulated device's NVML)"));
      const std::string json = cuscope::to_json(r);
      CHECK(cuscope::test::json_field(json, "admission_process_bytes") ==
            std::to_string(320 * MiB));
      CHECK(cuscope::test::json_field(json, "admission_nvml") == "the simulated device's NVML");
    }
    o.admission.bytes = 256 * MiB;
    o.admission.query_nvml = cuscope::nvml_query::never;
    try {
      session refused(pool, s, o);
      FAIL("the session was admitted");
    } catch (const admission_error& e) {
      // Without NVML the rest of the taken memory cannot be split between the processes.
      CHECK_THAT(e.what(), contains("the rest (the CUDA context, other pools, cudaMalloc, other "
                                    "processes) holds 832.00 MiB; NVML, which tells this "
                                    "process's memory from other processes': not asked"));
      CHECK_FALSE(e.report().admission_process_bytes);
      CHECK_FALSE(e.report().admission_other_processes_bytes);
    }
    REQUIRE(cudaFree(raw) == cudaSuccess);
  }
  SECTION("NVML absent: said so, and the rest named as one") {
    cuscope::sim::device_config c = cuscope::sim::config();
    c.nvml = false;
    cuscope::sim::reset(c);
    memory_pool pool;
    stream s;
    const other_tenant tenant(512 * MiB);
    try {
      session refused(pool, s, admit(512 * MiB, admission_policy::refuse));
      FAIL("the session was admitted");
    } catch (const admission_error& e) {
      CHECK_THAT(e.what(), contains("the rest (the CUDA context, other pools, cudaMalloc, other "
                                    "processes) holds 768.00 MiB; NVML, which tells this "
                                    "process's memory from other processes': unavailable: the "
                                    "simulated device answers no NVML queries"));
      const session_report& r = e.report();
      CHECK_FALSE(r.admission_process_bytes);
      CHECK_FALSE(r.admission_other_processes_bytes);
      CHECK_THAT(r.admission_nvml, contains("unavailable: "));
      CHECK(cuscope::test::json_field(cuscope::to_json(r), "admission_process_bytes") == "null");
    }
  }
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
    CHECK(r.admission_returned_bytes == 384 * MiB);  // the session's pool's and the other's
    CHECK(r.admission_available_bytes == 512 * MiB);
    CHECK(r.reserved_at_entry_bytes == 0);  // entry is measured after the admission
    CHECK_THAT(r.to_string(), contains("after a trim that returned 384.00 MiB"));
  }
  SECTION("without the policy: refused, nothing trimmed") {
    CHECK_THROWS_AS(session(pool, s, admit(384 * MiB, admission_policy::refuse)), admission_error);
    s.synchronize();
    t.synchronize();
    CHECK(pool.stats().reserved_bytes == 128 * MiB);
  }
}

TEST_CASE(
    "session: admission counts a fragmented cache only before a trim, and not at all "
    "without count_cache",
    "[session][admission]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 1024 * MiB;
  setup.context_bytes = 256 * MiB;
  device_guard device(setup);  // pools grow in 32 MiB units
  memory_pool pool;
  stream s;
  // Four 16 MiB blocks in two 32 MiB units; the first and third freed: 32 MiB cached, in two
  // halves of units that still hold a live allocation each. No 32 MiB allocation fits there, and
  // a trim can return neither half.
  void* block[4] = {};
  for (void*& p : block)
    p = pool.allocate(s, 16 * MiB);
  for (void** p : {&block[0], &block[2]}) {
    pool.deallocate(s, *p, 16 * MiB);
    *p = nullptr;
  }
  s.synchronize();
  REQUIRE(pool.stats().reserved_bytes == 64 * MiB);
  REQUIRE(pool.stats().used_bytes == 32 * MiB);
  const other_tenant tenant(704 * MiB);  // the device is full

  SECTION("counted on a first count: admitted, though one 32 MiB allocation cannot be served") {
    session admitted(pool, s, admit(32 * MiB, admission_policy::refuse));
    const session_report& r = admitted.report();
    CHECK(r.admission_free_bytes == 0);
    CHECK(r.admission_cached_bytes == 32 * MiB);  // the report says what the admission rests on
    CHECK(r.admission_available_bytes == 32 * MiB);
    CHECK_THROWS_AS(admitted.make_buffer<char>(32 * MiB), cuscope::out_of_memory);
    { auto half = admitted.make_buffer<char>(16 * MiB); }  // what one fragment holds
  }
  SECTION("after the trim of trim_and_retry, what is left cached is not counted") {
    try {
      session refused(pool, s, admit(48 * MiB, admission_policy::trim_and_retry));
      FAIL("the session was admitted");
    } catch (const admission_error& e) {
      CHECK(e.available_bytes() == 0);  // the old rule counted the 32 MiB left cached again
      CHECK(e.report().admission_cached_bytes == 0);
      CHECK(e.report().admission_returned_bytes == 0);
      CHECK_THAT(e.what(), contains("reserves 64.00 MiB (32.00 MiB in use, 32.00 MiB cached, "
                                    "between live allocations, not counted)"));
    }
  }
  SECTION("without count_cache: only the driver's free memory counts") {
    session_options o = admit(32 * MiB, admission_policy::refuse);
    o.admission.count_cache = false;
    try {
      session refused(pool, s, o);
      FAIL("the session was admitted");
    } catch (const admission_error& e) {
      CHECK(e.available_bytes() == 0);
      CHECK_THAT(e.what(), contains("(32.00 MiB in use, 32.00 MiB cached, not counted "
                                    "(admission_options::count_cache))"));
    }
    // A whole unit freed: trim_and_retry hands it to the driver, and then it counts.
    pool.deallocate(s, block[1], 16 * MiB);
    block[1] = nullptr;
    o.admission.on_shortfall = admission_policy::trim_and_retry;
    {
      session admitted(pool, s, o);
      const session_report& r = admitted.report();
      CHECK(r.admission_trimmed);
      CHECK(r.admission_returned_bytes == 32 * MiB);
      CHECK(r.admission_free_bytes == 32 * MiB);
      CHECK(r.admission_cached_bytes == 0);  // the half unit left beside block[3]
      CHECK(r.admission_available_bytes == 32 * MiB);
      auto whole = admitted.make_buffer<char>(32 * MiB);  // from the device
    }
  }
  for (void* p : block)
    if (p != nullptr) pool.deallocate(s, p, 16 * MiB);
  s.synchronize();
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
    CHECK_THAT(e.what(), contains("reserves 192.00 MiB (192.00 MiB in use, 0 B cached) under a "
                                  "limit of 256.00 MiB"));
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
