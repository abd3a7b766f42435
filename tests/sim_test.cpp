// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows, one test case per rule
// (docs/simulated-device.md). Rules that hold on any CUDA device also run against the real
// runtime; the simulation's own controls are tested in the simulated build only.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace {

using cuscope::test::device_guard;
using cuscope::test::device_setup;

constexpr std::size_t MiB = std::size_t{1} << 20;

struct trace {
  std::mutex mutex;
  std::vector<int> order;
  std::deque<std::pair<trace*, int>> marks;

  void add(cudaStream_t s, int id) {
    marks.emplace_back(this, id);
    REQUIRE(cudaLaunchHostFunc(s, &trace::record, &marks.back()) == cudaSuccess);
  }
  std::vector<int> seen() {
    std::lock_guard<std::mutex> lock(mutex);
    return order;
  }
  static void record(void* p) {
    auto* m = static_cast<std::pair<trace*, int>*>(p);
    std::lock_guard<std::mutex> lock(m->first->mutex);
    m->first->order.push_back(m->second);
  }
};

cudaMemPool_t make_pool(int device = 0, std::size_t max_bytes = 0) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
#if CUDART_VERSION >= 12020
  props.maxSize = max_bytes;
#else
  (void)max_bytes;
#endif
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  return pool;
}

std::uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t v = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, attr, &v) == cudaSuccess);
  return v;
}

void set_threshold(cudaMemPool_t pool, std::uint64_t bytes) {
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes) == cudaSuccess);
}

std::size_t free_bytes() {
  std::size_t free = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  return free;
}

cudaStream_t make_stream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess);
  return s;
}

}  // namespace

// Devices ----------------------------------------------------------------------------------------

TEST_CASE("sim: cudaSetDevice rejects an invalid ordinal with cudaErrorInvalidDevice", "[sim]") {
  device_guard device;
  const int n = cuscope::test::device_count();
  REQUIRE(n >= 1);
  CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
}

TEST_CASE("sim: a device supports memory pools and reports its total memory", "[sim]") {
  device_guard device;
  int pools = 0;
  REQUIRE(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0) == cudaSuccess);
  CHECK(pools == 1);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  std::size_t free = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(prop.totalGlobalMem == total);
  CHECK(free < total);
  CHECK(prop.memoryPoolsSupported == 1);
}

TEST_CASE("sim: the current device is a property of the host thread", "[sim]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  int other = -1;
  std::thread([&] { (void)cudaGetDevice(&other); }).join();
  CHECK(other == 0);
  int mine = -1;
  REQUIRE(cudaGetDevice(&mine) == cudaSuccess);
  CHECK(mine == 1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

// Errors -----------------------------------------------------------------------------------------

TEST_CASE("sim: a non-sticky error is the last error until cudaGetLastError clears it", "[sim]") {
  device_guard device;
  void* p = nullptr;
  CHECK(cudaMalloc(nullptr, 16) == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaMalloc(&p, 16) == cudaSuccess);  // success does not clear it
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
}

TEST_CASE("sim: error names and strings are those of the runtime", "[sim]") {
  CHECK(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) == "cudaErrorMemoryAllocation");
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
  CHECK(std::string(cudaGetErrorName(cudaErrorInvalidValue)) == "cudaErrorInvalidValue");
  CHECK(std::string(cudaGetErrorName(cudaSuccess)) == "cudaSuccess");
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: the last error belongs to the thread that made the call", "[sim]") {
  device_guard device;
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaGetLastError(); }).join();
  CHECK(other == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
}

TEST_CASE("sim: a sticky error fails every later call until the process is reset", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cuscope::sim::fail_api("cudaStreamSynchronize", 1, cudaErrorIllegalAddress);
  CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);      // cannot be cleared
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);  // the stream could not be destroyed
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("sim: an access to memory that is no longer reserved raises a sticky illegal address",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4096, pool, a) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 1, 4096, a) == cudaSuccess);
  // The free on b is not ordered after the memset on a: it runs first, the pool releases its
  // memory at the synchronization, and the memset then touches memory that is gone.
  REQUIRE(cudaFreeAsync(p, b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(cudaStreamSynchronize(a) == cudaErrorIllegalAddress);
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);
}

