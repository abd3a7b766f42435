// SPDX-License-Identifier: Apache-2.0
// The device and build described in the JSON, and the raw CUDA baselines the benchmarks compare
// against: raw pools, the default pool and its threshold, memory checks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "common.hpp"
#include "json.hpp"

namespace cuscope_bench {

// The device --------------------------------------------------------------------------------------

/// What the runtime says about the current device and itself.
inline json device_info() {
  json j = json::object();
  int device = 0;
  CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUSCOPE_BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  j.set("index", device);
  j.set("name", std::string(prop.name));
  j.set("compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
  j.set("multiprocessors", prop.multiProcessorCount);
  j.set("total_bytes", static_cast<std::size_t>(prop.totalGlobalMem));
  const auto attribute = [&](const char* name, cudaDeviceAttr attr) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess)
      j.set(name, value);
    else
      (void)cudaGetLastError();
  };
  attribute("clock_khz", cudaDevAttrClockRate);
  attribute("memory_clock_khz", cudaDevAttrMemoryClockRate);
  int version = 0;
  if (cudaDriverGetVersion(&version) == cudaSuccess) j.set("driver_api_version", version);
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) j.set("runtime_version", version);
  (void)cudaGetLastError();
  j.set("simulated", simulated);
  return j;
}

/// How this program was compiled.
inline json build_info() {
  json j = json::object();
#if defined(__OPTIMIZE__)
  j.set("optimized", true);
#else
  j.set("optimized", false);
#endif
#if defined(__VERSION__)
  j.set("compiler", std::string(__VERSION__));
#endif
#if defined(__CUDACC_VER_MAJOR__)
  j.set("nvcc", std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__));
#endif
  j.set("cudart_headers", CUDART_VERSION);
  return j;
}

// Device memory helpers -------------------------------------------------------------------------

/// Fills bytes at p with value on stream, reads the first and the last byte back and throws
/// unless both hold value: proves that the memory is usable. Synchronizes stream.
inline void verify_memory(void* p, std::size_t bytes, cudaStream_t stream, unsigned char value,
                          const std::string& what) {
  if (bytes == 0) return;
  unsigned char back[2] = {0, 0};
  auto* base = static_cast<unsigned char*>(p);
  CUSCOPE_BENCH_CHECK(cudaMemsetAsync(p, value, bytes, stream));
  CUSCOPE_BENCH_CHECK(cudaMemcpyAsync(&back[0], base, 1, cudaMemcpyDeviceToHost, stream));
  CUSCOPE_BENCH_CHECK(
      cudaMemcpyAsync(&back[1], base + (bytes - 1), 1, cudaMemcpyDeviceToHost, stream));
  CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(stream));
  if (back[0] != value || back[1] != value)
    throw std::runtime_error("self-check failed: " + what + ": wrote " + std::to_string(value) +
                             ", read back " + std::to_string(back[0]) + " and " +
                             std::to_string(back[1]));
}

/// A raw pool made with cudaMemPoolCreate and tuned as the docs advise: a release threshold of
/// UINT64_MAX keeps freed memory across synchronizations. Destroyed with the object.
class raw_pool {
 public:
  raw_pool() {
    int device = 0;
    CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    CUSCOPE_BENCH_CHECK(cudaMemPoolCreate(&pool_, &props));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  raw_pool(const raw_pool&) = delete;
  raw_pool& operator=(const raw_pool&) = delete;
  ~raw_pool() { (void)cudaMemPoolDestroy(pool_); }
  [[nodiscard]] cudaMemPool_t get() const noexcept { return pool_; }

 private:
  cudaMemPool_t pool_ = nullptr;
};

/// Reads a 64-bit attribute of a pool.
inline std::size_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t v = 0;
  CUSCOPE_BENCH_CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return static_cast<std::size_t>(v);
}

/// Starts a pool's reserved and used peaks afresh (changes no setting of the pool).
inline void reset_pool_peaks(cudaMemPool_t pool) {
  std::uint64_t zero = 0;
  CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  zero = 0;
  CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

/// The current device's default pool.
inline cudaMemPool_t default_pool() {
  int device = 0;
  CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool = nullptr;
  CUSCOPE_BENCH_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

/// Sets the release threshold of the device's default pool (shared with every library in the
/// process) and restores the previous value when destroyed. note() says so, for the output.
class default_pool_threshold {
 public:
  explicit default_pool_threshold(std::uint64_t bytes) : pool_(default_pool()) {
    CUSCOPE_BENCH_CHECK(
        cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &previous_));
    CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &bytes));
    int device = 0;
    CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
    cudaMemPool_t current = nullptr;
    CUSCOPE_BENCH_CHECK(cudaDeviceGetMemPool(&current, device));
    current_is_default_ = current == pool_;
    bytes_ = bytes;
  }
  default_pool_threshold(const default_pool_threshold&) = delete;
  default_pool_threshold& operator=(const default_pool_threshold&) = delete;
  ~default_pool_threshold() {
    if (cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &previous_) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "warning: could not restore the default pool's release threshold\n");
    }
  }
  [[nodiscard]] cudaMemPool_t pool() const noexcept { return pool_; }
  [[nodiscard]] std::string note() const {
    std::string n =
        "The device's default pool is shared by the whole process: this benchmark set "
        "its release threshold from " +
        std::to_string(previous_) + " to " + std::to_string(bytes_) +
        " bytes for the default-pool runs and restores " + std::to_string(previous_) +
        " before it exits.";
    if (!current_is_default_)
      n += " cudaMallocAsync does NOT use the default pool here (cudaDeviceSetMemPool was called).";
    return n;
  }

 private:
  cudaMemPool_t pool_ = nullptr;
  std::uint64_t previous_ = 0;
  std::uint64_t bytes_ = 0;
  bool current_is_default_ = true;
};

}  // namespace cuscope_bench
