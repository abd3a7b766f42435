// SPDX-License-Identifier: Apache-2.0
// The no-op runtime of host_cost_bench: cudaMallocFromPoolAsync and cudaFreeAsync that do almost
// nothing, so that the time left in an allocate/free pair is the library's own, not the
// simulated device's (nor a driver's).
//
// host_cost.py archives this file alone (libhost_cost_noop.a) and links it into a second copy of
// the benchmark with -Wl,--wrap=cudaMallocFromPoolAsync -Wl,--wrap=cudaFreeAsync: the program's
// calls reach these two functions, and everything else (pools, streams, attributes, the pool's
// statistics) is still the simulated device's. An allocation is the next 256-byte-aligned slice
// of a per-thread arena, taken round-robin; a free does nothing. That serves the benchmark, which
// frees every allocation before making the next one: never link it into anything else.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace {

constexpr std::size_t arena_bytes = std::size_t{1} << 20;
constexpr std::size_t alignment = 256;

struct arena {
  alignas(alignment) unsigned char bytes[arena_bytes];
  std::size_t next = 0;
};

thread_local arena local;

}  // namespace

extern "C" cudaError_t __wrap_cudaMallocFromPoolAsync(void** ptr, std::size_t size, cudaMemPool_t,
                                                      cudaStream_t) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  const std::size_t rounded = (size + alignment - 1) & ~(alignment - 1);
  if (rounded > arena_bytes) return cudaErrorMemoryAllocation;
  if (local.next + rounded > arena_bytes) local.next = 0;
  *ptr = local.bytes + local.next;
  local.next += rounded == 0 ? alignment : rounded;
  return cudaSuccess;
}

extern "C" cudaError_t __wrap_cudaFreeAsync(void*, cudaStream_t) {
  return cudaSuccess;
}
