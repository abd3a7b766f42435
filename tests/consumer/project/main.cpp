// SPDX-License-Identifier: Apache-2.0
// A consumer's program: includes cuscope's headers and a CCCL header with a plain C++ compiler,
// runs a few CUDA runtime calls and checks that the simulated device served them. Exits non-zero
// on any mismatch.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <cuda/std/version>  // found only if the package adds <CUDA include dir>/cccl for C++
#include <cuscope/sim.hpp>
#include <cuscope/version.hpp>
#if __has_include(<cuscope/cuscope.hpp>)
#  include <cuscope/cuscope.hpp>
#endif

#if !defined(CUSCOPE_CONSUMER_METHOD) || !defined(CUSCOPE_CONSUMER_EXPECTED_VERSION)
#  error "define CUSCOPE_CONSUMER_METHOD and CUSCOPE_CONSUMER_EXPECTED_VERSION as string literals"
#endif

static_assert(CUSCOPE_VERSION == CUSCOPE_VERSION_MAJOR * 10000 + CUSCOPE_VERSION_MINOR * 100 +
                                     CUSCOPE_VERSION_PATCH,
              "CUSCOPE_VERSION disagrees with its parts");

namespace {

int fail(const char* what, cudaError_t status) {
  std::printf("FAILED (%s): %s gave %s after %zu simulated runtime calls\n",
              CUSCOPE_CONSUMER_METHOD, what, cudaGetErrorName(status), cuscope::sim::call_count());
  return 1;
}

}  // namespace

int main() {
  if (std::strcmp(CUSCOPE_VERSION_STRING, CUSCOPE_CONSUMER_EXPECTED_VERSION) != 0) {
    std::printf("FAILED (%s): cuscope reports version %s, the package is %s\n",
                CUSCOPE_CONSUMER_METHOD, CUSCOPE_VERSION_STRING, CUSCOPE_CONSUMER_EXPECTED_VERSION);
    return 1;
  }

  cuscope::sim::device_config config;
  config.device_count = 2;
  cuscope::sim::reset(config);

  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count != 2) return fail("cudaGetDeviceCount", status);

  constexpr std::size_t bytes = std::size_t{1} << 20;
  void* device = nullptr;
  if ((status = cudaMalloc(&device, bytes)) != cudaSuccess) return fail("cudaMalloc", status);
  if ((status = cudaMemset(device, 0x5A, bytes)) != cudaSuccess) {
    return fail("cudaMemset", status);
  }
  unsigned char last = 0;
  status =
      cudaMemcpy(&last, static_cast<unsigned char*>(device) + bytes - 1, 1, cudaMemcpyDeviceToHost);
  if (status != cudaSuccess || last != 0x5A) return fail("cudaMemcpy", status);
  if ((status = cudaFree(device)) != cudaSuccess) return fail("cudaFree", status);

  const std::size_t calls = cuscope::sim::call_count();
  const std::size_t outstanding = cuscope::sim::outstanding_allocations();
  if (calls != 5 || outstanding != 0) {
    std::printf("FAILED (%s): %zu simulated runtime calls (expected 5), %zu allocations left\n",
                CUSCOPE_CONSUMER_METHOD, calls, outstanding);
    return 1;
  }
  std::printf(
      "cuscope %s via %s (CCCL %d.%d): runs on the simulated device (%d devices, %zu "
      "simulated runtime calls)\n",
      CUSCOPE_VERSION_STRING, CUSCOPE_CONSUMER_METHOD, CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION,
      count, calls);
  return 0;
}
