// SPDX-License-Identifier: Apache-2.0
// cuscope inside code that already has its own pools, streams and pointers, and on a device other
// than the current one.
#include <cstddef>
#include <cuscope/device.hpp>
#include <cuscope/device_buffer.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <numeric>
#include <optional>
#include <vector>

#include "test_support.hpp"

using cuscope::device_buffer;
using cuscope::memory_pool;
using cuscope::memory_pool_ref;
using cuscope::pinned_buffer;
using cuscope::session;
using cuscope::stream;
using cuscope::stream_ref;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<int> iota(std::size_t n, int from = 1) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// A pool made the way existing code makes one, with the raw runtime API.
cudaMemPool_t raw_pool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  return pool;
}

cudaStream_t raw_stream() {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

void set_flag(void* flag) {
  *static_cast<bool*>(flag) = true;
}

// Whether a pool has given all its memory back: only once the frees have run.
bool all_returned_after_trim(const memory_pool_ref& pool) {
  pool.trim_to(0);
  return pool.stats().reserved_bytes == 0;
}

cuscope::pool_options on_device(int device) {
  cuscope::pool_options o;
  o.device = device;
  return o;
}

cuscope::stream_options stream_on_device(int device) {
  cuscope::stream_options o;
  o.device = device;
  return o;
}

}  // namespace

// Adoption and release -------------------------------------------------------------------------

