// SPDX-License-Identifier: Apache-2.0
#include <cuscope/device_buffer.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/report.hpp>
#include <stdexcept>
#include <string>

#include "test_support.hpp"

using cuscope::memory_pool;
using cuscope::memory_report;
using cuscope::named_pool;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("report: the driver's view is reconciled with what each pool holds", "[report]") {
  device_guard device;
  memory_pool activations;
  memory_pool weights;
  cuscope::stream s;
  cuscope::device_buffer<char> a(s, 64 * MiB, activations);
  { cuscope::device_buffer<char> gone(s, 32 * MiB, activations); }
  cuscope::device_buffer<char> w(s, 16 * MiB, weights);
  s.synchronize();
  const auto r =
      memory_report(0, named_pool{"activations", activations}, named_pool{"weights", weights});
  REQUIRE(r.pools.size() == 3);
  CHECK(r.pools[0].name == "activations");
  CHECK(r.pools[0].used_bytes == 64 * MiB);
  CHECK(r.pools[0].reserved_bytes >= 96 * MiB);
  CHECK(r.pools[0].cached_bytes() == r.pools[0].reserved_bytes - 64 * MiB);
  CHECK(r.pools[1].name == "weights");
  CHECK(r.pools[1].used_bytes == 16 * MiB);
  CHECK(r.pools[2].name == "default pool");
  CHECK(r.pools[2].is_default);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  CHECK(r.total_bytes == total);
  CHECK(r.taken_bytes() == r.pool_reserved_bytes() + r.graph.reserved_bytes + r.other_bytes());
  CHECK(r.other_bytes() > 0);  // the context at least
  const std::string table = r.to_string();
  CHECK_THAT(table, contains("activations"));
  CHECK_THAT(table, contains("64.00 MiB"));
  CHECK_THAT(table, contains("default pool"));
  CHECK_THAT(table, contains("other (context, cudaMalloc, others)"));
}

TEST_CASE("report: unnamed pools are numbered and cudaMalloc memory counts as other", "[report]") {
  device_guard device;
  memory_pool pool;
  const auto before = memory_report(0, pool);
  REQUIRE(before.pools.size() == 2);
  CHECK(before.pools[0].name == "pool 1");
  void* raw = nullptr;
  REQUIRE(cudaMalloc(&raw, 64 * MiB) == cudaSuccess);
  const auto after = memory_report(0, pool);
  CHECK(after.other_bytes() >= before.other_bytes() + 64 * MiB);
  REQUIRE(cudaFree(raw) == cudaSuccess);
  const auto none = memory_report(0);
  REQUIRE(none.pools.size() == 1);
  CHECK(none.pools[0].is_default);
}

TEST_CASE("report: listing the default pool does not list it twice", "[report]") {
  device_guard device;
  const auto r =
      memory_report(0, named_pool{"shared", cuscope::memory_pool_ref::device_default(0)});
  REQUIRE(r.pools.size() == 1);
  CHECK(r.pools[0].name == "shared");
  CHECK(r.pools[0].is_default);
}

TEST_CASE("report: an invalid device or a pool of another device is refused", "[report]") {
  device_guard device({2});
  CHECK_THROWS_WITH(memory_report(7), contains("device 7 is not valid"));
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::pool_options o;
  o.device = 1;
  memory_pool other(o);
  CHECK_THROWS_WITH(memory_report(0, other), contains("is not a pool of device 0"));
  CHECK(memory_report(1, other).pools.size() == 2);
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("report: a failing runtime call gives a clean exception and leaves the device as it was",
          "[report][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep(
      [](cuscope::test::fault_point& fault) {
        cuscope::pool_options o;
        o.device = 1;
        memory_pool pool(o);
        (void)fault.run([&] {
          const auto r = memory_report(1, named_pool{"p", pool});
          CHECK(r.pools.size() == 2);
        });
        CHECK(cuscope::current_device() == 0);
      },
      {2});
  CHECK(runs > 4);
}
#endif

