// SPDX-License-Identifier: Apache-2.0
// An inference service as docs/concepts.md ("A concurrent service") and docs/services.md describe
// it: 8 worker threads, one shared pool with a limit, one session for the service and a session
// per request nested in it with the request's own budget. Some requests go over their budget,
// some ask more than the pool's limit; every report must describe its own request.
#include <cuscope/cuscope.hpp>
#include <cuscope/json_line_sink.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::test::contains;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

enum class kind { normal, over_budget, over_pool };

struct request {
  std::string id;
  kind what = kind::normal;
  std::size_t budget = 0;
  std::size_t a = 0, b = 0, c = 0;  // a lives throughout; b, then c, beside it
};

struct outcome {
  request q;
  std::size_t made = 0;  // allocations that succeeded
  std::size_t peak = 0;  // the request's own peak of live bytes
  bool refused = false;  // the over-budget or over-pool allocation threw out_of_memory
  cudaError_t status = cudaSuccess;
  std::size_t requested = 0;
  std::string message;
  cuscope::session_report report;
};

request make_request(int worker, int i) {
  request q;
  q.id = "request " + std::to_string(worker) + "." + std::to_string(i);
  q.what = i % 10 == 3 ? kind::over_budget : i % 10 == 7 ? kind::over_pool : kind::normal;
  q.budget = q.what == kind::over_pool ? std::size_t{2} << 30 : 4 * MiB;
  q.a = std::size_t(1 + (worker + i) % 4) * 256 * KiB;
  q.b = std::size_t(1 + i % 3) * 512 * KiB;
  q.c = std::size_t(1 + (worker * 7 + i) % 5) * 128 * KiB;
  return q;
}

// What a worker does for one request: the code a service would write.
outcome handle(cuscope::session& service, cuscope::stream_ref s, const request& q) {
  outcome out;
  out.q = q;
  cuscope::session_options o;
  o.name = q.id;
  o.budget_bytes = q.budget;
  cuscope::session req(service, s, o);
  {
    auto a = req.make_buffer<std::byte>(q.a, "weights slice");
    ++out.made;
    {
      auto b = req.make_buffer<std::byte>(q.b, "kv cache");
      ++out.made;
    }
    {
      auto c = req.make_buffer<std::byte>(q.c, "activations");
      ++out.made;
    }
    out.peak = q.a + std::max(q.b, q.c);
    if (q.what != kind::normal) {
      const std::size_t ask = q.what == kind::over_budget ? 8 * MiB : std::size_t{1} << 30;
      try {
        auto big = req.make_buffer<std::byte>(ask, "too big");
        ++out.made;
      } catch (const cuscope::out_of_memory& e) {
        out.refused = true;
        out.status = e.status();
        out.requested = e.requested_bytes();
        out.message = e.what();
      }
    }
  }
  out.report = req.finish();
  return out;
}

// Requests served by worker threads, each with a stream of its own; every worker's outcomes.
std::vector<std::vector<outcome>> serve(cuscope::session& service, int workers, int per_worker) {
  std::vector<std::vector<outcome>> results(static_cast<std::size_t>(workers));
  std::vector<std::string> failures(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        cuscope::stream s;  // one per worker thread
        for (int i = 0; i < per_worker; ++i)
          results[std::size_t(w)].push_back(handle(service, s, make_request(w, i)));
      } catch (const std::exception& e) {
        failures[std::size_t(w)] = e.what();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  for (const auto& f : failures)
    CHECK(f.empty());
  return results;
}

// The program's out-of-memory handler: here it has no cache of its own to drop, so it counts the
// refusals and lets them fail.
struct refusals {
  std::atomic<std::size_t> count{0};
  std::atomic<std::size_t> bytes{0};
};

bool count_refusal(const cuscope::out_of_memory_info& info) noexcept {
  auto* r = static_cast<refusals*>(info.user);
  if (info.attempt == 1) {
    r->count.fetch_add(1);
    r->bytes.fetch_add(info.bytes);
  }
  return false;
}

}  // namespace