TEST_CASE("memory_pool_ref: the user's own cudaMemPool_t is used and stays the user's",
          "[interop]") {
  device_guard device;
  const cudaMemPool_t raw = raw_pool(0);
  {
    const memory_pool_ref pool(raw, 0);
    stream s;
    const std::vector<int> data = iota(1000);
    device_buffer<int> b(s, data, pool);
    CHECK(b.to_vector(s) == data);
    std::uint64_t used = 0;
    REQUIRE(cudaMemPoolGetAttribute(raw, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess);
    CHECK(used == pool.stats().used_bytes);
    CHECK(used >= 4000);
  }  // the reference leaves the pool alone
  std::uint64_t used = 1;
  CHECK(cudaMemPoolGetAttribute(raw, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess);
  CHECK(used == 0);
  CHECK(cudaMemPoolDestroy(raw) == cudaSuccess);
}

TEST_CASE("memory_pool: adopt takes ownership of the user's pool and release hands it back",
          "[interop]") {
  device_guard device;
  const cudaMemPool_t raw = raw_pool(0);
  memory_pool owned = memory_pool::adopt(raw, 0);
  CHECK(owned.get() == raw);
  CHECK(owned.device() == 0);
  stream s;
  {
    const std::vector<int> data = iota(16);
    const device_buffer<int> b(s, data, owned);
    CHECK(b.to_vector(s) == data);
  }
  CHECK(owned.release() == raw);
  CHECK(owned.empty());
  CHECK(cudaMemPoolDestroy(raw) == cudaSuccess);  // the user's again

  const cudaMemPool_t another = raw_pool(0);
  { const memory_pool adopted = memory_pool::adopt(another, 0); }  // destroyed with the owner
  if (cuscope::test::simulated) {
    std::uint64_t value = 0;
    CHECK(cudaMemPoolGetAttribute(another, cudaMemPoolAttrUsedMemCurrent, &value) ==
          cudaErrorInvalidValue);
    (void)cudaGetLastError();
  }
}

TEST_CASE(
    "device_buffer: a pointer from the user's cudaMallocAsync on the user's pool and stream is "
    "adopted and released back",
    "[interop]") {
  device_guard device;
  const cudaMemPool_t user_pool = raw_pool(0);
  const cudaStream_t user_stream = raw_stream();
  cudaMemPool_t device_pool = nullptr;
  REQUIRE(cudaDeviceGetMemPool(&device_pool, 0) == cudaSuccess);
  // Legacy code: cudaMallocAsync from the pool it made current for the device.
  REQUIRE(cudaDeviceSetMemPool(0, user_pool) == cudaSuccess);
  void* raw = nullptr;
  REQUIRE(cudaMallocAsync(&raw, 256 * sizeof(int), user_stream) == cudaSuccess);
  REQUIRE(cudaDeviceSetMemPool(0, device_pool) == cudaSuccess);

  const memory_pool_ref pool(user_pool, 0);
  CHECK(pool.stats().used_bytes == 256 * sizeof(int));
  device_buffer<int> b = device_buffer<int>::adopt(user_stream, static_cast<int*>(raw), 256, pool);
  CHECK(b.data() == raw);
  CHECK(b.size() == 256);
  CHECK(b.stream() == stream_ref(user_stream));
  CHECK(b.pool() == pool);
  const std::vector<int> data = iota(256);
  b.copy_from(user_stream, data);
  CHECK(b.to_vector(user_stream) == data);
  b.resize(user_stream, 512);  // new memory from the same pool, the old freed
  CHECK(b.data() != raw);
  CHECK(pool.stats().used_bytes == 512 * sizeof(int));

  int* back = b.release();
  CHECK(b.empty());
  CHECK(pool.stats().used_bytes == 512 * sizeof(int));  // still allocated: the user's now
  CHECK(cudaFreeAsync(back, user_stream) == cudaSuccess);
  CHECK(cudaStreamSynchronize(user_stream) == cudaSuccess);
  CHECK(all_returned_after_trim(pool));
  CHECK(cudaStreamDestroy(user_stream) == cudaSuccess);
  CHECK(cudaMemPoolDestroy(user_pool) == cudaSuccess);
}

TEST_CASE("stream_ref: the user's raw stream is used throughout and stays the user's",
          "[interop]") {
  device_guard device;
  const cudaStream_t raw = raw_stream();
  memory_pool pool;
  {
    cuscope::session_options o;
    o.name = "legacy loop";
    session epoch(pool, raw, o);
    CHECK(epoch.stream() == stream_ref(raw));
    device_buffer<float> b = epoch.make_buffer<float>(MiB);
    CHECK(b.stream() == stream_ref(raw));
    bool ran = false;
    REQUIRE(cudaLaunchHostFunc(raw, set_flag, &ran) == cudaSuccess);
    b = device_buffer<float>();  // freed on the raw stream
    const cuscope::session_report& report = epoch.finish();
    CHECK(ran);  // the session synchronized the user's stream
    CHECK_FALSE(report.leaked());
    CHECK(report.returned_bytes >= 4 * MiB);
  }
  CHECK(cudaStreamQuery(raw) == cudaSuccess);  // still the user's
  {
    stream owned = stream::adopt(raw, 0);
    CHECK(owned.get() == raw);
    CHECK(owned.release() == raw);
  }
  CHECK(cudaStreamDestroy(raw) == cudaSuccess);

  const cudaStream_t another = raw_stream();
  { const stream owned = stream::adopt(another, 0); }  // destroyed with the owner
  if (cuscope::test::simulated) {
    CHECK(cudaStreamQuery(another) == cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
  }
}

TEST_CASE("pinned_buffer: memory from the user's cudaMallocHost is adopted and released back",
          "[interop]") {
  device_guard device;
  void* raw = nullptr;
  REQUIRE(cudaMallocHost(&raw, 64 * sizeof(int)) == cudaSuccess);
  pinned_buffer<int> host = pinned_buffer<int>::adopt(static_cast<int*>(raw), 64);
  std::iota(host.begin(), host.end(), 1);
  memory_pool pool;
  stream s;
  device_buffer<int> b(s, host, pool);  // an asynchronous copy from pinned memory
  CHECK(b.to_vector(s) == iota(64));
  CHECK(host.release() == raw);
  CHECK(cudaFreeHost(raw) == cudaSuccess);
}

// Several devices ------------------------------------------------------------------------------

TEST_CASE("device_buffer: buffers of device 1 work and are freed while device 0 is current",
          "[interop][devices]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  memory_pool pool(on_device(1));
  stream s(stream_on_device(1));
  stream t(stream_on_device(1));
  const std::vector<int> data = iota(1000);
  {
    device_buffer<int> b(s, data, pool);
    CHECK(b.device() == 1);
    CHECK(b.to_vector(s) == data);
    const device_buffer<int> copy(t, b);  // ordered after s through an event of device 1
    CHECK(copy.to_vector(t) == data);
    b.set_stream(t);
    b.resize(s, 2000);
    const std::vector<int> grown = b.to_vector(s);
    CHECK(std::vector<int>(grown.begin(), grown.begin() + 1000) == data);
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, b.data()) == cudaSuccess);
    CHECK(attributes.device == 1);
    CHECK(cuscope::current_device() == 0);
  }
  CHECK(cuscope::current_device() == 0);
  s.synchronize();
  t.synchronize();
  CHECK(all_returned_after_trim(pool));
}

TEST_CASE(
    "device_buffer: a default stream handle names device 1's stream for a buffer of device 1, "
    "whatever device is current",
    "[interop][devices]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  memory_pool pool(on_device(1));
  const stream_ref per_thread = stream_ref::per_thread();
  const std::vector<int> data = iota(256);
  {
    device_buffer<int> b(per_thread, data, pool);
    CHECK(b.to_vector(per_thread) == data);
    const device_buffer<int> copy(stream_ref::legacy(), b);
    CHECK(copy.to_vector(stream_ref::legacy()) == data);
    CHECK(cuscope::current_device() == 0);
  }  // freed on device 1's per-thread default stream, with device 0 current
  CHECK(cuscope::current_device() == 0);
  if (cuscope::test::simulated) {
    REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);  // device 0's
    CHECK_FALSE(all_returned_after_trim(pool));
  }
  {
    const cuscope::scoped_device on(1);
    per_thread.synchronize();
    stream_ref::legacy().synchronize();
  }
  CHECK(all_returned_after_trim(pool));
}

