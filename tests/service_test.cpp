// SPDX-License-Identifier: Apache-2.0
// A service: 1000 requests on 4 threads, each a session nested in the service's, with budgets,
// admission, out-of-memory refusals and injected faults, reporting one JSON line each.
#include <cuscope/json_line_sink.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <unistd.h>  // getpid

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::admission_error;
using cuscope::device_buffer;
using cuscope::json_line_sink;
using cuscope::leak_policy;
using cuscope::memory_pool;
using cuscope::session;
using cuscope::session_options;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::device_guard;
using cuscope::test::json_error;
using cuscope::test::json_field;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// What one worker saw; checked on the main thread (Catch2 assertions are not thread-safe).
struct worker_log {
  std::vector<std::string> errors;
  std::set<std::string> served;                // names of the requests that began
  std::map<std::string, std::size_t> budgets;  // of every request, 0 for none
  std::size_t admitted = 0;
  std::size_t admission_refusals = 0;
  std::size_t budget_refusals = 0;
  std::size_t pool_refusals = 0;
  std::size_t faults = 0;
  std::size_t failed_ends = 0;
};

void work(session& service, int id, int requests, worker_log& log) {
  stream s;
  std::mt19937 rng(static_cast<unsigned>(id) * 7919U + 1U);
  for (int i = 0; i < requests; ++i) {
    session_options o;
    o.name = "request " + std::to_string(id) + "." + std::to_string(i);
    o.budget_bytes = (1 + rng() % 8) * MiB;
    o.on_leak = leak_policy::ignore;  // the lines are checked instead
    const bool huge = i % 50 == 7;    // beyond the pool's limit
    if (huge) o.budget_bytes = 0;
    // The service's 32 MiB of weights leave at most 32 MiB of the pool's 64: three quarters of
    // its limit is never available, 16 MiB is unless the other requests hold more.
    if (i % 10 == 3) o.admission.pool_fraction = 0.75;
    if (i % 10 == 5) o.admission.bytes = 16 * MiB;
    log.budgets[o.name] = o.budget_bytes;
    try {
      session request(service, s, o);
      ++log.admitted;
      log.served.insert(o.name);
      {
        std::vector<device_buffer<char>> live;
        const int buffers = 1 + static_cast<int>(rng() % 6);
        for (int k = 0; k < buffers; ++k) {
          const std::size_t bytes = huge && k == 0 ? 80 * MiB : (1 + rng() % 4) * MiB / 2;
          try {
            live.push_back(request.make_buffer<char>(bytes, "activations"));
          } catch (const cuscope::out_of_memory& e) {
            if (e.status() == cudaSuccess)  // a budget, before CUDA was asked
              ++log.budget_refusals;
            else
              ++log.pool_refusals;
          } catch (const cuscope::cuda_error&) {
            ++log.faults;
          }
          if (rng() % 3 == 0 && !live.empty()) live.pop_back();
        }
      }
      try {
        const session_report& r = request.finish();
        if (r.leaked()) log.errors.push_back(o.name + ": leaked\n" + r.to_string());
      } catch (const cuscope::cuda_error&) {
        ++log.failed_ends;
        if (!request.finished()) log.errors.push_back(o.name + ": not finished after a failure");
        if (request.report().leaked())
          log.errors.push_back(o.name + ": leaked\n" + request.report().to_string());
      }
    } catch (const admission_error&) {
      ++log.admission_refusals;
    }
  }
}

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
        workers.emplace_back(work, std::ref(service), t, requests,
                             std::ref(logs[static_cast<std::size_t>(t)]));
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

  worker_log total;
  for (const worker_log& l : logs) {
    for (const std::string& e : l.errors)
      FAIL_CHECK(e);
    total.served.insert(l.served.begin(), l.served.end());
    total.budgets.insert(l.budgets.begin(), l.budgets.end());
    total.admitted += l.admitted;
    total.admission_refusals += l.admission_refusals;
    total.budget_refusals += l.budget_refusals;
    total.pool_refusals += l.pool_refusals;
    total.faults += l.faults;
    total.failed_ends += l.failed_ends;
  }
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
