// SPDX-License-Identifier: Apache-2.0
#include <cstddef>
#include <cstdint>
#include <cuscope/device_buffer.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/recorder.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_support.hpp"

using cuscope::memory_event;
using cuscope::memory_event_kind;
using cuscope::memory_pool;
using cuscope::recorder;
using cuscope::recorder_options;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

const void* fake_ptr(std::uintptr_t i) {
  return reinterpret_cast<const void*>(0x1000 + 16 * i);
}

recorder_options small(std::size_t capacity) {
  recorder_options o;
  o.capacity = capacity;
  o.sample_interval = std::chrono::hours(1);  // only the samples a test asks for
  return o;
}

}  // namespace

TEST_CASE("recorder: events come back in order with every field", "[recorder]") {
  recorder r(small(64));
  cudaMemPool_t pool = reinterpret_cast<cudaMemPool_t>(std::uintptr_t{0x5000});
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x6000});
  r.record_allocate(2, pool, stream, fake_ptr(1), 256, 7);
  r.record_free(2, pool, stream, fake_ptr(1), 256);
  r.record_synchronize(2, stream);
  r.record_threshold(2, pool, 4 * MiB);
  r.record_retry(2, pool, stream, 3 * MiB);
  const std::vector<memory_event> ev = r.events();
  REQUIRE(ev.size() == 5);
  CHECK(ev[0].kind == memory_event_kind::allocate);
  CHECK(ev[0].device == 2);
  CHECK(ev[0].pool == pool);
  CHECK(ev[0].stream == stream);
  CHECK(ev[0].ptr == fake_ptr(1));
  CHECK(ev[0].bytes == 256);
  CHECK(ev[0].scope == 7);
  CHECK(ev[1].kind == memory_event_kind::free);
  CHECK(ev[1].scope == 0);
  CHECK(ev[2].kind == memory_event_kind::synchronize);
  CHECK(ev[2].value == 0);
  CHECK(ev[3].kind == memory_event_kind::set_threshold);
  CHECK(ev[3].bytes == 4 * MiB);
  CHECK(ev[4].kind == memory_event_kind::retry);
  CHECK(ev[4].bytes == 3 * MiB);
  for (std::size_t i = 1; i < ev.size(); ++i)
    CHECK(ev[i].time_ns >= ev[i - 1].time_ns);
  CHECK(r.recorded() == 5);
  CHECK(r.dropped() == 0);
  CHECK(std::string(cuscope::to_string(memory_event_kind::out_of_memory)) == "out_of_memory");
}

TEST_CASE("recorder: a full ring drops the oldest events and counts them", "[recorder]") {
  recorder r(small(8));
  CHECK(r.capacity() == 8);
  for (std::uintptr_t i = 0; i < 20; ++i)
    r.record_allocate(0, nullptr, nullptr, fake_ptr(i), i + 1);
  CHECK(r.recorded() == 20);
  CHECK(r.dropped() == 12);
  const std::vector<memory_event> ev = r.events();
  REQUIRE(ev.size() == 8);
  for (std::size_t k = 0; k < ev.size(); ++k) {
    CHECK(ev[k].ptr == fake_ptr(12 + k));
    CHECK(ev[k].bytes == 13 + k);
  }
}

TEST_CASE("recorder: allocations and frees that overwrite a sample read no value or device free",
          "[recorder]") {
  device_guard device;
  memory_pool pool;
  recorder r(small(2));
  r.record_trim(0, pool.get(), 5 * MiB);  // slot 0: a value
  r.sample(0, pool.get());                // slot 1: a value and the device's free memory
  r.record_allocate(0, pool.get(), nullptr, fake_ptr(1), 256);
  r.record_free(0, pool.get(), nullptr, fake_ptr(1), 256);
  const std::vector<memory_event> ev = r.events();
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].kind == memory_event_kind::allocate);
  CHECK(ev[1].kind == memory_event_kind::free);
  for (const memory_event& e : ev) {
    CHECK(e.value == 0);
    CHECK(e.device_free == 0);
    CHECK(e.bytes == 256);
  }
}

