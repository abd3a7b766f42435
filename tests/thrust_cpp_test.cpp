// SPDX-License-Identifier: Apache-2.0
// thrust.hpp with Thrust's CPP device system and the plain C++ compiler: the allocator plumbing,
// which allocations reach the pool, on which stream, and that they all come back.
//
// The CPP system runs the vector's element work and the algorithms on the host, through the
// pointers the allocators return. Pool memory is device memory (on the simulated device as on a
// GPU) and cannot be read by the host, so these tests do nothing that touches elements: they
// reserve, move, swap and free storage, and ask the policies for temporary storage the way the
// algorithms do (thrust::get_temporary_buffer). Element work and real algorithms are tested with
// nvcc and the CUDA system in thrust_test.cu.
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <thrust/device_vector.h>
#include <thrust/memory.h>
#include <chrono>
#include <cstddef>
#include <cuscope/device_buffer.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/recorder.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <cuscope/thrust.hpp>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

using cuscope::memory_pool;
using cuscope::stream;
using cuscope::thrust_allocator;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t ints_per_MiB = MiB / sizeof(int);

template <class T>
using vector = thrust::device_vector<T, thrust_allocator<T>>;

// What a pool holds; used bytes are compared after the frees have been enqueued.
std::size_t used(const memory_pool& pool) {
  return pool.stats().used_bytes;
}

// Whether the pool can give back what it reserves: only once the frees on the stream have run.
bool all_returned_after_trim(const memory_pool& pool) {
  pool.trim_to(0);
  return pool.stats().reserved_bytes == 0;
}

}  // namespace

static_assert(!std::is_default_constructible_v<thrust_allocator<int>>,
              "there is no default pool to allocate from");
static_assert(std::is_same_v<thrust_allocator<int>::pointer, thrust::device_ptr<int>>);
static_assert(
    std::is_same_v<thrust_allocator<int>::rebind<double>::other, thrust_allocator<double>>);
static_assert(
    std::is_nothrow_invocable_v<decltype(&thrust_allocator<int>::deallocate),
                                thrust_allocator<int>&, thrust::device_ptr<int>, std::size_t>);
// Thrust runs a vector's own work with the policy its allocator's system() returns.
static_assert(std::is_same_v<thrust::detail::allocator_system<thrust_allocator<int>>::type,
                             cuscope::thrust_policy_sync_type>);
static_assert(
    std::is_same_v<thrust::detail::allocator_system<thrust_allocator<int>>::get_result_type,
                   cuscope::thrust_policy_sync_type&>);

TEST_CASE(
    "thrust_allocator: a device_vector's storage comes from the pool on the allocator's stream",
    "[thrust]") {
  device_guard device;
  memory_pool pool;
  stream s;
  stream other;
  {
    vector<int> v(thrust_allocator<int>(s, pool));
    CHECK(v.get_allocator().pool() == pool.ref());
    CHECK(v.get_allocator().stream() == s.ref());
    CHECK(used(pool) == 0);
    v.reserve(ints_per_MiB);
    CHECK(v.capacity() == ints_per_MiB);
    CHECK(v.empty());
    CHECK(used(pool) == MiB);
    v.reserve(2 * ints_per_MiB);  // new storage, the old returned
    CHECK(v.capacity() == 2 * ints_per_MiB);
    CHECK(used(pool) == 2 * MiB);
    v.shrink_to_fit();  // nothing to keep
    CHECK(v.capacity() == 0);
    CHECK(used(pool) == 0);
    v.reserve(ints_per_MiB);
  }
  CHECK(used(pool) == 0);
  if (cuscope::test::simulated) {
    // The frees are on s: synchronizing another stream does not complete them.
    other.synchronize();
    CHECK_FALSE(all_returned_after_trim(pool));
  }
  s.synchronize();
  CHECK(all_returned_after_trim(pool));
}

