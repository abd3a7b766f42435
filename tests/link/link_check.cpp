// SPDX-License-Identifier: Apache-2.0
// Passes when every runtime call reached the simulated device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cuscope/sim.hpp>

int main() {
  cuscope::sim::reset({3, std::size_t{1} << 30, std::size_t{64} << 20, std::size_t{2} << 20,
                       cuscope::sim::execution::deferred});
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaDeviceProp prop{};
  const cudaError_t props = cudaGetDeviceProperties(&prop, 0);
  if (status != cudaSuccess || props != cudaSuccess || count != 3 ||
      cuscope::sim::call_count() != 2) {
    std::printf("FAILED: cudaGetDeviceCount gave %s and %d devices after %zu simulated calls\n",
                cudaGetErrorName(status), count, cuscope::sim::call_count());
    return 1;
  }
  std::printf("%s: this program runs on the simulated device (%d devices)\n", prop.name, count);
  return 0;
}