TEST_CASE("recorder: allocations and frees sample the pool once the sample interval has passed",
          "[recorder]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  recorder_options o = small(64);
  SECTION("an interval of 0 samples after every allocation and free") {
    o.sample_interval = std::chrono::nanoseconds(0);
    recorder r(o);
    r.record_allocate(0, pool.get(), s.get(), fake_ptr(1), 256);
    r.record_free(0, pool.get(), s.get(), fake_ptr(1), 256);
    r.record_allocate(0, pool.get(), s.get(), fake_ptr(2), 512);
    const std::vector<memory_event> ev = r.events();
    REQUIRE(ev.size() == 6);
    for (std::size_t i = 0; i < ev.size(); i += 2)
      CHECK(ev[i + 1].kind == memory_event_kind::sample);
    CHECK(ev[0].kind == memory_event_kind::allocate);
    CHECK(ev[2].kind == memory_event_kind::free);
    CHECK(ev[4].kind == memory_event_kind::allocate);
  }
  SECTION("an hour's interval takes none in a test") {
    recorder r(o);
    for (std::uintptr_t i = 0; i < 10; ++i)
      r.record_allocate(0, pool.get(), s.get(), fake_ptr(i), 256);
    for (const memory_event& e : r.events())
      CHECK(e.kind == memory_event_kind::allocate);
  }
}

TEST_CASE("recorder: the capacity is rounded up to a power of two and must not be 0",
          "[recorder]") {
  CHECK(recorder(small(5)).capacity() == 8);
  CHECK(recorder(small(1)).capacity() == 1);
  CHECK(recorder().capacity() == 65536);
  CHECK_THROWS_AS(recorder(small(0)), std::invalid_argument);
}

TEST_CASE("recorder: threads record at once without losing or mixing events", "[recorder]") {
  constexpr std::size_t threads = 4;
  constexpr std::size_t each = 2000;
  recorder r(small(threads * each));
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&r, t] {
      for (std::size_t i = 0; i < each; ++i)
        r.record_allocate(static_cast<int>(t), nullptr, nullptr, fake_ptr(t * each + i), i,
                          static_cast<std::uint32_t>(t + 1));
    });
  }
  for (auto& w : workers)
    w.join();
  const std::vector<memory_event> ev = r.events();
  REQUIRE(ev.size() == threads * each);
  CHECK(r.dropped() == 0);
  std::vector<std::size_t> next(threads, 0);
  for (const memory_event& e : ev) {
    const std::size_t t = e.scope - 1;
    REQUIRE(t < threads);
    CHECK(e.device == static_cast<int>(t));
    // Each thread's events are whole and in the order it recorded them.
    CHECK(e.bytes == next[t]);
    CHECK(e.ptr == fake_ptr(t * each + next[t]));
    ++next[t];
  }
}

TEST_CASE("recorder: a sample reads the pool's use and reserve and the device's free memory",
          "[recorder]") {
  device_guard device;
  memory_pool pool;
  cuscope::stream s;
  void* p = pool.allocate(s, 8 * MiB);
  recorder r(small(16));
  r.sample(0, pool.get());
  pool.deallocate(s, p, 8 * MiB);
  s.synchronize();
  const auto stats = pool.stats();
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  const std::vector<memory_event> ev = r.events();
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].kind == memory_event_kind::sample);
  CHECK(ev[0].bytes == 8 * MiB);
  CHECK(ev[0].value == stats.reserved_bytes);
  if (cuscope::test::simulated) CHECK(ev[0].device_free == free_bytes);
  CHECK(ev[0].device_free > 0);
}

TEST_CASE("recorder: sessions get ids, names and parents", "[recorder]") {
  device_guard device;
  recorder r(small(64));
  const std::uint32_t outer = r.begin_session("epoch 1", 0, 0, nullptr);
  const std::uint32_t inner = r.begin_session("batch", outer, 0, nullptr);
  r.end_session(inner, 2, 512);
  r.end_session(outer, 0, 0);
  CHECK(outer == 1);
  CHECK(inner == 2);
  const auto sessions = r.sessions();
  REQUIRE(sessions.size() == 2);
  CHECK(sessions[1].name == "batch");
  CHECK(sessions[1].parent == 1);
  std::size_t ends = 0;
  for (const memory_event& e : r.events()) {
    if (e.kind != memory_event_kind::session_end) continue;
    ++ends;
    if (e.scope == inner) {
      CHECK(e.value == 2);
      CHECK(e.bytes == 512);
    }
  }
  CHECK(ends == 2);
}