TEST_CASE("thrust_allocator: moved and swapped vectors keep their memory with its pool and stream",
          "[thrust]") {
  device_guard device;
  memory_pool first;
  memory_pool second;
  stream s;
  stream t;
  const thrust_allocator<int> a(s, first);
  const thrust_allocator<int> b(t, second);
  vector<int> v(a);
  v.reserve(ints_per_MiB);
  vector<int> moved(std::move(v));
  CHECK(moved.capacity() == ints_per_MiB);
  CHECK(moved.get_allocator() == a);
  CHECK(used(first) == MiB);  // taken over, not copied

  vector<int> w(b);
  w.reserve(2 * ints_per_MiB);
  CHECK(used(second) == 2 * MiB);
  moved.swap(w);
  CHECK(moved.get_allocator() == b);
  CHECK(w.get_allocator() == a);
  CHECK(moved.capacity() == 2 * ints_per_MiB);
  CHECK(w.capacity() == ints_per_MiB);

  w = std::move(moved);  // w's memory goes back to first; w takes second's memory and allocator
  CHECK(used(first) == 0);
  CHECK(used(second) == 2 * MiB);
  CHECK(w.get_allocator() == b);
  w.clear();
  w.shrink_to_fit();
  CHECK(used(second) == 0);
  s.synchronize();
  t.synchronize();
}

TEST_CASE("thrust_allocator: rebinding keeps pool and stream; equal means same pool and stream",
          "[thrust]") {
  device_guard device;
  memory_pool pool;
  memory_pool other_pool;
  stream s;
  stream t;
  thrust_allocator<int> a(s, pool);
  const thrust_allocator<double> d(a);
  CHECK(d.pool() == pool.ref());
  CHECK(d.stream() == s.ref());
  CHECK(a == d);
  CHECK(a != thrust_allocator<int>(t, pool));
  CHECK(a != thrust_allocator<int>(s, other_pool));
  // The vector's own work runs with a policy on the same stream and pool.
  auto& system = thrust::detail::allocator_system<thrust_allocator<int>>::get(a);
  CHECK(&system == &a.system());
  CHECK(system.get_allocator().pool() == pool.ref());
  CHECK(system.get_allocator().stream() == s.ref());
  CHECK(a.max_size() == std::numeric_limits<std::size_t>::max() / sizeof(int));
  CHECK_THROWS_WITH(a.allocate(a.max_size() + 1), contains("overflow the byte count"));
  CHECK(used(pool) == 0);
}

TEST_CASE("thrust_allocator: a pool that cannot hold the storage throws out_of_memory naming it",
          "[thrust]") {
  device_guard device;
  cuscope::pool_options o;
  o.max_bytes = 32 * MiB;  // drivers round smaller limits up to 32 MiB
  memory_pool pool(o);
  stream s;
  vector<int> v(thrust_allocator<int>(s, pool));
  v.reserve(ints_per_MiB);
  CHECK_THROWS_AS(v.reserve(48 * ints_per_MiB), cuscope::out_of_memory);
  CHECK_THROWS_WITH(v.reserve(48 * ints_per_MiB), contains(pool.describe()));
  CHECK(v.capacity() == ints_per_MiB);  // unchanged
  CHECK(used(pool) == MiB);
}

namespace {

// An out-of-memory handler that frees the cache it is given (then waits for the free), or gives
// up, and counts the times it is asked.
struct oom_state {
  std::optional<cuscope::device_buffer<char>>* cache = nullptr;
  unsigned asked = 0;
};

bool free_cache(const cuscope::out_of_memory_info& info) noexcept {
  auto* st = static_cast<oom_state*>(info.user);
  ++st->asked;
  if (!st->cache->has_value()) return false;
  const cuscope::stream_ref s = (*st->cache)->stream();
  st->cache->reset();
  return cudaStreamSynchronize(s.get()) == cudaSuccess;
}

}  // namespace

