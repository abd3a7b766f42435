// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for host-located memory pools
// (docs/simulated-device.md, "Memory pools"). On a GPU (gpu.sim_host_pools) they run where the
// device reports host memory pools supported.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

namespace {

// cudaMemLocationTypeHost from the CUDA 13.0 headers on; host NUMA node 0 before.
cudaMemLocation host_location() {
  cudaMemLocation l{};
#if CUDART_VERSION >= 13000
  l.type = cudaMemLocationTypeHost;
  l.id = 0;
#else
  l.type = cudaMemLocationTypeHostNuma;
  l.id = 0;
#endif
  return l;
}

bool host_pools_supported() {
  int supported = 0;
#if CUDART_VERSION >= 13000
  const cudaDeviceAttr attr = cudaDevAttrHostMemoryPoolsSupported;
#else
  const cudaDeviceAttr attr = cudaDevAttrHostNumaMemoryPoolsSupported;
#endif
  if (cudaDeviceGetAttribute(&supported, attr, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return supported != 0;
}

cudaMemPool_t make_host_pool() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = host_location();
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  return pool;
}

}  // namespace

TEST_CASE("sim: a host-located pool serves pinned host memory in stream order, with statistics",
          "[sim][pools]") {
  device_guard device;
  if (!host_pools_supported()) {
    WARN("skipped: the device does not support host memory pools");
    return;
  }
  const std::size_t free_before = free_bytes();
  cudaMemPool_t pool = make_host_pool();
  if (cuscope::test::simulated) {
    // cudaMemPoolAttrLocationType (0xC), named from the CUDA 13.2 headers on.
    cudaMemLocationType type = cudaMemLocationTypeDevice;
    REQUIRE(cudaMemPoolGetAttribute(pool, static_cast<cudaMemPoolAttr>(0xC), &type) == cudaSuccess);
    CHECK(type == host_location().type);
  }
  cudaStream_t s = make_stream();
  int* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&p), 1024 * sizeof(int), pool, s) ==
          cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  // Host memory: the host reaches it at its address, and device memory is not taken.
  for (int i = 0; i < 1024; ++i)
    p[i] = i;
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 1024 * sizeof(int));
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 1024 * sizeof(int));
  CUSCOPE_CHECK_DRIVER_FREE(free_bytes(), free_before);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeHost);
  // A copy to the device and back, once a device may read it.
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(cudaMemPoolSetAccess(pool, &access, 1) == cudaSuccess);
  int* d = nullptr;
  REQUIRE(cudaMallocAsync(reinterpret_cast<void**>(&d), 1024 * sizeof(int), s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(d, p, 1024 * sizeof(int), cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 0, 1024 * sizeof(int), s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(p, d, 1024 * sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(p[0] == 0);
  CHECK(p[1023] == 1023);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a host-located pool is reachable from the host, and from devices once granted",
          "[sim][pools]") {
  device_guard device;
  if (!host_pools_supported()) {
    WARN("skipped: the device does not support host memory pools");
    return;
  }
  cudaMemPool_t pool = make_host_pool();
  cudaMemLocation device0{};
  device0.type = cudaMemLocationTypeDevice;
  device0.id = 0;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(cudaMemPoolGetAccess(&flags, pool, &device0) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtNone);
  cudaMemAccessDesc access{};
  access.location = device0;
  access.flags = cudaMemAccessFlagsProtRead;
  REQUIRE(cudaMemPoolSetAccess(pool, &access, 1) == cudaSuccess);
  REQUIRE(cudaMemPoolGetAccess(&flags, pool, &device0) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtRead);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: host pools refuse HostNumaCurrent and export handle types", "[sim][pools]") {
  device_guard device;
  if (!host_pools_supported()) {
    WARN("skipped: the device does not support host memory pools");
    return;
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeHostNumaCurrent;
  cudaMemPool_t pool = nullptr;
  // "Specifying cudaMemLocationTypeHostNumaCurrent ... will result in cudaErrorInvalidValue."
  CHECK(cudaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
#if CUDART_VERSION >= 13000
  // "Pools created with the type cudaMemLocationTypeHost are not IPC capable."
  props.location = host_location();
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  CHECK(cudaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
#endif
}
