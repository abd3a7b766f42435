// SPDX-License-Identifier: Apache-2.0
// Uses a runtime function that the simulated device does not provide, so the linker takes it
// from libcudart: the simulated device must refuse to run beside the real runtime.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  char dst[16];
  const char src[16] = {};
  const cudaError_t status = cudaMemcpy2D(dst, 4, src, 4, 4, 4, cudaMemcpyHostToHost);
  std::printf("FAILED: the program ran with both runtimes (%s)\n", cudaGetErrorName(status));
  return 0;
}