TEST_CASE("inference service: 8 threads, one pool, a session per request with its own budget",
          "[docs][session][service][concurrency]") {
  cuscope::test::device_guard device;

  cuscope::pool_options po;
  po.name = "inference";
  po.max_bytes = 512 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream service_stream;

  std::vector<std::string> lines;  // the sink calls its callback under its own lock
  cuscope::json_line_sink sink([&lines](const std::string& line) { lines.push_back(line); });
  cuscope::session_options so;
  so.name = "service";
  so.report_to = &sink;
  cuscope::session service(pool, service_stream, so);
  refusals refused;
  cuscope::scoped_out_of_memory_handler handler(&count_refusal, &refused);

  constexpr int workers = 8;
  constexpr int per_worker = 50;
  const auto results = serve(service, workers, per_worker);

  std::size_t allocations = 0, over_budget = 0, over_pool = 0, concurrent = 0, deferred = 0,
              largest_peak = 0;
  for (const auto& worker : results) {
    REQUIRE(worker.size() == std::size_t(per_worker));
    for (const auto& out : worker) {
      const cuscope::session_report& r = out.report;
      INFO(r.to_string());
      CHECK(r.name == out.q.id);
      CHECK(r.complete());
      CHECK_FALSE(r.leaked());
      CHECK(r.leaked_allocations == 0);
      CHECK_FALSE(r.untracked_leak);
      CHECK(r.allocations == out.made);
      CHECK(r.frees == out.made);
      // The request's own peak, exact under its budget, not the pool's. (A request the pool
      // refused reports the refused bytes in its peak, and the pool's peak a request reports
      // can miss its own: the cases "a refused allocation is not part of a session's peak" and
      // "an idle service holds what it held before the burst" below.)
      if (out.q.what != kind::over_pool) CHECK(r.tracked_peak_bytes == out.peak);
      if (out.q.what != kind::over_pool) largest_peak = std::max(largest_peak, out.peak);
      CHECK_FALSE(r.tracked_peak_upper_bound);
      CHECK(r.tracked_peak_bytes <= out.q.budget);
      concurrent += r.concurrent ? 1 : 0;
      deferred += r.trim_deferred ? 1 : 0;
      CHECK_FALSE((r.trimmed && r.trim_deferred));
      allocations += out.made;
      switch (out.q.what) {
        case kind::normal:
          CHECK_FALSE(out.refused);
          CHECK(r.budget_refusals == 0);
          CHECK(r.pool_refusals == 0);
          break;
        case kind::over_budget:
          ++over_budget;
          CHECK(out.refused);
          CHECK(out.status == cudaSuccess);  // a budget: CUDA was not asked
          CHECK(out.requested == 8 * MiB);
          CHECK_THAT(out.message, contains(out.q.id));
          CHECK(r.budget_refusals == 1);
          CHECK(r.pool_refusals == 0);
          break;
        case kind::over_pool:
          ++over_pool;
          CHECK(out.refused);
          CHECK(out.status == cudaErrorMemoryAllocation);
          CHECK(out.requested == std::size_t{1} << 30);
          CHECK_THAT(out.message, contains("pool 'inference'"));
          CHECK(r.budget_refusals == 0);
          CHECK(r.pool_refusals == 1);
          CHECK_THAT(r.to_string(), contains("refused: 0 by a budget, 1 by the pool"));
          break;
      }
    }
  }
  CHECK(over_budget == workers * per_worker / 10);
  CHECK(over_pool == workers * per_worker / 10);
  CHECK(refused.count == over_pool);  // the handler saw each pool refusal, not the budgets'
  CHECK(refused.bytes == over_pool * (std::size_t{1} << 30));
  CHECK(concurrent > 0);  // the requests did overlap
  CHECK(deferred > 0);    // and left the trim to the last one open
  CHECK(pool.stats().used_bytes == 0);
  // (An idle service holds what it held before the burst: the case "an idle service holds what
  // it held before the burst" below.)

  const cuscope::session_report& total = service.finish();
  INFO(total.to_string());
  CHECK_FALSE(total.leaked());
  CHECK(total.allocations == allocations);
  CHECK(total.frees == allocations);
  CHECK(total.budget_refusals == over_budget);
  CHECK(total.pool_refusals == over_pool);
  CHECK(total.reserved_at_exit_bytes == total.reserved_at_entry_bytes);
  // No budget, and 8 threads allocated through it: the sum of the threads' peaks, so it says so.
  CHECK(total.tracked_peak_upper_bound);
  CHECK(total.tracked_peak_bytes >= largest_peak);
  CHECK_THAT(total.to_string(), contains("at most"));
  CHECK(pool.stats().used_bytes == 0);

  // One JSON line per request and one for the service, each valid and leak-free.
  REQUIRE(lines.size() == std::size_t(workers * per_worker + 1));
  for (const auto& line : lines) {
    INFO(line);
    CHECK(cuscope::test::json_error(line).empty());
    CHECK(cuscope::test::json_field(line, "leaked") == "false");
    CHECK(cuscope::test::json_field(line, "complete") == "true");
  }
  CHECK(cuscope::test::json_field(lines.back(), "name") == "service");
}

