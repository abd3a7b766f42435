// SPDX-License-Identifier: Apache-2.0
#include <cuscope/memory_resource.hpp>
// <cuda/memory_resource> comes first through cuscope; included again it changes nothing.
#include <cstddef>
#include <cstdint>
#include <cuda/memory_resource>
#include <numeric>
#include <vector>
#if CCCL_VERSION >= 3005000
#  include <cuda/buffer>
#  include <cuda/memory_pool>
#endif
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "test_support.hpp"

using cuscope::memory_pool;
using cuscope::pinned_memory_pool;
using cuscope::pinned_pool_resource;
using cuscope::pool_resource;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

bool aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

}  // namespace

// Copies are cheap and never throw; one from a session holds a counted reference to its accounting.
static_assert(std::is_nothrow_copy_constructible_v<pool_resource>);
static_assert(std::is_nothrow_move_constructible_v<pool_resource>);
static_assert(!std::is_default_constructible_v<pool_resource>, "a resource needs a pool");
static_assert(noexcept(std::declval<pool_resource&>().deallocate(std::declval<cuda::stream_ref>(),
                                                                 std::declval<void*>(),
                                                                 std::size_t{}, std::size_t{})));
static_assert(noexcept(std::declval<pool_resource&>().deallocate_async(
    std::declval<void*>(), std::size_t{}, std::size_t{}, std::declval<cuda::stream_ref>())));
static_assert(cuda::has_property<pool_resource, cuda::mr::device_accessible>);
static_assert(!cuda::has_property<pool_resource, cuda::mr::host_accessible>);
// The concepts of the CCCL in use, and its type-erased references and owners (memory_resource.hpp
// asserts the concepts too). The toolchain matrix (scripts/toolchains.sh) builds this with CCCL
// 3.0 and 3.5.
#if CCCL_VERSION < 3001000
// CCCL 3.0: resource is synchronous, async_resource stream-ordered; no any_resource.
static_assert(cuda::mr::resource_with<pool_resource, cuda::mr::device_accessible>);
static_assert(cuda::mr::async_resource_with<pool_resource, cuda::mr::device_accessible>);
static_assert(!cuda::mr::resource_with<pool_resource, cuda::mr::host_accessible>);
static_assert(std::is_constructible_v<cuda::mr::async_resource_ref<cuda::mr::device_accessible>,
                                      pool_resource&>);
static_assert(
    std::is_constructible_v<cuda::mr::resource_ref<cuda::mr::device_accessible>, pool_resource&>);
static_assert(
    !std::is_constructible_v<cuda::mr::resource_ref<cuda::mr::host_accessible>, pool_resource&>);
#else
// CCCL 3.1+: synchronous_resource is synchronous, resource stream-ordered.
static_assert(cuda::mr::synchronous_resource_with<pool_resource, cuda::mr::device_accessible>);
static_assert(cuda::mr::resource_with<pool_resource, cuda::mr::device_accessible>);
static_assert(!cuda::mr::resource_with<pool_resource, cuda::mr::host_accessible>);
static_assert(
    std::is_constructible_v<cuda::mr::resource_ref<cuda::mr::device_accessible>, pool_resource&>);
static_assert(std::is_constructible_v<
              cuda::mr::synchronous_resource_ref<cuda::mr::device_accessible>, pool_resource&>);
static_assert(
    !std::is_constructible_v<cuda::mr::resource_ref<cuda::mr::host_accessible>, pool_resource&>);
#  if CCCL_VERSION >= 3005000
static_assert(
    std::is_constructible_v<cuda::mr::any_resource<cuda::mr::device_accessible>, pool_resource>);
static_assert(std::is_constructible_v<
              cuda::mr::any_synchronous_resource<cuda::mr::device_accessible>, pool_resource>);
static_assert(
    !std::is_constructible_v<cuda::mr::any_resource<cuda::mr::host_accessible>, pool_resource>);
#  endif
#endif

// A pool of page-locked host memory is host accessible too: pool_resource refuses it (it would
// claim device memory only), pinned_pool_resource says both and takes no device pool.
static_assert(!std::is_constructible_v<pool_resource, pinned_memory_pool&>);
static_assert(!std::is_constructible_v<pool_resource, const pinned_memory_pool&>);
static_assert(!std::is_constructible_v<pool_resource, pinned_memory_pool&&>);
static_assert(!std::is_constructible_v<pool_resource, pinned_memory_pool&, cuscope::stream_ref>);
static_assert(std::is_constructible_v<pool_resource, memory_pool&>);
static_assert(std::is_constructible_v<pinned_pool_resource, const pinned_memory_pool&>);
static_assert(!std::is_constructible_v<pinned_pool_resource, pinned_memory_pool&&>,
              "a resource over a temporary pool would dangle");
