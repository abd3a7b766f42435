// SPDX-License-Identifier: Apache-2.0
// nvcc's entry points and kernel launches on the simulated device (docs/simulated-device.md,
// "Kernels and nvcc's entry points"). This translation unit is plain C++: it makes the calls that
// nvcc's generated code makes (registration before main, push and pop of the call configuration,
// the launch), with ordinary functions standing for nvcc's host stubs. tests/nvcc/ does the same
// with code that nvcc compiled.
#include <cuda_runtime_api.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

#if CUSCOPE_TEST_SIMULATED

extern "C" {
void** CUDARTAPI __cudaRegisterFatBinary(void* fat_cubin);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void** module);
void CUDARTAPI __cudaUnregisterFatBinary(void** module);
void CUDARTAPI __cudaRegisterFunction(void** module, const char* host_function,
                                      char* device_function, const char* device_name,
                                      int thread_limit, uint3* tid, uint3* bid, dim3* block,
                                      dim3* grid, int* warp_size);
void CUDARTAPI __cudaRegisterManagedVar(void** module, void** host_variable_slot,
                                        char* device_address, const char* device_name, int ext,
                                        std::size_t size, int constant, int global);
unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 grid, dim3 block, std::size_t shared_bytes,
                                               CUstream_st* stream);
cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3* grid, dim3* block, std::size_t* shared_bytes,
                                                 void* stream);
cudaError_t CUDARTAPI __cudaGetKernel(void** kernel, const void* host_function);
cudaError_t CUDARTAPI __cudaLaunchKernel(void* kernel, dim3 grid, dim3 block, void** args,
                                         std::size_t shared_bytes, cudaStream_t stream);
}

namespace {

// Stand for nvcc's host stubs: what host code names when it names a kernel.
void scale(float*, int, float) {}
void unnamed(int) {}
void never_registered(int) {}

// What nvcc's generated code registers before main for a translation unit with those kernels.
struct fake_module {
  void** handle = __cudaRegisterFatBinary(nullptr);
  fake_module() {
    __cudaRegisterFunction(handle, reinterpret_cast<const char*>(&scale), nullptr, "_Z5scalePfif",
                           -1, nullptr, nullptr, nullptr, nullptr, nullptr);
    __cudaRegisterFunction(handle, reinterpret_cast<const char*>(&unnamed), nullptr, "_Z7unnamedi",
                           -1, nullptr, nullptr, nullptr, nullptr, nullptr);
    __cudaRegisterFatBinaryEnd(handle);
  }
  ~fake_module() { __cudaUnregisterFatBinary(handle); }
  fake_module(const fake_module&) = delete;
  fake_module& operator=(const fake_module&) = delete;
};

const void* address(void (*f)(float*, int, float)) {
  return reinterpret_cast<const void*>(f);
}
const void* address(void (*f)(int)) {
  return reinterpret_cast<const void*>(f);
}

// A launch as nvcc 13's host stub makes it for scale<<<grid, block, shared, stream>>>(p, n, by).
cudaError_t launch_scale(dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream, float* p,
                         int n, float by) {
  __cudaPushCallConfiguration(grid, block, shared, stream);
  void* kernel = nullptr;
  REQUIRE(__cudaGetKernel(&kernel, address(&scale)) == cudaSuccess);
  dim3 g;
  dim3 b;
  std::size_t bytes = 0;
  cudaStream_t s = nullptr;
  REQUIRE(__cudaPopCallConfiguration(&g, &b, &bytes, &s) == cudaSuccess);
  void* args[] = {&p, &n, &by};
  return __cudaLaunchKernel(kernel, g, b, args, bytes, s);
}

// The stand-in for scale: multiplies n floats by `by`, through the host view of device memory.
void scale_on_host(const cuscope::sim::launch&, float* p, int n, float by) {
  if (n == 0) return;
  float* host = cuscope::sim::host_view(p, static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    host[i] *= by;
}

float* allocate_floats(cudaStream_t s, std::size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, n * sizeof(float), s) == cudaSuccess);
  return static_cast<float*>(p);
}