#endif

// Memory -----------------------------------------------------------------------------------------

TEST_CASE("sim: cudaMemGetInfo counts cudaMalloc memory as used", "[sim]") {
  device_guard device;
  const std::size_t before = free_bytes();
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 64 * MiB) == cudaSuccess);
  CHECK(before - free_bytes() >= 64 * MiB);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CUSCOPE_CHECK_DRIVER_FREE(free_bytes(), before);
}

TEST_CASE("sim: asking for more than is free fails with cudaErrorMemoryAllocation", "[sim]") {
  device_guard device;
  std::size_t free = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, total + MiB) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  cudaStream_t s = make_stream();
  CHECK(cudaMallocAsync(&p, total + MiB, s) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CUSCOPE_CHECK_DRIVER_FREE(free_bytes(), free);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: freeing a pointer twice or one never allocated is cudaErrorInvalidValue", "[sim]") {
  device_guard device;
  int host = 0;
  CHECK(cudaFree(&host) == cudaErrorInvalidValue);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 256) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(cudaFree(p) == cudaErrorInvalidValue);
  cudaStream_t s = make_stream();
  REQUIRE(cudaMallocAsync(&p, 256, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  CHECK(cudaFreeAsync(p, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: memory from cudaMalloc can be freed in stream order with cudaFreeAsync", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  const std::size_t before = free_bytes();
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 16 * MiB) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 0, 16 * MiB, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
#if CUSCOPE_TEST_SIMULATED
  // The allocation is gone at once; the device has its memory back when the free has run.
  CHECK(cuscope::sim::outstanding_allocations() == 0);
  CHECK(before - free_bytes() >= 16 * MiB);
#endif
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CUSCOPE_CHECK_DRIVER_FREE(free_bytes(), before);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: data copied to the device and back is unchanged", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  std::vector<int> in(1000);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<int>(i * 7 + 1);
  std::vector<int> out(in.size(), 0);
  void* a = nullptr;
  void* b = nullptr;
  const std::size_t bytes = in.size() * sizeof(int);
  REQUIRE(cudaMallocAsync(&a, bytes, s) == cudaSuccess);
  REQUIRE(cudaMallocAsync(&b, bytes, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(a, in.data(), bytes, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(out.data(), b, bytes, cudaMemcpyDefault, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(out == in);
  REQUIRE(cudaMemsetAsync(b, 0, bytes, s) == cudaSuccess);
  // s does not block: the legacy default stream that cudaMemcpy uses does not wait for it.
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemcpy(out.data(), b, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(out == std::vector<int>(in.size(), 0));
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(b, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: pointer attributes tell device, pinned host and unregistered memory apart",
          "[sim]") {
  device_guard device;
  void* d = nullptr;
  void* h = nullptr;
  int plain = 0;
  REQUIRE(cudaMalloc(&d, 256) == cudaSuccess);
  REQUIRE(cudaMallocHost(&h, 256) == cudaSuccess);
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, d) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeDevice);
  CHECK(a.device == 0);
  REQUIRE(cudaPointerGetAttributes(&a, h) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeHost);
  REQUIRE(cudaPointerGetAttributes(&a, &plain) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeUnregistered);
  REQUIRE(cudaFreeHost(h) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
}

TEST_CASE("sim: pointer attributes of pinned memory name the device current at its allocation",
          "[sim]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  void* h = nullptr;
  REQUIRE(cudaMallocHost(&h, 64) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, h) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeHost);
  CHECK(a.device == 1);
  REQUIRE(cudaFreeHost(h) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: a copy from pageable memory reads the source before the call returns", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* d = nullptr;
  REQUIRE(cudaMallocAsync(&d, sizeof(int), s) == cudaSuccess);
  int value = 42;
  REQUIRE(cudaMemcpyAsync(d, &value, sizeof value, cudaMemcpyHostToDevice, s) == cudaSuccess);
  value = 7;
  int out = 0;
  REQUIRE(cudaMemcpyAsync(&out, d, sizeof out, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  // A copy into pageable memory has completed when it returns.
  CHECK(out == 42);
  REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: cudaMemset of pinned host memory has run when it returns, cudaMemsetAsync not",
          "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  unsigned char* h = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&h), 16) == cudaSuccess);
  REQUIRE(cudaMemset(h, 1, 16) == cudaSuccess);
  CHECK(h[15] == 1);
  REQUIRE(cudaMemsetAsync(h, 2, 16, s) == cudaSuccess);
  CHECK(h[15] == 1);  // deferred execution: waits for the synchronization
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(h[15] == 2);
  REQUIRE(cudaFreeHost(h) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a copy outside a live allocation or in the wrong direction is refused", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* d = nullptr;
  REQUIRE(cudaMallocAsync(&d, 256, s) == cudaSuccess);
  std::vector<char> host(512);
  CHECK(cudaMemcpyAsync(d, host.data(), 512, cudaMemcpyHostToDevice, s) == cudaErrorInvalidValue);
  CHECK(cudaMemcpyAsync(d, host.data(), 256, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidValue);
  CHECK(cudaMemcpyAsync(d, host.data(), 16, static_cast<cudaMemcpyKind>(7), s) ==
        cudaErrorInvalidMemcpyDirection);
  REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  CHECK(cudaMemcpyAsync(host.data(), d, 16, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: device memory is not the host's and is poisoned when allocated and when freed",
          "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  unsigned char* d = nullptr;
  REQUIRE(cudaMallocAsync(reinterpret_cast<void**>(&d), 64, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  unsigned char* view = cuscope::sim::host_view(d, 64);
  CHECK(static_cast<void*>(view) != static_cast<void*>(d));
  CHECK(view[0] == cuscope::sim::poison_byte);
  REQUIRE(cudaMemsetAsync(d, 0, 64, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(view[63] == 0);
  REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  CHECK(view[63] == 0);  // the free has not run yet
  REQUIRE(cudaStreamQuery(s) == cudaSuccess);
  CHECK(view[63] == cuscope::sim::poison_byte);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK_THROWS_AS(cuscope::sim::host_view(reinterpret_cast<int*>(std::uintptr_t{16}), 1),
                  std::out_of_range);
}

#endif

// Memory pools -----------------------------------------------------------------------------------

TEST_CASE("sim: the default pool's release threshold is 0, so a synchronization empties it",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReleaseThreshold) == 0);
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 8 * MiB, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 8 * MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: used bytes are the live allocations and drop when the free is enqueued", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  cudaStream_t s = make_stream();
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&a, 1 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaMallocFromPoolAsync(&b, 3 * MiB, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 4 * MiB);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 4 * MiB);
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 3 * MiB);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) == 4 * MiB);
  REQUIRE(cudaFreeAsync(b, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: high watermarks can only be reset to zero, which sets them to the current value",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  cudaStream_t s = make_stream();
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&a, 2 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaMallocFromPoolAsync(&b, 2 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(b, s) == cudaSuccess);
  std::uint64_t value = 5;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) == 4 * MiB);
  value = 0;
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) == 2 * MiB);
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &value) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemHigh) ==
        pool_attr(pool, cudaMemPoolAttrReservedMemCurrent));
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE(
    "sim: memory above the release threshold goes back at stream, event and device "
    "synchronization",
    "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, 4 * MiB);
  cudaStream_t s = make_stream();
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  const auto fill_and_free = [&] {
    void* p = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, s) == cudaSuccess);
    REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
    REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  };
  SECTION("stream") {
    fill_and_free();
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  }
  SECTION("event") {
    fill_and_free();
    REQUIRE(cudaEventSynchronize(e) == cudaSuccess);
  }
  SECTION("device") {
    fill_and_free();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) <= 4 * MiB);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: memory within the release threshold stays reserved across synchronization",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, 64 * MiB);
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 32 * MiB);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: cudaMemPoolTrimTo keeps at least the bytes asked for", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  cudaStream_t s = make_stream();
  std::vector<void*> blocks(4);
  for (void*& p : blocks)
    REQUIRE(cudaMallocFromPoolAsync(&p, 16 * MiB, pool, s) == cudaSuccess);
  for (void* p : blocks)
    REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const std::uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
  REQUIRE(reserved >= 64 * MiB);
  REQUIRE(cudaMemPoolTrimTo(pool, 20 * MiB) == cudaSuccess);
  const std::uint64_t kept = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(kept >= 20 * MiB);
  CHECK(kept <= reserved);
  // Whether some of the reserve can go without going under 20 MiB depends on the size of the
  // pool's chunks, which CUDA leaves to the driver ("may happen at different granularity").
  if (cuscope::test::simulated) CHECK(kept < reserved);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: cudaMemPoolTrimTo never releases memory behind a live allocation", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 8 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 8 * MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: cudaMemPoolTrimTo cannot release memory whose free has not run", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 256 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);  // before the synchronization
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 256 * MiB);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: a pool keeps memory that a free still to run refers to, even after its reuse",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();  // release threshold 0: every synchronization trims
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 2 * MiB, pool, a) == cudaSuccess);  // a whole chunk
  REQUIRE(cudaFreeAsync(p, a) == cudaSuccess);
  void* q = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, a) == cudaSuccess);
  REQUIRE(q == p);
  // Freed again on b, which does not wait for a: the first free is still queued on a.
  REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 2 * MiB);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: pools reserve memory in chunks of the granularity", "[sim]") {
  device_guard device({1, std::size_t{4} << 30, std::size_t{256} << 20, 2 * MiB});
  cudaMemPool_t pool = make_pool();
  cudaStream_t s = make_stream();
  const std::size_t before = free_bytes();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 1000, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 2 * MiB);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 1024);
  CHECK(before - free_bytes() == 2 * MiB);
  void* q = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&q, 3 * MiB, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 6 * MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(q, s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#endif

#if CUDART_VERSION >= 12020
TEST_CASE("sim: a pool never grows beyond its maxSize", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool(0, 64 * MiB);
  cudaStream_t s = make_stream();
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&a, 48 * MiB, pool, s) == cudaSuccess);
  CHECK(cudaMallocFromPoolAsync(&b, 48 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) <= 64 * MiB);
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(cudaMallocFromPoolAsync(&b, 48 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(b, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}
#endif

TEST_CASE("sim: destroying a pool with live allocations releases its memory after the last free",
          "[sim]") {
  device_guard device;
  const std::size_t before = free_bytes();
  cudaMemPool_t pool = make_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(before - free_bytes() >= 32 * MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CUSCOPE_CHECK_DRIVER_FREE(free_bytes(), before);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: the default pool cannot be destroyed", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
  CHECK(cudaMemPoolDestroy(pool) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaMemPool_t current = nullptr;
  REQUIRE(cudaDeviceGetMemPool(&current, 0) == cudaSuccess);
  CHECK(current == pool);
}

TEST_CASE("sim: cudaMallocAsync allocates from the device's current pool", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  REQUIRE(cudaDeviceSetMemPool(0, pool) == cudaSuccess);
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, MiB, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  cudaMemPool_t fallback = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&fallback, 0) == cudaSuccess);
  REQUIRE(cudaDeviceSetMemPool(0, fallback) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: cudaMemPoolGetAccess reports the access that cudaMemPoolSetAccess granted",
          "[sim]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess);
  if (can == 0) return;
  cudaMemPool_t pool = make_pool(0);
  cudaMemLocation owner{};
  owner.type = cudaMemLocationTypeDevice;
  owner.id = 0;
  cudaMemLocation peer = owner;
  peer.id = 1;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtRead;
  REQUIRE(cudaMemPoolGetAccess(&flags, pool, &peer) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtNone);
  cudaMemAccessDesc grant{};
  grant.location = peer;
  grant.flags = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(cudaMemPoolSetAccess(pool, &grant, 1) == cudaSuccess);
  REQUIRE(cudaMemPoolGetAccess(&flags, pool, &peer) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  REQUIRE(cudaMemPoolGetAccess(&flags, pool, &owner) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: memory freed on one stream is reused on another only in stream order", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  trace t;  // outlives every host function enqueued below
  // One allocation fills a whole chunk, so any reuse must be of the freed block.
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 2 * MiB, pool, a) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, a) == cudaSuccess);

  SECTION("the same stream reuses a free that has not run") {
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, a) == cudaSuccess);
    CHECK(q == p);
    REQUIRE(cudaFreeAsync(q, a) == cudaSuccess);
  }
  SECTION("another stream gets new memory rather than wait for the free") {
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b) == cudaSuccess);
    CHECK(q != p);
    CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 4 * MiB);
    REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
  }
  SECTION("another stream reuses it by waiting for the free when the device is full") {
    void* hog = nullptr;
    REQUIRE(cudaMalloc(&hog, free_bytes()) == cudaSuccess);
    t.add(a, 1);  // runs after the free on a
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b) == cudaSuccess);
    CHECK(q == p);
    t.add(b, 2);
    REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(cuscope::sim::pending_operations() == 1);  // the host function on a
    REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
    REQUIRE(cudaFree(hog) == cudaSuccess);
  }
  SECTION("without internal dependencies another stream gets new memory") {
    int no = 0;
    REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no) ==
            cudaSuccess);
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b) == cudaSuccess);
    CHECK(q != p);
    REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
  }
  SECTION("an event dependency makes the free reusable") {
    int no = 0;
    REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no) ==
            cudaSuccess);
    cudaEvent_t e = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventRecord(e, a) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(b, e, 0) == cudaSuccess);
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b) == cudaSuccess);
    CHECK(q == p);
    REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
    REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  }
  SECTION("a completed free is reused opportunistically") {
    REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
    int no = 0;
    REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no) ==
            cudaSuccess);
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b) == cudaSuccess);
    CHECK(q == p);
    REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
  }
  SECTION("a free that a synchronization saw complete is reused whatever the policies") {
    int no = 0;
    for (const cudaMemPoolAttr policy :
         {cudaMemPoolReuseFollowEventDependencies, cudaMemPoolReuseAllowOpportunistic,
          cudaMemPoolReuseAllowInternalDependencies})
      REQUIRE(cudaMemPoolSetAttribute(pool, policy, &no) == cudaSuccess);
    // b waits for the free; synchronizing b shows the host that the free on a has run.
    cudaEvent_t e = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventRecord(e, a) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(b, e, 0) == cudaSuccess);
    cudaStream_t c = make_stream();
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, c) == cudaSuccess);
    CHECK(q != p);  // the free has not been seen to complete
    REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
    void* r = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&r, 2 * MiB, pool, c) == cudaSuccess);
    CHECK(r == p);
    REQUIRE(cudaFreeAsync(q, c) == cudaSuccess);
    REQUIRE(cudaFreeAsync(r, c) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(c) == cudaSuccess);
    REQUIRE(cudaStreamDestroy(c) == cudaSuccess);
    REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#endif

