// SPDX-License-Identifier: Apache-2.0
// What the tests of the simulated device's rules share (sim/tests/sim_*_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace cuscope::sim_test {

using cuscope::test::device_guard;
using cuscope::test::device_setup;

inline constexpr std::size_t MiB = std::size_t{1} << 20;

/// The order in which host functions ran.
struct trace {
  std::mutex mutex;
  std::vector<int> order;
  std::deque<std::pair<trace*, int>> marks;

  void add(cudaStream_t s, int id) {
    marks.emplace_back(this, id);
    REQUIRE(cudaLaunchHostFunc(s, &trace::record, &marks.back()) == cudaSuccess);
  }
  std::vector<int> seen() {
    std::lock_guard<std::mutex> lock(mutex);
    return order;
  }
  static void record(void* p) {
    auto* m = static_cast<std::pair<trace*, int>*>(p);
    std::lock_guard<std::mutex> lock(m->first->mutex);
    m->first->order.push_back(m->second);
  }
};

inline cudaMemPool_t make_pool(int device = 0, std::size_t max_bytes = 0) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
#if CUDART_VERSION >= 12020
  props.maxSize = max_bytes;
#else
  (void)max_bytes;
#endif
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  return pool;
}

inline std::uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t v = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, attr, &v) == cudaSuccess);
  return v;
}

inline void set_threshold(cudaMemPool_t pool, std::uint64_t bytes) {
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes) == cudaSuccess);
}

inline std::size_t free_bytes() {
  std::size_t free = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  return free;
}

inline cudaStream_t make_stream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess);
  return s;
}

}  // namespace cuscope::sim_test