static_assert(!std::is_constructible_v<pinned_pool_resource, memory_pool&>);
static_assert(!std::is_constructible_v<pinned_pool_resource, cuscope::memory_pool_ref>);
static_assert(std::is_nothrow_copy_constructible_v<pinned_pool_resource>);
static_assert(!std::is_default_constructible_v<pinned_pool_resource>);
static_assert(cuda::has_property<pinned_pool_resource, cuda::mr::host_accessible>);
static_assert(cuda::has_property<pinned_pool_resource, cuda::mr::device_accessible>);
#if CCCL_VERSION < 3001000
static_assert(cuda::mr::resource_with<pinned_pool_resource, cuda::mr::host_accessible,
                                      cuda::mr::device_accessible>);
static_assert(cuda::mr::async_resource_with<pinned_pool_resource, cuda::mr::host_accessible,
                                            cuda::mr::device_accessible>);
static_assert(cuda::mr::async_resource_with<pinned_pool_resource, cuda::mr::host_accessible>);
static_assert(std::is_constructible_v<cuda::mr::async_resource_ref<cuda::mr::host_accessible>,
                                      pinned_pool_resource&>);
static_assert(std::is_constructible_v<
              cuda::mr::resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible>,
              pinned_pool_resource&>);
#else
static_assert(cuda::mr::synchronous_resource_with<pinned_pool_resource, cuda::mr::host_accessible,
                                                  cuda::mr::device_accessible>);
static_assert(cuda::mr::resource_with<pinned_pool_resource, cuda::mr::host_accessible,
                                      cuda::mr::device_accessible>);
static_assert(cuda::mr::resource_with<pinned_pool_resource, cuda::mr::host_accessible>);
static_assert(std::is_constructible_v<cuda::mr::resource_ref<cuda::mr::host_accessible>,
                                      pinned_pool_resource&>);
static_assert(
    std::is_constructible_v<
        cuda::mr::synchronous_resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible>,
        pinned_pool_resource&>);
#  if CCCL_VERSION >= 3005000
static_assert(std::is_constructible_v<
              cuda::mr::any_resource<cuda::mr::host_accessible, cuda::mr::device_accessible>,
              pinned_pool_resource>);
#  endif
#endif

TEST_CASE("pool_resource: stream-ordered allocations come from the pool on the stream given",
          "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  stream s;
  pool_resource r(pool);
  CHECK(r.pool() == pool.ref());
  const cuda::stream_ref cs(s.get());
  void* a = r.allocate(cs, MiB, 256);  // CCCL 3.1+ names
  CHECK(pool.stats().used_bytes == MiB);
  CHECK(aligned(a, 256));
  void* b = r.allocate_async(2 * MiB, 64, cs);  // CCCL 3.0 names
  CHECK(pool.stats().used_bytes == 3 * MiB);
  void* c = r.allocate(s, MiB);  // cuscope's own stream types and the default alignment
  CHECK(pool.stats().used_bytes == 4 * MiB);
  r.deallocate(cs, a, MiB, 256);
  r.deallocate_async(b, 2 * MiB, 64, cs);
  r.deallocate(s, c, MiB);
  CHECK(pool.stats().used_bytes == 0);
  CHECK(r.allocate(s, 0) == nullptr);
  s.synchronize();
}

TEST_CASE("pool_resource: a resource_ref holds it and allocates from the pool",
          "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  stream s;
  pool_resource r(pool);
#if CCCL_VERSION < 3001000
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> async_ref{r};
  void* p = async_ref.allocate_async(MiB, 256, cuda::stream_ref(s.get()));
  CHECK(pool.stats().used_bytes == MiB);
  async_ref.deallocate_async(p, MiB, 256, cuda::stream_ref(s.get()));
  cuda::mr::resource_ref<cuda::mr::device_accessible> sync_ref{r};
  void* q = sync_ref.allocate(2 * MiB, 256);
  CHECK(pool.stats().used_bytes == 2 * MiB);
  sync_ref.deallocate(q, 2 * MiB, 256);
#else
  cuda::mr::resource_ref<cuda::mr::device_accessible> async_ref{r};
  void* p = async_ref.allocate(cuda::stream_ref(s.get()), MiB, 256);
  CHECK(pool.stats().used_bytes == MiB);
  async_ref.deallocate(cuda::stream_ref(s.get()), p, MiB, 256);
  cuda::mr::synchronous_resource_ref<cuda::mr::device_accessible> sync_ref{r};
  void* q = sync_ref.allocate_sync(2 * MiB, 256);
  CHECK(pool.stats().used_bytes == 2 * MiB);
  sync_ref.deallocate_sync(q, 2 * MiB, 256);
#endif
  CHECK(pool.stats().used_bytes == 0);
  s.synchronize();
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
}

