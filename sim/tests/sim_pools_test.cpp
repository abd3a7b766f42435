// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for memory pools and the reuse of freed
// memory, one test case per rule (docs/simulated-device.md). Rules that hold on any CUDA device
// also run against the real runtime; the simulation's own controls are tested in the simulated
// build only.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

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
    REQUIRE(cudaMallocFromPoolAsync(&p, 128 * MiB, pool, s) == cudaSuccess);
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
  // At least the threshold stays, and at most what the pool's release unit rounds it up to: a GPU
  // releases in pages of a few MiB or in 32 MiB units, the simulation in 32 MiB units.
  const std::uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(reserved >= 4 * MiB);
  CHECK(reserved <= 32 * MiB);
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

TEST_CASE("sim: a synchronization keeps at least the release threshold, trimming in units",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, 100 * MiB);
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 256 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  // Not the whole 256 MiB chunk, not below 100 MiB: the fewest 32 MiB units above it.
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 128 * MiB);
  // The memory given back is gone: the rest of the chunk's addresses are no longer device memory.
  cudaPointerAttributes attrs{};
  REQUIRE(cudaPointerGetAttributes(&attrs, static_cast<char*>(p) + 200 * MiB) == cudaSuccess);
  CHECK(attrs.type == cudaMemoryTypeUnregistered);
  REQUIRE(cudaPointerGetAttributes(&attrs, static_cast<char*>(p) + 100 * MiB) == cudaSuccess);
  CHECK(attrs.type == cudaMemoryTypeDevice);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: cudaMemPoolTrimTo gives back free units around a live allocation", "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  cudaStream_t s = make_stream();
  void* big = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&big, 128 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(big, s) == cudaSuccess);
  void* live = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&live, 1 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 32 * MiB);
  // The live allocation keeps its unit and its data.
  std::vector<unsigned char> in(1 * MiB, 7), out(1 * MiB, 0);
  REQUIRE(cudaMemcpy(live, in.data(), in.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(out.data(), live, out.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(out == in);
  REQUIRE(cudaFreeAsync(live, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: free memory in pieces is remapped for a larger request instead of growing",
          "[sim]") {
  // gpu-evidence section 7: A, B and C, the first and third freed, then a request as large as
  // both together.
  device_guard device;
  cudaMemPool_t pool = make_pool();
  set_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  cudaStream_t s = make_stream();
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&a, 32 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaMallocFromPoolAsync(&b, 32 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaMallocFromPoolAsync(&c, 32 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(c, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 96 * MiB);
  void* d = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&d, 64 * MiB, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 96 * MiB);
  // The remapped range is one allocation: a copy over all of it works.
  std::vector<unsigned char> in(64 * MiB, 3);
  CHECK(cudaMemcpy(d, in.data(), in.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaFreeAsync(b, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

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
  REQUIRE(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, a) == cudaSuccess);  // a whole unit
  REQUIRE(cudaFreeAsync(p, a) == cudaSuccess);
  void* q = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, a) == cudaSuccess);
  REQUIRE(q == p);
  // Freed again on b, which does not wait for a: the first free is still queued on a.
  REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 32 * MiB);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: pools reserve memory in units of the granularity, 32 MiB by default", "[sim]") {
  device_guard device({1, std::size_t{4} << 30, std::size_t{256} << 20,
                       cuscope::sim::device_config{}.pool_granularity_bytes});
  CHECK(cuscope::sim::config().pool_granularity_bytes == 32 * MiB);
  cudaMemPool_t pool = make_pool();
  cudaStream_t s = make_stream();
  const std::size_t before = free_bytes();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 1000, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 32 * MiB);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 1024);
  CHECK(before - free_bytes() == 32 * MiB);
  // Small requests are carved from the reserve without growth.
  void* q = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&q, 3 * MiB, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 32 * MiB);
  // A request that does not fit grows the pool by whole units.
  void* r = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&r, 48 * MiB, pool, s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 96 * MiB);
  for (void* x : {p, q, r})
    REQUIRE(cudaFreeAsync(x, s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: the pool attributes of CUDA 13.2 and 13.4 describe the pool and are read-only",
          "[sim]") {
  device_guard device({2});
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 1;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.maxSize = 40 * MiB;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  // By number: the enumerators exist only in the headers of CUDA 13.2 and newer.
  const auto attr = [](int n) { return static_cast<cudaMemPoolAttr>(n); };
  cudaMemAllocationType type{};
  REQUIRE(cudaMemPoolGetAttribute(pool, attr(0x9), &type) == cudaSuccess);
  CHECK(type == cudaMemAllocationTypePinned);
  cudaMemAllocationHandleType handles{};
  REQUIRE(cudaMemPoolGetAttribute(pool, attr(0xA), &handles) == cudaSuccess);
  CHECK(handles == cudaMemHandleTypePosixFileDescriptor);
  int id = -5;
  REQUIRE(cudaMemPoolGetAttribute(pool, attr(0xB), &id) == cudaSuccess);
  CHECK(id == 1);
  cudaMemLocationType where{};
  REQUIRE(cudaMemPoolGetAttribute(pool, attr(0xC), &where) == cudaSuccess);
  CHECK(where == cudaMemLocationTypeDevice);
  CHECK(pool_attr(pool, attr(0xD)) == 64 * MiB);  // rounded up to whole 32 MiB units
  int flag = -5;
  REQUIRE(cudaMemPoolGetAttribute(pool, attr(0xE), &flag) == cudaSuccess);
  CHECK(flag == 0);
  REQUIRE(cudaMemPoolGetAttribute(pool, attr(0xF), &flag) == cudaSuccess);
  CHECK(flag == -1);
  cudaMemPool_t fallback = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&fallback, 0) == cudaSuccess);
  CHECK(pool_attr(fallback, attr(0xD)) == 0);  // no maximum
  std::uint64_t value = 0;
  for (int n = 0x5; n <= 0xF; ++n) {
    if (n == 0x6 || n == 0x8) continue;  // the watermarks reset to zero
    INFO("attribute " << n);
    CHECK(cudaMemPoolSetAttribute(pool, attr(n), &value) == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  }
  CHECK(cudaMemPoolGetAttribute(pool, attr(0), &value) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: pools count each allocation rounded up to pool_rounding_bytes", "[sim]") {
  for (const std::size_t rounding : {std::size_t{256}, std::size_t{512}, std::size_t{4096}}) {
    INFO("pool_rounding_bytes " << rounding);
    cuscope::sim::device_config c;
    c.pool_rounding_bytes = rounding;
    cuscope::sim::reset(c);
    cudaMemPool_t pool = make_pool();
    cudaStream_t s = make_stream();
    void* a = nullptr;
    void* b = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&a, 600, pool, s) == cudaSuccess);
    REQUIRE(cudaMallocFromPoolAsync(&b, 512, pool, s) == cudaSuccess);
    const std::size_t six_hundred = (600 + rounding - 1) / rounding * rounding;
    CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) ==
          six_hundred + std::max<std::size_t>(512, rounding));
    CHECK(reinterpret_cast<std::uintptr_t>(a) % rounding == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(b) % rounding == 0);
    REQUIRE(cudaFreeAsync(a, s) == cudaSuccess);
    REQUIRE(cudaFreeAsync(b, s) == cudaSuccess);
    CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
    REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  }
  for (const std::size_t bad :
       {std::size_t{0}, std::size_t{128}, std::size_t{768}, std::size_t{128} << 10}) {
    cuscope::sim::device_config c;
    c.pool_rounding_bytes = bad;
    CHECK_THROWS_WITH(cuscope::sim::reset(c), cuscope::test::contains("pool_rounding_bytes"));
  }
  cuscope::sim::reset();
}