TEST_CASE("recorder: sessions and pool names keep every entry in order as their lists grow",
          "[recorder]") {
  device_guard device;
  recorder r(small(1024));
  constexpr std::uint32_t count = 40;  // more than the room the first sessions get
  for (std::uint32_t i = 1; i <= count; ++i)
    CHECK(r.begin_session("s" + std::to_string(i), i - 1, 0, nullptr) == i);
  r.end_session(3, 1, 64);
  r.end_session(count + 1, 0, 0);  // no such session: nothing recorded
  const auto sessions = r.sessions();
  REQUIRE(sessions.size() == count);
  for (std::uint32_t i = 1; i <= count; ++i) {
    CHECK(sessions[i - 1].id == i);
    CHECK(sessions[i - 1].parent == i - 1);
    CHECK(sessions[i - 1].name == "s" + std::to_string(i));
  }
  std::size_t ends = 0;
  for (const memory_event& e : r.events()) {
    if (e.kind != memory_event_kind::session_end) continue;
    ++ends;
    CHECK(e.scope == 3);
    CHECK(e.value == 1);
    CHECK(e.bytes == 64);
  }
  CHECK(ends == 1);

  const auto pool = [](std::uintptr_t i) { return reinterpret_cast<cudaMemPool_t>(0x100 * i); };
  r.name_pool(pool(1), "weights");
  r.name_pool(pool(2), "activations");
  r.name_pool(pool(3), "scratch");
  r.name_pool(pool(2), "activations, renamed");  // the last name wins, in its first place
  const auto names = r.pool_names();
  REQUIRE(names.size() == 3);
  CHECK(names[0].first == pool(1));
  CHECK(names[0].second == "weights");
  CHECK(names[1].first == pool(2));
  CHECK(names[1].second == "activations, renamed");
  CHECK(names[2].first == pool(3));
  CHECK(names[2].second == "scratch");
}

TEST_CASE("recorder: none is attached by default", "[recorder]") {
  device_guard device;
  memory_pool pool;
  CHECK(pool.attached_recorder() == nullptr);
  CHECK(pool.ref().attached_recorder() == nullptr);
  cuscope::stream s;
  cuscope::session session(pool, s, "quiet");
  CHECK(session.pool().attached_recorder() == nullptr);
  (void)session.finish();
}

TEST_CASE("recorder: a pool records allocations, frees, trims and threshold changes",
          "[recorder]") {
  device_guard device;
  recorder r(small(256));
  memory_pool pool;
  pool.set_recorder(&r, "weights");
  CHECK(pool.attached_recorder() == &r);
  CHECK(pool.ref().attached_recorder() == &r);
  cuscope::stream s;
  void* p = pool.allocate(s, 3 * MiB);
  pool.deallocate(s, p, 3 * MiB);
  {
    const cuscope::device_buffer<int> b(s, 1024, pool);
    CHECK(b.pool().attached_recorder() == &r);
  }
  s.synchronize();
  pool.set_release_threshold(5 * MiB);
  pool.trim_to(0);
  pool.set_recorder(nullptr);
  void* quiet = pool.allocate(s, 1 * MiB);
  pool.deallocate(s, quiet, 1 * MiB);
  s.synchronize();

  std::vector<memory_event> ev;
  for (const memory_event& e : r.events())
    if (e.kind != memory_event_kind::sample) ev.push_back(e);
  REQUIRE(ev.size() == 6);
  CHECK(ev[0].kind == memory_event_kind::allocate);
  CHECK(ev[0].ptr == p);
  CHECK(ev[0].bytes == 3 * MiB);
  CHECK(ev[0].pool == pool.get());
  CHECK(ev[0].stream == s.get());
  CHECK(ev[1].kind == memory_event_kind::free);
  CHECK(ev[1].ptr == p);
  CHECK(ev[1].bytes == 3 * MiB);
  CHECK(ev[2].kind == memory_event_kind::allocate);
  CHECK(ev[2].bytes == 1024 * sizeof(int));
  CHECK(ev[3].kind == memory_event_kind::free);
  CHECK(ev[3].ptr == ev[2].ptr);
  CHECK(ev[4].kind == memory_event_kind::set_threshold);
  CHECK(ev[4].bytes == 5 * MiB);
  CHECK(ev[5].kind == memory_event_kind::trim);
  CHECK(ev[5].bytes == 0);
  // The attachment and the trim sampled the pool: the last sample shows it trimmed.
  const std::vector<memory_event> all = r.events();
  REQUIRE(all.front().kind == memory_event_kind::sample);
  REQUIRE(all.back().kind == memory_event_kind::sample);
  CHECK(all.back().value == 0);
  CHECK(all.back().bytes == 0);
  const auto names = r.pool_names();
  REQUIRE(names.size() == 1);
  CHECK(names[0].second == "weights");
}