#if CCCL_VERSION >= 3005000
TEST_CASE(
    "pool_resource: any_resource and any_synchronous_resource own a copy and allocate from "
    "the pool",
    "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  stream s;
  {
    cuda::mr::any_resource<cuda::mr::device_accessible> any{pool_resource(pool, s)};
    void* p = any.allocate(cuda::stream_ref(s.get()), MiB, 256);
    CHECK(pool.stats().used_bytes == MiB);
    CHECK(any == cuda::mr::any_resource<cuda::mr::device_accessible>{pool_resource(pool)});
    cuda::mr::any_synchronous_resource<cuda::mr::device_accessible> any_sync{
        pool_resource(pool, s)};
    void* q = any_sync.allocate_sync(2 * MiB, 256);
    CHECK(pool.stats().used_bytes == 3 * MiB);
    any_sync.deallocate_sync(q, 2 * MiB, 256);
    any.deallocate(cuda::stream_ref(s.get()), p, MiB, 256);
  }
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
}
#endif

TEST_CASE(
    "pinned_pool_resource: a host-accessible resource_ref allocates page-locked memory from the "
    "pool that the host reads and writes",
    "[memory_resource]") {
  device_guard device;
  if (!pinned_memory_pool::supported(0)) {
    WARN("skipped: host memory pools are not supported here");
    return;
  }
  pinned_memory_pool pool;
  memory_pool device_pool;
  stream s;
  pinned_pool_resource r(pool, s);
  CHECK(r.pool() == pool.ref());
  CHECK(r.sync_stream() == s.ref());
  CHECK(r == pinned_pool_resource(pool));
  CHECK(r.allocate(s, 0) == nullptr);
  const std::size_t n = 1024;
#if CCCL_VERSION < 3001000
  cuda::mr::async_resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible> ref{r};
  auto* p = static_cast<int*>(ref.allocate_async(n * sizeof(int), 256, cuda::stream_ref(s.get())));
#else
  cuda::mr::resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible> ref{r};
  auto* p = static_cast<int*>(ref.allocate(cuda::stream_ref(s.get()), n * sizeof(int), 256));
#endif
  CHECK(pool.stats().used_bytes >= n * sizeof(int));
  CHECK(device_pool.stats().used_bytes == 0);
  CHECK(aligned(p, 256));
  s.synchronize();  // the allocation has run: the host may touch it
  std::iota(p, p + n, 0);
  // Through the device and back, into memory from the synchronous members.
  void* d = device_pool.allocate(s, n * sizeof(int));
  REQUIRE(cudaMemcpyAsync(d, p, n * sizeof(int), cudaMemcpyDefault, s.get()) == cudaSuccess);
  auto* q = static_cast<int*>(r.allocate_sync(n * sizeof(int), 64));
  REQUIRE(cudaMemcpyAsync(q, d, n * sizeof(int), cudaMemcpyDefault, s.get()) == cudaSuccess);
  device_pool.deallocate(s, d, n * sizeof(int));
  s.synchronize();
  CHECK(q[0] == 0);
  CHECK(q[n - 1] == static_cast<int>(n - 1));
  r.deallocate_sync(q, n * sizeof(int), 64);
#if CCCL_VERSION < 3001000
  ref.deallocate_async(p, n * sizeof(int), 256, cuda::stream_ref(s.get()));
#else
  ref.deallocate(cuda::stream_ref(s.get()), p, n * sizeof(int), 256);
#endif
  s.synchronize();
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  CHECK(pool.stats().used_bytes == 0);
  CHECK_THROWS_WITH(r.allocate(s, 64, 512),
                    contains("cuscope::pinned_pool_resource: alignment 512 for 64 bytes from " +
                             pool.describe()));
  CHECK_THROWS_WITH(
      r.allocate(s, 1, 512),
      contains("cuscope::pinned_pool_resource: alignment 512 for 1 byte from " + pool.describe()));
}