TEST_CASE(
    "report: what nvidia-smi shows for the process is split into pools, cudaMalloc and the "
    "rest",
    "[report]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  cuscope::device_buffer<char> live(s, 48 * MiB, pool);
  { cuscope::device_buffer<char> gone(s, 16 * MiB, pool); }
  s.synchronize();
  void* raw = nullptr;
  REQUIRE(cudaMalloc(&raw, 32 * MiB) == cudaSuccess);
  cuscope::report_options o;
  o.malloc_bytes = 32 * MiB;
  const auto r = memory_report(0, {named_pool{"activations", pool}}, o);
  INFO(r.to_string());
  CHECK(r.pool_used_bytes() == 48 * MiB);
  CHECK(r.pool_cached_bytes() == r.pool_reserved_bytes() - 48 * MiB);
  if (cuscope::test::simulated) {
    // The simulated device's NVML: this process holds what the device has taken.
    CHECK(r.process.source == "the simulated device's NVML");
    REQUIRE(r.has_process_footprint());
    CHECK(r.process.used_bytes == r.taken_bytes());
    CHECK(r.other_processes_bytes() == 0);
#if CUSCOPE_TEST_SIMULATED
    CHECK(r.process_outside_pools_bytes() == cuscope::sim::config().context_bytes + 32 * MiB);
    CHECK(r.process_rest_bytes() == cuscope::sim::config().context_bytes);
#endif
  } else if (r.has_process_footprint()) {
    CHECK(r.process.used_bytes >= r.pool_reserved_bytes());
    CHECK(r.process.used_bytes <= r.taken_bytes());
  }
  if (r.has_process_footprint()) {
    CHECK(r.pool_used_bytes() + r.pool_cached_bytes() + *r.malloc_bytes + r.process_rest_bytes() ==
          r.process.used_bytes);
    const std::string table = r.to_string();
    CHECK_THAT(table, contains("nvidia-smi shows this process using"));
    CHECK_THAT(table, contains("cudaMalloc (as given)"));
    CHECK_THAT(table, contains("the rest (context, libraries)"));
  }
  REQUIRE(cudaFree(raw) == cudaSuccess);
}