TEST_CASE("recorder: sessions record their scope, and their buffers carry its id", "[recorder]") {
  device_guard device;
  recorder r(small(256));
  memory_pool pool;
  pool.set_recorder(&r);
  cuscope::stream s;
  cuscope::device_buffer<char> leaked;
  {
    cuscope::session_options eo;
    eo.name = "epoch 1";
    eo.on_leak = cuscope::leak_policy::ignore;  // the step's buffer outlives it too
    cuscope::session epoch(pool, s, eo);
    const auto a = epoch.make_buffer<char>(2 * MiB);
    {
      cuscope::session_options o;
      o.name = "step";
      o.on_leak = cuscope::leak_policy::ignore;
      cuscope::session step(epoch, o);
      leaked = step.make_buffer<char>(1 * MiB);
      (void)step.finish();
    }
    (void)epoch.finish();
  }
  const auto sessions = r.sessions();
  REQUIRE(sessions.size() == 2);
  CHECK(sessions[0].name == "epoch 1");
  CHECK(sessions[1].name == "step");
  CHECK(sessions[1].parent == sessions[0].id);
  std::size_t syncs = 0;
  std::size_t trims = 0;
  for (const memory_event& e : r.events()) {
    if (e.kind == memory_event_kind::allocate && e.bytes == 2 * MiB) CHECK(e.scope == 1);
    if (e.kind == memory_event_kind::allocate && e.bytes == 1 * MiB) CHECK(e.scope == 2);
    if (e.kind == memory_event_kind::synchronize) ++syncs;
    if (e.kind == memory_event_kind::trim) ++trims;
    if (e.kind == memory_event_kind::session_end && e.scope == 2) {
      CHECK(e.value == 1);
      CHECK(e.bytes == 1 * MiB);
    }
  }
  CHECK(syncs == 2);
  CHECK(trims == 2);
  leaked = {};
  s.synchronize();
}

TEST_CASE("recorder: a session records into the recorder its options name", "[recorder]") {
  device_guard device;
  recorder r(small(64));
  memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "request 7";
  o.record_into = &r;
  {
    cuscope::session request(pool, s, o);
    const auto b = request.make_buffer<float>(256);
    CHECK(b.pool().attached_recorder() == nullptr);  // the session's, not the pool's
  }
  // The pool itself is not attached: only the session's allocations are recorded.
  CHECK(pool.attached_recorder() == nullptr);
  std::size_t allocations = 0;
  for (const memory_event& e : r.events())
    if (e.kind == memory_event_kind::allocate) ++allocations;
  CHECK(allocations == 1);
  REQUIRE(r.sessions().size() == 1);
  CHECK(r.sessions()[0].name == "request 7");
}

TEST_CASE("recorder: an out-of-memory error is recorded with the bytes asked", "[recorder]") {
  device_guard device;
  recorder r(small(64));
  cuscope::pool_options o;
  o.max_bytes = 32 * MiB;  // drivers round smaller limits up to 32 MiB
  memory_pool pool(o);
  pool.set_recorder(&r);
  cuscope::stream s;
  CHECK_THROWS_AS(pool.allocate(s, 48 * MiB), cuscope::out_of_memory);
  bool seen = false;
  for (const memory_event& e : r.events()) {
    if (e.kind != memory_event_kind::out_of_memory) continue;
    seen = true;
    CHECK(e.bytes == 48 * MiB);
    CHECK(e.pool == pool.get());
  }
  CHECK(seen);
}