std::vector<float> read_back(const float* device, int n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  REQUIRE(cudaMemcpy(out.data(), device, out.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  return out;
}

}  // namespace

TEST_CASE("sim: a kernel launch with no stand-in fails and enqueues nothing", "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cudaStream_t s = make_stream();
  float* p = allocate_floats(s, 4);
  const std::size_t pending = cuscope::sim::pending_operations();
  CHECK(launch_scale(1, 4, 0, s, p, 4, 2.0f) == cudaErrorNoKernelImageForDevice);
  CHECK(cudaGetLastError() == cudaErrorNoKernelImageForDevice);
  CHECK(cudaGetLastError() == cudaSuccess);  // not sticky: the context goes on
  CHECK(cuscope::sim::pending_operations() == pending);
  CHECK(cuscope::sim::call_count("cudaLaunchKernel") == 1);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a stand-in runs in stream order on a copy of the launch's arguments",
          "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cuscope::sim::register_kernel(&scale, &scale_on_host);
  cudaStream_t s = make_stream();
  float* p = allocate_floats(s, 4);
  const std::vector<float> ones(4, 1.0f);
  REQUIRE(cudaMemcpyAsync(p, ones.data(), 16, cudaMemcpyHostToDevice, s) == cudaSuccess);
  float by = 3.0f;
  REQUIRE(launch_scale(1, 4, 0, s, p, 4, by) == cudaSuccess);
  by = 100.0f;  // the launch copied its arguments: this does not reach the stand-in
  CHECK(cuscope::sim::pending_operations() >= 1);  // deferred: nothing ran yet
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(read_back(p, 4) == std::vector<float>(4, 3.0f));
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cuscope::sim::unregister_kernel(&scale));
  CHECK_FALSE(cuscope::sim::unregister_kernel(&scale));
}