TEST_CASE("report: NVML is not asked when the options say so", "[report]") {
  device_guard device;
  cuscope::report_options o;
  o.query_nvml = false;
  const auto r = memory_report(0, {}, o);
  CHECK_FALSE(r.has_process_footprint());
  CHECK(r.process_outside_pools_bytes() == 0);
  CHECK(r.other_processes_bytes() == 0);
  CHECK_THAT(r.to_string(), contains("not asked (report_options::query_nvml)"));
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("report: a device without NVML is reported as unavailable", "[report][sim]") {
  device_guard device;
  cuscope::sim::device_config c = cuscope::sim::config();
  c.nvml = false;
  cuscope::sim::reset(c);
  memory_pool pool;
  const auto r = memory_report(0, pool);
  CHECK_FALSE(r.process.available);
  CHECK_FALSE(r.has_process_footprint());
  CHECK_THAT(r.process.source, contains("unavailable"));
  CHECK_THAT(r.to_string(), contains("nvidia-smi's view (NVML): unavailable"));
  // The pools are reported all the same.
  CHECK(r.pools.size() == 2);
}

TEST_CASE("report: the simulated NVML follows NVML's calling conventions", "[report][sim]") {
  device_guard device({2});
  using namespace cuscope::detail::nvml;
  const library lib;
  REQUIRE(lib.loaded());
  const auto init = lib.function<return_t (*)()>("nvmlInit_v2");
  const auto shutdown = lib.function<return_t (*)()>("nvmlShutdown");
  const auto by_bus =
      lib.function<return_t (*)(const char*, device_t*)>("nvmlDeviceGetHandleByPciBusId_v2");
  const auto query = lib.function<return_t (*)(device_t, unsigned int*, process_info_v2*)>(
      "nvmlDeviceGetComputeRunningProcesses_v3");
  REQUIRE(init != nullptr);
  REQUIRE(by_bus != nullptr);
  REQUIRE(query != nullptr);
  CHECK(lib.symbol("nvmlDeviceGetMemoryInfo") == nullptr);
  device_t d = nullptr;
  CHECK(by_bus("00000000:01:00.0", &d) == 1);  // NVML_ERROR_UNINITIALIZED
  REQUIRE(init() == success);
  CHECK(by_bus("00000000:02:00.0", &d) == 6);  // NVML_ERROR_NOT_FOUND: two devices
  CHECK(by_bus("not a bus id", &d) == 2);      // NVML_ERROR_INVALID_ARGUMENT
  REQUIRE(by_bus("00000000:01:00.0", &d) == success);
  unsigned int n = 0;
  CHECK(query(d, &n, nullptr) == error_insufficient_size);
  CHECK(n == 1);
  process_info_v2 info{};
  REQUIRE(query(d, &n, &info) == success);
  CHECK(info.pid == this_process());
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  {
    cuscope::scoped_device on(1);
    REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  }
  CHECK(info.usedGpuMemory == total - free_bytes);
  CHECK(shutdown() == success);
  CHECK(shutdown() == 1);
}

TEST_CASE("report: NVML is loaded and initialized once, however many reports ask it",
          "[report][sim]") {
  device_guard device;
  constexpr std::size_t reports = 50;
  {
    memory_pool pool;
    cuscope::stream s;
    cuscope::device_buffer<char> live(s, 8 * MiB, pool);
    s.synchronize();
    for (std::size_t i = 0; i < reports; ++i) {
      const auto r = memory_report(0, pool);
      REQUIRE(r.has_process_footprint());
      CHECK(r.process.source == "the simulated device's NVML");
      CHECK(r.process.used_bytes == r.taken_bytes());  // the answers are the device's, each time
    }
  }
  CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
  CHECK(cuscope::sim::call_count("nvmlShutdown") == 0);  // left initialized until the end
  CHECK(cuscope::sim::call_count("nvmlDeviceGetHandleByPciBusId_v2") == reports);
  CHECK(cuscope::sim::call_count("nvmlDeviceGetComputeRunningProcesses_v3") == reports);
  // A fresh simulated process has NVML uninitialized: the first report initializes it again.
  cuscope::sim::reset(cuscope::sim::config());
  CHECK(memory_report(0, {}).has_process_footprint());
  CHECK(memory_report(0, {}).has_process_footprint());
  CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
  // Runtime calls and NVML's are counted apart.
  CHECK_THROWS_AS((void)cuscope::sim::call_count("nvmlDeviceGetMemoryInfo"), std::invalid_argument);
}

TEST_CASE("report: a failed nvmlInit_v2 is remembered with its reason and not tried again",
          "[report][sim]") {
  device_guard device;
  cuscope::sim::device_config c = cuscope::sim::config();
  c.nvml_init_error = 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  cuscope::sim::reset(c);
  for (int i = 0; i < 3; ++i) {
    const auto r = memory_report(0, {});
    CHECK_FALSE(r.has_process_footprint());
    CHECK(r.process.source ==
          "unavailable: nvmlInit_v2 failed with NVML error 9 (Driver Not Loaded)");
    CHECK_THAT(r.to_string(), contains("Driver Not Loaded"));
  }
  CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
  CHECK(cuscope::sim::call_count("nvmlDeviceGetHandleByPciBusId_v2") == 0);
  // The next (simulated) process tries again, and finds a driver.
  c.nvml_init_error = 0;
  cuscope::sim::reset(c);
  CHECK(memory_report(0, {}).has_process_footprint());
  CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
  c.nvml_init_error = -1;
  CHECK_THROWS_AS(cuscope::sim::reset(c), std::invalid_argument);
}
#endif

TEST_CASE("report: empty_cache synchronizes, trims every pool named and returns the bytes freed",
          "[report]") {
  device_guard device;
  cuscope::memory_pool a;
  cuscope::memory_pool b;
  cuscope::memory_pool untouched;
  cuscope::stream s;
  void* kept = a.allocate(s, 40 * MiB);
  a.deallocate(s, a.allocate(s, 64 * MiB), 64 * MiB);  // cached, its free not yet run
  b.deallocate(s, b.allocate(s, 32 * MiB), 32 * MiB);
  untouched.deallocate(s, untouched.allocate(s, 32 * MiB), 32 * MiB);
  const std::size_t a_before = a.stats().reserved_bytes;
  REQUIRE(a_before >= 104 * MiB);
  const std::size_t freed = cuscope::empty_cache(a, b);
  CHECK(freed == a_before - a.stats().reserved_bytes + 32 * MiB);
  CHECK(b.stats().reserved_bytes == 0);
  CHECK(a.stats().used_bytes == 40 * MiB);  // live memory stays
  CHECK(a.stats().reserved_bytes < a_before);
  CHECK(untouched.stats().reserved_bytes == 32 * MiB);  // not named, not trimmed
  CHECK(cuscope::empty_cache(b) == 0);
  a.deallocate(s, kept, 40 * MiB);
  s.synchronize();
}

TEST_CASE("report: empty_cache counts what the synchronization gave back above a threshold",
          "[report]") {
  device_guard device;
  cuscope::pool_options o;
  o.release_threshold_bytes = 16 * MiB;
  cuscope::memory_pool low(o);
  cuscope::stream s;
  low.deallocate(s, low.allocate(s, 64 * MiB), 64 * MiB);  // its free not yet run
  REQUIRE(low.stats().reserved_bytes == 64 * MiB);
  // The synchronization returns what lies above 16 MiB, the trim the rest; a pool named twice
  // counts once.
  CHECK(cuscope::empty_cache(low, low) == 64 * MiB);
  CHECK(low.stats().reserved_bytes == 0);
}
