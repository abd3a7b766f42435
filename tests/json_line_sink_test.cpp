// SPDX-License-Identifier: Apache-2.0
// json_line_sink and session_options::report_to: one JSON line per session end.
#include <cuscope/json_line_sink.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <stdlib.h>  // setenv, unsetenv (POSIX)
#include <unistd.h>  // getpid

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::json_line_sink;
using cuscope::leak_policy;
using cuscope::memory_pool;
using cuscope::session;
using cuscope::session_options;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;
using cuscope::test::json_error;
using cuscope::test::json_field;

static_assert(!std::is_copy_constructible_v<json_line_sink>);
static_assert(!std::is_move_constructible_v<json_line_sink>);
static_assert(std::is_base_of_v<cuscope::report_sink, json_line_sink>);
// The line callback is held by copy: a move-only one is refused by the constructor's constraint.
struct move_only_line {
  move_only_line() = default;
  move_only_line(move_only_line&&) = default;
  move_only_line(const move_only_line&) = delete;
  void operator()(const std::string&) {}
};
static_assert(!std::is_constructible_v<json_line_sink, move_only_line>);
static_assert(std::is_constructible_v<json_line_sink, void (*)(const std::string&)>);

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A file in the temporary directory, removed at the end of the scope.
class temp_file {
 public:
  explicit temp_file(const std::string& stem)
      : path_((std::filesystem::temp_directory_path() /
               (stem + "." + std::to_string(::getpid()) + ".jsonl"))
                  .string()) {
    std::filesystem::remove(path_);
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class env_var {
 public:
  env_var(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  env_var(const env_var&) = delete;
  env_var& operator=(const env_var&) = delete;
  ~env_var() { unsetenv(name_); }

 private:
  const char* name_;
};

// Cleanup failures seen by the handler (the tests that set it run on one thread).
std::vector<std::string>& cleanups() {
  static std::vector<std::string> seen;
  return seen;
}
void record_cleanup(const cuscope::cleanup_error& e) noexcept {
  try {
    cleanups().push_back(std::string(e.operation) + " | " + e.object + " | " + e.message);
  } catch (...) {
  }
}

}  // namespace

TEST_CASE(
    "json_line_sink: every session of a service writes one line as it ends, which parses back "
    "to its report",
    "[json_line_sink]") {
  device_guard device;
  const temp_file file("cuscope_sink_file");
  const auto sink = json_line_sink::append_to(file.path());
  CHECK(sink->target() == "file '" + file.path() + "'");
  memory_pool pool;
  stream s;
  session_options so;
  so.name = "service";
  so.report_to = sink.get();
  session_report ra;
  session_report rb;
  {
    session service(pool, s, so);
    auto kept = std::make_unique<cuscope::device_buffer<char>>();
    {
      session_options o;
      o.name = "request \"a\"";
      o.on_leak = leak_policy::ignore;
      session a(service, o);  // inherits the service's sink
      *kept = a.make_buffer<char>(3 * MiB, "kept");
      { auto scratch = a.make_buffer<char>(5 * MiB); }
      ra = a.finish();
      CHECK(sink->lines() == 1);
    }
    {
      session b(service, "request b");
      { auto x = b.make_buffer<char>(MiB); }
      rb = b.finish();
    }
    kept.reset();
    CHECK(sink->lines() == 2);
  }  // the service's destructor ends it and writes its line too
  CHECK(sink->lines() == 3);
  CHECK(sink->failures() == 0);
  const std::vector<std::string> lines = split_lines(read_file(file.path()));
  REQUIRE(lines.size() == 3);
  for (const std::string& line : lines) {
    INFO(line);
    CHECK(json_error(line).empty());
    CHECK(json_field(line, "version") == "1");
    CHECK(json_field(line, "complete") == "true");
  }
  CHECK(json_field(lines[0], "name") == "request \"a\"");
  CHECK(json_field(lines[0], "leaked_allocations") == "1");
  CHECK(json_field(lines[0], "leaked_bytes") == std::to_string(3 * MiB));
  CHECK(json_field(lines[0], "tracked_peak_bytes") == std::to_string(ra.tracked_peak_bytes));
  CHECK(ra.tracked_peak_bytes == 8 * MiB);
  CHECK(json_field(lines[0], "tag") == "kept");  // the first leak's
  CHECK(json_field(lines[1], "name") == "request b");
  CHECK(json_field(lines[1], "leaked") == "false");
  CHECK(json_field(lines[1], "returned_bytes") == std::to_string(rb.returned_bytes));
  CHECK(json_field(lines[2], "name") == "service");
  CHECK(json_field(lines[2], "leaked") == "false");  // the leaked buffer died before the service
  CHECK(json_field(lines[2], "tracked_peak_bytes") == std::to_string(8 * MiB));

  SECTION("a second sink appends to the same file") {
    const auto again = json_line_sink::append_to(file.path());
    session_options o;
    o.report_to = again.get();
    o.name = "later";
    session later(pool, s, o);
    (void)later.finish();
    const std::vector<std::string> now = split_lines(read_file(file.path()));
    REQUIRE(now.size() == 4);
    CHECK(json_field(now[3], "name") == "later");
  }
}

TEST_CASE("json_line_sink: sessions ending on 4 threads at once write whole lines, one each",
          "[json_line_sink][concurrency]") {
  device_guard device;
  std::ostringstream out;
  json_line_sink sink(out);
  CHECK(sink.target() == "a std::ostream");
  memory_pool pool;
  stream s;
  session_options so;
  so.name = "service";
  so.report_to = &sink;
  constexpr int threads = 4;
  constexpr int requests = 50;
  {
    session service(pool, s, so);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&service, t] {
        stream own;
        for (int i = 0; i < requests; ++i) {
          session request(service, own,
                          "request " + std::to_string(t) + "." + std::to_string(i) +
                              std::string(static_cast<std::size_t>(i) * 40, 'x'));  // long lines
          auto b = request.make_buffer<char>((1 + static_cast<std::size_t>(i % 3)) * MiB);
        }
      });
    }
    for (std::thread& w : workers)
      w.join();
    CHECK(sink.lines() == threads * requests);
  }
  const std::vector<std::string> lines = split_lines(out.str());
  REQUIRE(lines.size() == threads * requests + 1);
  std::set<std::string> names;
  for (const std::string& line : lines) {
    INFO(line);
    REQUIRE(json_error(line).empty());
    CHECK(json_field(line, "leaked") == "false");
    names.insert(json_field(line, "name"));
  }
  CHECK(names.size() == lines.size());  // every session once
  CHECK(json_field(lines.back(), "name") == "service");
}

