// SPDX-License-Identifier: Apache-2.0
// The Conan package's test: cuscope's headers and a CCCL header compile with a plain C++ compiler,
// the program links cuscope::sim, and the runtime calls reach the simulated device. Exits non-zero
// otherwise.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <cuda/std/version>  // found only if the package adds <CUDA include dir>/cccl for C++
#include <cuscope/sim.hpp>
#include <cuscope/version.hpp>
#if __has_include(<cuscope/cuscope.hpp>)
#  include <cuscope/cuscope.hpp>
#endif

int main() {
  if (std::strcmp(CUSCOPE_VERSION_STRING, CUSCOPE_EXPECTED_VERSION) != 0) {
    std::printf("FAILED: cuscope reports version %s, the package is %s\n", CUSCOPE_VERSION_STRING,
                CUSCOPE_EXPECTED_VERSION);
    return 1;
  }
  cuscope::sim::reset();
  void* device = nullptr;
  const cudaError_t malloc_status = cudaMalloc(&device, 4096);
  const cudaError_t free_status = cudaFree(device);
  const std::size_t calls = cuscope::sim::call_count();
  if (malloc_status != cudaSuccess || free_status != cudaSuccess || calls != 2 ||
      cuscope::sim::outstanding_allocations() != 0) {
    std::printf(
        "FAILED: cudaMalloc gave %s, cudaFree %s, %zu simulated runtime calls (expected 2)\n",
        cudaGetErrorName(malloc_status), cudaGetErrorName(free_status), calls);
    return 1;
  }
  std::printf(
      "cuscope %s via Conan (CCCL %d.%d): runs on the simulated device (%zu simulated "
      "runtime calls)\n",
      CUSCOPE_VERSION_STRING, CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION, calls);
  return 0;
}
