// SPDX-License-Identifier: Apache-2.0
// Sessions as docs/concepts.md ("Sessions", "Budgets and nesting", "Leak reports", "A session on
// several streams", "A concurrent service", "Running out", "Limits from the environment") and
// docs/services.md promise them, in the corners the other trials leave alone: budgets refused by
// a parent, counters passed up, the end's threshold, trim and peaks, leaks from several threads,
// buffers moved to other streams, requests that overlap on threads, the session's adaptors,
// empty_cache, the out-of-memory handler and limits given as a fraction of the device.
// A plain C++ compiler: Thrust's CPP device system (storage management only, docs/interop.md).
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <cuscope/cuscope.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/thrust.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "json_check.hpp"
#include "test_support.hpp"

using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// Lets n threads meet, so that their sessions overlap.
class meeting {
 public:
  explicit meeting(int n) : left_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    if (--left_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int left_;
};

}  // namespace

TEST_CASE("sessions: a nested session's budget and its parent's refuse, each by its own name",
          "[docs][session][budget]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;

  cuscope::session_options ro;
  ro.name = "request";
  ro.budget_bytes = 8 * MiB;
  cuscope::session request(pool, s, ro);
  {
    cuscope::session_options io;
    io.name = "decode";
    io.budget_bytes = 6 * MiB;
    cuscope::session step(request, s, io);
    auto a = step.make_buffer<std::byte>(4 * MiB, "a");
    const std::size_t used = pool.stats().used_bytes;

    // Over the nested session's own budget: named, refused before CUDA is asked.
    std::string what;
    try {
      (void)step.make_buffer<std::byte>(3 * MiB);
    } catch (const cuscope::out_of_memory& e) {
      CHECK(e.status() == cudaSuccess);
      what = e.what();
    }
    INFO(what);
    CHECK_THAT(what, contains("'decode'"));
    CHECK(pool.stats().used_bytes == used);

    // Within its own budget, over its parent's: the parent's name.
    auto b = request.make_buffer<std::byte>(3 * MiB, "b");
    what.clear();
    try {
      (void)step.make_buffer<std::byte>(MiB + MiB / 2);
    } catch (const cuscope::out_of_memory& e) {
      CHECK(e.status() == cudaSuccess);
      what = e.what();
    }
    INFO(what);
    CHECK_THAT(what, contains("'request'"));
    CHECK(pool.stats().used_bytes == used + 3 * MiB);

    // The parent cannot finish while the nested session is open, and nothing happens.
    CHECK(message_of([&] { (void)request.finish(); }) ==
          "cuscope::session 'request': finish() while its nested session(s) 'decode' are open; "
          "end them first");
    CHECK(pool.stats().used_bytes == used + 3 * MiB);

    { auto c = step.make_buffer<std::byte>(MiB, "c"); }  // 4 + 1 in step, 8 in request
    b = cuscope::device_buffer<std::byte>();
    const cuscope::session_report& r = step.finish();
    CHECK(r.allocations == 2);
    CHECK(r.frees == 1);            // a is still alive
    CHECK(r.budget_refusals == 2);  // its own budget and its parent's
    CHECK(r.pool_refusals == 0);
    CHECK(r.tracked_peak_bytes == 5 * MiB);
    CHECK(r.leaked_allocations == 1);
    REQUIRE(r.leaks.size() == 1);
    CHECK(std::string(r.leaks[0].tag) == "a");
    (void)a;
  }
  // a leaked out of step, but its memory was freed when it went; the request saw all of it.
  const cuscope::session_report& r = request.finish();
  INFO(r.to_string());
  CHECK(r.allocations == 3);  // what went through it and through the session nested in it
  CHECK(r.frees == 3);
  CHECK(r.budget_refusals == 2);
  CHECK(r.tracked_peak_bytes == 8 * MiB);  // 4 + 3 + 1: the nested peak is passed on
  CHECK_FALSE(r.leaked());
  CHECK_THAT(r.to_string(),
             contains("3 allocations, 3 freed; refused: 2 by a budget, 0 by the pool"));
}

TEST_CASE("sessions: the end restores the threshold, trims to the entry's reserve or keep_bytes",
          "[docs][session]") {
  device_guard device;
  cuscope::memory_pool pool;  // keep_all
  cuscope::stream s;
  { auto warm = cuscope::device_buffer<std::byte>(s, 64 * MiB, pool); }
  s.synchronize();
  REQUIRE(pool.stats().reserved_bytes == 64 * MiB);
  REQUIRE(pool.stats().used_high_bytes == 64 * MiB);

  {
    cuscope::session_options o;
    o.name = "threshold 0";
    o.release_threshold_bytes = 0;
    cuscope::session epoch(pool, s, o);
    // "starts the pool's peaks afresh"
    CHECK(pool.stats().used_high_bytes == 0);
    { auto x = epoch.make_buffer<std::byte>(96 * MiB); }
    const cuscope::session_report& r = epoch.finish();
    INFO(r.to_string());
    CHECK(r.peak_used_bytes == 96 * MiB);
    CHECK(r.reserved_at_entry_bytes == 64 * MiB);
    // Its threshold of 0 gave everything back at the end's synchronization, the entry's reserve
    // included: the trim cannot grow the pool again.
    CHECK(r.reserved_at_finish_bytes == 96 * MiB);
    CHECK(r.reserved_at_exit_bytes == 0);
    CHECK(r.returned_bytes == 96 * MiB);
  }
  // keep_all again: a synchronization keeps the reserve.
  { auto y = cuscope::device_buffer<std::byte>(s, 128 * MiB, pool); }
  s.synchronize();
  CHECK(pool.stats().reserved_bytes >= 128 * MiB);

  cuscope::session_options o;
  o.name = "keep 32 MiB";
  o.keep_bytes = 32 * MiB;
  cuscope::session epoch(pool, s, o);
  const cuscope::session_report& r = epoch.finish();
  CHECK(r.reserved_at_exit_bytes == 32 * MiB);
  CHECK(pool.stats().reserved_bytes == 32 * MiB);

  cuscope::session_options off;
  off.trim = false;
  cuscope::session kept(pool, s, off);
  CHECK_FALSE(kept.finish().trimmed);
  CHECK(pool.stats().reserved_bytes == 32 * MiB);
}

