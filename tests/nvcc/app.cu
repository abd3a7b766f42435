// SPDX-License-Identifier: Apache-2.0
// A program compiled by nvcc, kernels and all, that runs on the simulated device:
//   app                 launches a kernel with no stand-in: the launch fails and names the kernel
//   app --stand-ins     gives the kernels host stand-ins, which then do the kernels' work
// It prints "nvcc program ran on the simulated device" when every check held, and exits non-zero
// otherwise. tests/consumer/check_nvcc.cmake builds it with CMake (a CUDA target) and with a plain
// nvcc command line from pkg-config.
#include <cstdio>
#include <cstring>
#include <cuscope/cuscope.hpp>
#include <cuscope/sim.hpp>
#include <vector>

__device__ int device_counter;
__managed__ int managed_total;

__global__ void scale(float* data, int n, float by) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] *= by;
}

template <class T>
__global__ void fill(T* data, int n, T value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] = value;
}

namespace {

int failed(const char* what) {
  std::printf("FAILED: %s\n", what);
  return 1;
}

int without_stand_ins() {
  cuscope::stream stream;
  cuscope::memory_pool pool;
  cuscope::device_buffer<float> data(stream, 8, pool);
  scale<<<1, 8, 0, stream.get()>>>(data.data(), 8, 2.0f);
  const cudaError_t status = cudaGetLastError();
  std::printf("scale<<<1, 8>>> gave %s\n", cudaGetErrorName(status));
  if (status != cudaErrorNoKernelImageForDevice) return failed("the launch did not fail");
  return 0;
}

int with_stand_ins() {
  namespace sim = cuscope::sim;
  sim::register_kernel(&scale, [](const sim::launch& l, float* data, int n, float by) {
    float* host = sim::host_view(data, static_cast<std::size_t>(n));
    for (int i = 0; i < n && i < static_cast<int>(l.grid.x * l.block.x); ++i)
      host[i] *= by;
  });
  sim::register_kernel(&fill<float>, [](const sim::launch&, float* data, int n, float value) {
    float* host = sim::host_view(data, static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      host[i] = value;
  });
  if (sim::kernel_name(&fill<float>) != "void fill<float>(float*, int, float)" &&
      sim::kernel_name(&fill<float>) != "fill<float>(float*, int, float)") {
    std::printf("fill<float> is registered as '%s'\n", sim::kernel_name(&fill<float>).c_str());
    return failed("the kernel's registered name");
  }
  managed_total = 5;  // host access to a __managed__ variable
  std::vector<float> result(8);
  {
    cuscope::stream stream;
    cuscope::memory_pool pool;
    cuscope::device_buffer<float> data(stream, 8, pool);
    fill<<<1, 8, 0, stream.get()>>>(data.data(), 8, 1.5f);
    scale<<<2, 4, 0, stream.get()>>>(data.data(), 8, 4.0f);
    if (cudaGetLastError() != cudaSuccess) return failed("a launch with a stand-in");
    CUSCOPE_CUDA_TRY(cudaMemcpyAsync(result.data(), data.data(), 8 * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
  }
  for (float v : result)
    if (v != 6.0f) return failed("the stand-ins' results");
  if (managed_total != 5) return failed("the __managed__ variable");
  if (cuscope::sim::outstanding_allocations() != 0) return failed("allocations left behind");
  std::printf("stand-ins ran: every element is %g\n", static_cast<double>(result[0]));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool stand_ins = argc > 1 && std::strcmp(argv[1], "--stand-ins") == 0;
  cudaDeviceProp prop{};
  CUSCOPE_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  if (std::strcmp(prop.name, "cuscope simulated device") != 0)
    return failed("not on the simulated device");
  const int result = stand_ins ? with_stand_ins() : without_stand_ins();
  if (result == 0) std::printf("nvcc program ran on the simulated device\n");
  return result;
}