TEST_CASE("thrust_allocator and thrust_policy: a refused allocation asks the out-of-memory handler",
          "[thrust][oom]") {
  device_guard device;
  cuscope::pool_options o;
  o.max_bytes = 32 * MiB;
  memory_pool pool(o);
  stream s;
  std::optional<cuscope::device_buffer<char>> cache;
  cache.emplace(s, 24 * MiB, pool);
  oom_state st;
  st.cache = &cache;
  const cuscope::scoped_out_of_memory_handler handler(&free_cache, &st);
  auto policy = cuscope::thrust_policy(s, pool);
  SECTION("the handler frees the cache: the vector grows") {
    vector<int> v(thrust_allocator<int>(s, pool));
    v.reserve(16 * ints_per_MiB);
    CHECK(st.asked == 1);
    CHECK_FALSE(cache.has_value());
    CHECK(v.capacity() == 16 * ints_per_MiB);
  }
  SECTION("the handler frees the cache: the temporary storage is given") {
    const auto buffer = thrust::get_temporary_buffer<char>(policy, 16 * MiB);
    CHECK(st.asked == 1);
    CHECK(used(pool) == 16 * MiB);
    thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
  }
  SECTION("nothing left to free: out_of_memory naming the pool, after asking again") {
    cache.reset();
    vector<int> v(thrust_allocator<int>(s, pool));
    v.reserve(16 * ints_per_MiB);
    CHECK_THROWS_WITH(thrust::get_temporary_buffer<char>(policy, 24 * MiB),
                      contains(pool.describe()));
    CHECK(st.asked == 1);
    CHECK_THROWS_AS(v.reserve(40 * ints_per_MiB), cuscope::out_of_memory);
    CHECK(st.asked == 2);
    CHECK(v.capacity() == 16 * ints_per_MiB);
  }
  cache.reset();
  s.synchronize();
}

