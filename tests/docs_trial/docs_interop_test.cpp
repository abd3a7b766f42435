// SPDX-License-Identifier: Apache-2.0
// Existing CUDA code meeting cuscope as docs/interop.md describes it: the user's own cudaStream_t,
// cudaMemPool_t and raw pointers used, adopted and released; Thrust storage and temporary storage
// from a pool (a plain C++ compiler: the CPP device system, storage management only, as the page
// says); cuda::mr resources and references over a pool and a session; pinned buffers adopted and
// from a pool of pinned host memory; the per-thread default stream; a second device; and the
// light kernel header's device_span and launch_status in host code.
// A plain C++ compiler: Thrust's CPP device system, defined before the first Thrust include.
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <cuscope/cuda_stream_ref.hpp>
#include <cuscope/cuscope.hpp>
#include <cuscope/kernel.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/thrust.hpp>

#include <thrust/device_vector.h>
#include <thrust/memory.h>

#include <cuda_runtime_api.h>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

// The user's stream, made and destroyed with the runtime API.
struct raw_stream {
  cudaStream_t s = nullptr;
  raw_stream() { REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess); }
  ~raw_stream() { CHECK(cudaStreamDestroy(s) == cudaSuccess); }
  raw_stream(const raw_stream&) = delete;
  raw_stream& operator=(const raw_stream&) = delete;
};

// The user's pool, made with cudaMemPoolCreate.
cudaMemPool_t make_raw_pool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t raw = nullptr;
  REQUIRE(cudaMemPoolCreate(&raw, &props) == cudaSuccess);
  return raw;
}

std::uint64_t threshold_of(cudaMemPool_t pool) {
  std::uint64_t value = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value) == cudaSuccess);
  return value;
}

// A launcher as a kernel file written against <cuscope/kernel.hpp> declares it: a raw stream, a
// device_span, and the launch's status back. Here the "kernel" is a memset, which the plain C++
// build can enqueue on either runtime.
cuscope::launch_status launch_clear(cudaStream_t stream, cuscope::device_span<float> x) {
  (void)cudaMemsetAsync(x.data(), 0, x.size_bytes(), stream);
  return CUSCOPE_LAUNCH_STATUS(clear);
}

// A function that is no kernel of any image: launching it fails on a GPU and on the simulated
// device alike.
void not_a_kernel(float*) {}

cuscope::launch_status launch_missing(cudaStream_t stream, cuscope::device_span<float> x) {
  float* data = x.data();
  void* args[] = {&data};
  (void)cudaLaunchKernel(reinterpret_cast<const void*>(&not_a_kernel), dim3(1), dim3(1), args, 0,
                         stream);
  return CUSCOPE_LAUNCH_STATUS(not_a_kernel);
}

}  // namespace

// device_span and launch_status, as kernel files and host code hand them to each other.
static_assert(std::is_trivially_copyable_v<cuscope::device_span<float>>);
static_assert(std::is_trivially_copyable_v<cuscope::launch_status>);
static_assert(
    std::is_convertible_v<cuscope::device_span<float>, cuscope::device_span<const float>>);
static_assert(
    !std::is_convertible_v<cuscope::device_span<const float>, cuscope::device_span<float>>);
static_assert(std::is_convertible_v<cuscope::stream_ref, cudaStream_t>);
static_assert(cuscope::launch_status{}.ok());

// The concepts docs/interop.md names for each generation of cuda::mr.
#if CCCL_VERSION < 3001000
static_assert(cuda::mr::async_resource_with<cuscope::pool_resource, cuda::mr::device_accessible>);
static_assert(cuda::mr::resource_with<cuscope::pool_resource, cuda::mr::device_accessible>);
#else
static_assert(cuda::mr::resource_with<cuscope::pool_resource, cuda::mr::device_accessible>);
static_assert(
    cuda::mr::synchronous_resource_with<cuscope::pool_resource, cuda::mr::device_accessible>);
#endif
// There is no default pool, so no default allocator.
static_assert(!std::is_default_constructible_v<cuscope::thrust_allocator<int>>);