TEST_CASE("session: a session on device 1 waits for device 1's work and restores device 0",
          "[interop][devices][session]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  memory_pool pool(on_device(1));
  stream s(stream_on_device(1));
  {
    session epoch(pool, s, "device 1");
    {
      const device_buffer<float> a = epoch.make_buffer<float>(MiB);
      CHECK(a.device() == 1);
    }
    const cuscope::session_report& report = epoch.finish();
    CHECK(report.device == 1);
    CHECK(report.peak_used_bytes == 4 * MiB);
    CHECK_FALSE(report.leaked());
    CHECK(report.returned_bytes >= 4 * MiB);
    CHECK(cuscope::current_device() == 0);
  }
  // On the per-thread default stream: the session's end synchronizes device 1's, so the free
  // has run and the trim gives everything back.
  cuscope::session_options o;
  o.keep_bytes = 0;
  session epoch(pool, stream_ref::per_thread(), o);
  {
    const device_buffer<float> b = epoch.make_buffer<float>(2 * MiB);
    CHECK(cuscope::current_device() == 0);
  }
  const cuscope::session_report& report = epoch.finish();
  CHECK(report.returned_bytes >= 8 * MiB);
  CHECK(report.reserved_at_exit_bytes == 0);
  CHECK(cuscope::current_device() == 0);
}

TEST_CASE("memory_pool: pools, streams and pinned buffers of device 1 leave device 0 current",
          "[interop][devices]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  {
    cuscope::pool_options o = on_device(1);
    o.initial_bytes = 4 * MiB;
    memory_pool pool(o);
    CHECK(pool.stats().reserved_bytes >= 4 * MiB);
    stream s(stream_on_device(1));
    void* p = pool.allocate(stream_ref::per_thread(), MiB);  // device 1's per-thread stream
    pool.deallocate(stream_ref::per_thread(), p, MiB);
    const pinned_buffer<int> host(16);
    CHECK(cuscope::current_device() == 0);
    const cuscope::scoped_device on(1);
    stream_ref::per_thread().synchronize();
  }
  CHECK(cuscope::current_device() == 0);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE(
    "device_buffer: a failing runtime call on device 1 leaves device 0 current and nothing "
    "allocated",
    "[interop][devices][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep(
      [](cuscope::test::fault_point& fault) {
        memory_pool pool(on_device(1));
        stream s(stream_on_device(1));
        const std::vector<int> data = iota(64);
        std::optional<device_buffer<int>> a;
        std::optional<device_buffer<int>> b;
        (void)fault.run([&] {
          a.emplace(s, data, pool);
          b.emplace(stream_ref::per_thread(), *a);
          b->set_stream(s);
          a->resize(stream_ref::per_thread(), 128);
          (void)b->to_vector(stream_ref::per_thread());
        });
        CHECK(cuscope::current_device() == 0);
        a.reset();
        b.reset();
        s.synchronize();
        const cuscope::scoped_device on(1);
        stream_ref::per_thread().synchronize();
      },
      {2});
  CHECK(runs > 10);
}

#endif