namespace {
std::vector<std::string> lines_seen;
void keep_line(const std::string& line) {
  lines_seen.push_back(line);
}
}  // namespace

TEST_CASE(
    "json_line_sink: a callback (a function or a lambda) gets each line without its newline; "
    "an empty one is refused",
    "[json_line_sink]") {
  device_guard device;
  memory_pool pool;
  stream s;
  lines_seen.clear();
  std::vector<std::string> captured;
  json_line_sink to_function(&keep_line);
  json_line_sink to_lambda([&captured](const std::string& line) { captured.push_back(line); });
  CHECK(to_function.target() == "a callback");
  for (json_line_sink* sink : {&to_function, &to_lambda}) {
    session_options o;
    o.name = "called back";
    o.report_to = sink;
    session work(pool, s, o);
    { auto b = work.make_buffer<char>(MiB); }
    (void)work.finish();
  }
  CHECK(to_function.lines() == 1);
  CHECK(to_lambda.lines() == 1);
  REQUIRE(lines_seen.size() == 1);
  REQUIRE(captured.size() == 1);
  CHECK(json_error(captured[0]).empty());
  CHECK(json_field(captured[0], "name") == "called back");
  CHECK(captured[0].find('\n') == std::string::npos);
  CHECK(json_field(lines_seen[0], "name") == "called back");

  void (*none)(const std::string&) = nullptr;
  CHECK_THROWS_AS(json_line_sink(none), std::invalid_argument);
  CHECK_THROWS_WITH(json_line_sink(none), contains("the line callback is empty"));
  CHECK_THROWS_WITH(json_line_sink(std::function<void(const std::string&)>()),
                    contains("the line callback is empty"));
  CHECK(json_line_sink(std::function<void(const std::string&)>(&keep_line)).target() ==
        "a callback");
}

