// SPDX-License-Identifier: Apache-2.0
// Where the memory went, as docs/observability.md and docs/services.md describe it: a recorder
// attached to a pool through three epochs, its Chrome trace and snapshot read back as JSON and
// checked field by field, the memory report's reconciliation with what nvidia-smi shows, and a
// json_line_sink writing one line per session.
#include <cuscope/cuscope.hpp>
#include <cuscope/json_line_sink.hpp>
#include <cuscope/trace.hpp>

#include <cuda_runtime_api.h>

#include <stdlib.h>  // setenv
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::test::contains;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

// A small JSON reader, enough to walk the exported files.
struct json {
  enum class type { null, boolean, number, string, array, object } t = type::null;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<json> a;
  std::map<std::string, json> o;

  [[nodiscard]] bool has(const std::string& k) const { return o.count(k) != 0; }
  [[nodiscard]] const json& operator[](const std::string& k) const {
    const auto it = o.find(k);
    if (it == o.end()) throw std::out_of_range("no key " + k);
    return it->second;
  }
};

class json_reader {
 public:
  explicit json_reader(const std::string& text) : s_(text) {}
  json read() {
    json v = value();
    skip();
    if (i_ != s_.size()) throw std::runtime_error("trailing characters");
    return v;
  }

 private:
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  json value() {
    skip();
    json v;
    const char c = s_.at(i_);
    if (c == '{') {
      v.t = json::type::object;
      ++i_;
      skip();
      if (s_.at(i_) == '}') return ++i_, v;
      for (;;) {
        skip();
        const std::string k = string();
        skip();
        expect(':');
        v.o[k] = value();
        skip();
        if (s_.at(i_) == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.t = json::type::array;
      ++i_;
      skip();
      if (s_.at(i_) == ']') return ++i_, v;
      for (;;) {
        v.a.push_back(value());
        skip();
        if (s_.at(i_) == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.t = json::type::string;
      v.s = string();
      return v;
    }
    if (s_.compare(i_, 4, "true") == 0) return i_ += 4, v.t = json::type::boolean, v.b = true, v;
    if (s_.compare(i_, 5, "false") == 0) return i_ += 5, v.t = json::type::boolean, v;
    if (s_.compare(i_, 4, "null") == 0) return i_ += 4, v;
    std::size_t used = 0;
    v.n = std::stod(s_.substr(i_, 40), &used);
    v.t = json::type::number;
    i_ += used;
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (s_.at(i_) != '"') {
      if (s_[i_] == '\\') ++i_;
      out += s_.at(i_++);
    }
    ++i_;
    return out;
  }
  void expect(char c) {
    if (s_.at(i_) != c) throw std::runtime_error(std::string("expected ") + c);
    ++i_;
  }
  const std::string& s_;
  std::size_t i_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse(const std::string& text) {
  INFO(text.substr(0, 2000));
  REQUIRE(cuscope::test::json_error(text) == std::string());
  return json_reader(text).read();
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

std::string temp_path(const char* name) {
  return "/tmp/cuscope_docs_observability_" + std::to_string(::getpid()) + "_" + name;
}

// The line of a printed report that holds label, its runs of spaces folded into one.
std::string line_of(const std::string& text, const std::string& label) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(label) == std::string::npos) continue;
    std::string folded;
    for (const char c : line)
      if (c != ' ' || (!folded.empty() && folded.back() != ' ')) folded += c;
    return folded;
  }
  return "(no line with " + label + ")";
}

std::vector<std::string> cleanup_operations;
void collect(const cuscope::cleanup_error& e) noexcept {
  cleanup_operations.emplace_back(e.operation);
}

}  // namespace

TEST_CASE(
    "observability: a recorder on a pool through three epochs, exported as trace and snapshot",
    "[docs][recorder][trace]") {
  cuscope::test::device_guard device;
  cuscope::stream stream;
  cuscope::recorder rec;  // a ring of 65536 events
  cuscope::memory_pool pool;
  CHECK(pool.attached_recorder() == nullptr);  // off by default
  pool.set_recorder(&rec, "training");
  CHECK(pool.attached_recorder() == &rec);
  const cuscope::memory_pool_ref ref = pool;
  CHECK(ref.attached_recorder() == &rec);  // every reference of the pool records

  std::optional<cuscope::device_buffer<float>> kept;
  for (int e = 1; e <= 3; ++e) {
    cuscope::session epoch(pool, stream, "epoch " + std::to_string(e));
    for (int step = 0; step < 4; ++step) {
      auto x = epoch.make_buffer<float>(MiB / sizeof(float));
      auto y = epoch.make_buffer<float>(2 * MiB / sizeof(float));
    }
    if (e == 3) kept.emplace(epoch.make_buffer<float>(3 * MiB / sizeof(float), "kv cache"));
    epoch.finish();
  }
  pool.set_release_threshold(64 * MiB);  // a threshold change
  try {
    auto huge = cuscope::device_buffer<char>(stream, 64 * GiB, pool);
    FAIL("a 64 GiB buffer on a 4 GiB device was allocated");
  } catch (const cuscope::out_of_memory&) {
  }

  // The Chrome trace: one process per device, sessions as slices, counters per pool and device.
  const std::string trace_path = temp_path("memory.json");
  cuscope::write_chrome_trace(rec, trace_path);
  const json trace = parse(read_file(trace_path));
  ::unlink(trace_path.c_str());
  REQUIRE(trace.has("traceEvents"));
  REQUIRE(trace.has("otherData"));
  CHECK(trace["otherData"]["dropped_events"].n == 0);
  std::set<std::string> counters, slices, instants;
  std::set<double> pids;
  for (const json& ev : trace["traceEvents"].a) {
    if (!ev.has("ph")) continue;
    const std::string ph = ev["ph"].s;
    const std::string name = ev.has("name") ? ev["name"].s : "";
    if (ph == "C") counters.insert(name);
    if (ph == "X" || ph == "B") slices.insert(name);
    if (ph == "i" || ph == "I") instants.insert(name);
    if (ph != "M" && ev.has("pid")) pids.insert(ev["pid"].n);
  }
  INFO("counters: " << counters.size() << ", slices: " << slices.size()
                    << ", instants: " << instants.size());
  for (const char* c :
       {"training: used", "training: reserved", "training: freeing", "device 0: free"})
    CHECK(counters.count(c) == 1);
  for (const char* s : {"epoch 1", "epoch 2", "epoch 3"})
    CHECK(slices.count(s) == 1);
  CHECK(pids.size() == 1);  // one device, one process
  std::string instant_names;
  for (const auto& i : instants)
    instant_names += i + "; ";
  INFO(instant_names);
  // Instant events for trims, threshold changes, out-of-memory errors and leaks.
  CHECK_THAT(instant_names, contains("trim"));
  CHECK_THAT(instant_names, contains("threshold"));
  CHECK_THAT(instant_names, contains("out of memory"));
  CHECK_THAT(instant_names, contains("leak"));

  // The snapshot: the allocation still live, in the session that made it.
  const std::string snap_path = temp_path("live.json");
  cuscope::write_snapshot(rec, snap_path);
  const json snap = parse(read_file(snap_path));
  ::unlink(snap_path.c_str());
  CHECK(snap["schema"].s == "cuscope-snapshot/1");
  CHECK(snap["time_us"].n > 0);
  CHECK(snap["recorded_events"].n > 30);  // 3 epochs of 8 or 9 allocations and their frees
  CHECK(snap["dropped_events"].n == 0);
  CHECK(snap["complete"].b);
  REQUIRE(snap["scopes"].a.size() == 1);
  const json& scope = snap["scopes"].a[0];
  CHECK(scope["name"].s == "epoch 3");
  CHECK(scope["session"].n > 0);
  CHECK(scope["parent"].n == 0);
  CHECK(scope["live_allocations"].n == 1);
  CHECK(scope["live_bytes"].n == 3 * MiB);
  REQUIRE(scope["allocations"].a.size() == 1);
  const json& live = scope["allocations"].a[0];
  CHECK(live["ptr"].s == hex(kept->data()));
  CHECK(live["bytes"].n == 3 * MiB);
  CHECK(live["device"].n == 0);
  CHECK(live["pool"].s == "training");
  CHECK(live["stream"].s == hex(stream.get()));
  CHECK(live["time_us"].n > 0);
  CHECK(live["time_us"].n <= snap["time_us"].n);

  // Freed, it leaves the snapshot.
  kept.reset();
  cuscope::write_snapshot(rec, snap_path);
  const json after = parse(read_file(snap_path));
  ::unlink(snap_path.c_str());
  for (const json& s : after["scopes"].a)
    CHECK(s["live_allocations"].n == 0);

  // A file that cannot be written: trace_write_error naming the path; the recorder is unchanged.
  try {
    cuscope::write_chrome_trace(rec, "/nonexistent-dir/memory.json");
    FAIL("a trace into a missing directory was written");
  } catch (const cuscope::trace_write_error& e) {
    CHECK_THAT(e.what(), contains("/nonexistent-dir/memory.json"));
  }
  CHECK(rec.dropped() == 0);
  pool.set_recorder(nullptr);  // detaches
  CHECK(pool.attached_recorder() == nullptr);
}

TEST_CASE("observability: a full ring drops the oldest events and the exports say so",
          "[docs][recorder]") {
  cuscope::test::device_guard device;
  cuscope::stream stream;
  cuscope::recorder_options o;
  o.capacity = 100;  // rounded up to 128
  cuscope::recorder rec(o);
  cuscope::memory_pool pool;
  pool.set_recorder(&rec, "small");
  for (int i = 0; i < 200; ++i) {
    auto b = cuscope::device_buffer<char>(stream, 4 * KiB, pool);
  }
  stream.synchronize();
  CHECK(rec.dropped() > 0);
  // 200 allocations and 200 frees at least, kept: 128.
  CHECK(rec.dropped() >= 400 - 128);

  const std::string trace_path = temp_path("small.json");
  cuscope::write_chrome_trace(rec, trace_path);
  const json trace = parse(read_file(trace_path));
  ::unlink(trace_path.c_str());
  CHECK(trace["otherData"]["dropped_events"].n == static_cast<double>(rec.dropped()));
  const std::string snap_path = temp_path("small_live.json");
  cuscope::write_snapshot(rec, snap_path);
  const json snap = parse(read_file(snap_path));
  ::unlink(snap_path.c_str());
  CHECK(snap["dropped_events"].n == static_cast<double>(rec.dropped()));
  CHECK_FALSE(snap["complete"].b);
  // recorded_events counts every event recorded, the dropped ones included: 128 are kept.
  CHECK(snap["recorded_events"].n >= 400);
  CHECK(snap["recorded_events"].n - snap["dropped_events"].n == 128);
}

TEST_CASE("observability: a session records into its own recorder without the pool attached",
          "[docs][recorder][session]") {
  cuscope::test::device_guard device;
  cuscope::stream stream;
  cuscope::memory_pool pool;
  std::optional<cuscope::recorder> rec;
  rec.emplace();
  cuscope::session_options o;
  o.name = "request";
  o.record_into = &*rec;
  void* raw = nullptr;
  std::optional<cuscope::device_buffer<int>> made, nested_made;
  {
    cuscope::session request(pool, stream, o);
    CHECK(pool.attached_recorder() == nullptr);
    made.emplace(request.make_buffer<int>(1024, "through the session"));
    raw = pool.allocate(stream, 8 * KiB);  // not through the session: not recorded
    {
      cuscope::session step(request, "step");  // records into its parent's recorder
      nested_made.emplace(step.make_buffer<int>(512));
      step.finish();
    }
    const std::string snap_path = temp_path("request.json");
    cuscope::write_snapshot(*rec, snap_path);
    const json snap = parse(read_file(snap_path));
    ::unlink(snap_path.c_str());
    std::map<std::string, const json*> by_name;
    for (const json& s : snap["scopes"].a)
      by_name[s["name"].s] = &s;
    REQUIRE(by_name.count("request") == 1);
    REQUIRE(by_name.count("step") == 1);
    CHECK((*by_name["request"])["live_bytes"].n == 1024 * sizeof(int));
    CHECK((*by_name["step"])["live_bytes"].n == 512 * sizeof(int));
    CHECK((*by_name["step"])["parent"].n == (*by_name["request"])["session"].n);
    for (const json& s : snap["scopes"].a)
      for (const json& a : s["allocations"].a)
        CHECK(a["ptr"].s != hex(raw));
    made.reset();
    nested_made.reset();
    pool.deallocate(stream, raw, 8 * KiB);
    request.finish();
  }

  // A recorder destroyed before the pools it records detaches itself.
  pool.set_recorder(&*rec, "detached");
  CHECK(pool.attached_recorder() == &*rec);
  rec.reset();
  CHECK(pool.attached_recorder() == nullptr);
  auto after = cuscope::device_buffer<int>(stream, 16, pool);  // records nowhere, crashes nothing
}

TEST_CASE("observability: memory_report reconciles what nvidia-smi shows with the pools",
          "[docs][report]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 16 * GiB;
  setup.context_bytes = 300 * MiB;
  cuscope::test::device_guard device(setup);
  cuscope::stream stream;
  cuscope::memory_pool pool;
  pool.set_release_threshold(2 * GiB);  // keeps what it reserved
  auto live = cuscope::device_buffer<char>(stream, 256 * MiB, pool);
  { auto freed = cuscope::device_buffer<char>(stream, 768 * MiB, pool); }
  stream.synchronize();

  const std::string text =
      cuscope::memory_report(0, cuscope::named_pool{"activations", pool}).to_string();
  INFO(text);
  if (cuscope::test::simulated) {
    // concepts.md's example, printed on the simulated device with these very amounts.
    CHECK(line_of(text, "device 0") ==
          "device 0 (cuscope simulated device): 1.29 GiB taken, "
          "14.71 GiB free of 16.00 GiB");
    CHECK(line_of(text, "activations") == "activations 1.00 GiB 256.00 MiB 768.00 MiB");
    CHECK(line_of(text, "default pool") == "default pool 0 B 0 B 0 B");
    CHECK(line_of(text, "other (context") == "other (context, cudaMalloc, others) 300.00 MiB");
    // observability.md's split of what nvidia-smi shows (NVML, simulated).
    CHECK(line_of(text, "nvidia-smi") == "nvidia-smi shows this process using 1.29 GiB:");
    CHECK(line_of(text, "live allocations") == "live allocations in the pools 256.00 MiB");
    CHECK(line_of(text, "cached in the pools") == "cached in the pools (trimmable) 768.00 MiB");
    CHECK(line_of(text, "context, cudaMalloc, libraries") ==
          "context, cudaMalloc, libraries 300.00 MiB");
    CHECK(line_of(text, "other processes") == "other processes 0 B");
  }
  CHECK_THAT(text, contains("default pool"));

#if CUSCOPE_TEST_SIMULATED
  {
    // Another tenant's memory is another process's, not this one's.
    cuscope::sim::set_other_process_bytes(0, 512 * MiB);
    const std::string shared =
        cuscope::memory_report(0, cuscope::named_pool{"activations", pool}).to_string();
    INFO(shared);
    CHECK(line_of(shared, "nvidia-smi") == "nvidia-smi shows this process using 1.29 GiB:");
    CHECK(line_of(shared, "other processes") == "other processes 512.00 MiB");
    cuscope::sim::set_other_process_bytes(0, 0);
  }
#endif

  // cudaMalloc memory the caller knows of, passed in report_options::malloc_bytes, is split
  // from the rest of what the process holds outside the pools.
  void* raw = nullptr;
  REQUIRE(cudaMalloc(&raw, 100 * MiB) == cudaSuccess);
  cuscope::report_options ro;
  ro.malloc_bytes = 100 * MiB;
  const cuscope::device_memory_report with_malloc =
      cuscope::memory_report(0, {cuscope::named_pool{"activations", pool}}, ro);
  const std::string malloc_text = with_malloc.to_string();
  INFO(malloc_text);
  if (cuscope::test::simulated) {
    CHECK(with_malloc.process_rest_bytes() == 300 * MiB);
    CHECK(line_of(malloc_text, "cudaMalloc (as given)") == "cudaMalloc (as given) 100.00 MiB");
  }
  REQUIRE(cudaFree(raw) == cudaSuccess);

  // empty_cache gives the cache back and keeps the live buffer.
  CHECK(cuscope::empty_cache(pool) == 768 * MiB);
  CHECK(pool.stats().used_bytes == 256 * MiB);
}

TEST_CASE("observability: json_line_sink writes one JSON line per session", "[docs][sink]") {
  cuscope::test::device_guard device;
  cuscope::stream stream;
  cuscope::memory_pool pool;

  const std::string path = temp_path("requests.jsonl");
  ::unlink(path.c_str());
  {
    auto sink = cuscope::json_line_sink::append_to(path);
    cuscope::session_options so;
    so.name = "service";
    so.report_to = sink.get();
    cuscope::session service(pool, stream, so);
    for (int i = 0; i < 3; ++i) {
      cuscope::session request(service, "request " + std::to_string(i));
      auto b = request.make_buffer<float>(1024 * static_cast<std::size_t>(i + 1));
    }
    service.finish();
    CHECK(sink->lines() == 4);
    CHECK(sink->failures() == 0);
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  ::unlink(path.c_str());
  REQUIRE(lines.size() == 4);
  for (int i = 0; i < 4; ++i) {
    const json line = parse(lines[static_cast<std::size_t>(i)]);
    CHECK(line["version"].n == 1);
    CHECK(line["complete"].b);
    CHECK_FALSE(line["leaked"].b);
    CHECK(line["name"].s == (i < 3 ? "request " + std::to_string(i) : std::string("service")));
    if (i < 3) CHECK(line["peak_used_bytes"].n >= 4096.0 * (i + 1));
  }

  // A callback sink gets each line without its newline; one that throws breaks nothing.
  std::vector<std::string> got;
  cuscope::json_line_sink callback([&got](const std::string& line) {
    got.push_back(line);
    if (got.size() == 2) throw std::runtime_error("disk full");
  });
  cuscope::session_options so;
  so.name = "quiet";
  so.report_to = &callback;
  cleanup_operations.clear();
  {
    cuscope::scoped_cleanup_handler quiet(&collect);
    cuscope::session outer(pool, stream, so);
    { cuscope::session a(outer, "a"); }
    { cuscope::session b(outer, "b"); }
    outer.finish();
  }
  REQUIRE(got.size() == 3);
  CHECK(got[0].back() == '}');
  CHECK(callback.lines() == 2);
  CHECK(callback.failures() == 1);
  REQUIRE(cleanup_operations.size() == 1);
  CHECK(cleanup_operations[0] == "report_sink::write");

  // from_env: unset is nullptr; empty is std::invalid_argument naming the variable.
  ::unsetenv("CUSCOPE_DOCSOBS_REPORT");
  CHECK(cuscope::json_line_sink::from_env("docsobs") == nullptr);
  ::setenv("CUSCOPE_DOCSOBS_REPORT", "", 1);
  try {
    (void)cuscope::json_line_sink::from_env("docsobs");
    FAIL("an empty CUSCOPE_DOCSOBS_REPORT was taken");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), contains("CUSCOPE_DOCSOBS_REPORT"));
  }
  ::setenv("CUSCOPE_DOCSOBS_REPORT", "/nonexistent-dir/x.jsonl", 1);
  try {
    (void)cuscope::json_line_sink::from_env("docsobs");
    FAIL("a file that cannot be opened was taken");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), contains("CUSCOPE_DOCSOBS_REPORT"));
  }
  ::setenv("CUSCOPE_DOCSOBS_REPORT", path.c_str(), 1);
  CHECK(cuscope::json_line_sink::from_env("docsobs") != nullptr);
  ::unsetenv("CUSCOPE_DOCSOBS_REPORT");
  ::unlink(path.c_str());
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("observability: a session whose end fails still writes its line with complete false",
          "[docs][sink]") {
  cuscope::test::device_guard device;
  cuscope::stream stream;
  cuscope::memory_pool pool;
  std::vector<std::string> got;
  cuscope::json_line_sink sink([&got](const std::string& line) { got.push_back(line); });
  cuscope::session_options so;
  so.name = "failing";
  so.report_to = &sink;
  cuscope::session failing(pool, stream, so);
  { auto b = failing.make_buffer<float>(1024); }
  cuscope::sim::fail_api("cudaStreamSynchronize", 1, cudaErrorInvalidValue);
  CHECK_THROWS(failing.finish());
  REQUIRE(got.size() == 1);
  const json line = parse(got[0]);
  CHECK_FALSE(line["complete"].b);
  REQUIRE(line["errors"].a.size() >= 1);
  CHECK_THAT(line["errors"].a[0].s, contains("synchron"));
  (void)cudaGetLastError();
}
#endif
