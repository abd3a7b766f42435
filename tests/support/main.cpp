// SPDX-License-Identifier: Apache-2.0
// The test runner. Against the real runtime it exits with CUSCOPE_TEST_SKIP_CODE when no GPU is
// present, so that ctest reports the executable as Skipped rather than Passed.
#include <cuda_runtime_api.h>

#include <cstdio>

#if CUSCOPE_CATCH2_MAJOR >= 3
#  include <catch2/catch_session.hpp>
#else
#  define CATCH_CONFIG_RUNNER
#  include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
#if !CUSCOPE_TEST_SIMULATED
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device (%s: %s)\n", cudaGetErrorName(status),
                cudaGetErrorString(status));
    return CUSCOPE_TEST_SKIP_CODE;
  }
#endif
  const int result = Catch::Session().run(argc, argv);
#if !CUSCOPE_TEST_SIMULATED
  // Every test's objects are gone: destroying the context here is what lets compute-sanitizer's
  // leak check (--leak-check full) see the end of the program and report what is still allocated.
  const cudaError_t reset = cudaDeviceReset();
  if (reset != cudaSuccess)
    std::fprintf(stderr, "cudaDeviceReset at exit failed: %s: %s\n", cudaGetErrorName(reset),
                 cudaGetErrorString(reset));
#endif
  return result;
}