TEST_CASE("thrust_allocator and thrust_policy: 0 bytes are a null pointer and no runtime call",
          "[thrust]") {
  device_guard device;
  memory_pool pool;
  stream s;
  thrust_allocator<int> a(s, pool);
  thrust_allocator<int> on_default(cuscope::stream_ref::legacy(), pool);
  auto policy = cuscope::thrust_policy(s, pool);
  auto& temporary = policy.get_allocator();
#if CUSCOPE_TEST_SIMULATED
  const std::size_t allocations = cuscope::sim::call_count("cudaMallocFromPoolAsync");
  const std::size_t frees = cuscope::sim::call_count("cudaFreeAsync");
#endif
  const thrust::device_ptr<int> p = a.allocate(0);
  CHECK(p.get() == nullptr);
  a.deallocate(p, 0);
  const thrust::device_ptr<int> d = on_default.allocate(0);
  CHECK(d.get() == nullptr);
  on_default.deallocate(d, 0);
  char* t = temporary.allocate(0);
  CHECK(t == nullptr);
  temporary.deallocate(t, 0);
#if CUSCOPE_TEST_SIMULATED
  CHECK(cuscope::sim::call_count("cudaMallocFromPoolAsync") == allocations);
  CHECK(cuscope::sim::call_count("cudaFreeAsync") == frees);
#endif
  CHECK(used(pool) == 0);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE(
    "thrust_allocator and thrust_policy: a recorder attached to the pool, also after they "
    "were made, sees every allocation and free",
    "[thrust][recorder]") {
  device_guard device;
  memory_pool pool;
  memory_pool other;
  stream s;
  const thrust_allocator<int> a(s, pool);
  auto policy = cuscope::thrust_policy(s, pool);
  cuscope::recorder_options ro;
  ro.capacity = 64;
  ro.sample_interval = std::chrono::hours(1);  // no samples but the attachments'
  cuscope::recorder r(ro);
  {
    // A recorder on another pool only: nothing of this pool's is recorded, all is given back.
    other.set_recorder(&r);
    vector<int> v(a);
    v.reserve(ints_per_MiB);
    const auto buffer = thrust::get_temporary_buffer<char>(policy, 1000);
    thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
    other.set_recorder(nullptr);
  }
  CHECK(used(pool) == 0);
  pool.set_recorder(&r);
  void* storage = nullptr;
  void* temporary = nullptr;
  {
    vector<int> v(a);
    v.reserve(ints_per_MiB);
    storage = thrust::raw_pointer_cast(v.data());
    const auto buffer = thrust::get_temporary_buffer<char>(policy, 1000);
    temporary = thrust::raw_pointer_cast(buffer.first);
    thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
  }
  pool.set_recorder(nullptr);
  s.synchronize();

  std::vector<cuscope::memory_event> ev;
  for (const cuscope::memory_event& e : r.events())
    if (e.kind != cuscope::memory_event_kind::sample) ev.push_back(e);
  REQUIRE(ev.size() == 4);
  CHECK(ev[0].kind == cuscope::memory_event_kind::allocate);
  CHECK(ev[0].ptr == storage);
  CHECK(ev[0].bytes == MiB);
  CHECK(ev[1].kind == cuscope::memory_event_kind::allocate);
  CHECK(ev[1].ptr == temporary);
  CHECK(ev[1].bytes == 1000);
  CHECK(ev[2].kind == cuscope::memory_event_kind::free);
  CHECK(ev[2].ptr == temporary);
  CHECK(ev[2].bytes == 1000);
  CHECK(ev[3].kind == cuscope::memory_event_kind::free);
  CHECK(ev[3].ptr == storage);
  CHECK(ev[3].bytes == MiB);
  for (const cuscope::memory_event& e : ev) {
    CHECK(e.pool == pool.get());
    CHECK(e.stream == s.get());
  }
}

TEST_CASE("thrust_policy: the temporary storage of algorithms comes from the pool and goes back",
          "[thrust]") {
  device_guard device;
  memory_pool pool;
  stream s;
  stream other;
  auto policy = cuscope::thrust_policy(s, pool);
  CHECK(policy.get_allocator().pool() == pool.ref());
  CHECK(policy.get_allocator().stream() == s.ref());
  // Algorithms ask for their temporary storage through thrust::get_temporary_buffer.
  const auto buffer = thrust::get_temporary_buffer<double>(policy, MiB / sizeof(double));
  CHECK(buffer.second == static_cast<std::ptrdiff_t>(MiB / sizeof(double)));
  CHECK(used(pool) == MiB);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, thrust::raw_pointer_cast(buffer.first)) ==
          cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeDevice);
  thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
  CHECK(used(pool) == 0);
  if (cuscope::test::simulated) {
    other.synchronize();
    CHECK_FALSE(all_returned_after_trim(pool));  // the free waits on s
  }
  s.synchronize();
  CHECK(all_returned_after_trim(pool));

  auto sync_policy = cuscope::thrust_policy_sync(s, pool);
  const auto bytes = thrust::get_temporary_buffer<char>(sync_policy, 3 * MiB);
  CHECK(used(pool) == 3 * MiB);
  thrust::return_temporary_buffer(sync_policy, bytes.first, bytes.second);
  CHECK(used(pool) == 0);
  s.synchronize();
}

TEST_CASE("thrust_allocator: a vector of device 1 on the per-thread stream, with device 0 current",
          "[thrust][devices]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::pool_options o;
  o.device = 1;
  memory_pool pool(o);
  {
    vector<int> v(thrust_allocator<int>(cuscope::stream_ref::per_thread(), pool));
    v.reserve(ints_per_MiB);
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, thrust::raw_pointer_cast(v.data())) ==
            cudaSuccess);
    CHECK(attributes.device == 1);
    CHECK(cuscope::current_device() == 0);
  }  // freed on device 1's per-thread stream
  CHECK(cuscope::current_device() == 0);
  const cuscope::scoped_device on(1);
  cuscope::stream_ref::per_thread().synchronize();
  CHECK(all_returned_after_trim(pool));
}

