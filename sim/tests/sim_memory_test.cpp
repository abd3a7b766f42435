// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for memory, one test case per rule
// (docs/simulated-device.md). Rules that hold on any CUDA device also run against the real
// runtime; the simulation's own controls are tested in the simulated build only.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

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
  CHECK(view[63] == 0);                              // the free has not run yet
  REQUIRE(cudaStreamQuery(s) == cudaErrorNotReady);  // the query starts the free
  REQUIRE(cudaGetLastError() == cudaErrorNotReady);
  CHECK(view[63] == cuscope::sim::poison_byte);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK_THROWS_AS(cuscope::sim::host_view(reinterpret_cast<int*>(std::uintptr_t{16}), 1),
                  std::out_of_range);
}

TEST_CASE("sim: cudaFree of stream-ordered memory does not wait; earlier work faults", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 4096, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 1, 4096, s) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(cuscope::sim::pending_operations() == 2);  // cudaFree ran nothing
  CHECK(cuscope::sim::outstanding_allocations() == 0);
  CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  const std::string report = cuscope::sim::fault_report();
  CHECK(report.find("a memset of 4096 bytes") != std::string::npos);
  CHECK(report.find("cudaFree does not wait for enqueued work") != std::string::npos);
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);  // the stream could not be destroyed
  CHECK(cuscope::sim::fault_report().empty());
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("sim: cudaFree after a synchronization, or of memory no work touches, is clean",
          "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* p = nullptr;
  void* q = nullptr;
  REQUIRE(cudaMallocAsync(&p, 4096, s) == cudaSuccess);
  REQUIRE(cudaMallocAsync(&q, 4096, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 1, 4096, s) == cudaSuccess);
  REQUIRE(cudaFree(q) == cudaSuccess);  // its allocation has not run either: not an access
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(cuscope::sim::fault_report().empty());
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: free_synchronizes restores a cudaFree that runs the device's work first", "[sim]") {
  device_guard device;
  cuscope::sim::device_config c = cuscope::sim::config();
  c.free_synchronizes = true;
  cuscope::sim::reset(c);
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 4096, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 1, 4096, s) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(cuscope::sim::pending_operations() == 0);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cuscope::sim::fault_report().empty());
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: cudaFreeHost and cudaHostUnregister do not wait; earlier copies fault", "[sim]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* d = nullptr;
  void* h = nullptr;
  REQUIRE(cudaMalloc(&d, 256) == cudaSuccess);
  REQUIRE(cudaMallocHost(&h, 256) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(d, h, 256, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaFreeHost(h) == cudaSuccess);
  CHECK(cuscope::sim::pending_operations() == 1);
  CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  CHECK(cuscope::sim::fault_report().find("cudaFreeHost does not wait") != std::string::npos);
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);

  cuscope::sim::device_config c = cuscope::sim::config();
  c.free_host_synchronizes = true;
  cuscope::sim::reset(c);
  s = make_stream();
  std::vector<unsigned char> registered(256, 7);
  REQUIRE(cudaMalloc(&d, 256) == cudaSuccess);
  REQUIRE(cudaHostRegister(registered.data(), 256, cudaHostRegisterDefault) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(d, registered.data(), 256, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaHostUnregister(registered.data()) == cudaSuccess);  // ran the copy first
  CHECK(cuscope::sim::pending_operations() == 0);
  unsigned char back = 0;
  REQUIRE(cudaMemcpy(&back, d, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == 7);
  CHECK(cuscope::sim::fault_report().empty());
  REQUIRE(cudaFree(d) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: managed memory is reachable from the host and in copies, and cudaFree frees it",
          "[sim]") {
  device_guard device;
  int* m = nullptr;
  CHECK(cudaMallocManaged(reinterpret_cast<void**>(&m), 0) == cudaErrorInvalidValue);
  CHECK(cudaMallocManaged(reinterpret_cast<void**>(&m), 64, 4) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaMallocManaged(reinterpret_cast<void**>(&m), 16 * sizeof(int)) == cudaSuccess);
  for (int i = 0; i < 16; ++i)
    m[i] = i;
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, m) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeManaged);
  CHECK(a.devicePointer == m);
  CHECK(a.hostPointer == m);
  int* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 16 * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemcpy(d, m, 16 * sizeof(int), cudaMemcpyDeviceToDevice) == cudaSuccess);
  int back[16] = {};
  REQUIRE(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back[15] == 15);
  CHECK(cudaFreeHost(m) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaFree(m) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
}