TEST_CASE(
    "pool_resource: a reference to a pinned_memory_pool is refused, naming the pool and "
    "pinned_pool_resource",
    "[memory_resource]") {
  device_guard device;
  if (!pinned_memory_pool::supported(0)) {
    WARN("skipped: host memory pools are not supported here");
    return;
  }
  cuscope::pool_options options;
  options.name = "staging";
  pinned_memory_pool pool(options);
  const cuscope::memory_pool_ref ref = pool.ref();
  CHECK_THROWS_AS(pool_resource(ref), std::invalid_argument);
  CHECK_THROWS_WITH(pool_resource(ref), contains("cuscope::pool_resource: " + pool.describe() +
                                                 " holds page-locked host memory") &&
                                            contains("use pinned_pool_resource"));
  // A device pool is still taken.
  memory_pool device_pool;
  CHECK(pool_resource(device_pool.ref()).pool() == device_pool.ref());
#if CUSCOPE_TEST_SIMULATED
  // A driver that does not answer cudaMemPoolAttrLocationType (older than CUDA 13.2): cuscope
  // knows the pools it made of host memory.
  cuscope::sim::fail_api("cudaMemPoolGetAttribute", 1, cudaErrorInvalidValue);
  CHECK_THROWS_WITH(pool_resource(ref), contains("holds page-locked host memory"));
  cuscope::sim::fail_api("cudaMemPoolGetAttribute", 1, cudaErrorInvalidValue);
  CHECK(pool_resource(device_pool.ref()).pool() == device_pool.ref());
  CHECK(cudaGetLastError() == cudaSuccess);
#endif
}

TEST_CASE("pool_resource: equal resources share a pool", "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  memory_pool other;
  stream s;
  const pool_resource a(pool);
  const pool_resource b(pool.ref(), s);
  CHECK(a == b);
  CHECK_FALSE(a != b);
  CHECK(a != pool_resource(other));
  CHECK(b.sync_stream() == s.ref());
  CHECK(a.sync_stream() == cuscope::stream_ref::per_thread());
}

TEST_CASE(
    "pool_resource: an alignment beyond 256 or not a power of two is refused, naming the pool",
    "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  stream s;
  pool_resource r(pool, s);
  CHECK_THROWS_AS(r.allocate(s, 64, 512), std::invalid_argument);
  CHECK_THROWS_WITH(r.allocate_sync(64, 512),
                    contains("alignment 512 for 64 bytes from " + pool.describe()));
  CHECK_THROWS_WITH(r.allocate_async(64, 3, cuda::stream_ref(s.get())), contains("alignment 3"));
  CHECK_THROWS_AS(r.allocate(64, 0), std::invalid_argument);
  CHECK(pool.stats().used_bytes == 0);
  for (std::size_t alignment = 1; alignment <= 256; alignment *= 2) {
    void* p = r.allocate(s, 100, alignment);
    CHECK(aligned(p, alignment));
    r.deallocate(s, p, 100, alignment);
  }
  s.synchronize();
}

TEST_CASE("pool_resource: a synchronous allocation is ready on any stream when it returns",
          "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  stream sync;
  stream other;
  pool_resource r(pool, sync);
  bool earlier_work_done = false;
  REQUIRE(cudaLaunchHostFunc(
              sync.get(), [](void* flag) { *static_cast<bool*>(flag) = true; },
              &earlier_work_done) == cudaSuccess);
  void* p = r.allocate_sync(MiB);
  CHECK(earlier_work_done);  // it waited for the sync stream
  CHECK(sync.ready());
  CHECK(pool.stats().used_bytes == MiB);
  // Usable on another stream with no event: zero it there and read it back.
  REQUIRE(cudaMemsetAsync(p, 0, MiB, other.get()) == cudaSuccess);
  unsigned char byte = 1;
  REQUIRE(cudaMemcpyAsync(&byte, static_cast<unsigned char*>(p) + MiB - 1, 1,
                          cudaMemcpyDeviceToHost, other.get()) == cudaSuccess);
  other.synchronize();
  CHECK(byte == 0);
  r.deallocate_sync(p, MiB);
  void* q = r.allocate(2 * MiB, 128);  // the CCCL 3.0 name of allocate_sync
  CHECK(pool.stats().used_bytes == 2 * MiB);
  r.deallocate(q, 2 * MiB, 128);
  CHECK(pool.stats().used_bytes == 0);
  sync.synchronize();
}