TEST_CASE("interop: the user's cudaStream_t serves buffers and sessions and stays the user's",
          "[docs][interop]") {
  cuscope::test::device_guard device;
  const std::size_t n = 4096;
  const std::vector<float> host = ramp(n);
  cudaStream_t s;  // made by your code
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  {
    cuscope::memory_pool pool;
    cuscope::device_buffer<float> x(s, n, pool);  // allocated and later freed on s
    CHECK(x.stream().get() == s);
    x.copy_from(s, host);
    cuscope::pinned_buffer<float> back(n);
    {
      cuscope::session epoch(pool, s, "epoch 1");  // finish() synchronizes s
      CHECK(epoch.stream().get() == s);
      auto y = epoch.make_buffer<float>(n);
      REQUIRE(cudaMemcpyAsync(y.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, s) ==
              cudaSuccess);
      REQUIRE(cudaMemcpyAsync(back.data(), y.data(), n * sizeof(float), cudaMemcpyDeviceToHost,
                              s) == cudaSuccess);
      y = cuscope::device_buffer<float>();
      const cuscope::session_report& r = epoch.finish();
      INFO(r.to_string());
      CHECK_FALSE(r.leaked());
      CHECK(r.allocations == 1);
      CHECK(r.frees == 1);
    }
    // The session's end synchronized s: the copy to page-locked memory has landed.
    CHECK(std::vector<float>(back.begin(), back.end()) == host);
  }

  // cuda::stream_ref, both ways (<cuscope/cuda_stream_ref.hpp>).
  const cuda::stream_ref cccl(s);
  const cuscope::stream_ref from_cccl = cccl;
  CHECK(from_cccl.get() == s);
  const cuda::stream_ref to_cccl = cuscope::stream_ref(s);
  CHECK(to_cccl.get() == s);

  // Adopted, then handed back.
  cuscope::stream owned = cuscope::stream::adopt(s, /*device=*/0);  // destroyed with `owned`
  CHECK(owned.get() == s);
  CHECK(owned.device() == 0);
  cudaStream_t again = owned.release();  // yours again
  CHECK(again == s);
  CHECK(owned.empty());
  CHECK(cudaStreamDestroy(again) == cudaSuccess);

  // Adopted for good: the owner destroys it (the guard checks that no stream is left).
  cudaStream_t t = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking) == cudaSuccess);
  { const cuscope::stream mine = cuscope::stream::adopt(t, 0); }
  CHECK_THROWS_AS(cuscope::stream::adopt(cuscope::stream_ref::legacy().get(), 0),
                  std::invalid_argument);
}