TEST_CASE("sim: cudaMemPrefetchAsync and cudaMemAdvise take managed memory only", "[sim]") {
  device_guard device;
  void* m = nullptr;
  void* d = nullptr;
  REQUIRE(cudaMallocManaged(&m, 4096) == cudaSuccess);
  REQUIRE(cudaMalloc(&d, 4096) == cudaSuccess);
  cudaStream_t s = make_stream();
#  if CUDART_VERSION >= 13000
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = 0;
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  CHECK(cudaMemPrefetchAsync(m, 4096, gpu, 0, s) == cudaSuccess);
  CHECK(cudaMemPrefetchAsync(m, 4096, host, 0, s) == cudaSuccess);
  CHECK(cudaMemAdvise(m, 4096, cudaMemAdviseSetReadMostly, gpu) == cudaSuccess);
  CHECK(cudaMemPrefetchAsync(d, 4096, gpu, 0, s) == cudaErrorInvalidValue);
  CHECK(cudaMemAdvise(d, 4096, cudaMemAdviseSetReadMostly, gpu) == cudaErrorInvalidValue);
  gpu.id = 7;
  CHECK(cudaMemPrefetchAsync(m, 4096, gpu, 0, s) == cudaErrorInvalidDevice);
#  else
  CHECK(cudaMemPrefetchAsync(m, 4096, 0, s) == cudaSuccess);
  CHECK(cudaMemPrefetchAsync(m, 4096, cudaCpuDeviceId, s) == cudaSuccess);
  CHECK(cudaMemAdvise(m, 4096, cudaMemAdviseSetReadMostly, 0) == cudaSuccess);
  CHECK(cudaMemPrefetchAsync(d, 4096, 0, s) == cudaErrorInvalidValue);
  CHECK(cudaMemAdvise(d, 4096, cudaMemAdviseSetReadMostly, 0) == cudaErrorInvalidValue);
  CHECK(cudaMemPrefetchAsync(m, 4096, 7, s) == cudaErrorInvalidDevice);
#  endif
  (void)cudaGetLastError();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaFree(m) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
}

TEST_CASE("sim: cudaMallocPitch pads rows to 512 bytes and cudaMemcpy2D copies row by row",
          "[sim]") {
  device_guard device;
  void* d = nullptr;
  std::size_t pitch = 0;
  REQUIRE(cudaMallocPitch(&d, &pitch, 100, 4) == cudaSuccess);
  CHECK(pitch == 512);
  unsigned char in[4][100];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 100; ++c)
      in[r][c] = static_cast<unsigned char>(r * 10 + c % 10);
  REQUIRE(cudaMemcpy2D(d, pitch, in, 100, 100, 4, cudaMemcpyHostToDevice) == cudaSuccess);
  unsigned char out[4][100] = {};
  cudaStream_t s = make_stream();
  REQUIRE(cudaMemcpy2DAsync(out, 100, d, pitch, 100, 4, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(out[3][99] == 39);
  CHECK(out[1][5] == 15);
  CHECK(cudaMemcpy2D(d, pitch, in, 100, 101, 4, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidPitchValue);  // wider than the source rows
  CHECK(cudaMemcpy2D(d, pitch, in, 100, 100, 5, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);  // past the allocation
  (void)cudaGetLastError();
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
}

TEST_CASE("sim: cudaMemcpyPeer copies between the memory of two devices", "[sim]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  int* a = nullptr;
  int* b = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&a), sizeof(int)) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&b), sizeof(int)) == cudaSuccess);
  const int value = 42;
  REQUIRE(cudaMemcpy(a, &value, sizeof value, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpyPeer(b, 1, a, 0, sizeof(int)) == cudaSuccess);
  CHECK(cudaMemcpyPeer(b, 0, a, 0, sizeof(int)) == cudaErrorInvalidValue);  // b is device 1's
  CHECK(cudaMemcpyPeerAsync(b, 1, a, 9, sizeof(int), nullptr) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  int back = 0;
  REQUIRE(cudaMemcpy(&back, b, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == 42);
  REQUIRE(cudaFree(b) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaFree(a) == cudaSuccess);
}

TEST_CASE("sim: a second free, a free inside an allocation and a foreign free are named", "[sim]") {
  device_guard device;
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 4096, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  CHECK(cuscope::sim::misuse_report().empty());
  CHECK(cudaFreeAsync(p, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  std::string report = cuscope::sim::misuse_report();
  CHECK(report.find("cudaFreeAsync(") != std::string::npos);
  CHECK(report.find("a second free of the 4096 bytes that cudaMallocAsync") != std::string::npos);
  void* m = nullptr;
  REQUIRE(cudaMalloc(&m, 1024) == cudaSuccess);
  CHECK(cudaFree(static_cast<char*>(m) + 16) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  report = cuscope::sim::misuse_report();
  CHECK(report.find("16 bytes into the 1024 bytes that cudaMalloc") != std::string::npos);
  REQUIRE(cudaFree(m) == cudaSuccess);
  CHECK(cudaFree(m) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  int local = 0;
  CHECK(cudaFree(&local) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  report = cuscope::sim::misuse_report();
  CHECK(report.find("cudaFree(") != std::string::npos);
  CHECK(report.find("that cudaMalloc (call #") != std::string::npos);
  CHECK(report.find("not device memory that the simulated runtime allocated") != std::string::npos);
  // An address allocated again is a new allocation: its free is no misuse.
  const std::string before = cuscope::sim::misuse_report();
  void* again = nullptr;
  REQUIRE(cudaMalloc(&again, 1024) == cudaSuccess);
  REQUIRE(cudaFree(again) == cudaSuccess);
  CHECK(cuscope::sim::misuse_report() == before);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

#endif
