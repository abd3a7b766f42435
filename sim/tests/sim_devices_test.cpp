// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for devices and errors, one test case per
// rule (docs/simulated-device.md). Rules that hold on any CUDA device also run against the real
// runtime; the simulation's own controls are tested in the simulated build only.
#include <cuda_runtime_api.h>

#include <string>
#include <thread>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

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

TEST_CASE("sim: the attributes that common CUDA code asks for are answered", "[sim]") {
  device_guard device;
  // NVIDIA's helper_cuda.h asks for the compute mode, CUB for the memory clock rate.
  int mode = -1;
  REQUIRE(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0) == cudaSuccess);
  CHECK(mode == cudaComputeModeDefault);
  int clock = 0;
  REQUIRE(cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, 0) == cudaSuccess);
  CHECK(clock > 0);
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(prop.major == major);
  int optin = 0;
  REQUIRE(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) ==
          cudaSuccess);
  CHECK(static_cast<std::size_t>(optin) == prop.sharedMemPerBlockOptin);
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrComputeMode, -1) == cudaErrorInvalidDevice);
  CHECK(cudaDeviceGetAttribute(nullptr, cudaDevAttrComputeMode, 0) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("sim: every error code has its runtime name and message", "[sim]") {
  CHECK(std::string(cudaGetErrorName(cudaErrorStreamCaptureInvalidated)) ==
        "cudaErrorStreamCaptureInvalidated");
  CHECK(std::string(cudaGetErrorString(cudaErrorStreamCaptureInvalidated)) ==
        "operation failed due to a previous error during capture");
  CHECK(std::string(cudaGetErrorName(cudaErrorNotReady)) == "cudaErrorNotReady");
  CHECK(std::string(cudaGetErrorString(cudaErrorNotReady)) == "device not ready");
  CHECK(std::string(cudaGetErrorName(cudaErrorMissingConfiguration)) ==
        "cudaErrorMissingConfiguration");
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("sim: cudaDeviceGetAttribute knows every attribute of the CUDA 12.9 to 13.5 headers",
          "[sim]") {
  device_guard device({2});
  // 131 numbers name an attribute in those headers; the gaps and the reserved numbers do not.
  int known = 0;
  for (int attr = 0; attr < 256; ++attr) {
    int value = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&value, static_cast<cudaDeviceAttr>(attr), 0);
    if (e == cudaSuccess) {
      ++known;
    } else {
      CHECK(e == cudaErrorInvalidValue);
    }
  }
  (void)cudaGetLastError();
  CHECK(known == 131);
  int value = -1;
  CHECK(cudaDeviceGetAttribute(&value, static_cast<cudaDeviceAttr>(92), 0) ==
        cudaErrorInvalidValue);  // cudaDevAttrReserved92
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrPciBusId, 1) == cudaSuccess);
  CHECK(value == 1);
  REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 1) == cudaSuccess);
  CHECK(value == 132);
}

TEST_CASE("sim: cudaGetErrorName knows every code of the CUDA 12.9 to 13.5 headers", "[sim]") {
  int known = 0;
  for (int code = 0; code < 1100; ++code) {
    const std::string name = cudaGetErrorName(static_cast<cudaError_t>(code));
    const std::string text = cudaGetErrorString(static_cast<cudaError_t>(code));
    if (name == "unrecognized error code") {
      CHECK(text == name);
      continue;
    }
    ++known;
    CHECK(name.rfind("cuda", 0) == 0);
    CHECK(!text.empty());
  }
  CHECK(known == 138);  // 133 in 12.9 to 13.0, five more by 13.5
  CHECK(std::string(cudaGetErrorName(static_cast<cudaError_t>(919))) == "cudaErrorFabricNotReady");
}

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

TEST_CASE("sim: peer access is enabled once per pair and disabled only when enabled", "[sim]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 0, 1) == cudaSuccess);
  REQUIRE(can == 1);
  CHECK(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorInvalidDevice);  // itself
  CHECK(cudaDeviceEnablePeerAccess(1, 1) == cudaErrorInvalidValue);   // flags must be 0
  CHECK(cudaDeviceDisablePeerAccess(1) == cudaErrorPeerAccessNotEnabled);
  (void)cudaGetLastError();
  REQUIRE(cudaDeviceEnablePeerAccess(1, 0) == cudaSuccess);
  CHECK(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorPeerAccessAlreadyEnabled);
  (void)cudaGetLastError();
  REQUIRE(cudaDeviceDisablePeerAccess(1) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED && CUDART_VERSION >= 13000

TEST_CASE("sim: cudaMemGetDefaultMemPool and cudaMemSetMemPool name a device's pools", "[sim]") {
  device_guard device;
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = 0;
  cudaMemPool_t by_location = nullptr;
  cudaMemPool_t by_device = nullptr;
  REQUIRE(cudaMemGetDefaultMemPool(&by_location, &gpu, cudaMemAllocationTypePinned) == cudaSuccess);
  REQUIRE(cudaDeviceGetDefaultMemPool(&by_device, 0) == cudaSuccess);
  CHECK(by_location == by_device);
  cudaMemPool_t pool = make_pool();
  REQUIRE(cudaMemSetMemPool(&gpu, cudaMemAllocationTypePinned, pool) == cudaSuccess);
  cudaMemPool_t current = nullptr;
  REQUIRE(cudaMemGetMemPool(&current, &gpu, cudaMemAllocationTypePinned) == cudaSuccess);
  CHECK(current == pool);
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  CHECK(cudaMemGetDefaultMemPool(&current, &host, cudaMemAllocationTypePinned) ==
        cudaErrorNotSupported);
  gpu.id = 5;
  CHECK(cudaMemGetMemPool(&current, &gpu, cudaMemAllocationTypePinned) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  REQUIRE(cudaDeviceSetMemPool(0, by_device) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

#endif
