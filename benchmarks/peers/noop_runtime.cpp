// SPDX-License-Identifier: Apache-2.0
// The no-op runtime of host_cost_bench: cudaMallocFromPoolAsync and cudaFreeAsync that do almost
// nothing, so that the time left in an allocate/free pair is the library's own, not the
// simulated device's (nor a driver's).
//
// host_cost.py archives this file alone (libhost_cost_noop.a) and links it into a second copy of
// the benchmark with -Wl,--wrap=cudaMallocFromPoolAsync -Wl,--wrap=cudaFreeAsync: the program's
// calls reach these two functions, and everything else (pools, streams, attributes, the pool's
// statistics) is still the simulated device's. Each thread has an arena of 256-byte blocks (host
// memory, never touched): an allocation of at most 256 bytes takes the block freed last, as a
// pool gives back the block just freed on the same stream, or the next one never used; a larger
// one is the next slice of a second arena, taken round-robin, and its free does nothing. So live
// allocations of at most 256 bytes never share an address (up to 16384 of them per thread),
// which the benchmark's rows with thousands of live allocations need; larger ones may. Never
// link it into anything else.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

constexpr std::size_t block = 256;
constexpr std::size_t blocks = 16384;
constexpr std::size_t large_bytes = std::size_t{1} << 20;

struct arena {
  unsigned char* small = nullptr;  // blocks * block bytes, from the heap on first use
  std::size_t used = 0;            // blocks ever handed out
  void* freed[blocks];             // blocks freed, the last on top
  std::size_t freed_count = 0;
  unsigned char* large = nullptr;
  std::size_t large_next = 0;

  arena() {
    small = static_cast<unsigned char*>(std::malloc(blocks * block));
    large = static_cast<unsigned char*>(std::malloc(large_bytes));
  }
  ~arena() {
    std::free(small);
    std::free(large);
  }
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
};

arena& local() {
  static thread_local arena a;
  return a;
}

}  // namespace

extern "C" cudaError_t __wrap_cudaMallocFromPoolAsync(void** ptr, std::size_t size, cudaMemPool_t,
                                                      cudaStream_t) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  arena& a = local();
  if (size <= block) {
    if (a.freed_count != 0) {
      *ptr = a.freed[--a.freed_count];
      return cudaSuccess;
    }
    if (a.used == blocks || a.small == nullptr) return cudaErrorMemoryAllocation;
    *ptr = a.small + block * a.used++;
    return cudaSuccess;
  }
  const std::size_t rounded = (size + block - 1) & ~(block - 1);
  if (rounded > large_bytes || a.large == nullptr) return cudaErrorMemoryAllocation;
  if (a.large_next + rounded > large_bytes) a.large_next = 0;
  *ptr = a.large + a.large_next;
  a.large_next += rounded;
  return cudaSuccess;
}

extern "C" cudaError_t __wrap_cudaFreeAsync(void* ptr, cudaStream_t) {
  arena& a = local();
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  const auto small = reinterpret_cast<std::uintptr_t>(a.small);
  if (p - small < blocks * block) a.freed[a.freed_count++] = ptr;
  return cudaSuccess;
}
