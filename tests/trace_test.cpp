// SPDX-License-Identifier: Apache-2.0
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cuscope/memory_pool.hpp>
#include <cuscope/recorder.hpp>
#include <cuscope/stream.hpp>
#include <cuscope/trace.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::chrome_trace_json;
using cuscope::recorder;
using cuscope::recorder_options;
using cuscope::snapshot_json;
using cuscope::test::contains;
using cuscope::test::json_error;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;

const void* fake_ptr(std::uintptr_t i) {
  return reinterpret_cast<const void*>(0x1000 + 16 * i);
}
cudaMemPool_t fake_pool(std::uintptr_t i) {
  return reinterpret_cast<cudaMemPool_t>(0x9000 + i);
}

recorder_options quiet(std::size_t capacity = 256) {
  recorder_options o;
  o.capacity = capacity;
  o.sample_interval = std::chrono::hours(1);
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// A timeline of two nested sessions, one of which leaks, and an out-of-memory error.
void fill(recorder& r) {
  r.name_pool(fake_pool(1), "activations \"A\"");
  const std::uint32_t epoch = r.begin_session("epoch 1", 0, 0, nullptr);
  const std::uint32_t step = r.begin_session("step\t1", epoch, 0, nullptr);
  r.record_allocate(0, fake_pool(1), nullptr, fake_ptr(1), 4 * KiB, step);
  r.record_allocate(0, fake_pool(1), nullptr, fake_ptr(2), 8 * KiB, step);
  r.record_allocate(0, fake_pool(2), nullptr, fake_ptr(3), 1 * KiB, 0);
  r.record_free(0, fake_pool(1), nullptr, fake_ptr(1), 4 * KiB);
  r.record_out_of_memory(0, fake_pool(1), nullptr, 64 * KiB, step);
  r.end_session(step, 1, 8 * KiB);
  r.record_synchronize(0, nullptr);
  r.end_session(epoch, 1, 8 * KiB);
}

}  // namespace

TEST_CASE("trace: the Chrome trace is valid JSON with sessions, counters and instant events",
          "[trace]") {
  cuscope::test::device_guard device;
  recorder r(quiet());
  fill(r);
  const std::string json = chrome_trace_json(r);
  INFO(json);
  CHECK(json_error(json).empty());
  CHECK(count(json, "\"ph\":\"X\"") == 2);
  CHECK_THAT(json, contains("\"name\":\"epoch 1\""));
  CHECK_THAT(json, contains("\"name\":\"step\\t1\""));
  // The step leaked one allocation of 8 KiB, as an instant event and in its slice.
  CHECK_THAT(json, contains("\"name\":\"leak in step\\t1\""));
  CHECK_THAT(json, contains("\"leaked_bytes\":8192"));
  CHECK_THAT(json, contains("\"name\":\"out of memory in activations \\\"A\\\"\""));
  CHECK_THAT(json, contains("\"requested_bytes\":65536"));
  // The free is pending until the synchronization.
  CHECK_THAT(json, contains("\"name\":\"activations \\\"A\\\": freeing\",\"ph\":\"C\""));
  CHECK(count(json, "\"activations \\\"A\\\": freeing\"") == 2);
  CHECK_THAT(json, contains("\"dropped_events\":0"));
}

TEST_CASE("trace: counters follow samples and the allocations between them", "[trace]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  recorder r(quiet());
  r.name_pool(pool.get(), "p");
  r.sample(0, pool.get());
  void* a = pool.allocate(s, 64 * KiB);
  r.record_allocate(0, pool.get(), s.get(), a, 64 * KiB);
  pool.deallocate(s, a, 64 * KiB);
  r.record_free(0, pool.get(), s.get(), a, 64 * KiB);
  s.synchronize();
  const std::string json = chrome_trace_json(r);
  INFO(json);
  CHECK(json_error(json).empty());
  CHECK_THAT(json, contains("\"name\":\"p: used\",\"ph\":\"C\""));
  CHECK_THAT(json, contains("\"args\":{\"bytes\":65536}"));
  CHECK_THAT(json, contains("\"name\":\"p: reserved\""));
  CHECK_THAT(json, contains("\"name\":\"device 0: free\""));
}

TEST_CASE("trace: the snapshot lists the live allocations of each session", "[trace]") {
  cuscope::test::device_guard device;
  recorder r(quiet());
  fill(r);
  const std::string json = snapshot_json(r);
  INFO(json);
  CHECK(json_error(json).empty());
  CHECK_THAT(json, contains("\"complete\":true"));
  CHECK_THAT(json, contains("{\"session\":2,\"name\":\"step\\t1\",\"parent\":1,"
                            "\"live_allocations\":1,\"live_bytes\":8192"));
  CHECK_THAT(json, contains("{\"session\":0,\"name\":null,\"parent\":0,"
                            "\"live_allocations\":1,\"live_bytes\":1024"));
  CHECK_THAT(json, contains("\"ptr\":\"0x1020\""));  // fake_ptr(2), live
  CHECK(count(json, "\"ptr\":\"0x1010\"") == 0);     // fake_ptr(1), freed
}

TEST_CASE("trace: a ring that dropped events says so in both exports", "[trace]") {
  recorder r(quiet(4));
  for (std::uintptr_t i = 0; i < 10; ++i)
    r.record_allocate(0, fake_pool(1), nullptr, fake_ptr(i), 16);
  const std::string trace = chrome_trace_json(r);
  const std::string snap = snapshot_json(r);
  CHECK(json_error(trace).empty());
  CHECK(json_error(snap).empty());
  CHECK_THAT(trace, contains("\"dropped_events\":6"));
  CHECK_THAT(snap, contains("\"dropped_events\":6"));
  CHECK_THAT(snap, contains("\"complete\":false"));
  CHECK_THAT(snap, contains("\"live_allocations\":4"));
}

TEST_CASE("trace: a session still open ends with the trace", "[trace]") {
  cuscope::test::device_guard device;
  recorder r(quiet());
  const std::uint32_t id = r.begin_session("serving", 0, 0, nullptr);
  r.record_allocate(0, fake_pool(1), nullptr, fake_ptr(1), 16, id);
  const std::string json = chrome_trace_json(r);
  CHECK(json_error(json).empty());
  CHECK_THAT(json, contains("\"open\":true"));
}

TEST_CASE("trace: files are written, and an unwritable path is named in the error", "[trace]") {
  cuscope::test::device_guard device;
  recorder r(quiet());
  fill(r);
  const std::string path = "cuscope_trace_test.json";
  cuscope::write_chrome_trace(r, path);
  const std::string trace = read_file(path);
  CHECK(json_error(trace).empty());
  CHECK(count(trace, "\"ph\":\"X\"") == 2);
  cuscope::write_snapshot(r, path);
  const std::string snap = read_file(path);
  CHECK(json_error(snap).empty());
  CHECK_THAT(snap, contains("\"schema\":\"cuscope-snapshot/1\""));
  std::remove(path.c_str());
  const std::string bad = "/nonexistent-cuscope-dir/trace.json";
  try {
    cuscope::write_chrome_trace(r, bad);
    FAIL("no exception");
  } catch (const cuscope::trace_write_error& e) {
    CHECK(e.path() == bad);
    CHECK_THAT(e.what(), contains("cannot write '/nonexistent-cuscope-dir/trace.json'"));
    CHECK_THAT(e.what(), contains("No such file or directory"));
  }
  CHECK_THROWS_AS(cuscope::write_snapshot(r, bad), cuscope::trace_write_error);
  // The recorder is untouched and still exports.
  CHECK(json_error(chrome_trace_json(r)).empty());
}