TEST_CASE("recorder: a recorder that outlives its pool still exports what it recorded",
          "[recorder]") {
  device_guard device;
  recorder r(small(64));
  cudaMemPool_t handle = nullptr;
  {
    memory_pool pool;
    pool.set_recorder(&r, "short-lived");
    handle = pool.get();
    cuscope::stream s;
    const cuscope::device_buffer<char> b(s, 1 * MiB, pool);
  }
  const std::vector<memory_event> ev = r.events();
  REQUIRE(!ev.empty());
  bool allocated = false;
  for (const memory_event& e : ev)
    allocated = allocated || (e.kind == memory_event_kind::allocate && e.pool == handle);
  CHECK(allocated);
  CHECK(r.dropped() == 0);
}

TEST_CASE("recorder: memory of the cuda::mr adaptor is recorded when allocated and when freed",
          "[recorder]") {
  device_guard device;
  recorder r(small(64));
  memory_pool pool;
  pool.set_recorder(&r);
  cuscope::stream s;
  cuscope::pool_resource mr(pool);
  void* a = mr.allocate(s, 4096);
  mr.deallocate(s, a, 4096);
  void* b = mr.allocate_sync(8192);
  mr.deallocate_sync(b, 8192);
  s.synchronize();
  std::vector<memory_event> ev;
  for (const memory_event& e : r.events())
    if (e.kind == memory_event_kind::allocate || e.kind == memory_event_kind::free) ev.push_back(e);
  REQUIRE(ev.size() == 4);
  CHECK(ev[1].kind == memory_event_kind::free);
  CHECK(ev[1].ptr == a);
  CHECK(ev[1].bytes == 4096);
  CHECK(ev[3].kind == memory_event_kind::free);
  CHECK(ev[3].ptr == b);
  CHECK(ev[3].bytes == 8192);
}

TEST_CASE("recorder: a pool's allocations and frees name the pool's device, whatever is current",
          "[recorder]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  recorder r(small(64));
  cuscope::pool_options po;
  po.device = 1;
  memory_pool on_one(po);
  memory_pool on_zero;
  // Two entries in the table: the pool attached first is found past the newer one.
  on_one.set_recorder(&r);
  on_zero.set_recorder(&r);
  cuscope::stream_options so;
  so.device = 1;
  cuscope::stream s1(so);
  cuscope::stream s0;
  REQUIRE(cuscope::current_device() == 0);
  void* p = on_one.allocate(s1, 4096);
  on_one.deallocate(s1, p, 4096);
  { const cuscope::device_buffer<int> b(s1, 256, on_one); }
  cuscope::pool_resource mr(on_one);
  mr.deallocate(s1, mr.allocate(s1, 512), 512);
  void* q = on_zero.allocate(s0, 1024);
  on_zero.deallocate(s0, q, 1024);
  s1.synchronize();
  s0.synchronize();
  std::vector<memory_event> ev;
  for (const memory_event& e : r.events())
    if (e.kind == memory_event_kind::allocate || e.kind == memory_event_kind::free) ev.push_back(e);
  REQUIRE(ev.size() == 8);
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(ev[i].kind == (i % 2 == 0 ? memory_event_kind::allocate : memory_event_kind::free));
    CHECK(ev[i].device == 1);
    CHECK(ev[i].pool == on_one.get());
    CHECK(ev[i].stream == s1.get());
    CHECK(ev[i].scope == 0);
  }
  CHECK(ev[0].ptr == p);
  CHECK(ev[0].bytes == 4096);
  CHECK(ev[2].bytes == 256 * sizeof(int));
  CHECK(ev[5].bytes == 512);
  CHECK(ev[6].device == 0);
  CHECK(ev[6].pool == on_zero.get());
  CHECK(ev[6].ptr == q);
  CHECK(ev[7].kind == memory_event_kind::free);
  CHECK(ev[7].device == 0);
  CHECK(ev[7].bytes == 1024);
}