TEST_CASE("pool_resource: a pool on another device works while device 0 is current",
          "[memory_resource]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::pool_options o;
  o.device = 1;
  memory_pool pool(o);
  pool_resource r(pool);  // the per-thread default stream, of device 1
  void* p = r.allocate_sync(MiB);
  CHECK(cuscope::current_device() == 0);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
  CHECK(attributes.device == 1);
  r.deallocate_sync(p, MiB);
  CHECK(cuscope::current_device() == 0);
  {
    const cuscope::scoped_device on(1);
    CHECK_NOTHROW(cuscope::stream_ref::per_thread().synchronize());
  }
  pool.trim_to(0);
  CHECK(pool.stats().reserved_bytes == 0);  // the free ran on device 1's per-thread stream
}

#if CCCL_VERSION >= 3005000 && !CUSCOPE_TEST_SIMULATED
// CCCL 3.5's own memory types reach the driver API through libcuda.so.1, which the simulated
// device does not provide: these run against the real runtime only.

TEST_CASE("pool_resource: cuda::device_memory_pool_ref over a pool's handle allocates from it",
          "[memory_resource][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  cuda::device_memory_pool_ref ref(pool.get());
  CHECK(ref.get() == pool.get());
  void* p = ref.allocate(cuda::stream_ref(s.get()), MiB);
  CHECK(pool.stats().used_bytes == MiB);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeDevice);
  ref.deallocate(cuda::stream_ref(s.get()), p, MiB);
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("pool_resource: a cuda::buffer over it holds its elements in the pool and returns them",
          "[memory_resource][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  std::vector<int> in(1000);
  std::iota(in.begin(), in.end(), 1);
  std::vector<int> out(in.size(), 0);
  {
    auto buffer = cuda::make_buffer<int, cuda::mr::device_accessible>(
        cuda::stream_ref(s.get()), pool_resource(pool, s), in.begin(), in.end());
    CHECK(buffer.size() == in.size());
    CHECK(pool.stats().used_bytes >= in.size() * sizeof(int));
    REQUIRE(cudaMemcpyAsync(out.data(), buffer.data(), in.size() * sizeof(int),
                            cudaMemcpyDeviceToHost, s.get()) == cudaSuccess);
    s.synchronize();
  }
  CHECK(out == in);
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
}

#endif

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("pool_resource: a failing runtime call throws and leaks nothing",
          "[memory_resource][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep([](cuscope::test::fault_point& fault) {
    memory_pool pool;
    stream s;
    pool_resource r(pool, s);
    void* p = nullptr;
    void* q = nullptr;
    const bool done = fault.run([&] {
      p = r.allocate_sync(MiB);
      q = r.allocate(s, MiB, 256);
    });
    if (done) CHECK(pool.stats().used_bytes == 2 * MiB);
    r.deallocate_sync(p, MiB);
    r.deallocate(s, q, MiB);
    s.synchronize();
    CHECK(pool.stats().used_bytes == 0);
  });
  CHECK(runs >= 4);
}

#endif

TEST_CASE("pool_resource: a resource from a session is counted by it", "[memory_resource]") {
  device_guard device;
  memory_pool pool;
  stream s;
  cuscope::session_options o;
  o.name = "mr";
  o.budget_bytes = 2 * MiB;
  o.on_leak = cuscope::leak_policy::ignore;
  cuscope::session work(pool, s, o);
  pool_resource r(work);
  CHECK(r.counts_for(work));
  CHECK_FALSE(pool_resource(pool).counts_for(work));
  {
    memory_pool other_pool;
    stream t;
    cuscope::session other(other_pool, t);
    CHECK_FALSE(r.counts_for(other));
    CHECK(pool_resource(other).counts_for(other));
  }
  CHECK(r.sync_stream() == work.stream());
  CHECK(r != pool_resource(pool));
  const cuda::stream_ref cs(s.get());
  void* a = r.allocate(cs, MiB, 256);
  CHECK(work.live_bytes() == MiB);
  CHECK_THROWS_AS(r.allocate(cs, 2 * MiB, 256), cuscope::out_of_memory);
  void* b = r.allocate_sync(MiB / 2);
  CHECK(work.live_allocations() == 2);
  r.deallocate_sync(b, MiB / 2);
  const cuscope::session_report& rep = work.finish();
  CHECK(rep.leaked_allocations == 1);
  CHECK(rep.leaked_bytes == MiB);
  CHECK_THROWS_AS(r.allocate(cs, MiB, 256), std::logic_error);
  r.deallocate(cs, a, MiB, 256);
  CHECK(work.live_allocations() == 1);  // the report's figure, fixed at the end
  s.synchronize();
}