TEST_CASE("sessions: counters count what went through, a failed request is not an allocation",
          "[docs][session][counters]") {
  device_guard device;
  cuscope::pool_options po;
  po.max_bytes = 64 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream s;

  cuscope::session_options so;
  so.name = "counted";
  so.budget_bytes = 48 * MiB;
  so.on_pool_full = cuscope::alloc_policy::retry_after_trim;
  cuscope::session epoch(pool, s, so);

  auto keep = epoch.make_buffer<std::byte>(16 * MiB);
  { auto a = epoch.make_buffer<std::byte>(KiB); }
  void* p = epoch.allocate(s, 4 * KiB, "raw");
  epoch.deallocate(s, p, 4 * KiB);
  auto released = epoch.make_buffer<std::byte>(KiB);
  void* handed_back = released.release();  // neither freed nor leaked
  CHECK_THROWS_AS(epoch.make_buffer<std::byte>(40 * MiB), cuscope::out_of_memory);  // budget
  // Within the budget, beyond what the pool holds: the pool refuses after a retry.
  {
    auto fill = cuscope::device_buffer<std::byte>(s, 32 * MiB, pool);  // raw, beside the session
    CHECK_THROWS_AS(epoch.make_buffer<std::byte>(30 * MiB), cuscope::out_of_memory);
  }
  s.synchronize();
  { auto fits = epoch.make_buffer<std::byte>(30 * MiB); }

  keep = cuscope::device_buffer<std::byte>();
  REQUIRE(cudaFreeAsync(handed_back, s.get()) == cudaSuccess);  // the caller's to free
  const cuscope::session_report& r = epoch.finish();
  INFO(r.to_string());
  CHECK(r.allocations == 5);  // keep, a, raw, released, fits
  CHECK(r.frees == 4);
  CHECK(r.budget_refusals == 1);
  CHECK(r.pool_refusals == 1);
  CHECK(r.retries == 1);
  CHECK_FALSE(r.leaked());
  CHECK_THAT(r.to_string(), contains("5 allocations, 4 freed; refused: 1 by a budget, 1 by the "
                                     "pool; 1 retried"));
  const std::string json = cuscope::to_json(r);
  CHECK(cuscope::test::json_field(json, "allocations") == "5");
  CHECK(cuscope::test::json_field(json, "retries") == "1");
}

TEST_CASE("sessions: leaks from several threads are listed largest first",
          "[docs][session][leak]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options so;
  so.name = "threads";
  so.on_leak = cuscope::leak_policy::ignore;
  cuscope::session shared(pool, s, so);
  std::vector<cuscope::device_buffer<std::byte>> kept(4);
  std::vector<std::thread> threads;
  const std::size_t sizes[] = {KiB, 3 * MiB, 5 * KiB, 2 * MiB};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back(
        [&, t] { kept[std::size_t(t)] = shared.make_buffer<std::byte>(sizes[t]); });
  for (auto& t : threads)
    t.join();
  const cuscope::session_report& r = shared.finish();
  REQUIRE(r.leaks.size() == 4);
  CHECK(r.leaks[0].bytes == 3 * MiB);
  CHECK(r.leaks[1].bytes == 2 * MiB);
  CHECK(r.leaks[2].bytes == 5 * KiB);
  CHECK(r.leaks[3].bytes == KiB);
  CHECK(r.leaked_bytes == 5 * MiB + 6 * KiB);
}

TEST_CASE("sessions: a raw allocation in a session is untracked, rounded as the pool rounds",
          "[docs][session][leak]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options so;
  so.on_leak = cuscope::leak_policy::ignore;
  void* p = nullptr;
  {
    cuscope::session epoch(pool, s, so);
    auto leaked = epoch.make_buffer<std::byte>(400);
    p = pool.allocate(s, 1000);
    const cuscope::session_report& r = epoch.finish();
    INFO(r.to_string());
    CHECK(r.untracked_bytes == 1024);
    CHECK(r.untracked_leak);
    CHECK(r.leaked_allocations == 1);
    CHECK(r.leaked());
  }
  {
    so.untracked_leaks = false;
    cuscope::session epoch(pool, s, so);
    pool.deallocate(s, p, 1000);
    p = pool.allocate(s, 1000);
    const cuscope::session_report& r = epoch.finish();
    CHECK_FALSE(r.untracked_leak);
    CHECK_FALSE(r.leaked());
  }
  pool.deallocate(s, p, 1000);
  s.synchronize();
  {  // released, and still in use at the end: raw memory to the session
    so.untracked_leaks = true;
    cuscope::session epoch(pool, s, so);
    p = epoch.make_buffer<std::byte>(1000).release();
    const cuscope::session_report& r = epoch.finish();
    CHECK(r.allocations == 1);
    CHECK(r.frees == 0);
    CHECK(r.leaked_allocations == 0);
    CHECK(r.untracked_bytes == 1024);
    CHECK(r.untracked_leak);
  }
  pool.deallocate(s, p, 1000);
  s.synchronize();
}

TEST_CASE("sessions: memory on listed streams is synchronized there, moved elsewhere the device",
          "[docs][session][streams]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream compute, copy, other;

  {  // the documented example
    cuscope::session_options o;
    o.name = "step";
    o.streams = {copy};
    cuscope::session step(pool, compute, o);
    auto x = step.make_buffer<float>(MiB);
    auto staging = step.make_buffer<float>(copy, MiB);
    CHECK(staging.stream() == cuscope::stream_ref(copy));
    copy.wait(compute);
    x = cuscope::device_buffer<float>();
    staging = cuscope::device_buffer<float>();
    const cuscope::session_report& r = step.finish();
    CHECK_FALSE(r.synchronized_device);
    CHECK(r.used_at_exit_bytes == 0);
    CHECK(r.reserved_at_exit_bytes == 0);  // both frees ran, so the trim gave everything back
    CHECK(r.returned_bytes == 32 * MiB);
  }
  {  // set_stream onto a stream it was not given
    cuscope::session step(pool, compute, "moved");
    auto x = step.make_buffer<float>(MiB);
    x.set_stream(other);
    x = cuscope::device_buffer<float>();
    const cuscope::session_report& r = step.finish();
    CHECK(r.synchronized_device);
    CHECK(r.reserved_at_exit_bytes == 0);
  }
  {  // resize on a stream it was not given
    cuscope::session step(pool, compute, "resized");
    auto x = step.make_buffer<float>(MiB);
    x.resize(other, 2 * MiB);
    CHECK(x.stream() == cuscope::stream_ref(other));
    x = cuscope::device_buffer<float>();
    const cuscope::session_report& r = step.finish();
    CHECK(r.synchronized_device);
    CHECK(r.allocations >= 1);
    CHECK_FALSE(r.leaked());
    CHECK(r.reserved_at_exit_bytes == 0);
  }
  {  // session::allocate on a listed stream
    cuscope::session_options o;
    o.streams = {copy};
    cuscope::session step(pool, compute, o);
    void* p = step.allocate(copy, 4 * MiB);
    step.deallocate(copy, p, 4 * MiB);
    const cuscope::session_report& r = step.finish();
    CHECK_FALSE(r.synchronized_device);
    CHECK(r.reserved_at_exit_bytes == 0);
  }
}

