// SPDX-License-Identifier: Apache-2.0
// The service of tests/service_test.cpp in a GoogleTest suite under the per-test leak check
// (<cuscope/testing/gtest.hpp>): 1000 requests on 4 threads, each a session nested in the
// service's, write 1000 JSON lines (a refused request its admission_error's report) that parse and
// add up, and the leak check around the test finds the suite's pool as it was.
#include <cuscope/testing/gtest.hpp>

#include <cuscope/cuscope.hpp>
#include <cuscope/json_line_sink.hpp>

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "json_check.hpp"
#include "service_load.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

cuscope::memory_pool* suite_pool = nullptr;  // 64 MiB at most
cuscope::stream* suite_stream = nullptr;

std::size_t figure(const std::string& line, const char* key) {
  return static_cast<std::size_t>(std::stoull(cuscope::test::json_field(line, key)));
}

TEST(Service, ThousandRequestsOnFourThreadsWriteOneLineEach) {
  constexpr int threads = 4;
  constexpr int requests = 250;
  std::vector<std::string> lines;
  std::vector<cuscope::test::worker_log> logs(threads);
  std::size_t written = 0;
  {
    cuscope::json_line_sink sink([&lines](const std::string& line) { lines.push_back(line); });
    cuscope::session_options so;
    so.name = "service";
    so.budget_bytes = 32 * MiB + threads * 80 * MiB + 32 * MiB;  // the pool refuses, not it
    so.report_to = &sink;
    cuscope::session service(*suite_pool, *suite_stream, so);
    auto weights = service.make_buffer<char>(32 * MiB, "weights");
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back(cuscope::test::serve_requests, std::ref(service), t, requests,
                           std::ref(logs[static_cast<std::size_t>(t)]), &sink);
    for (std::thread& w : workers)
      w.join();
    weights = {};
    const cuscope::session_report& r = service.finish();
    EXPECT_FALSE(r.leaked()) << r.to_string();
    EXPECT_TRUE(r.complete()) << r.to_string();
    written = sink.lines();
    EXPECT_EQ(sink.failures(), 0u);
  }
  cuscope::test::worker_log total;
  for (const cuscope::test::worker_log& l : logs)
    total.add(l);
  for (const std::string& e : total.errors)
    ADD_FAILURE() << e;
  EXPECT_EQ(total.admitted + total.admission_refusals, std::size_t{threads * requests});
  EXPECT_EQ(total.served.size(), total.admitted);
  EXPECT_GT(total.budget_refusals, 0u);
  EXPECT_GE(total.pool_refusals, std::size_t{threads * requests / 50});
  EXPECT_EQ(total.faults, 0u);
  EXPECT_EQ(total.failed_ends, 0u);

  // One line per request, begun or refused by its admission, and the service's.
  ASSERT_EQ(lines.size(), std::size_t{threads * requests} + 1);
  EXPECT_EQ(written, lines.size());
  std::set<std::string> names;
  std::set<std::string> refused;
  std::size_t admission_checked = 0;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    const std::string& line = lines[i];
    SCOPED_TRACE(line);
    ASSERT_EQ(cuscope::test::json_error(line), "");
    const std::string name = cuscope::test::json_field(line, "name");
    if (cuscope::test::json_field(line, "admission_refused") == "true") {
      EXPECT_TRUE(refused.insert(name).second);
      EXPECT_LT(figure(line, "admission_available_bytes"),
                figure(line, "admission_required_bytes"));
      EXPECT_EQ(cuscope::test::json_field(line, "admission_nvml"),
                "the simulated device's NVML");  // asked to explain the refusal
      continue;
    }
    EXPECT_TRUE(names.insert(name).second);
    EXPECT_EQ(cuscope::test::json_field(line, "leaked"), "false");
    EXPECT_EQ(cuscope::test::json_field(line, "complete"), "true");
    EXPECT_EQ(figure(line, "leaked_bytes"), 0u);
    // The figures add up: what the end returned is the reserve it found less what it left (another
    // request may have grown the pool meanwhile), the request's own peak is within its budget and
    // the pool's peak within its limit.
    const std::size_t finish = figure(line, "reserved_at_finish_bytes");
    const std::size_t exit = figure(line, "reserved_at_exit_bytes");
    EXPECT_EQ(figure(line, "returned_bytes"), finish > exit ? finish - exit : 0);
    EXPECT_LE(figure(line, "peak_used_bytes"), figure(line, "peak_reserved_bytes"));
    EXPECT_LE(figure(line, "peak_reserved_bytes"), 64 * MiB);
    const std::size_t budget = total.budgets.at(name);
    if (budget != 0) {
      EXPECT_LE(figure(line, "tracked_peak_bytes"), budget);
    }
    if (figure(line, "admission_required_bytes") != 0) {
      ++admission_checked;
      EXPECT_EQ(figure(line, "admission_required_bytes"), 16 * MiB);
      EXPECT_GE(figure(line, "admission_available_bytes"), 16 * MiB);
    }
  }
  EXPECT_EQ(names, total.served);
  EXPECT_EQ(refused.size(), total.admission_refusals);
  EXPECT_EQ(admission_checked + total.admission_refusals, std::size_t{threads * requests / 5});
  const std::string& last = lines.back();
  EXPECT_EQ(cuscope::test::json_field(last, "name"), "service");
  EXPECT_EQ(figure(last, "used_at_exit_bytes"), 0u);
  EXPECT_GE(figure(last, "tracked_peak_bytes"), 32 * MiB);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  cuscope::testing::install_gtest_listener();
  cuscope::stream stream;
  cuscope::pool_options options;
  options.max_bytes = 64 * MiB;
  cuscope::memory_pool pool(options);
  suite_pool = &pool;
  suite_stream = &stream;
  const cuscope::testing::watch_pool watched(pool, "the service's pool");
  const int failed = RUN_ALL_TESTS();
  stream.synchronize();
  return failed;
}