// Streams and events -----------------------------------------------------------------------------

TEST_CASE("sim: work on one stream runs in the order it was enqueued", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  trace t;
  for (int i = 0; i < 10; ++i)
    t.add(s, i);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: cudaStreamWaitEvent orders work after the event's record", "[sim]") {
  device_guard device;
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  trace t;
  t.add(a, 1);
  REQUIRE(cudaEventRecord(e, a) == cudaSuccess);
  t.add(a, 3);  // after the record: not waited for
  REQUIRE(cudaStreamWaitEvent(b, e, 0) == cudaSuccess);
  t.add(b, 2);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  const std::vector<int> seen = t.seen();
  REQUIRE(seen.size() >= 2);
  CHECK(seen[0] == 1);
  // 3 is on a after the record: on a GPU it may run before 2 or after it, and synchronizing b
  // need not wait for it. The simulated device runs only what b waits for.
  const auto two = std::find(seen.begin(), seen.end(), 2);
  CHECK(two != seen.end());
  if (cuscope::test::simulated) CHECK(seen == std::vector<int>{1, 2});
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  CHECK(t.seen().size() == 3);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
}

TEST_CASE("sim: the legacy default stream waits for blocking streams and they for it", "[sim]") {
  device_guard device;
  cudaStream_t blocking = make_stream(cudaStreamDefault);
  trace t;
  t.add(blocking, 1);
  t.add(cudaStreamLegacy, 2);
  t.add(blocking, 3);
  REQUIRE(cudaStreamSynchronize(blocking) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{1, 2, 3});
  REQUIRE(cudaStreamDestroy(blocking) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

// The per-thread variants of the runtime, as a program compiled with
// CUDA_API_PER_THREAD_DEFAULT_STREAM calls them.
extern "C" cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t, cudaHostFn_t, void*);
extern "C" cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);