TEST_CASE(
    "sessions: overlapping requests defer the trim to the last, which trims to the first's "
    "entry",
    "[docs][session][service]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream service_stream;
  { auto warm = cuscope::device_buffer<std::byte>(service_stream, 32 * MiB, pool); }
  service_stream.synchronize();
  cuscope::session_options so;
  so.name = "service";
  cuscope::session service(pool, service_stream, so);

  constexpr int workers = 4;
  meeting begun(workers), allocated(workers);
  std::vector<cuscope::session_report> reports(workers);
  std::vector<std::thread> threads;
  std::mutex end_order;
  std::vector<int> order;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      cuscope::stream s;
      cuscope::session_options o;
      o.name = "request " + std::to_string(w);
      cuscope::session req(service, s, o);
      begun.arrive_and_wait();
      {
        auto kv = req.make_buffer<std::byte>(std::size_t(w + 1) * 40 * MiB, "kv cache");
        allocated.arrive_and_wait();
      }
      std::lock_guard<std::mutex> lock(end_order);  // one ends at a time, in a known order
      reports[std::size_t(w)] = req.finish();
      order.push_back(w);
    });
  }
  for (auto& t : threads)
    t.join();
  REQUIRE(order.size() == std::size_t(workers));
  for (int i = 0; i < workers; ++i) {
    const cuscope::session_report& r = reports[std::size_t(order[std::size_t(i)])];
    INFO(r.to_string());
    CHECK(r.concurrent);
    CHECK(r.tracked_peak_bytes == std::size_t(order[std::size_t(i)] + 1) * 40 * MiB);
    CHECK_FALSE(r.tracked_peak_upper_bound);
    CHECK(r.peak_used_bytes >= 400 * MiB);  // shared: all four together
    if (i + 1 < workers) {
      CHECK(r.trim_deferred);
      CHECK_FALSE(r.trimmed);
    } else {
      CHECK_FALSE(r.trim_deferred);
      CHECK(r.trimmed);
      CHECK(r.reserved_at_exit_bytes == 32 * MiB);  // what the pool held when the first began
    }
  }
  CHECK(pool.stats().reserved_bytes == 32 * MiB);
  const cuscope::session_report& total = service.finish();
  CHECK(total.allocations == std::size_t(workers));
  CHECK(total.reserved_at_exit_bytes == 32 * MiB);
}

TEST_CASE("sessions: a request's buffers freed on another thread, with and without a budget",
          "[docs][session][service]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session service(pool, s, "service");
  for (const bool budget : {false, true}) {
    cuscope::session_options o;
    o.name = budget ? "with a budget" : "without";
    if (budget) o.budget_bytes = 64 * MiB;
    cuscope::session req(service, s, o);
    std::vector<cuscope::device_buffer<std::byte>> made;
    std::thread maker([&] {
      for (int i = 0; i < 4; ++i)
        made.push_back(req.make_buffer<std::byte>(MiB));
    });
    maker.join();
    std::thread freer([&] { made.clear(); });
    freer.join();
    auto mine = req.make_buffer<std::byte>(2 * MiB);
    mine = cuscope::device_buffer<std::byte>();
    const cuscope::session_report& r = req.finish();
    INFO(r.to_string());
    CHECK(r.allocations == 5);
    CHECK(r.frees == 5);
    CHECK_FALSE(r.leaked());
    if (budget) {
      CHECK_FALSE(r.tracked_peak_upper_bound);
      CHECK(r.tracked_peak_bytes == 4 * MiB);
    } else {
      CHECK(r.tracked_peak_bytes >= 4 * MiB);
      if (r.tracked_peak_upper_bound) CHECK_THAT(r.to_string(), contains("at most"));
    }
  }
  CHECK_FALSE(service.finish().leaked());
}

