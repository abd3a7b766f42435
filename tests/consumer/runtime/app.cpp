// SPDX-License-Identifier: Apache-2.0
// Allocates from a pool and says which device it ran on: the simulated one, or a GPU.
#include <cstdio>
#include <cuscope/cuscope.hpp>

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 0;
  }
  cuscope::stream stream;
  cuscope::memory_pool pool;
  cuscope::device_buffer<int> buffer(stream, 256, pool);
  stream.synchronize();
  std::printf("ran on %s\n", prop.name);
  return 0;
}