TEST_CASE("sim: deferred work runs only when the host synchronizes with it", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  trace t;
  t.add(s, 1);
  CHECK(t.seen().empty());
  CHECK(cuscope::sim::pending_operations() == 1);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{1});
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: eager work runs when it is enqueued", "[sim]") {
  device_guard device({1, std::size_t{4} << 30, std::size_t{256} << 20, 2 * MiB, true});
  cudaStream_t s = make_stream();
  trace t;
  t.add(s, 1);
  CHECK(t.seen() == std::vector<int>{1});
  CHECK(cuscope::sim::pending_operations() == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a non-blocking stream is not ordered with the legacy default stream", "[sim]") {
  device_guard device;
  cudaStream_t quiet = make_stream(cudaStreamNonBlocking);
  trace t;
  t.add(quiet, 1);
  t.add(cudaStreamLegacy, 2);
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{2});
  REQUIRE(cudaStreamSynchronize(quiet) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(quiet) == cudaSuccess);
}

TEST_CASE("sim: the per-thread default stream does not wait for other blocking streams", "[sim]") {
  device_guard device;
  cudaStream_t blocking = make_stream(cudaStreamDefault);
  trace t;
  t.add(blocking, 1);
  t.marks.emplace_back(&t, 2);
  REQUIRE(cudaLaunchHostFunc_ptsz(nullptr, &trace::record, &t.marks.back()) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize_ptsz(nullptr) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{2});
  t.add(cudaStreamLegacy, 3);  // legacy: waits for both
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{2, 1, 3});
  REQUIRE(cudaStreamDestroy(blocking) == cudaSuccess);
}