TEST_CASE("sessions: the session's adaptors count against its budget and name their leaks",
          "[docs][session][adaptors]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options so;
  so.name = "adapted";
  so.budget_bytes = 8 * MiB;
  so.on_leak = cuscope::leak_policy::ignore;
  cuscope::session epoch(pool, s, so);

  cuscope::pool_resource mr(epoch);
  void* a = mr.allocate_sync(6 * MiB, 256);
  CHECK_THROWS_AS(mr.allocate_sync(4 * MiB, 256), cuscope::out_of_memory);
  cuscope::thrust_allocator<float> alloc(epoch);
  CHECK_THROWS_AS(alloc.allocate(MiB), cuscope::out_of_memory);  // 4 MiB more
  auto leaked = alloc.allocate(KiB);
  mr.deallocate_sync(a, 6 * MiB, 256);

  std::vector<float> host(1 << 16, 1.0f);
  std::size_t batches = 0;
  for (const auto& b : cuscope::batches(epoch, host, 4096)) {
    (void)b;
    ++batches;
  }
  CHECK(batches == 16);

  const cuscope::session_report& r = epoch.finish();
  INFO(r.to_string());
  CHECK(r.budget_refusals == 2);
  REQUIRE(r.leaks.size() == 1);
  CHECK(r.leaks[0].bytes == KiB * sizeof(float));
  CHECK(std::string(r.leaks[0].tag) == "cuscope::thrust_allocator");
  CHECK(r.allocations >= 4);  // a, the leaked one, the range's buffers
  alloc.deallocate(leaked, KiB);
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("empty_cache: trims the named pools after their frees complete, keeps live memory",
          "[docs][empty_cache]") {
  device_guard device;
  cuscope::memory_pool activations, workspace, untouched;
  cuscope::stream s;
  auto live = cuscope::device_buffer<std::byte>(s, 8 * MiB, activations);
  { auto gone = cuscope::device_buffer<std::byte>(s, 64 * MiB, activations); }
  { auto gone = cuscope::device_buffer<std::byte>(s, 40 * MiB, workspace); }
  { auto gone = cuscope::device_buffer<std::byte>(s, 40 * MiB, untouched); }
  // The frees are enqueued, not run (the device defers work until a synchronization).
  const std::size_t before = activations.stats().reserved_bytes + workspace.stats().reserved_bytes;
  const std::size_t freed = cuscope::empty_cache(activations, workspace);
  CHECK(freed == before - activations.stats().reserved_bytes);
  CHECK(workspace.stats().reserved_bytes == 0);
  CHECK(activations.stats().used_bytes == 8 * MiB);
  CHECK(activations.stats().reserved_bytes >= 8 * MiB);
  CHECK(activations.stats().reserved_bytes < 64 * MiB);
  CHECK(untouched.stats().reserved_bytes == 64 * MiB);
  live = cuscope::device_buffer<std::byte>();
  CHECK(cuscope::empty_cache(activations) == 32 * MiB);
  CHECK(cuscope::empty_cache(untouched) == 64 * MiB);
}

namespace {

struct handler_log {
  std::vector<int> attempts;
  std::size_t bytes = 0;
  cudaStream_t stream = nullptr;
  void* user = nullptr;
  cuscope::device_buffer<std::byte>* cache = nullptr;
  int help_until = 0;  // returns true for attempts up to this one
};

bool on_oom(const cuscope::out_of_memory_info& info) noexcept {
  auto* log = static_cast<handler_log*>(info.user);
  log->attempts.push_back(int(info.attempt));
  log->bytes = info.bytes;
  log->stream = info.stream;
  log->user = info.user;
  if (log->cache != nullptr && info.attempt == 1) {
    *log->cache = cuscope::device_buffer<std::byte>();  // free what only the program can
    return true;
  }
  return int(info.attempt) <= log->help_until;
}

}  // namespace

TEST_CASE("out-of-memory handler: asked after the policy, again after each refused retry",
          "[docs][oom]") {
  device_guard device;
  cuscope::pool_options po;
  po.max_bytes = 64 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream s;

  handler_log log;
  log.help_until = 2;
  {
    cuscope::scoped_out_of_memory_handler scoped(&on_oom, &log);
    auto hold = cuscope::device_buffer<std::byte>(s, 48 * MiB, pool);
    cuscope::session_options so;
    so.name = "oom";
    so.on_pool_full = cuscope::alloc_policy::retry_after_trim;
    cuscope::session epoch(pool, s, so);
    CHECK_THROWS_AS(epoch.make_buffer<std::byte>(32 * MiB), cuscope::out_of_memory);
    CHECK(log.attempts == std::vector<int>{1, 2, 3});
    CHECK(log.bytes == 32 * MiB);
    CHECK(log.stream == s.get());
    CHECK(log.user == &log);

    // A handler that frees: the retry succeeds.
    log.attempts.clear();
    log.help_until = 0;
    log.cache = &hold;
    { auto fits = epoch.make_buffer<std::byte>(32 * MiB); }
    CHECK(log.attempts == std::vector<int>{1});
    const cuscope::session_report& r = epoch.finish();
    INFO(r.to_string());
    CHECK(r.pool_refusals == 1);
    CHECK(r.retries == (1 + 2) + (1 + 1));  // each time the policy's, then the handler's
    CHECK(r.allocations == 1);
  }
  // Restored: no handler, nothing retried.
  log.attempts.clear();
  auto hold = cuscope::device_buffer<std::byte>(s, 48 * MiB, pool);
  CHECK_THROWS_AS(cuscope::device_buffer<std::byte>(s, 32 * MiB, pool), cuscope::out_of_memory);
  CHECK(log.attempts.empty());
}

TEST_CASE("limits from the environment: fractions of the device's memory", "[docs][env]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 16 * GiB;
  device_guard device(setup);
  const std::size_t total = [] {
    std::size_t f = 0, t = 0;
    REQUIRE(cudaMemGetInfo(&f, &t) == cudaSuccess);
    return t;
  }();

  ::setenv("CUSCOPE_TRIAL_MAX_BYTES", "0.25", 1);
  ::setenv("CUSCOPE_TRIAL_INITIAL_BYTES", "64MiB", 1);
  ::setenv("CUSCOPE_TRIAL_RELEASE_THRESHOLD", "keep_all", 1);
  auto po = cuscope::pool_options::from_env("trial");
  CHECK(po.max_bytes == total / 4);
  CHECK(po.initial_bytes == 64 * MiB);
  CHECK(po.name == "trial");
  INFO(po.origin);
  CHECK_THAT(po.origin, contains("CUSCOPE_TRIAL_MAX_BYTES"));
  CHECK_THAT(po.origin, contains("0.25"));
  CHECK_THAT(po.origin, contains("device 0"));
  CHECK_THAT(po.origin, contains("16.00 GiB"));

  ::setenv("CUSCOPE_TRIAL_MAX_BYTES", "25%", 1);
  CHECK(cuscope::pool_options::from_env("trial").max_bytes == total / 4);
  ::setenv("CUSCOPE_TRIAL_MAX_BYTES", "1.0", 1);
  CHECK(cuscope::pool_options::from_env("trial").max_bytes == total);
  for (const char* bad : {"0.0", "150%", "1.5", "-0.5", "0%", "12 parsecs", ""}) {
    ::setenv("CUSCOPE_TRIAL_MAX_BYTES", bad, 1);
    const std::string what = message_of([] { (void)cuscope::pool_options::from_env("trial"); });
    INFO(bad);
    CHECK_THAT(what, contains(std::string("CUSCOPE_TRIAL_MAX_BYTES=\"") + bad + "\" is not"));
  }
  ::setenv("CUSCOPE_TRIAL_MAX_BYTES", "1.5 GiB", 1);
  CHECK(cuscope::pool_options::from_env("trial").max_bytes == GiB + GiB / 2);
  ::unsetenv("CUSCOPE_TRIAL_MAX_BYTES");
  ::unsetenv("CUSCOPE_TRIAL_INITIAL_BYTES");
  ::unsetenv("CUSCOPE_TRIAL_RELEASE_THRESHOLD");

  ::setenv("CUSCOPE_TRIAL_BUDGET_BYTES", "0.5", 1);
  ::setenv("CUSCOPE_TRIAL_KEEP_BYTES", "1%", 1);
  ::setenv("CUSCOPE_TRIAL_ADMIT_BYTES", "50%", 1);
  ::setenv("CUSCOPE_TRIAL_TRIM", "no", 1);
  auto so = cuscope::session_options::from_env("trial");
  CHECK(so.budget_bytes == total / 2);
  CHECK(so.keep_bytes == total / 100);
  CHECK(so.admission.device_fraction == 0.5);
  CHECK(so.admission.bytes == 0);
  CHECK_FALSE(so.trim);
  CHECK_THAT(so.origin, contains("CUSCOPE_TRIAL_BUDGET_BYTES"));
  for (const char* v : {"CUSCOPE_TRIAL_BUDGET_BYTES", "CUSCOPE_TRIAL_KEEP_BYTES",
                        "CUSCOPE_TRIAL_ADMIT_BYTES", "CUSCOPE_TRIAL_TRIM"})
    ::unsetenv(v);

  // A name with other characters.
  CHECK_THROWS_AS(cuscope::pool_options::from_env("my-pool"), std::invalid_argument);
}

TEST_CASE("admission: the cache counts on a first look, trim_and_retry trims the pools it names",
          "[docs][session][admission]") {
  device_guard device;  // 4 GiB, 256 MiB of context
  cuscope::memory_pool pool, workspace;
  cuscope::stream s;
  { auto warm = cuscope::device_buffer<std::byte>(s, GiB, pool); }
  { auto warm = cuscope::device_buffer<std::byte>(s, 512 * MiB, workspace); }
  s.synchronize();
  void* tenant = nullptr;  // another tenant's memory
  REQUIRE(cudaMalloc(&tenant, 2 * GiB) == cudaSuccess);
  // Free: 4 GiB - 256 MiB - 1.5 GiB - 2 GiB = 256 MiB; the pool caches 1 GiB.

  cuscope::session service(pool, s, "service");
  {
    cuscope::session_options o;
    o.name = "fits the cache";
    o.admission.bytes = GiB;
    cuscope::session req(service, s, o);
    const cuscope::session_report& r = req.finish();
    CHECK_FALSE(r.admission_refused);
    CHECK(r.admission_required_bytes == GiB);
    CHECK(r.admission_available_bytes == GiB + 256 * MiB);
    CHECK(r.admission_cached_bytes == GiB);
    CHECK(r.admission_free_bytes == 256 * MiB);
    CHECK_FALSE(r.admission_trimmed);
  }
  {
    cuscope::session_options o;
    o.name = "request";
    o.admission.bytes = GiB + GiB / 2;
    std::string what;
    try {
      cuscope::session req(service, s, o);
      FAIL("admitted");
    } catch (const cuscope::admission_error& e) {
      what = e.what();
      CHECK(e.requested_bytes() == GiB + GiB / 2);
      CHECK(e.available_bytes() == GiB + 256 * MiB);
      CHECK(e.shortfall_bytes() == 256 * MiB);
      CHECK(e.report().admission_refused);
      CHECK(e.report().name == "request");
      const std::string text = e.report().to_string();
      INFO(text);
      CHECK_THAT(text, contains("session 'request' on device 0, refused by its admission"));
      CHECK(std::count(text.begin(), text.end(), '\n') == 2);
      const std::bad_alloc& as_bad_alloc = e;  // an out_of_memory, so a std::bad_alloc
      (void)as_bad_alloc;
    }
    INFO(what);
    CHECK_THAT(what, contains("cuscope::session 'request': admission refused: 1.50 GiB must be "
                              "available at entry, 1.25 GiB is (256.00 MiB short)"));
    CHECK_THAT(what, contains("Device 0 has 256.00 MiB free of 4.00 GiB"));
    CHECK_THAT(what, contains("1.00 GiB cached"));
  }
  {  // count_cache off: the driver's free memory alone
    cuscope::session_options o;
    o.name = "no cache";
    o.admission.bytes = 512 * MiB;
    o.admission.count_cache = false;
    CHECK_THROWS_AS(cuscope::session(service, s, o), cuscope::admission_error);
    o.admission.device_fraction = 0.05;  // 204.8 MiB: the largest of the two is asked
    CHECK_THROWS_AS(cuscope::session(service, s, o), cuscope::admission_error);
    o.admission.bytes = 0;
    cuscope::session fits(service, s, o);
    CHECK(fits.finish().admission_required_bytes == std::size_t(0.05 * double(4 * GiB)));
  }
  {  // trim_and_retry, also trimming another cache of the service
    cuscope::session_options o;
    o.name = "trimmed";
    o.admission.bytes = GiB + GiB / 2;
    o.admission.on_shortfall = cuscope::admission_policy::trim_and_retry;
    o.admission.also_trim = {workspace};
    cuscope::session req(service, s, o);
    const cuscope::session_report& r = req.finish();
    INFO(r.to_string());
    CHECK(r.admission_trimmed);
    CHECK(r.admission_returned_bytes == GiB + GiB / 2);
    CHECK(r.admission_available_bytes == GiB + 3 * GiB / 4);
    CHECK(r.admission_cached_bytes == 0);
    CHECK(workspace.stats().reserved_bytes == 0);
  }
  {  // refused after the trim: the message says what every pool trimmed gave back
    { auto w = cuscope::device_buffer<std::byte>(s, 256 * MiB, workspace); }
    { auto w = cuscope::device_buffer<std::byte>(s, 128 * MiB, pool); }
    s.synchronize();
    cuscope::session_options o;
    o.name = "too large";
    o.admission.bytes = 2 * GiB;
    o.admission.on_shortfall = cuscope::admission_policy::trim_and_retry;
    o.admission.also_trim = {workspace, workspace, pool};  // each trimmed and counted once
    try {
      cuscope::session req(service, s, o);
      FAIL("admitted");
    } catch (const cuscope::admission_error& e) {
      INFO(e.what());
      CHECK(e.report().admission_returned_bytes == 384 * MiB);
      CHECK_THAT(e.what(), contains("2.00 GiB must be available at entry, 1.75 GiB is (256.00 "
                                    "MiB short) after synchronizing the device and trimming the "
                                    "pool and 1 of also_trim (384.00 MiB returned)"));
    }
  }
  {  // a fraction of a pool without a limit
    cuscope::session_options o;
    o.admission.pool_fraction = 0.5;
    const std::string what = message_of([&] { cuscope::session req(service, s, o); });
    INFO(what);
    CHECK_THAT(what, contains("limit"));
  }
  // The refused sessions never began: the service ends as if they had not been asked.
  const cuscope::session_report& r = service.finish();
  CHECK_FALSE(r.leaked());
  CHECK(r.allocations == 0);
  REQUIRE(cudaFree(tenant) == cudaSuccess);
}

TEST_CASE("sessions: on_finish sees every report, a session ended by an exception says so",
          "[docs][session][leak]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  std::vector<cuscope::session_report> seen;
  std::vector<std::string> sunk;
  cuscope::session_options o;
  o.name = "unwound";
  o.on_finish = [&](const cuscope::session_report& r) { seen.push_back(r); };
  o.on_leak = cuscope::leak_policy::throw_exception;
  o.leak_sink = [&](const cuscope::session_report& r) { sunk.push_back(r.name); };
  std::optional<cuscope::device_buffer<float>> kept;
  try {
    cuscope::session epoch(pool, s, o);
    kept.emplace(epoch.make_buffer<float>(1024, "kept"));
    throw std::runtime_error("the step failed");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "the step failed");  // not a session_leak_error
  }
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].unwinding);
  CHECK(seen[0].leaked_allocations == 1);
  CHECK(sunk == std::vector<std::string>{"unwound"});  // reported instead of thrown

  o.name = "clean";
  {
    cuscope::session epoch(pool, s, o);
    (void)epoch.finish();
  }
  REQUIRE(seen.size() == 2);
  CHECK_FALSE(seen[1].unwinding);
  CHECK_FALSE(seen[1].leaked());
  CHECK(sunk.size() == 1);
  kept.reset();
  s.synchronize();
}