TEST_CASE(
    "json_line_sink: a failing sink goes to the cleanup handler and the session ends all the "
    "same",
    "[json_line_sink]") {
  device_guard device;
  cleanups().clear();
  const cuscope::scoped_cleanup_handler handler(&record_cleanup);
  memory_pool pool;
  stream s;
  json_line_sink sink(
      [](const std::string&) -> void { throw std::runtime_error("the log pipe is closed"); });
  CHECK(sink.target() == "a callback");
  session_options o;
  o.name = "unlogged";
  o.report_to = &sink;
  {
    session work(pool, s, o);
    { auto b = work.make_buffer<char>(4 * MiB); }
    const session_report* r = nullptr;
    CHECK_NOTHROW(r = &work.finish());
    CHECK(r->trimmed);
    CHECK(pool.stats().reserved_bytes == 0);
  }
  { session from_destructor(pool, s, o); }
  CHECK(sink.failures() == 2);
  CHECK(sink.lines() == 0);
  REQUIRE(cleanups().size() == 2);
  for (const std::string& c : cleanups()) {
    CHECK_THAT(c, contains("report_sink::write | cuscope::session"));
    CHECK_THAT(c, contains("the log pipe is closed"));
  }

  SECTION("a file that cannot take the line: the error names the file and the session") {
    std::FILE* full = std::fopen("/dev/full", "w");
    if (full == nullptr) {
      SUCCEED("no /dev/full on this system");
      return;
    }
    cleanups().clear();
    {
      json_line_sink to_full(full);
      CHECK(to_full.target() == "a FILE stream");
      session_options f;
      f.name = "disk full";
      f.report_to = &to_full;
      session work(pool, s, f);
      CHECK_NOTHROW(work.finish());
      CHECK(to_full.failures() == 1);
    }
    std::fclose(full);
    REQUIRE(cleanups().size() == 1);
    CHECK_THAT(cleanups()[0], contains("json_line_sink (a FILE stream)"));
    CHECK_THAT(cleanups()[0], contains("session 'disk full'"));
  }
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("json_line_sink: a session whose end fails still writes its line, marked incomplete",
          "[json_line_sink]") {
  device_guard device;
  std::ostringstream out;
  json_line_sink sink(out);
  memory_pool pool;
  stream s;
  session_options o;
  o.name = "faulted";
  o.report_to = &sink;
  session work(pool, s, o);
  { auto b = work.make_buffer<char>(2 * MiB); }
  cuscope::sim::fail_api("cudaMemPoolTrimTo", 1, cudaErrorUnknown);
  CHECK_THROWS_AS(work.finish(), cuscope::cuda_error);
  const std::vector<std::string> lines = split_lines(out.str());
  REQUIRE(lines.size() == 1);
  CHECK(json_error(lines[0]).empty());
  CHECK(json_field(lines[0], "name") == "faulted");
  CHECK(json_field(lines[0], "complete") == "false");
  CHECK_THAT(lines[0], contains("trimming the pool"));
  pool.trim_to(0);
}
#endif

TEST_CASE("json_line_sink: from_env names its variable in every error", "[json_line_sink]") {
  CHECK(json_line_sink::from_env("sinktest") == nullptr);  // not set: no sink
  {
    const env_var v("CUSCOPE_SINKTEST_REPORT", "stderr");
    const auto sink = json_line_sink::from_env("sinktest");
    REQUIRE(sink != nullptr);
    CHECK(sink->target() == "stderr");
  }
  {
    const env_var v("CUSCOPE_SINKTEST_REPORT", "stdout");
    CHECK(json_line_sink::from_env("sinktest")->target() == "stdout");
  }
  {
    const temp_file file("cuscope_sink_env");
    const env_var v("CUSCOPE_SINKTEST_REPORT", file.path().c_str());
    const auto sink = json_line_sink::from_env("sinktest");
    REQUIRE(sink != nullptr);
    CHECK(sink->target() == "file '" + file.path() + "'");
    CHECK(std::filesystem::exists(file.path()));
  }
  {
    const env_var v("CUSCOPE_SINKTEST_REPORT", "");
    CHECK_THROWS_WITH(json_line_sink::from_env("sinktest"),
                      contains("CUSCOPE_SINKTEST_REPORT=\"\" is not"));
  }
  {
    const env_var v("CUSCOPE_SINKTEST_REPORT", "/nonexistent-cuscope-dir/reports.jsonl");
    CHECK_THROWS_AS(json_line_sink::from_env("sinktest"), std::runtime_error);
    CHECK_THROWS_WITH(json_line_sink::from_env("sinktest"),
                      contains("cannot open '/nonexistent-cuscope-dir/reports.jsonl'") &&
                          contains("(from CUSCOPE_SINKTEST_REPORT)"));
  }
  CHECK_THROWS_AS(json_line_sink::from_env("sink-test"), std::invalid_argument);
  CHECK_THROWS_WITH(json_line_sink::from_env(""), contains("the name is empty"));
  CHECK_THROWS_AS(json_line_sink(static_cast<std::FILE*>(nullptr)), std::invalid_argument);
  CHECK_THROWS_AS(json_line_sink(std::function<void(const std::string&)>{}), std::invalid_argument);
}