TEST_CASE("sim: a host function may not call the runtime", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaError_t seen = cudaSuccess;
  REQUIRE(cudaLaunchHostFunc(
              s,
              [](void* p) {
                void* ptr = nullptr;
                *static_cast<cudaError_t*>(p) = cudaMalloc(&ptr, 16);
              },
              &seen) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(seen == cudaErrorNotPermitted);
  (void)cudaGetLastError();  // the host function ran here, on the synchronizing thread
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a destroyed stream finishes its work and its handle becomes invalid", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  trace t;
  t.add(s, 1);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(t.seen().empty());
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(t.seen() == std::vector<int>{1});
}

#endif

TEST_CASE("sim: elapsed time needs two completed events that record timing", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEvent_t untimed = nullptr;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&stop) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  float ms = -1;
  REQUIRE(cudaEventRecord(start, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(stop, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(untimed, s) == cudaSuccess);
  // untimed is recorded after stop: waiting for it waits for both (waiting for stop alone
  // would leave cudaEventQuery(untimed) free to answer cudaErrorNotReady on a GPU).
  REQUIRE(cudaEventSynchronize(untimed) == cudaSuccess);
  REQUIRE(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  CHECK(ms >= 0);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CHECK(cudaEventQuery(untimed) == cudaSuccess);
  REQUIRE(cudaEventDestroy(start) == cudaSuccess);
  REQUIRE(cudaEventDestroy(stop) == cudaSuccess);
  REQUIRE(cudaEventDestroy(untimed) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: cudaEventElapsedTime is not ready before both events have run", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&stop) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorInvalidResourceHandle);  // unrecorded
  (void)cudaGetLastError();
  REQUIRE(cudaEventRecord(start, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(stop, s) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);  // not ready is not an error
  REQUIRE(cudaEventSynchronize(stop) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  REQUIRE(cudaEventDestroy(start) == cudaSuccess);
  REQUIRE(cudaEventDestroy(stop) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

// Control of the simulation -----------------------------------------------------------------------

TEST_CASE("sim: fail_call makes the n-th call from now fail and nothing else", "[sim]") {
  device_guard device;
  cuscope::sim::fail_call(2, cudaErrorMemoryAllocation);
  int n = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 64) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  REQUIRE(cudaMalloc(&p, 64) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK_THROWS_AS(cuscope::sim::fail_call(0, cudaErrorUnknown), std::invalid_argument);
  CHECK_THROWS_AS(cuscope::sim::fail_call(1, cudaSuccess), std::invalid_argument);
}

TEST_CASE("sim: fail_api fails the nth call of one function and rejects unknown names", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cuscope::sim::fail_api("cudaMallocAsync", 2, cudaErrorMemoryAllocation);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMallocAsync(&a, 64, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  CHECK(cudaMallocAsync(&b, 64, s) == cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  CHECK(cuscope::sim::call_count("cudaMallocAsync") == 2);
  CHECK_THROWS_WITH(cuscope::sim::fail_api("cudaMallocAsyncc", 1, cudaErrorUnknown),
                    cuscope::test::contains("'cudaMallocAsyncc' is not a function"));
  cuscope::sim::fail_api("cudaStreamDestroy", 1, cudaErrorUnknown);
  cuscope::sim::clear_faults();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: call_count counts the runtime calls since the reset", "[sim]") {
  device_guard device;
  CHECK(cuscope::sim::call_count() == 0);
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  (void)cudaGetLastError();  // error queries are not counted
  CHECK(cuscope::sim::call_count() == 1);
  CHECK(cuscope::sim::call_count("cudaGetDeviceCount") == 1);
}

TEST_CASE("sim: reset names every allocation and handle still outstanding", "[sim]") {
  device_guard device;
  void* d = nullptr;
  void* h = nullptr;
  REQUIRE(cudaMalloc(&d, 1000) == cudaSuccess);
  REQUIRE(cudaMallocHost(&h, 24) == cudaSuccess);
  cudaStream_t s = make_stream();
  CHECK(cuscope::sim::outstanding_allocations() == 2);
  CHECK(cuscope::sim::outstanding_bytes() == 1024);
  const std::string report = cuscope::sim::outstanding_report();
  CHECK_THAT(report, cuscope::test::contains("1000 bytes"));
  CHECK_THAT(report, cuscope::test::contains("cudaMalloc"));
  CHECK_THAT(report, cuscope::test::contains("pinned host allocation"));
  CHECK_THAT(report, cuscope::test::contains("is not destroyed"));
  CHECK_THROWS_WITH(cuscope::sim::reset(), cuscope::test::contains("1000 bytes"));
  CHECK(cuscope::sim::outstanding_allocations() == 0);
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("sim: reset rejects an impossible configuration", "[sim]") {
  device_guard device;
  cuscope::sim::device_config c;
  c.pool_granularity_bytes = 3000;
  CHECK_THROWS_AS(cuscope::sim::reset(c), std::invalid_argument);
  c = {};
  c.total_bytes = c.context_bytes;
  CHECK_THROWS_AS(cuscope::sim::reset(c), std::invalid_argument);
}

TEST_CASE("sim: a process with no device reports cudaErrorNoDevice", "[sim]") {
  device_guard device({0});
  int n = -1;
  CHECK(cudaGetDeviceCount(&n) == cudaErrorNoDevice);
  CHECK(n == 0);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorNoDevice);
  (void)cudaGetLastError();
}

TEST_CASE("sim: the runtime can be called from several threads at once", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) ++failures;
      for (int i = 0; i < 200; ++i) {
        void* p = nullptr;
        if (cudaMallocFromPoolAsync(&p, 4096 + static_cast<std::size_t>(i), pool, s) !=
                cudaSuccess ||
            cudaMemsetAsync(p, i, 16, s) != cudaSuccess || cudaFreeAsync(p, s) != cudaSuccess)
          ++failures;
        if (i % 50 == 0 && cudaStreamSynchronize(s) != cudaSuccess) ++failures;
      }
      if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess)
        ++failures;
    });
  }
  for (std::thread& t : threads)
    t.join();
  CHECK(failures == 0);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#endif