TEST_CASE("sessions: a request that begins while another is open keeps the pool's peaks",
          "[docs][session][service]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s, t;
  cuscope::session service(pool, s, "service");
  std::optional<cuscope::session> first(std::in_place, service, "first");
  auto a = first->make_buffer<std::byte>(40 * MiB);
  {
    cuscope::session second(service, t, "second");
    { auto b = second.make_buffer<std::byte>(MiB); }
    const cuscope::session_report& r = second.finish();
    CHECK(r.concurrent);
    CHECK(r.trim_deferred);
    CHECK(r.peak_used_bytes >= 41 * MiB);  // the first one's memory is part of the pool's peak
    CHECK(r.tracked_peak_bytes == MiB);
  }
  a = cuscope::device_buffer<std::byte>();
  const cuscope::session_report& r = first->finish();
  CHECK(r.concurrent);
  CHECK(r.trimmed);
  CHECK(r.peak_used_bytes >= 41 * MiB);
  CHECK(r.tracked_peak_bytes == 40 * MiB);
  CHECK(r.reserved_at_exit_bytes == 0);
  first.reset();
  CHECK_FALSE(service.finish().leaked());
}

namespace {

struct my_cache {
  std::vector<cuscope::device_buffer<std::byte>> blocks;
  std::size_t drop_all() {
    const std::size_t n = blocks.size();
    blocks.clear();
    return n;
  }
};

// docs/concepts.md, "Running out", as written.
bool drop_cache(const cuscope::out_of_memory_info& info) noexcept {
  auto* cache = static_cast<my_cache*>(info.user);
  return info.attempt == 1 && cache->drop_all() > 0;  // retry once, if something was dropped
}

}  // namespace