TEST_CASE("recorder: detaching stops the recording through every reference and buffer",
          "[recorder]") {
  device_guard device;
  recorder r(small(64));
  memory_pool pool;
  pool.set_recorder(&r);
  const cuscope::memory_pool_ref ref = pool;
  cuscope::stream s;
  cuscope::device_buffer<char> b(s, 4096, ref);
  CHECK(ref.attached_recorder() == &r);
  pool.set_recorder(nullptr);
  CHECK(ref.attached_recorder() == nullptr);
  void* p = ref.allocate(s, 512);
  ref.deallocate(s, p, 512);
  b = {};  // allocated while recorded, freed after: the free is not recorded
  s.synchronize();
  std::size_t allocations = 0;
  std::size_t frees = 0;
  for (const memory_event& e : r.events()) {
    if (e.kind == memory_event_kind::allocate) ++allocations;
    if (e.kind == memory_event_kind::free) ++frees;
  }
  CHECK(allocations == 1);
  CHECK(frees == 0);
}

TEST_CASE("recorder: a recorder destroyed before its pool detaches itself", "[recorder]") {
  device_guard device;
  memory_pool pool;
  memory_pool other;
  cuscope::stream s;
  {
    recorder r(small(64));
    pool.set_recorder(&r, "first");
    other.set_recorder(&r, "second");
    CHECK(pool.attached_recorder() == &r);
    CHECK(other.attached_recorder() == &r);
  }
  CHECK(pool.attached_recorder() == nullptr);
  CHECK(other.attached_recorder() == nullptr);
  const cuscope::device_buffer<int> b(s, 256, pool);
  CHECK(b.size() == 256);
  // A new pool that gets a destroyed pool's handle is not recorded either.
  recorder kept(small(64));
  cudaMemPool_t handle = nullptr;
  {
    memory_pool gone;
    gone.set_recorder(&kept);
    handle = gone.get();
  }
  CHECK(cuscope::memory_pool_ref(handle, 0).attached_recorder() == nullptr);
  const memory_pool taken(std::move(pool));
  CHECK_THROWS_AS(pool.set_recorder(&kept), std::logic_error);  // NOLINT: use after move
  s.synchronize();
}

TEST_CASE("recorder: a session records what its allocate hands out and its deallocate frees",
          "[recorder]") {
  device_guard device;
  recorder r(small(64));
  memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.record_into = &r;
  {
    cuscope::session scope(pool, s, o);
    void* p = scope.allocate(s, 1024);
    scope.deallocate(s, p, 1024);
  }
  std::size_t allocations = 0;
  std::size_t frees = 0;
  for (const memory_event& e : r.events()) {
    if (e.kind == memory_event_kind::allocate) {
      ++allocations;
      CHECK(e.scope == 1);
    }
    if (e.kind == memory_event_kind::free) ++frees;
  }
  CHECK(allocations == 1);
  CHECK(frees == 1);
}

TEST_CASE(
    "recorder: memory a session with a recorder of its own hands out by pointer is recorded "
    "there, allocation and free, and not into the pool's",
    "[recorder]") {
  device_guard device;
  recorder pool_recorder(small(64));
  recorder session_recorder(small(64));
  memory_pool pool;
  pool.set_recorder(&pool_recorder, "shared");
  cuscope::stream s;
  cuscope::session_options o;
  o.record_into = &session_recorder;
  {
    cuscope::session scope(pool, s, o);
    void* p = scope.allocate(s, 1024);
    scope.deallocate(s, p, 1024);
    cuscope::pool_resource resource(scope);
    void* q = resource.allocate_async(512, 256, ::cuda::stream_ref(s.get()));
    resource.deallocate_async(q, 512, 256, ::cuda::stream_ref(s.get()));
  }
  const auto count = [](const recorder& r, memory_event_kind kind) {
    std::size_t n = 0;
    for (const memory_event& e : r.events())
      if (e.kind == kind) ++n;
    return n;
  };
  CHECK(count(session_recorder, memory_event_kind::allocate) == 2);
  CHECK(count(session_recorder, memory_event_kind::free) == 2);
  CHECK(count(pool_recorder, memory_event_kind::allocate) == 0);
  CHECK(count(pool_recorder, memory_event_kind::free) == 0);
}