TEST_CASE("interop: the user's cudaMemPool_t, referred to, adopted and handed back",
          "[docs][interop]") {
  cuscope::test::device_guard device;
  raw_stream user;
  cudaStream_t s = user.s;
  const std::size_t n = 1000;

  cudaMemPool_t raw = make_raw_pool(0);  // made by your code with cudaMemPoolCreate
  {
    cuscope::memory_pool_ref ref(raw, /*device=*/0);
    CHECK(ref.get() == raw);
    std::size_t used = 0;
    {
      cuscope::device_buffer<int> b(s, n, ref);
      CHECK(b.pool().get() == raw);
      used = ref.stats().used_bytes;
      CHECK(used >= n * sizeof(int));
      std::vector<int> host(n, 7);
      b.copy_from(s, host);
      CHECK(b.to_vector(s) == host);
    }
    CHECK(used > 0);

    // A session on the user's pool trims it back, and leaves its attributes as they were.
    const std::uint64_t keep = 256 * MiB;
    REQUIRE(cudaMemPoolSetAttribute(raw, cudaMemPoolAttrReleaseThreshold,
                                    const_cast<std::uint64_t*>(&keep)) == cudaSuccess);
    std::size_t entry = 0;
    {
      cuscope::session step(ref, s, "on the user's pool");
      auto x = step.make_buffer<int>(n);
      auto big = step.make_buffer<char>(64 * MiB);  // grows the pool past what it held
      CHECK(ref.stats().reserved_bytes >= 64 * MiB);
      x = cuscope::device_buffer<int>();
      big = cuscope::device_buffer<char>();
      const cuscope::session_report& r = step.finish();
      INFO(r.to_string());
      CHECK_FALSE(r.leaked());
      CHECK(r.trimmed);
      CHECK(r.returned_bytes >= 64 * MiB);
      CHECK(r.reserved_at_exit_bytes == r.reserved_at_entry_bytes);  // trimmed back to entry
      entry = r.reserved_at_entry_bytes;
    }
    CHECK(threshold_of(raw) == keep);
    CHECK(ref.stats().reserved_bytes == entry);
    CHECK(ref.stats().used_bytes == 0);
  }

  cuscope::memory_pool owned = cuscope::memory_pool::adopt(raw, 0);  // destroyed with `owned`
  CHECK(owned.get() == raw);
  { cuscope::device_buffer<int> b(s, n, owned); }
  cudaMemPool_t back = owned.release();  // or not
  CHECK(back == raw);
  CHECK(owned.empty());
  CHECK(cudaMemPoolDestroy(back) == cudaSuccess);

  // Adopted for good: destroyed with its owner (the guard checks that no pool is left).
  { const cuscope::memory_pool mine = cuscope::memory_pool::adopt(make_raw_pool(0), 0); }

  // The device's default pool: read, used, never changed.
  cudaMemPool_t default_pool = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&default_pool, 0) == cudaSuccess);
  const std::uint64_t before = threshold_of(default_pool);
  {
    const cuscope::memory_pool_ref shared = cuscope::memory_pool_ref::device_default(0);
    CHECK(shared.get() == default_pool);
    cuscope::session borrowed(shared, s, "on the default pool");
    auto x = borrowed.make_buffer<float>(n);
    const cuscope::pool_stats st = shared.stats();
    CHECK(st.used_bytes >= n * sizeof(float));
    x = cuscope::device_buffer<float>();
    const cuscope::session_report& r = borrowed.finish();
    CHECK_FALSE(r.leaked());
  }
  CHECK(threshold_of(default_pool) == before);
}

TEST_CASE("interop: pointers from cudaMallocAsync and cudaMallocHost adopted and released",
          "[docs][interop]") {
  cuscope::test::device_guard device;
  raw_stream user;
  cudaStream_t s = user.s;
  const std::size_t n = 2048;
  const std::vector<float> host = ramp(n);

  void* p;
  REQUIRE(cudaMallocAsync(&p, n * sizeof(float), s) == cudaSuccess);  // the current pool
  auto b = cuscope::device_buffer<float>::adopt(s, static_cast<float*>(p), n,
                                                cuscope::memory_pool_ref::device_current(0));
  CHECK(b.data() == p);
  CHECK(b.size() == n);
  b.copy_from(s, host);
  CHECK(b.to_vector(s) == host);
  float* q = b.release();  // yours again: cudaFreeAsync(q, s)
  CHECK(q == p);
  CHECK(b.empty());
  REQUIRE(cudaFreeAsync(q, s) == cudaSuccess);

  // Adopted for good: freed with cudaFreeAsync on s by the buffer (the guard checks).
  cuscope::memory_pool pool;
  void* r = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&r, n * sizeof(float), pool.get(), s) == cudaSuccess);
  {
    auto c = cuscope::device_buffer<float>::adopt(s, static_cast<float*>(r), n, pool);
    CHECK(pool.stats().used_bytes >= n * sizeof(float));
  }
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pool.stats().used_bytes == 0);

  // Page-locked memory from cudaMallocHost and cudaHostAlloc.
  void* h = nullptr;
  REQUIRE(cudaMallocHost(&h, n * sizeof(float)) == cudaSuccess);
  auto pinned = cuscope::pinned_buffer<float>::adopt(static_cast<float*>(h), n);
  CHECK(pinned.data() == h);
  CHECK(pinned.size() == n);
  float* mine = pinned.release();
  CHECK(pinned.empty());
  CHECK(cudaFreeHost(mine) == cudaSuccess);
  void* a = nullptr;
  REQUIRE(cudaHostAlloc(&a, n * sizeof(float), cudaHostAllocDefault) == cudaSuccess);
  {
    auto kept = cuscope::pinned_buffer<float>::adopt(static_cast<float*>(a), n);
    std::copy(host.begin(), host.end(), kept.begin());
    cuscope::device_buffer<float> d(s, kept, pool);  // an asynchronous copy from page-locked
    CHECK(d.to_vector(s) == host);
  }  // cudaFreeHost by the buffer (the guard checks)
}