TEST_CASE("concepts: the code blocks of the page, run", "[docs][session]") {
  cuscope::test::device_setup setup;
  setup.total_bytes = 16 * GiB;
  device_guard device(setup);

  cuscope::stream s;
  {
    cuscope::pool_options o;
    o.max_bytes = 8ull << 30;      // a hard limit (CUDA 12.2 and newer)
    o.initial_bytes = 1ull << 30;  // reserve up front
    cuscope::memory_pool pool(o);
    CHECK(pool.stats().reserved_bytes == GiB);
    void* p = pool.allocate(s, 1 << 20);  // stream-ordered
    CHECK(pool.stats().used_bytes == MiB);
    pool.deallocate(s, p, 1 << 20);
    cuscope::pool_stats st = pool.stats();  // reserved/used, current and peak
    CHECK(st.used_high_bytes == MiB);
    CHECK(pool.max_bytes() == 8 * GiB);
    void* q = pool.allocate(s, MiB, cuscope::alloc_policy::retry_after_trim);  // may block
    pool.deallocate(s, q, MiB);
    s.synchronize();
  }
  {
    cuscope::pool_options o;
    o.max_bytes = 64 * MiB;
    cuscope::memory_pool pool(o);
    my_cache cache;
    cache.blocks.push_back(cuscope::device_buffer<std::byte>(s, 48 * MiB, pool));
    cuscope::set_out_of_memory_handler(&drop_cache, &cache);
    {
      auto big = cuscope::device_buffer<std::byte>(s, 32 * MiB, pool);  // the cache is dropped
      CHECK(cache.blocks.empty());
      CHECK_THROWS_AS(cuscope::device_buffer<std::byte>(s, 48 * MiB, pool), cuscope::out_of_memory);
    }
    cuscope::set_out_of_memory_handler(nullptr, nullptr);
    s.synchronize();
  }
  {
    cuscope::memory_pool pool;
    std::vector<float> host(1 << 20, 1.0f);
    cuscope::device_buffer<float> a(s, host, pool);  // allocate and copy
    cuscope::device_buffer<float> b(s, a);           // a deep copy takes a stream
    b.resize(s, 2 << 20);                            // keeps the first million
    std::vector<float> back = b.to_vector(s);        // blocks
    REQUIRE(back.size() == std::size_t(2 << 20));
    CHECK(std::all_of(back.begin(), back.begin() + (1 << 20), [](float v) { return v == 1.0f; }));

    const int epochs = 2;
    std::vector<std::vector<float>> data(3, std::vector<float>(1000, 2.0f));
    for (int e = 0; e < epochs; ++e) {
      cuscope::session epoch(pool, s, "epoch " + std::to_string(e));
      for (auto& batch : data) {
        auto x = epoch.make_buffer<float>(batch.size());
        x.copy_from(s, batch);
      }
      const std::string text = epoch.finish().to_string();
      CHECK_THAT(text, contains("session 'epoch " + std::to_string(e) + "' on device 0"));
      CHECK_THAT(text, contains("no leaks"));
    }
    cuscope::session_options o;
    o.budget_bytes = 2ull << 30;
    cuscope::session request(pool, s, o);
    {
      cuscope::session step(request, "decode");
      auto kv = step.make_buffer<std::uint16_t>(1000);  // counts against both sessions
    }
    CHECK(request.finish().tracked_peak_bytes == 2000);

    a = cuscope::device_buffer<float>();
    b = cuscope::device_buffer<float>();
    cuscope::memory_pool workspace;
    { auto w = cuscope::device_buffer<std::byte>(s, MiB, workspace); }
    std::size_t freed = cuscope::empty_cache(pool, workspace);
    CHECK(freed == 64 * MiB);  // 32 MiB each
  }
}

TEST_CASE("sessions: threads come and go in one session; an exited thread's buffers stay counted",
          "[docs][session][service]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options so;
  so.name = "shared";
  so.on_leak = cuscope::leak_policy::ignore;
  cuscope::session shared(pool, s, so);
  std::vector<cuscope::device_buffer<std::byte>> made;
  for (int round = 0; round < 8; ++round) {
    std::thread([&, round] {
      made.push_back(shared.make_buffer<std::byte>(std::size_t(round + 1) * 64 * KiB, "round"));
      if (round % 2 == 1) made.erase(made.begin());  // one made by the thread before
    }).join();
  }
  // Four left, made by threads that exited: 5, 6, 7 and 8 x 64 KiB.
  REQUIRE(made.size() == 4);
  std::thread([&] { made.erase(made.begin()); }).join();  // 5 x 64 KiB freed by a new thread
  const cuscope::session_report& r = shared.finish();
  INFO(r.to_string());
  CHECK(r.allocations == 8);
  CHECK(r.frees == 5);
  CHECK(r.leaked_allocations == 3);
  REQUIRE(r.leaks.size() == 3);
  CHECK(r.leaks[0].bytes == 8 * 64 * KiB);
  CHECK(r.leaks[2].bytes == 6 * 64 * KiB);
  CHECK(r.leaked_bytes == 21 * 64 * KiB);
  for (const auto& leak : r.leaks)
    CHECK(std::string(leak.tag) == "round");
  made.clear();
  s.synchronize();

  // All made and freed on one thread, not the session's own: exact.
  cuscope::session one(pool, s, "one thread");
  std::thread([&] {
    auto a = one.make_buffer<std::byte>(MiB);
    auto b = one.make_buffer<std::byte>(MiB);
  }).join();
  const cuscope::session_report& r1 = one.finish();
  CHECK(r1.tracked_peak_bytes == 2 * MiB);
  CHECK_FALSE(r1.tracked_peak_upper_bound);
}

TEST_CASE("sessions: a budget is reached exactly, synchronize_device is said",
          "[docs][session][budget]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "exact";
  o.budget_bytes = 8 * MiB;
  o.synchronize_device = true;
  cuscope::session epoch(pool, s, o);
  {
    auto a = epoch.make_buffer<std::byte>(4 * MiB);
    void* p = epoch.allocate(s, 4 * MiB);
    CHECK_THROWS_AS(epoch.make_buffer<std::byte>(1), cuscope::out_of_memory);
    epoch.deallocate(s, p, 4 * MiB);
  }
  { auto whole = epoch.make_buffer<std::byte>(8 * MiB); }
  const cuscope::session_report& r = epoch.finish();
  CHECK(r.synchronized_device);
  CHECK(r.tracked_peak_bytes == 8 * MiB);
  CHECK(r.budget_refusals == 1);
  CHECK_FALSE(r.leaked());
}

