// SPDX-License-Identifier: Apache-2.0
// Passes when every runtime call reached the simulated device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cuscope/sim.hpp>

int main() {
  cuscope::sim::device_config config;
  config.device_count = 3;
  config.total_bytes = std::size_t{1} << 30;
  config.context_bytes = std::size_t{64} << 20;
  config.pool_granularity_bytes = std::size_t{2} << 20;
  config.mode = cuscope::sim::execution::deferred;
  cuscope::sim::reset(config);
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