TEST_CASE("interop: Thrust vectors and temporary storage from a pool, on the CPP device system",
          "[docs][interop][thrust]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  using vector = thrust::device_vector<int, cuscope::thrust_allocator<int>>;

  // Storage management, which the page says works with the CPP system: reserve, shrink_to_fit,
  // moves, swaps and frees.
  {
    vector v(cuscope::thrust_allocator<int>(s, pool));
    CHECK(v.get_allocator().pool().get() == pool.get());
    CHECK(v.get_allocator().stream() == s.ref());
    v.reserve(1 << 20);
    CHECK(v.capacity() >= (1 << 20));
    s.synchronize();
    CHECK(pool.stats().used_bytes >= (std::size_t{1} << 20) * sizeof(int));
    v.shrink_to_fit();
    s.synchronize();
    CHECK(pool.stats().used_bytes == 0);

    v.reserve(1000);
    vector w(cuscope::thrust_allocator<int>(s, pool));
    w.reserve(5000);
    const std::size_t wc = w.capacity();
    v.swap(w);
    CHECK(v.capacity() == wc);
    vector moved(std::move(v));
    CHECK(moved.capacity() == wc);
    s.synchronize();
    CHECK(pool.stats().used_bytes >= 6000 * sizeof(int));
  }
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);

  // Temporary storage through the policies.
  {
    auto policy = cuscope::thrust_policy(s, pool);
    auto temp = thrust::get_temporary_buffer<double>(policy, 4096);
    CHECK(temp.second == 4096);
    s.synchronize();
    CHECK(pool.stats().used_bytes >= 4096 * sizeof(double));
    thrust::return_temporary_buffer(policy, temp.first, temp.second);
    auto sync_policy = cuscope::thrust_policy_sync(s, pool);
    auto temp2 = thrust::get_temporary_buffer<char>(sync_policy, 100);
    CHECK(temp2.second == 100);
    thrust::return_temporary_buffer(sync_policy, temp2.first, temp2.second);
  }
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);

  // Inside a session: the allocator and the policy are counted by it, under its budget.
  cuscope::session_options o;
  o.name = "request";
  o.budget_bytes = 1 << 20;
  cuscope::session request(pool, s, o);
  {
    vector v{cuscope::thrust_allocator<int>(request)};
    CHECK(v.get_allocator().stream() == request.stream());
    v.reserve(1000);
    CHECK(request.live_allocations() == 1);
    CHECK(request.live_bytes() >= 1000 * sizeof(int));
    auto policy = cuscope::thrust_policy(request);
    auto temp = thrust::get_temporary_buffer<int>(policy, 2000);
    CHECK(request.live_allocations() == 2);
    thrust::return_temporary_buffer(policy, temp.first, temp.second);
    CHECK(request.live_allocations() == 1);
    // Over the budget: refused as out_of_memory, CUDA not asked.
    try {
      v.reserve(1 << 20);
      FAIL("a reserve over the session's budget succeeded");
    } catch (const cuscope::out_of_memory& e) {
      CHECK(e.status() == cudaSuccess);
      CHECK_THAT(e.what(), cuscope::test::contains("request"));
    }
    CHECK(v.capacity() >= 1000);
  }
  const cuscope::session_report& r = request.finish();
  INFO(r.to_string());
  CHECK_FALSE(r.leaked());
  CHECK(r.allocations == 2);
  CHECK(r.frees == 2);
  CHECK(r.budget_refusals == 1);
}

