// SPDX-License-Identifier: Apache-2.0
// Links the shared libcudart beside the simulated device and uses a runtime function that the
// simulation does not provide, so the linker takes it from libcudart: the simulated device must
// refuse to run beside the real runtime.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaGraphCreate(&graph, 0);
  std::printf("FAILED: the program ran with both runtimes (%s)\n", cudaGetErrorName(status));
  return 0;
}