TEST_CASE("sim: a stand-in receives the launch configuration and the kernel's name",
          "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cudaStream_t s = make_stream();
  cuscope::sim::launch seen{};
  std::string name;
  int value = 0;
  cuscope::sim::register_kernel(&unnamed, [&](const cuscope::sim::launch& l, int v) {
    seen = l;
    name = l.kernel;
    value = v;
  });
  int v = 42;
  void* args[] = {&v};
  REQUIRE(cudaLaunchKernel(address(&unnamed), dim3(2, 3), dim3(32, 4), args, 128, s) ==
          cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(seen.grid.x == 2);
  CHECK(seen.grid.y == 3);
  CHECK(seen.block.x == 32);
  CHECK(seen.block.y == 4);
  CHECK(seen.shared_bytes == 128);
  CHECK(seen.stream == s);
  CHECK(name == "unnamed(int)");
  CHECK(value == 42);
  CHECK(cuscope::sim::kernel_name(&unnamed) == "unnamed(int)");
  CHECK(cuscope::sim::kernel_name(&never_registered).empty());
  CHECK(cuscope::sim::unregister_kernel(&unnamed));
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a stand-in registered by name matches the mangled, demangled or short name",
          "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cudaStream_t s = make_stream();
  for (const char* key : {"scale", "scale(float*, int, float)", "_Z5scalePfif"}) {
    CAPTURE(key);
    int runs = 0;
    cuscope::sim::register_kernel<float*, int, float>(
        key, [&runs](const cuscope::sim::launch&, float*, int n, float) { runs += n; });
    float* p = nullptr;
    REQUIRE(launch_scale(1, 1, 0, s, p, 5, 1.0f) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(runs == 5);
    CHECK(cuscope::sim::unregister_kernel(key));
  }
  CHECK(launch_scale(1, 1, 0, s, nullptr, 1, 1.0f) == cudaErrorNoKernelImageForDevice);
  CHECK_THROWS_AS(cuscope::sim::register_kernel<int>("", [](const cuscope::sim::launch&, int) {}),
                  std::invalid_argument);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorNoKernelImageForDevice);
}

TEST_CASE("sim: a launch is checked as CUDA checks it before any stand-in is looked for",
          "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cuscope::sim::register_kernel(&scale, &scale_on_host);
  cudaStream_t s = make_stream();
  void* none[] = {nullptr};
  // A function nvcc did not register.
  CHECK(cudaLaunchKernel(address(&never_registered), dim3(1), dim3(1), none, 0, s) ==
        cudaErrorInvalidDeviceFunction);
  // Block and grid limits of every device since compute capability 5.0.
  CHECK(launch_scale(1, 1025, 0, s, nullptr, 0, 1.0f) == cudaErrorInvalidConfiguration);
  CHECK(launch_scale(dim3(1), dim3(1, 1, 65), 0, s, nullptr, 0, 1.0f) ==
        cudaErrorInvalidConfiguration);
  CHECK(launch_scale(dim3(0), dim3(1), 0, s, nullptr, 0, 1.0f) == cudaErrorInvalidConfiguration);
  CHECK(launch_scale(dim3(1, 65536), dim3(1), 0, s, nullptr, 0, 1.0f) ==
        cudaErrorInvalidConfiguration);
  // Dynamic shared memory beyond 48 KiB needs cudaFuncAttributeMaxDynamicSharedMemorySize.
  CHECK(launch_scale(1, 1, 64 * 1024, s, nullptr, 0, 1.0f) == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(address(&scale), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               64 * 1024) == cudaSuccess);
  CHECK(launch_scale(1, 1, 64 * 1024, s, nullptr, 0, 1.0f) == cudaSuccess);
  // An invalid stream.
  CHECK(launch_scale(1, 1, 0, reinterpret_cast<cudaStream_t>(&module), nullptr, 0, 1.0f) ==
        cudaErrorInvalidResourceHandle);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cuscope::sim::unregister_kernel(&scale));
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("sim: fault injection reaches kernel launches and function attributes",
          "[sim][kernels]") {
  device_guard device;
  fake_module module;
  int runs = 0;
  cuscope::sim::register_kernel(&unnamed, [&runs](const cuscope::sim::launch&, int) { ++runs; });
  int v = 1;
  void* args[] = {&v};
  cuscope::sim::fail_api("cudaLaunchKernel", 1, cudaErrorLaunchOutOfResources);
  CHECK(cudaLaunchKernel(address(&unnamed), dim3(1), dim3(1), args, 0, nullptr) ==
        cudaErrorLaunchOutOfResources);
  cuscope::sim::fail_api("cudaLaunchKernelExC", 1, cudaErrorLaunchOutOfResources);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  CHECK(cudaLaunchKernelExC(&config, address(&unnamed), args) == cudaErrorLaunchOutOfResources);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(runs == 0);
  CHECK(cudaLaunchKernelExC(&config, address(&unnamed), args) == cudaSuccess);
  CHECK(cudaLaunchKernelExC(nullptr, address(&unnamed), args) == cudaErrorInvalidValue);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(runs == 1);
  cuscope::sim::fail_api("cudaFuncGetAttributes", 1, cudaErrorInvalidDeviceFunction);
  cudaFuncAttributes attr{};
  CHECK(cudaFuncGetAttributes(&attr, address(&unnamed)) == cudaErrorInvalidDeviceFunction);
  cuscope::sim::fail_api("cudaFuncSetAttribute", 1, cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(address(&unnamed), cudaFuncAttributePreferredSharedMemoryCarveout,
                             50) == cudaErrorInvalidValue);
  CHECK(cuscope::sim::call_count("cudaLaunchKernel") == 1);
  CHECK(cuscope::sim::call_count("cudaLaunchKernelExC") == 3);
  CHECK(cuscope::sim::unregister_kernel(&unnamed));
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("sim: function attributes report what cudaFuncSetAttribute set", "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cudaFuncAttributes attr{};
  REQUIRE(cudaFuncGetAttributes(&attr, address(&scale)) == cudaSuccess);
  CHECK(attr.maxThreadsPerBlock == 1024);
  CHECK(attr.maxDynamicSharedSizeBytes == 0);
  CHECK(attr.preferredShmemCarveout == -1);
  REQUIRE(cudaFuncSetAttribute(address(&scale), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               100 * 1024) == cudaSuccess);
  REQUIRE(cudaFuncSetAttribute(address(&scale), cudaFuncAttributePreferredSharedMemoryCarveout,
                               25) == cudaSuccess);
  REQUIRE(cudaFuncGetAttributes(&attr, address(&scale)) == cudaSuccess);
  CHECK(attr.maxDynamicSharedSizeBytes == 100 * 1024);
  CHECK(attr.preferredShmemCarveout == 25);
  CHECK(cudaFuncSetAttribute(address(&scale), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             228 * 1024) == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(address(&scale), cudaFuncAttributePreferredSharedMemoryCarveout,
                             101) == cudaErrorInvalidValue);
  CHECK(cudaFuncGetAttributes(&attr, address(&never_registered)) == cudaErrorInvalidDeviceFunction);
  CHECK(cudaFuncGetAttributes(nullptr, address(&scale)) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("sim: the call configuration is a stack per thread; popping an empty one fails",
          "[sim][kernels]") {
  device_guard device;
  cudaStream_t s = make_stream();
  CHECK(__cudaPushCallConfiguration(dim3(1), dim3(2), 3, nullptr) == 0);
  CHECK(__cudaPushCallConfiguration(dim3(4), dim3(5), 6, s) == 0);
  dim3 g;
  dim3 b;
  std::size_t bytes = 0;
  cudaStream_t popped = nullptr;
  REQUIRE(__cudaPopCallConfiguration(&g, &b, &bytes, &popped) == cudaSuccess);
  CHECK((g.x == 4 && b.x == 5 && bytes == 6 && popped == s));
  REQUIRE(__cudaPopCallConfiguration(&g, &b, &bytes, &popped) == cudaSuccess);
  CHECK((g.x == 1 && b.x == 2 && bytes == 3 && popped == nullptr));
  CHECK(__cudaPopCallConfiguration(&g, &b, &bytes, &popped) == cudaErrorMissingConfiguration);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a __managed__ variable gets zeroed host memory until its module goes",
          "[sim][kernels]") {
  void** module = __cudaRegisterFatBinary(nullptr);
  double* slot = nullptr;
  __cudaRegisterManagedVar(module, reinterpret_cast<void**>(&slot), nullptr, "counter", 0,
                           sizeof(double), 0, 0);
  REQUIRE(slot != nullptr);
  CHECK(*slot == 0.0);
  *slot = 2.5;
  __cudaUnregisterFatBinary(module);
  CHECK(slot == nullptr);
}

TEST_CASE("sim: a stand-in cannot call the runtime, as a host function cannot", "[sim][kernels]") {
  device_guard device;
  fake_module module;
  cudaError_t inside = cudaSuccess;
  cuscope::sim::register_kernel(&unnamed, [&inside](const cuscope::sim::launch&, int) {
    int count = 0;
    inside = cudaGetDeviceCount(&count);
  });
  int v = 0;
  void* args[] = {&v};
  REQUIRE(cudaLaunchKernel(address(&unnamed), dim3(1), dim3(1), args, 0, nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(inside == cudaErrorNotPermitted);
  CHECK(cuscope::sim::unregister_kernel(&unnamed));
  // The refused call was made on the thread that ran the stand-in, this one.
  CHECK(cudaGetLastError() == cudaErrorNotPermitted);
}

#endif  // CUSCOPE_TEST_SIMULATED