TEST_CASE("sim: cudaMallocAsync of 0 bytes keeps the pointer as it was, or writes nullptr",
          "[sim]") {
  int marker = 0;
  void* const before = &marker;
  for (const bool keeps : {true, false}) {
    cuscope::sim::device_config c;
    c.zero_byte_async_keeps_pointer = keeps;
    cuscope::sim::reset(c);
    cudaMemPool_t pool = make_pool();
    cudaStream_t s = make_stream();
    void* p = before;
    REQUIRE(cudaMallocAsync(&p, 0, s) == cudaSuccess);
    CHECK(p == (keeps ? before : nullptr));
    p = before;
    REQUIRE(cudaMallocFromPoolAsync(&p, 0, pool, s) == cudaSuccess);
    CHECK(p == (keeps ? before : nullptr));
    CHECK(cuscope::sim::outstanding_allocations() == 0);
    CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
    REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
    REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  }
  cuscope::sim::reset();
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

#if CUDART_VERSION >= 12020
TEST_CASE("sim: maxSize is rounded up, and a refused allocation leaves nullptr in the pointer",
          "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool(0, MiB);
  cudaStream_t s = make_stream();
  void* small = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&small, 42, pool, s) == cudaSuccess);
  void* again = nullptr;  // a 1 MiB limit held exactly would refuse this one
  REQUIRE(cudaMallocFromPoolAsync(&again, MiB, pool, s) == cudaSuccess);
  void* big = small;
  CHECK(cudaMallocFromPoolAsync(&big, 33 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(big == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
#  if CUDART_VERSION >= 13020
  CHECK(pool_attr(pool, cudaMemPoolAttrMaxPoolSize) >= MiB);
#  endif
  REQUIRE(cudaFreeAsync(small, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(again, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}
#endif

TEST_CASE("sim: cudaMallocAsync of 0 bytes succeeds, and cudaFreeAsync of nullptr too", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, 0, s) == cudaSuccess);
  CHECK(cudaFreeAsync(nullptr, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

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

TEST_CASE("sim: cudaMemPoolCreate refuses a device that does not exist with cudaErrorInvalidValue",
          "[sim]") {
  device_guard device;
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  for (const int id : {count, 9999, -1}) {
    INFO("location.id " << id);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = id;
    cudaMemPool_t pool = nullptr;
    const cudaError_t e = cudaMemPoolCreate(&pool, &props);
    // The reference lists cudaErrorInvalidValue; a GPU's code is asked by the driver probe.
    if (cuscope::test::simulated) {
      CHECK(e == cudaErrorInvalidValue);
    } else {
      CHECK(e != cudaSuccess);
    }
    CHECK(cudaGetLastError() == e);
  }
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
  REQUIRE(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, a) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, a) == cudaSuccess);

  SECTION("the same stream reuses a free that has not run") {
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, a) == cudaSuccess);
    CHECK(q == p);
    REQUIRE(cudaFreeAsync(q, a) == cudaSuccess);
  }
  SECTION("another stream gets new memory rather than wait for the free") {
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, b) == cudaSuccess);
    CHECK(q != p);
    CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 64 * MiB);
    REQUIRE(cudaFreeAsync(q, b) == cudaSuccess);
  }
  SECTION("another stream reuses it by waiting for the free when the device is full") {
    void* hog = nullptr;
    REQUIRE(cudaMalloc(&hog, free_bytes()) == cudaSuccess);
    t.add(a, 1);  // runs after the free on a
    void* q = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, b) == cudaSuccess);
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
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, b) == cudaSuccess);
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
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, b) == cudaSuccess);
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
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, b) == cudaSuccess);
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
    REQUIRE(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, c) == cudaSuccess);
    CHECK(q != p);  // the free has not been seen to complete
    REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
    void* r = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&r, 32 * MiB, pool, c) == cudaSuccess);
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

TEST_CASE(
    "sim: a query or a blocking copy does not apply the release threshold; synchronizing any "
    "stream of the device does",
    "[sim]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  cudaStream_t a = make_stream();
  cudaStream_t unrelated = make_stream();
  void* target = nullptr;
  REQUIRE(cudaMalloc(&target, 4096) == cudaSuccess);
  set_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, a) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, a) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  set_threshold(pool, 0);
  CHECK(cudaStreamQuery(a) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 32 * MiB);
  unsigned char bytes[4096] = {};
  REQUIRE(cudaMemcpy(target, bytes, sizeof bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 32 * MiB);
  // A stream that never touched the pool: its synchronization releases all the same.
  REQUIRE(cudaStreamSynchronize(unrelated) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaFree(target) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(unrelated) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: memory freed on another device's stream goes back at that stream's synchronization",
          "[sim]") {
  // CUDA's streamOrderedAllocationP2P sample frees device 0's memory on a device 1 stream.
  device_guard device({2});
  cudaMemPool_t pool = make_pool(0);
  cudaStream_t s0 = make_stream();
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s1 = make_stream();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4 * MiB, pool, s0) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s0) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s1) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s1) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s0) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#endif
