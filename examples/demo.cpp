// SPDX-License-Identifier: Apache-2.0
// The demo of the README's quick start: which device it runs on and what its memory holds.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("cuscope demo on %s (%s)\n", prop.name,
              CUSCOPE_EXAMPLE_SIMULATED ? "simulated device" : "GPU");
  std::printf("memory: %zu MiB free of %zu MiB\n", free_bytes >> 20, total >> 20);
  return 0;
}
