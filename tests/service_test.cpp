// SPDX-License-Identifier: Apache-2.0
// A service: 1000 requests on 4 threads, each a session nested in the service's, with budgets,
// admission, out-of-memory refusals and injected faults, reporting one JSON line each. The load is
// service_load.hpp's, which tests/testing/gtest_service.cpp runs under GoogleTest too.
#include <cuscope/detail/nvml.hpp>  // process_usage, what an admission asks
#include <cuscope/json_line_sink.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <unistd.h>  // getpid

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "json_check.hpp"
#include "service_load.hpp"
#include "test_support.hpp"

using cuscope::json_line_sink;
using cuscope::memory_pool;
using cuscope::session;
using cuscope::session_options;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::device_guard;
using cuscope::test::json_error;
using cuscope::test::json_field;
using cuscope::test::worker_log;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE(
    "service: 1000 requests on 4 threads write 1000 report lines that parse, add up, and show "
    "no leaks; the pool ends empty and trimmed",
    "[service][session][json_line_sink][concurrency]") {
  device_guard device;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cuscope_service." + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  std::filesystem::remove(path);
  cuscope::pool_options po;
  po.max_bytes = 64 * MiB;
  memory_pool pool(po);
  stream s;
  constexpr int threads = 4;
  constexpr int requests = 250;
  constexpr std::size_t keep = 32 * MiB;
  constexpr std::size_t injected_alloc_faults = 3;
  constexpr std::size_t injected_sync_faults = 2;
  std::vector<worker_log> logs(threads);
  std::size_t lines_written = 0;
  {
    const auto sink = json_line_sink::append_to(path);
    session_options so;
    so.name = "service";
    // Above what the service can ever hold, its weights and a huge request on every thread at
    // once (a budget counts bytes before the pool is asked): a huge request is the pool's to
    // refuse, never the service's.
    so.budget_bytes = 32 * MiB + threads * 80 * MiB + 32 * MiB;
    so.keep_bytes = keep;
    so.report_to = sink.get();
    session service(pool, s, so);
    auto weights = service.make_buffer<char>(32 * MiB, "weights");
#if CUSCOPE_TEST_SIMULATED
    for (const std::size_t nth : {std::size_t{50}, std::size_t{700}, std::size_t{1500}})
      cuscope::sim::fail_api("cudaMallocFromPoolAsync", nth, cudaErrorUnknown);
    // Each request's end synchronizes its stream once: two of the ends fail.
    for (const std::size_t nth : {std::size_t{20}, std::size_t{500}})
      cuscope::sim::fail_api("cudaStreamSynchronize", nth, cudaErrorUnknown);
#endif
    {
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t)
        workers.emplace_back(cuscope::test::serve_requests, std::ref(service), t, requests,
                             std::ref(logs[static_cast<std::size_t>(t)]), nullptr);
      for (std::thread& w : workers)
        w.join();
    }
    weights = {};
    CHECK(service.live_allocations() == 0);
    CHECK(pool.stats().used_bytes == 0);
    const session_report& r = service.finish();
    CHECK_FALSE(r.leaked());
    CHECK(r.complete());
    CHECK(r.tracked_peak_bytes <= so.budget_bytes);
    lines_written = sink->lines();
    CHECK(sink->failures() == 0);
  }
  CHECK(pool.stats().used_bytes == 0);
  CHECK(pool.stats().reserved_bytes <= keep);

  // Checked here: Catch2 assertions are not thread-safe.
  worker_log total;
  for (const worker_log& l : logs)
    total.add(l);
  for (const std::string& e : total.errors)
    FAIL_CHECK(e);
  CHECK(total.admitted + total.admission_refusals == threads * requests);
  CHECK(total.served.size() == total.admitted);
  CHECK(total.budget_refusals > 0);
  // The huge requests at least, unless an injected fault took the call first.
  CHECK(total.pool_refusals + total.faults >= threads * requests / 50);
  if (cuscope::test::simulated) {
    CHECK(total.faults == injected_alloc_faults);
    CHECK(total.failed_ends == injected_sync_faults);
  }

  // One line per request that began, and the service's last.
  const std::vector<std::string> lines = read_lines(path);
  std::filesystem::remove(path);
  CHECK(lines_written == total.admitted + 1);
  REQUIRE(lines.size() == total.admitted + 1);
  const std::map<std::string, std::size_t>& budgets = total.budgets;
  std::set<std::string> names;
  std::size_t incomplete = 0;
  std::size_t trimmed = 0;
  std::size_t admission_checked = 0;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    const std::string& line = lines[i];
    INFO(line);
    REQUIRE(json_error(line).empty());
    CHECK(json_field(line, "version") == "1");
    names.insert(json_field(line, "name"));
    CHECK(json_field(line, "leaked") == "false");
    CHECK(json_field(line, "leaked_allocations") == "0");
    CHECK(line.find("\"leaks\":[]") != std::string::npos);
    const std::string name = json_field(line, "name");
    const auto budget = budgets.find(name);
    REQUIRE(budget != budgets.end());
    if (budget->second != 0)
      CHECK(std::stoull(json_field(line, "tracked_peak_bytes")) <= budget->second);
    if (json_field(line, "complete") == "false") {
      ++incomplete;
      CHECK(line.find("synchronizing: ") != std::string::npos);
    } else {
      // Each request's end trims, or leaves the trim to a request still open.
      CHECK(json_field(line, "trimmed") != json_field(line, "trim_deferred"));
    }
    if (json_field(line, "trimmed") == "true") ++trimmed;
    if (json_field(line, "admission_required_bytes") != "0") {
      ++admission_checked;
      CHECK(json_field(line, "admission_required_bytes") == std::to_string(16 * MiB));
    }
  }
  CHECK(names == total.served);  // every request that began wrote exactly one line
  CHECK(incomplete == total.failed_ends);
  CHECK(trimmed > 0);
  CHECK(admission_checked + total.admission_refusals == threads * requests / 5);
  CHECK(total.admission_refusals >= threads * requests / 10);  // every one asking 48 MiB
  const std::string& last = lines.back();
  CHECK(json_error(last).empty());
  CHECK(json_field(last, "name") == "service");
  CHECK(json_field(last, "leaked") == "false");
  CHECK(std::stoull(json_field(last, "tracked_peak_bytes")) >= 32 * MiB);
  CHECK(json_field(last, "used_at_exit_bytes") == "0");
  CHECK(std::stoull(json_field(last, "reserved_at_exit_bytes")) <= keep);
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE(
    "service: 8 threads asking NVML at once load and initialize it once, and every answer is the "
    "device's",
    "[service][session][admission][concurrency]") {
  device_guard device;
  constexpr int threads = 8;
  // The pool's reserve is made before the threads start and the requests fit in it, so the
  // memory the device has taken, which the simulated NVML gives this process, does not change.
  memory_pool pool;
  stream s;
  pool.deallocate(s, pool.allocate(s, 64 * MiB), 64 * MiB);
  s.synchronize();
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  const std::size_t taken = total_bytes - free_bytes;
  int domain = 0;
  int bus = 0;
  int slot = 0;
  REQUIRE(cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, 0) == cudaSuccess);
  const std::string bus_id = cuscope::detail::nvml::bus_id(
      static_cast<unsigned>(domain), static_cast<unsigned>(bus), static_cast<unsigned>(slot));
  const unsigned pid = cuscope::detail::nvml::this_process();

  // Runs body(t) on threads threads released together, and returns how many answers were wrong.
  const auto at_once = [&](const std::function<int(int)>& body) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::atomic<int> wrong{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load())
          std::this_thread::yield();
        wrong.fetch_add(body(t));
      });
    while (ready.load() < threads)
      std::this_thread::yield();
    go = true;
    for (std::thread& w : workers)
      w.join();
    return wrong.load();
  };

  SECTION("the first queries of a process race to load NVML") {
    constexpr int queries = 100;
    CHECK(at_once([&](int) {
            int wrong = 0;
            for (int i = 0; i < queries; ++i) {
              const auto a = cuscope::detail::nvml::process_usage(bus_id, pid);
              const bool right = a.available && a.listed && a.used_bytes == taken &&
                                 a.source == "the simulated device's NVML";
              wrong += right ? 0 : 1;
            }
            return wrong;
          }) == 0);
    CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
    CHECK(cuscope::sim::call_count("nvmlShutdown") == 0);
    CHECK(cuscope::sim::call_count("nvmlDeviceGetComputeRunningProcesses_v3") ==
          std::size_t{threads * queries});
  }

  SECTION("requests whose admission asks NVML every time") {
    constexpr int requests = 25;
    session_options so;
    so.name = "service";
    session service(pool, s, so);
    session_options o;
    o.admission.bytes = MiB;
    o.admission.query_nvml = cuscope::nvml_query::always;
    o.trim = false;
    CHECK(at_once([&](int t) {
            stream mine;
            int wrong = 0;
            for (int i = 0; i < requests; ++i) {
              session_options mo = o;
              mo.name = "request " + std::to_string(t) + "." + std::to_string(i);
              session request(service, mine, mo);
              auto b = request.make_buffer<char>(256 * 1024, "work");
              const session_report& r = request.report();
              const bool right = r.admission_nvml == "the simulated device's NVML" &&
                                 r.admission_process_bytes == taken &&
                                 r.admission_other_processes_bytes == std::size_t{0} &&
                                 r.driver_total_bytes - r.admission_free_bytes == taken;
              wrong += right ? 0 : 1;
            }
            return wrong;
          }) == 0);
    CHECK(cuscope::sim::call_count("nvmlInit_v2") == 1);
    CHECK(cuscope::sim::call_count("nvmlShutdown") == 0);
    CHECK(cuscope::sim::call_count("nvmlDeviceGetComputeRunningProcesses_v3") ==
          std::size_t{threads * requests});
  }
}
#endif