TEST_CASE("interop: pool_resource under cuda::mr, over a pool and over a session",
          "[docs][interop][memory_resource]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  const std::size_t bytes = 3000;

  cuscope::pool_resource res(pool);  // pool must outlive it
  CHECK(res.pool().get() == pool.get());
#if CCCL_VERSION < 3001000
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{res};  // CCCL 3.0
  void* p = ref.allocate_async(bytes, 256, cuda::stream_ref(s.get()));
  s.synchronize();
  CHECK(pool.stats().used_bytes >= bytes);
  ref.deallocate_async(p, bytes, 256, cuda::stream_ref(s.get()));
#else
  cuda::mr::resource_ref<cuda::mr::device_accessible> ref{res};  // CCCL 3.1 and later
  void* p = ref.allocate(cuda::stream_ref(s.get()), bytes, 256);
  s.synchronize();
  CHECK(pool.stats().used_bytes >= bytes);
  ref.deallocate(cuda::stream_ref(s.get()), p, bytes, 256);
#endif
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);

  // Alignments: up to 256 honoured, larger or not a power of two refused.
  void* small = res.allocate_sync(64, 128);
  CHECK(reinterpret_cast<std::uintptr_t>(small) % 128 == 0);
  res.deallocate_sync(small, 64, 128);
  CHECK_THROWS_AS(res.allocate_sync(64, 512), std::invalid_argument);
  CHECK_THROWS_AS(res.allocate_sync(64, 48), std::invalid_argument);
  CHECK_THROWS_AS(res.allocate(s, 64, 1024), std::invalid_argument);

  // The synchronous members: ready on any stream when they return.
  void* q = res.allocate_sync(bytes);
  const std::vector<char> host(bytes, 'x');
  REQUIRE(cudaMemcpyAsync(q, host.data(), bytes, cudaMemcpyHostToDevice, s.get()) == cudaSuccess);
  std::vector<char> back(bytes);
  REQUIRE(cudaMemcpyAsync(back.data(), q, bytes, cudaMemcpyDeviceToHost, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(back == host);
  res.deallocate_sync(q, bytes);
  cuscope::stream_ref(res.sync_stream()).synchronize();
  CHECK(pool.stats().used_bytes == 0);

  // A session's resource: counted by it; a copy outliving the session refuses to allocate.
  cuscope::pool_resource late(pool);
  {
    cuscope::session step(pool, s, "mr step");
    cuscope::pool_resource counted(step);
    CHECK(counted.sync_stream() == s.ref());
    CHECK(counted != res);  // the same pool, but counted for a session
    void* c = counted.allocate(s, 1024);
    CHECK(step.live_allocations() == 1);
    CHECK(step.live_bytes() == 1024);
    counted.deallocate(s, c, 1024);
    CHECK(step.live_allocations() == 0);
    late = counted;
    const cuscope::session_report& r = step.finish();
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == 1);
    CHECK(r.frees == 1);
  }
  CHECK_THROWS_AS(late.allocate(s, 1024), std::logic_error);
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("interop: pinned buffers from a pool of pinned host memory", "[docs][interop]") {
  cuscope::test::device_guard device;
  if (!cuscope::pinned_memory_pool::supported(0)) {
    WARN("skipped: no host memory pools on device 0");
    return;
  }
  cuscope::memory_pool pool;
  cuscope::stream s;
  cuscope::pool_options po;
  po.release_threshold_bytes = 64 * MiB;
  cuscope::pinned_memory_pool pinned_pool(po);
  CHECK(pinned_pool.release_threshold() == 64 * MiB);
  const std::size_t n = 10000;
  const std::vector<float> host = ramp(n);
  {
    cuscope::pinned_buffer<float> staging(s, n, pinned_pool);  // the host may write at once
    CHECK(staging.pooled());
    CHECK(staging.stream() == s.ref());
    std::copy(host.begin(), host.end(), staging.begin());
    CHECK(pinned_pool.stats().used_bytes >= n * sizeof(float));
    cuscope::device_buffer<float> d(s, staging, pool);
    cuscope::pinned_buffer<float> out(s, n, pinned_pool);
    d.copy_to(s, out.data(), n);
    s.synchronize();
    CHECK(std::vector<float>(out.begin(), out.end()) == host);
  }  // back to the pool in stream order on s
  s.synchronize();
  CHECK(pinned_pool.stats().used_bytes == 0);
  CHECK(pinned_pool.stats().reserved_bytes > 0);  // kept under the threshold
  pinned_pool.trim_to(0);
  CHECK(pinned_pool.stats().reserved_bytes == 0);
}

TEST_CASE("interop: the per-thread and legacy default streams, named", "[docs][interop]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  const std::vector<float> host = ramp(777);
  for (const cuscope::stream_ref s :
       {cuscope::stream_ref::per_thread(), cuscope::stream_ref::legacy()}) {
    cuscope::device_buffer<float> b(s, host, pool);
    CHECK(b.stream() == s);
    CHECK(b.to_vector(s) == host);
  }
  cuscope::session on_default(pool, cuscope::stream_ref::per_thread(), "per-thread");
  { auto x = on_default.make_buffer<float>(100); }
  CHECK_FALSE(on_default.finish().leaked());
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("interop: a pool, stream, buffers and session on device 1 leave device 0 current",
          "[docs][interop]") {
  cuscope::test::device_setup two;
  two.device_count = 2;
  cuscope::test::device_guard device(two);
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const auto current = [] {
    int d = -1;
    REQUIRE(cudaGetDevice(&d) == cudaSuccess);
    return d;
  };
  const std::size_t n = 5000;
  const std::vector<float> host = ramp(n);
  {
    cuscope::pool_options po;
    po.device = 1;
    cuscope::memory_pool pool(po);  // device 0 stays current
    CHECK(current() == 0);
    CHECK(pool.device() == 1);
    cuscope::stream_options so;
    so.device = 1;
    cuscope::stream s(so);
    CHECK(s.device() == 1);
    {
      cuscope::session epoch(pool, s, "on device 1");  // synchronizes and trims device 1's pool
      auto b = epoch.make_buffer<float>(n);
      CHECK(b.device() == 1);
      CHECK(current() == 0);
      b.copy_from(s, host);
      CHECK(b.to_vector(s) == host);
      b = cuscope::device_buffer<float>();
      const cuscope::session_report& r = epoch.finish();
      INFO(r.to_string());
      CHECK_FALSE(r.leaked());
      CHECK(r.device == 1);
      CHECK(r.reserved_at_exit_bytes == 0);
      CHECK(current() == 0);
    }
    CHECK(current() == 0);

    // The per-thread default stream given to a buffer of device 1 is device 1's.
    {
      cuscope::device_buffer<float> d(cuscope::stream_ref::per_thread(), n, pool);
      CHECK(current() == 0);
      d.copy_from(cuscope::stream_ref::per_thread(), host);
      CHECK(d.to_vector(cuscope::stream_ref::per_thread()) == host);
      CHECK(current() == 0);
    }
    CHECK(current() == 0);
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    CHECK(pool.stats().used_bytes == 0);
  }
  CHECK(current() == 0);
}

TEST_CASE("interop: a launcher's device_span and launch_status in host code", "[docs][interop]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream s;
  const std::vector<float> host = ramp(256);
  cuscope::device_buffer<float> x(s, host, pool);

  // span() passed by value; a launcher takes the raw stream (stream_ref converts, stream: get()).
  const cuscope::device_span<float> whole = x.span();
  CHECK(whole.data() == x.data());
  CHECK(whole.size() == 256);
  CHECK(whole.size_bytes() == 256 * sizeof(float));
  CHECK(whole.first(10).size() == 10);
  CHECK(whole.last(6).data() == x.data() + 250);
  CHECK(whole.subspan(100, 28).data() == x.data() + 100);
  CHECK(whole.subspan(100, 28).size() == 28);
  const cuscope::device_span<const float> read_only = whole;
  CHECK(read_only.data() == whole.data());

  const cuscope::launch_status ok = launch_clear(s.get(), whole.subspan(100, 28));
  CHECK(ok.ok());
  CHECK(std::string(ok.launch) == "clear");
  CHECK(ok.line > 0);
  cuscope::check_launch(ok);  // does not throw
  std::vector<float> expected = host;
  std::fill(expected.begin() + 100, expected.begin() + 128, 0.0f);
  CHECK(x.to_vector(s) == expected);

  const cuscope::launch_status bad = launch_missing(s.ref(), whole);
  CHECK_FALSE(bad.ok());
  CHECK(std::string(bad.launch) == "not_a_kernel");
  try {
    cuscope::check_launch(bad);
    FAIL("check_launch did not throw for a failed launch");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == bad.status);
    CHECK_THAT(e.what(), cuscope::test::contains("not_a_kernel"));
    CHECK_THAT(e.what(), cuscope::test::contains("docs_interop_test.cpp"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // the status took the error and cleared it
}
