// SPDX-License-Identifier: Apache-2.0
// A leak, as docs/concepts.md ("Leak reports") describes its report: a session whose tagged
// buffer outlives it names that buffer (size, address, stream, tag, call site, session) in
// to_string() and in to_json().
#include <cuscope/cuscope.hpp>

#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::test::contains;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

std::string file_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

TEST_CASE("a leaked tagged buffer is named in to_string() and to_json()", "[docs][session][leak]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;

  std::optional<cuscope::device_buffer<float>> kept;
  cuscope::session epoch(pool, stream, "epoch 1");
  kept.emplace(epoch.make_buffer<float>(3 * MiB / sizeof(float), "kv cache"));
  const int line = __LINE__ - 1;
  { auto freed = epoch.make_buffer<float>(1024, "freed in time"); }
  const cuscope::session_report& r = epoch.finish();

  CHECK(r.leaked());
  REQUIRE(r.leaked_allocations == 1);
  CHECK(r.leaked_bytes == 3 * MiB);
  REQUIRE(r.leaks.size() == 1);
  const auto& leak = r.leaks[0];
  CHECK(leak.bytes == 3 * MiB);
  CHECK(leak.pointer == kept->data());
  CHECK(std::string(leak.tag) == "kv cache");
  CHECK(leak.line == line);

  const std::string text = r.to_string();
  INFO(text);
  CHECK_THAT(text, contains("LEAKED 1 allocation, 3.00 MiB"));
  CHECK_THAT(text, contains("3.00 MiB at " + hex(kept->data()) + " on stream " + hex(stream.get()) +
                            ", 'kv cache', made at "));
  CHECK_THAT(text, contains(file_name(__FILE__) + ":" + std::to_string(line)));
  CHECK_THAT(text, !contains("freed in time"));

  const std::string json = cuscope::to_json(r);
  INFO(json);
  CHECK(cuscope::test::json_error(json).empty());
  CHECK(cuscope::test::json_field(json, "version") == "1");
  CHECK(cuscope::test::json_field(json, "leaked") == "true");
  CHECK(cuscope::test::json_field(json, "leaked_allocations") == "1");
  CHECK(cuscope::test::json_field(json, "leaked_bytes") == std::to_string(3 * MiB));
  CHECK_THAT(json, contains("\"leaks\":[{"));
  CHECK(cuscope::test::json_field(json, "bytes") == std::to_string(3 * MiB));
  CHECK(cuscope::test::json_field(json, "pointer") == hex(kept->data()));
  CHECK(cuscope::test::json_field(json, "stream") == hex(stream.get()));
  CHECK(cuscope::test::json_field(json, "tag") == "kv cache");
  CHECK_THAT(cuscope::test::json_field(json, "file"), contains(file_name(__FILE__)));
  CHECK(cuscope::test::json_field(json, "line") == std::to_string(line));
  // Every field concepts.md lists, and no other.
  const std::set<std::string> documented = {"version",
                                            "name",
                                            "device",
                                            "seconds",
                                            "reserved_at_entry_bytes",
                                            "reserved_at_finish_bytes",
                                            "reserved_at_exit_bytes",
                                            "used_at_entry_bytes",
                                            "used_at_exit_bytes",
                                            "peak_used_bytes",
                                            "peak_reserved_bytes",
                                            "returned_bytes",
                                            "driver_free_at_entry_bytes",
                                            "driver_free_at_exit_bytes",
                                            "driver_total_bytes",
                                            "tracked_peak_bytes",
                                            "tracked_peak_upper_bound",
                                            "leaked_allocations",
                                            "leaked_bytes",
                                            "allocations",
                                            "frees",
                                            "budget_refusals",
                                            "pool_refusals",
                                            "retries",
                                            "untracked_bytes",
                                            "untracked_leak",
                                            "graph_used_bytes",
                                            "graph_reserved_bytes",
                                            "graph_returned_bytes",
                                            "graph_trimmed",
                                            "trimmed",
                                            "trim_deferred",
                                            "concurrent",
                                            "synchronized_device",
                                            "unwinding",
                                            "admission_required_bytes",
                                            "admission_available_bytes",
                                            "admission_trimmed",
                                            "admission_returned_bytes",
                                            "admission_refused",
                                            "admission_free_bytes",
                                            "admission_cached_bytes",
                                            "admission_graph_reserved_bytes",
                                            "admission_process_bytes",
                                            "admission_other_processes_bytes",
                                            "admission_nvml",
                                            "leaked",
                                            "leaks",
                                            "bytes",
                                            "pointer",
                                            "stream",
                                            "tag",
                                            "file",
                                            "line",
                                            "session",
                                            "complete",
                                            "unknown",
                                            "errors"};
  std::set<std::string> written;
  for (std::size_t at = json.find("\":"); at != std::string::npos; at = json.find("\":", at + 2))
    written.insert(json.substr(json.rfind('"', at - 1) + 1, at - json.rfind('"', at - 1) - 1));
  CHECK(written == documented);

  // A leaked buffer stays valid; the session only counted it.
  const std::vector<float> twos(kept->size(), 2.0f);
  kept->copy_from(stream, twos);
  CHECK(kept->to_vector(stream).back() == 2.0f);
  kept.reset();
}

TEST_CASE("a leak in a nested session names the session it was charged to",
          "[docs][session][leak]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;

  std::optional<cuscope::device_buffer<float>> kept;
  cuscope::session request(pool, stream, "request");
  {
    cuscope::session step(request, "step");
    kept.emplace(step.make_buffer<float>(2 * MiB / sizeof(float), "activations"));
    const cuscope::session_report& s = step.finish();
    CHECK(s.leaked_allocations == 1);
  }
  const cuscope::session_report& r = request.finish();
  INFO(r.to_string());
  REQUIRE(r.leaks.size() == 1);
  CHECK(r.leaked_bytes == 2 * MiB);
  CHECK_THAT(r.to_string(), contains("'activations', made at "));
  CHECK_THAT(r.to_string(), contains(", in session 'step'"));
  CHECK(cuscope::test::json_field(cuscope::to_json(r), "session") == "step");
  kept.reset();
}

TEST_CASE("on_leak: throw_exception makes finish() throw, report hands the report to leak_sink",
          "[docs][session][leak]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;

  std::optional<cuscope::device_buffer<int>> kept;
  cuscope::session_options o;
  o.name = "strict";
  o.on_leak = cuscope::leak_policy::throw_exception;
  cuscope::session strict(pool, stream, o);
  kept.emplace(strict.make_buffer<int>(256, "forgotten"));
  try {
    strict.finish();
    FAIL("finish() with a leak did not throw");
  } catch (const cuscope::session_leak_error& e) {
    CHECK_THAT(e.what(), contains("session 'strict'"));
    CHECK_THAT(e.what(), contains("'forgotten'"));
    REQUIRE(e.report().leaks.size() == 1);
    CHECK(e.report().leaks[0].bytes == 256 * sizeof(int));
  }
  kept.reset();

  std::vector<cuscope::session_report> sunk;
  o.name = "logged";
  o.on_leak = cuscope::leak_policy::report;
  o.leak_sink = [&sunk](const cuscope::session_report& r) { sunk.push_back(r); };
  {
    cuscope::session logged(pool, stream, o);
    kept.emplace(logged.make_buffer<int>(256, "forgotten"));
  }  // ended by its destructor
  REQUIRE(sunk.size() == 1);
  CHECK(sunk[0].name == "logged");
  CHECK(sunk[0].leaked_allocations == 1);
  kept.reset();
}