TEST_CASE(
    "thrust_allocator and thrust_policy: a 0 handle and the legacy stream name the default "
    "stream of the pool's device, with another device current",
    "[thrust][devices]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::pool_options o;
  o.device = 1;
  memory_pool pool(o);
  const cudaStream_t null_stream = nullptr;  // the legacy default stream (per-thread: ptds builds)
  for (const cuscope::stream_ref s :
       {cuscope::stream_ref(null_stream), cuscope::stream_ref::legacy()}) {
    {
      vector<int> v(thrust_allocator<int>(s, pool));
      v.reserve(ints_per_MiB);
      CHECK(used(pool) == MiB);
      auto policy = cuscope::thrust_policy(s, pool);
      const auto buffer = thrust::get_temporary_buffer<char>(policy, 1000);
      CHECK(used(pool) > MiB);
      thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
      CHECK(cuscope::current_device() == 0);
    }  // freed on device 1's default stream
    CHECK(used(pool) == 0);
    CHECK(cuscope::current_device() == 0);
    const cuscope::scoped_device on(1);
    s.synchronize();
    CHECK(all_returned_after_trim(pool));
  }
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("thrust_allocator: a failing runtime call leaves the vector as it was and leaks nothing",
          "[thrust][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep([](cuscope::test::fault_point& fault) {
    memory_pool pool;
    stream s;
    vector<int> v(thrust_allocator<int>(s, pool));
    v.reserve(ints_per_MiB);
    bool grown = false;
    (void)fault.run([&] {
      v.reserve(4 * ints_per_MiB);
      grown = true;
      auto policy = cuscope::thrust_policy(s, pool);
      const auto buffer = thrust::get_temporary_buffer<int>(policy, 1024);
      thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
    });
    CHECK(v.capacity() == (grown ? 4 : 1) * ints_per_MiB);
  });
  CHECK(runs >= 4);
}

#endif

TEST_CASE("thrust_allocator: an allocator and a policy from a session are counted by it",
          "[thrust]") {
  device_guard device;
  memory_pool pool;
  stream s;
  cuscope::session_options o;
  o.name = "thrust";
  o.budget_bytes = 2 * MiB;
  o.on_leak = cuscope::leak_policy::ignore;
  cuscope::session work(pool, s, o);
  {
    vector<int> v{thrust_allocator<int>(work)};
    CHECK(v.get_allocator().counts_for(work));
    CHECK_FALSE(thrust_allocator<int>(s, pool).counts_for(work));
    v.reserve(ints_per_MiB);
    CHECK(work.live_bytes() == MiB);
    CHECK_THROWS_AS(v.reserve(3 * ints_per_MiB), cuscope::out_of_memory);
    CHECK(work.live_bytes() == MiB);
    vector<int> w(v.get_allocator());
    w.reserve(ints_per_MiB / 2);
    CHECK(work.live_allocations() == 2);
  }
  CHECK(work.live_bytes() == 0);
  {
    auto policy = cuscope::thrust_policy(work);
    auto buffer = thrust::get_temporary_buffer<int>(policy, ints_per_MiB);
    CHECK(work.live_bytes() == MiB);
    thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
    CHECK(work.live_bytes() == 0);
    auto sync_policy = cuscope::thrust_policy_sync(work);
    CHECK_THROWS_AS(thrust::get_temporary_buffer<int>(sync_policy, 3 * ints_per_MiB),
                    cuscope::out_of_memory);
  }
  const thrust_allocator<int> kept(work);
  vector<int> leak(kept);
  leak.reserve(ints_per_MiB);
  const cuscope::session_report& r = work.finish();
  CHECK(r.leaked_allocations == 1);
  CHECK(r.leaked_bytes == MiB);
  CHECK(r.tracked_peak_bytes == 3 * MiB / 2);
  vector<int> late(kept);
  CHECK_THROWS_AS(late.reserve(1), std::logic_error);
}
