// SPDX-License-Identifier: Apache-2.0
// Loads a library at run time, as CCCL and cuda-api-wrappers load libcuda.so.1: the simulated
// device must refuse the real runtime and driver, and let every other library load.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  (void)cudaGetDeviceCount(&count);  // the simulated device
  void* other = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  std::printf("libm.so.6 %s\n", other != nullptr ? "loaded" : "did not load");
  std::fflush(stdout);
  if (other != nullptr) dlclose(other);
  const char* name = argc > 1 ? argv[1] : "libcuda.so.1";
  void* cuda = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  std::printf("dlopen(%s) returned %s\n", name, cuda != nullptr ? "a handle" : "null");
  if (cuda != nullptr) dlclose(cuda);
  return 0;
}