TEST_CASE("sessions: a finishing session takes no nested session, a finished one's adaptors none",
          "[docs][session][misuse]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session* self = nullptr;
  std::string refused;
  cuscope::session_options o;
  o.name = "finishing";
  o.on_finish = [&](const cuscope::session_report&) {
    try {
      cuscope::session late(*self, "late");
      refused = "(began)";
    } catch (const std::logic_error& e) {
      refused = e.what();
    }
  };
  cuscope::session parent(pool, s, o);
  self = &parent;
  (void)parent.finish();
  INFO(refused);
  CHECK_THAT(refused, contains("'finishing'"));
  CHECK_THAT(refused, contains("'late'"));

  CHECK_THROWS_AS(thrust::get_temporary_buffer<int>(cuscope::thrust_policy_sync(parent), 16),
                  std::logic_error);
  CHECK_THROWS_WITH(thrust::get_temporary_buffer<int>(cuscope::thrust_policy(parent), 16),
                    contains("session 'finishing'"));
  CHECK_THROWS_WITH(parent.make_buffer<int>(s, 16), contains("session 'finishing'"));
}

TEST_CASE(
    "sessions: a chain of overlapping requests trims back to the first one's entry; raw "
    "memory is untracked, not a leak, for a concurrent request",
    "[docs][session][service]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s, t, u;
  { auto warm = cuscope::device_buffer<std::byte>(s, 32 * MiB, pool); }
  s.synchronize();
  cuscope::session_options so;
  so.name = "service";
  so.on_leak = cuscope::leak_policy::ignore;
  cuscope::session service(pool, s, so);

  std::optional<cuscope::session> a(std::in_place, service, s, so);
  auto x = a->make_buffer<std::byte>(40 * MiB);
  std::optional<cuscope::session> b(std::in_place, service, t, so);
  void* raw = pool.allocate(t, 1000);
  x = cuscope::device_buffer<std::byte>();
  const cuscope::session_report ra = a->finish();
  a.reset();
  CHECK(ra.trim_deferred);
  std::optional<cuscope::session> c(std::in_place, service, u, so);  // while b is open
  auto y = c->make_buffer<std::byte>(100 * MiB);
  const cuscope::session_report rb = b->finish();
  b.reset();
  INFO(rb.to_string());
  CHECK(rb.trim_deferred);
  CHECK(rb.concurrent);
  CHECK(rb.untracked_bytes == 1024);
  CHECK_FALSE(rb.untracked_leak);
  CHECK_FALSE(rb.leaked());
  y = cuscope::device_buffer<std::byte>();
  pool.deallocate(t, raw, 1000);
  const cuscope::session_report rc = c->finish();
  c.reset();
  INFO(rc.to_string());
  CHECK(rc.trimmed);
  CHECK(rc.reserved_at_exit_bytes == 32 * MiB);  // what the pool held when a began
  CHECK(pool.stats().reserved_bytes == 32 * MiB);
  CHECK_FALSE(service.finish().leaked());
}

TEST_CASE("sessions: a budget in a parent makes a nested session's peak exact across threads",
          "[docs][session][service]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options so;
  so.name = "service";
  so.budget_bytes = 64 * MiB;
  cuscope::session service(pool, s, so);
  cuscope::session req(service, s, "request without a budget of its own");
  std::vector<cuscope::device_buffer<std::byte>> made;
  std::thread([&] {
    for (int i = 0; i < 4; ++i)
      made.push_back(req.make_buffer<std::byte>(MiB));
  }).join();
  std::thread([&] { made.clear(); }).join();
  { auto mine = req.make_buffer<std::byte>(2 * MiB); }
  const cuscope::session_report& r = req.finish();
  INFO(r.to_string());
  CHECK_FALSE(r.tracked_peak_upper_bound);
  CHECK(r.tracked_peak_bytes == 4 * MiB);
  const cuscope::session_report& total = service.finish();
  CHECK_FALSE(total.tracked_peak_upper_bound);
  CHECK(total.tracked_peak_bytes == 4 * MiB);
}

TEST_CASE("empty_cache: counts what the synchronization gave back under a low threshold",
          "[docs][empty_cache]") {
  device_guard device;
  cuscope::pool_options o;
  o.release_threshold_bytes = 0;  // CUDA's default: everything goes back at a synchronization
  cuscope::memory_pool pool(o);
  cuscope::memory_pool kept;
  cuscope::stream s;
  { auto gone = cuscope::device_buffer<std::byte>(s, 64 * MiB, pool); }
  { auto gone = cuscope::device_buffer<std::byte>(s, 32 * MiB, kept); }
  REQUIRE(pool.stats().reserved_bytes == 64 * MiB);  // the free is enqueued, not run
  CHECK(cuscope::empty_cache(pool, kept) == 96 * MiB);
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK(kept.stats().reserved_bytes == 0);
}

TEST_CASE("admission: NVML's figures in the report when asked always, null in JSON when not",
          "[docs][session][admission]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "asked";
  o.admission.bytes = MiB;
  o.admission.query_nvml = cuscope::nvml_query::always;
  {
    cuscope::session req(pool, s, o);
    const cuscope::session_report& r = req.finish();
    INFO(r.admission_nvml);
    REQUIRE(r.admission_process_bytes.has_value());
    CHECK(r.admission_other_processes_bytes.has_value());
    const std::string json = cuscope::to_json(r);
    CHECK(cuscope::test::json_field(json, "admission_process_bytes") ==
          std::to_string(*r.admission_process_bytes));
  }
  o.name = "not asked";
  o.admission.query_nvml = cuscope::nvml_query::never;
  cuscope::session req(pool, s, o);
  const cuscope::session_report& r = req.finish();
  CHECK_FALSE(r.admission_process_bytes.has_value());
  const std::string json = cuscope::to_json(r);
  CHECK(cuscope::test::json_field(json, "admission_process_bytes") == "null");
  CHECK_THAT(r.admission_nvml, contains("not asked"));
}

TEST_CASE("sessions: memory from allocate is named with its tag and call site when leaked",
          "[docs][session][leak]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session_options o;
  o.name = "raw";
  o.on_leak = cuscope::leak_policy::ignore;
  cuscope::session epoch(pool, s, o);
  void* p = epoch.allocate(s, 3000, "workspace");
  const int line = __LINE__ - 1;
  const cuscope::session_report& r = epoch.finish();
  INFO(r.to_string());
  REQUIRE(r.leaks.size() == 1);
  CHECK(r.leaks[0].bytes == 3000);
  CHECK(r.leaks[0].pointer == p);
  CHECK(std::string(r.leaks[0].tag) == "workspace");
  CHECK(r.leaks[0].line == line);
  CHECK(r.untracked_bytes == 0);  // the pool's rounding of 3000 to 3072 is the leak's
  CHECK_FALSE(r.untracked_leak);
  CHECK_THAT(r.to_string(), contains("LEAKED 1 allocation, 2.93 KiB"));
  pool.deallocate(s, p, 3000);
  s.synchronize();
}