// A budgeted session's peak counts what was made: a request refused by the pool, or by an
// enclosing budget after the request's own budget accepted it, never shows in it.
TEST_CASE("a refused allocation is not part of a session's peak", "[docs][session][service]") {
  cuscope::test::device_guard device;
  cuscope::pool_options po;
  po.name = "inference";
  po.max_bytes = 64 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream s;

  // Refused by the pool's limit.
  cuscope::session service(pool, s, "service");
  cuscope::session_options o;
  o.name = "over the pool";
  o.budget_bytes = std::size_t{2} << 30;
  {
    cuscope::session req(service, s, o);
    {
      auto a = req.make_buffer<std::byte>(MiB);
      CHECK_THROWS_AS(req.make_buffer<std::byte>(std::size_t{1} << 30), cuscope::out_of_memory);
    }
    const cuscope::session_report& r = req.finish();
    INFO(r.to_string());
    CHECK(r.pool_refusals == 1);
    CHECK(r.tracked_peak_bytes == MiB);
  }
  CHECK(service.finish().tracked_peak_bytes == MiB);

  // Refused by the service's budget after the request's own budget accepted it.
  cuscope::session_options so;
  so.name = "service";
  so.budget_bytes = 16 * MiB;
  cuscope::session bounded(pool, s, so);
  o.name = "over the service's budget";
  {
    cuscope::session req(bounded, s, o);
    {
      auto a = req.make_buffer<std::byte>(MiB);
      CHECK_THROWS_AS(req.make_buffer<std::byte>(32 * MiB), cuscope::out_of_memory);
    }
    const cuscope::session_report& r = req.finish();
    INFO(r.to_string());
    CHECK(r.budget_refusals == 1);
    CHECK(r.tracked_peak_bytes == MiB);
  }
  CHECK(bounded.finish().tracked_peak_bytes == MiB);
}

// The first request of a burst reads the pool's reserve and resets its peaks while no other
// request can begin (under the service's lock): the last request of the burst trims back to what
// the idle service held, and a request's report never shows the pool's peak below its own.
TEST_CASE("an idle service holds what it held before the burst",
          "[docs][session][service][concurrency]") {
  cuscope::test::device_guard device;
  cuscope::pool_options po;
  po.name = "inference";
  po.max_bytes = 512 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream service_stream;
  cuscope::session service(pool, service_stream, "service");
  for (int burst = 0; burst < 20; ++burst) {
    const auto results = serve(service, 8, 20);
    INFO("after burst " << burst);
    for (const auto& worker : results)
      for (const auto& out : worker)
        if (out.q.what != kind::over_pool)
          CHECK(out.report.peak_used_bytes >= out.report.tracked_peak_bytes);
    CHECK(pool.stats().used_bytes == 0);
    CHECK(pool.stats().reserved_bytes == 0);
  }
  CHECK_FALSE(service.finish().leaked());
}

TEST_CASE("the service session itself, shared by threads that free each other's buffers",
          "[docs][session][service][concurrency]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options so;
  so.name = "shared";
  so.budget_bytes = 64 * MiB;
  cuscope::session shared(pool, s, so);

  // Each thread makes buffers on the shared session and keeps every other one, which another
  // thread frees.
  constexpr int workers = 8;
  constexpr int per_worker = 200;
  std::vector<std::vector<cuscope::device_buffer<std::byte>>> kept(workers);
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        for (int i = 0; i < per_worker; ++i) {
          auto b = shared.make_buffer<std::byte>(std::size_t(1 + i % 7) * 4 * KiB, "shared");
          if (i % 2 == 0) kept[std::size_t(w)].push_back(std::move(b));
        }
      });
    }
    for (auto& t : threads)
      t.join();
  }
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, w] { kept[std::size_t((w + 1) % workers)].clear(); });
    for (auto& t : threads)
      t.join();
  }
  const cuscope::session_report& r = shared.finish();
  INFO(r.to_string());
  CHECK(r.allocations == std::size_t(workers * per_worker));
  CHECK(r.frees == r.allocations);
  CHECK_FALSE(r.leaked());
  CHECK(r.tracked_peak_bytes <= so.budget_bytes);
  CHECK_FALSE(r.tracked_peak_upper_bound);  // a budget counts exactly
  CHECK(pool.stats().used_bytes == 0);
}