TEST_CASE("sessions: on the device's default pool, a setting changes only when asked, and back",
          "[docs][session]") {
  device_guard device;
  const auto pool = cuscope::memory_pool_ref::device_default(0);
  cuscope::stream s;
  const std::size_t threshold = pool.release_threshold();
  {
    cuscope::session epoch(pool, s, "default pool");
    CHECK(pool.release_threshold() == threshold);
    { auto x = epoch.make_buffer<std::byte>(MiB); }
    const cuscope::session_report& r = epoch.finish();
    CHECK(r.trimmed);  // a session trims the pool it is given, this one too
    CHECK(r.reserved_at_exit_bytes == r.reserved_at_entry_bytes);
  }
  CHECK(pool.release_threshold() == threshold);
  cuscope::session_options o;
  o.name = "asked";
  o.release_threshold_bytes = threshold + 64 * MiB;
  {
    cuscope::session epoch(pool, s, o);
    CHECK(pool.release_threshold() == threshold + 64 * MiB);  // asked for: the session's
    (void)epoch.finish();
  }
  CHECK(pool.release_threshold() == threshold);  // restored
}

namespace {

bool first_handler(const cuscope::out_of_memory_info&) noexcept {
  return false;
}
bool second_handler(const cuscope::out_of_memory_info&) noexcept {
  return false;
}

}  // namespace

TEST_CASE("out-of-memory handler: a scoped one restores the one before it", "[docs][oom]") {
  cuscope::set_out_of_memory_handler(&first_handler, nullptr);
  {
    cuscope::scoped_out_of_memory_handler scoped(&second_handler, nullptr);
    // set_out_of_memory_handler returns the handler it replaces.
    CHECK(cuscope::set_out_of_memory_handler(&second_handler, nullptr) == &second_handler);
  }
  CHECK(cuscope::set_out_of_memory_handler(nullptr, nullptr) == &first_handler);
}

TEST_CASE("sessions: a nested session passes its peaks on and keeps its parent's earlier ones",
          "[docs][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session outer(pool, s, "outer");
  { auto big = outer.make_buffer<std::byte>(96 * MiB); }
  s.synchronize();
  {
    cuscope::session inner(outer, "inner");
    { auto small = inner.make_buffer<std::byte>(MiB); }
    const cuscope::session_report& r = inner.finish();
    CHECK(r.peak_used_bytes == MiB);  // its own pool peaks start at its entry
    CHECK(r.tracked_peak_bytes == MiB);
  }
  {
    cuscope::session inner(outer, "larger");
    auto a = inner.make_buffer<std::byte>(100 * MiB);
    auto b = inner.make_buffer<std::byte>(100 * MiB);
  }
  const cuscope::session_report& r = outer.finish();
  INFO(r.to_string());
  CHECK(r.peak_used_bytes == 200 * MiB);
  CHECK(r.tracked_peak_bytes == 200 * MiB);
  CHECK(r.peak_reserved_bytes >= 200 * MiB);
  CHECK(r.allocations == 4);
}

TEST_CASE("sessions: the outer report's peak is its own when the nested ones were smaller",
          "[docs][session]") {
  device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::session outer(pool, s, "outer");
  { auto big = outer.make_buffer<std::byte>(96 * MiB); }
  s.synchronize();
  {
    cuscope::session inner(outer, "inner");
    { auto small = inner.make_buffer<std::byte>(MiB); }
  }
  const cuscope::session_report& r = outer.finish();
  INFO(r.to_string());
  CHECK(r.peak_used_bytes == 96 * MiB);
  CHECK(r.peak_reserved_bytes == 96 * MiB);
  CHECK(r.tracked_peak_bytes == 96 * MiB);
}

TEST_CASE("limits from the environment: the other values of the tables", "[docs][env]") {
  device_guard device;  // 4 GiB
  ::setenv("CUSCOPE_TRIAL2_DEVICE", "-1", 1);
  ::setenv("CUSCOPE_TRIAL2_RELEASE_THRESHOLD", "50%", 1);
  auto po = cuscope::pool_options::from_env("trial2");
  CHECK(po.device == -1);
  CHECK(po.release_threshold_bytes == 2 * GiB);
  ::setenv("CUSCOPE_TRIAL2_DEVICE", "-2", 1);
  CHECK_THROWS_AS(cuscope::pool_options::from_env("trial2"), std::invalid_argument);
  ::unsetenv("CUSCOPE_TRIAL2_DEVICE");
  ::unsetenv("CUSCOPE_TRIAL2_RELEASE_THRESHOLD");

  cuscope::session_options defaults;
  defaults.name = "kept";
  defaults.budget_bytes = 7;
  ::setenv("CUSCOPE_TRIAL2_ADMIT_BYTES", "512MiB", 1);
  ::setenv("CUSCOPE_TRIAL2_ADMISSION", "trim_and_retry", 1);
  ::setenv("CUSCOPE_TRIAL2_ADMISSION_CACHE", "off", 1);
  ::setenv("CUSCOPE_TRIAL2_ADMISSION_NVML", "always", 1);
  ::setenv("CUSCOPE_TRIAL2_TRIM", "1", 1);
  auto so = cuscope::session_options::from_env("trial2", defaults);
  CHECK(so.name == "kept");
  CHECK(so.budget_bytes == 7);
  CHECK(so.admission.bytes == 512 * MiB);
  CHECK(so.admission.device_fraction == 0.0);
  CHECK(so.admission.on_shortfall == cuscope::admission_policy::trim_and_retry);
  CHECK_FALSE(so.admission.count_cache);
  CHECK(so.admission.query_nvml == cuscope::nvml_query::always);
  CHECK(so.trim);
  for (const char* bad : {"maybe", ""}) {
    ::setenv("CUSCOPE_TRIAL2_TRIM", bad, 1);
    const std::string what = message_of([] { (void)cuscope::session_options::from_env("trial2"); });
    INFO(what);
    CHECK_THAT(what, contains("CUSCOPE_TRIAL2_TRIM"));
  }
  ::setenv("CUSCOPE_TRIAL2_TRIM", "yes", 1);
  ::setenv("CUSCOPE_TRIAL2_ADMISSION", "wait", 1);
  CHECK_THROWS_AS(cuscope::session_options::from_env("trial2"), std::invalid_argument);
  for (const char* v :
       {"CUSCOPE_TRIAL2_ADMIT_BYTES", "CUSCOPE_TRIAL2_ADMISSION", "CUSCOPE_TRIAL2_ADMISSION_CACHE",
        "CUSCOPE_TRIAL2_ADMISSION_NVML", "CUSCOPE_TRIAL2_TRIM"})
    ::unsetenv(v);
}
