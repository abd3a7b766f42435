// SPDX-License-Identifier: Apache-2.0
// A legacy codebase as docs/interop.md and docs/adopting.md describe taking cuscope in: its own
// cudaStream_t and cudaMemPool_t, raw cudaMallocAsync pointers adopted by buffers, a session
// wrapped around a step that also hands out memory on a second stream, and Thrust storage from
// the session where the docs say it runs (a plain C++ compiler: storage management only).
// A plain C++ compiler: Thrust's CPP device system (storage management only, docs/interop.md).
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <cuscope/cuscope.hpp>
#include <cuscope/thrust.hpp>

#include <thrust/device_vector.h>
#include <thrust/memory.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "test_support.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// The legacy code's own state: made and destroyed with the runtime API.
struct legacy_state {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cudaMemPool_t pool = nullptr;

  legacy_state() {
    REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking) == cudaSuccess);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
    std::uint64_t keep = UINT64_MAX;  // the usual tuning: keep the cache across synchronizations
    REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
  }
  ~legacy_state() {
    CHECK(cudaMemPoolDestroy(pool) == cudaSuccess);
    CHECK(cudaStreamDestroy(copy) == cudaSuccess);
    CHECK(cudaStreamDestroy(compute) == cudaSuccess);
  }
  legacy_state(const legacy_state&) = delete;
  legacy_state& operator=(const legacy_state&) = delete;
};

}  // namespace

TEST_CASE("legacy code: raw pointers adopted, a session around a step on two streams",
          "[docs][interop][session]") {
  cuscope::test::device_guard device;
  legacy_state legacy;
  cuscope::memory_pool_ref pool(legacy.pool, 0);
  const std::size_t n = (1 * MiB) / sizeof(float);

  // Pointers from the legacy allocation calls, now owned by buffers.
  void* raw = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&raw, n * sizeof(float), legacy.pool, legacy.compute) ==
          cudaSuccess);
  auto weights =
      cuscope::device_buffer<float>::adopt(legacy.compute, static_cast<float*>(raw), n, pool);
  const std::vector<float> threes(n, 3.0f);
  weights.copy_from(legacy.compute, threes);

  void* from_default = nullptr;
  REQUIRE(cudaMallocAsync(&from_default, 256, legacy.compute) == cudaSuccess);
  auto flags = cuscope::device_buffer<int>::adopt(legacy.compute, static_cast<int*>(from_default),
                                                  64, cuscope::memory_pool_ref::device_current(0));
  int* back = flags.release();  // yours again
  REQUIRE(cudaFreeAsync(back, legacy.compute) == cudaSuccess);

  // A step: a session on the legacy pool and stream, with memory on the legacy copy stream too.
  const std::size_t big = (40 * MiB) / sizeof(float);  // past the weights' block: the pool grows
  std::vector<float> result;
  {
    cuscope::session step(pool, legacy.compute, "step");
    {
      auto x = step.make_buffer<float>(big, "activations");
      auto staging = step.make_buffer<float>(legacy.copy, big, "staging");  // freed on copy
      REQUIRE(cudaMemcpyAsync(x.data(), weights.data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                              legacy.compute) == cudaSuccess);
      cuscope::stream_ref(legacy.copy).wait(legacy.compute);
      REQUIRE(cudaMemcpyAsync(staging.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                              legacy.copy) == cudaSuccess);
      result.resize(n);
      REQUIRE(cudaMemcpyAsync(result.data(), staging.data(), n * sizeof(float),
                              cudaMemcpyDeviceToHost, legacy.copy) == cudaSuccess);
      cuscope::stream_ref(legacy.compute).wait(legacy.copy);  // x is freed after the copy
    }
    // Legacy code allocating raw from the pool inside the step, and freeing it in time.
    void* tmp = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&tmp, MiB, legacy.pool, legacy.compute) == cudaSuccess);
    REQUIRE(cudaFreeAsync(tmp, legacy.compute) == cudaSuccess);

    const cuscope::session_report& r = step.finish();
    INFO(r.to_string());
    // The copy stream was not listed: the end synchronized the device, so the free enqueued on
    // it had completed before the trim.
    CHECK(r.synchronized_device);
    CHECK_FALSE(r.leaked());
    CHECK(r.untracked_bytes == 0);
    CHECK(r.allocations == 2);
    CHECK(r.frees == 2);
    CHECK(r.trimmed);
    CHECK(r.returned_bytes >= 2 * big * sizeof(float));
    CHECK(r.reserved_at_exit_bytes == r.reserved_at_entry_bytes);
  }
  CHECK(result == threes);

  // The same step with the copy stream listed: the end synchronizes exactly those two.
  {
    cuscope::session_options o;
    o.name = "listed";
    o.streams = {cuscope::stream_ref(legacy.copy)};
    cuscope::session step(pool, legacy.compute, o);
    { auto staging = step.make_buffer<float>(legacy.copy, big, "staging"); }
    const cuscope::session_report& r = step.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.synchronized_device);
    CHECK_FALSE(r.leaked());
    CHECK(r.returned_bytes >= big * sizeof(float));
    CHECK(r.reserved_at_exit_bytes == r.reserved_at_entry_bytes);
  }

  // Raw memory the legacy code leaves allocated from the session's pool is named as untracked.
  {
    cuscope::session step(pool, legacy.compute, "leaky step");
    void* kept = nullptr;
    REQUIRE(cudaMallocFromPoolAsync(&kept, MiB, legacy.pool, legacy.compute) == cudaSuccess);
    const cuscope::session_report& r = step.finish();
    INFO(r.to_string());
    CHECK(r.untracked_bytes == MiB);
    CHECK(r.untracked_leak);
    CHECK(r.leaked());
    REQUIRE(cudaFreeAsync(kept, legacy.compute) == cudaSuccess);
  }

  weights = cuscope::device_buffer<float>();
  REQUIRE(cudaStreamSynchronize(legacy.compute) == cudaSuccess);
}

TEST_CASE("legacy code: Thrust storage from a session with a plain C++ compiler",
          "[docs][interop][thrust][session]") {
  cuscope::test::device_guard device;
  legacy_state legacy;
  cuscope::memory_pool_ref pool(legacy.pool, 0);

  cuscope::session_options o;
  o.name = "thrust step";
  o.budget_bytes = 8 * MiB;
  cuscope::session step(pool, legacy.compute, o);
  {
    // Storage management runs with the CPP system: reserve, temporary storage, frees.
    thrust::device_vector<int, cuscope::thrust_allocator<int>> v{
        cuscope::thrust_allocator<int>(step)};
    v.reserve(1 << 20);  // 4 MiB
    CHECK(v.capacity() >= std::size_t{1} << 20);
    auto tmp = thrust::get_temporary_buffer<int>(cuscope::thrust_policy(step), 1 << 18);
    CHECK(tmp.second == 1 << 18);
    thrust::return_temporary_buffer(cuscope::thrust_policy(step), tmp.first, tmp.second);
    // The budget covers Thrust's storage too.
    CHECK_THROWS_AS(v.reserve(4 << 20), cuscope::out_of_memory);
  }
  const cuscope::session_report& r = step.finish();
  INFO(r.to_string());
  CHECK_FALSE(r.leaked());
  CHECK(r.allocations == 2);
  CHECK(r.frees == 2);
  CHECK(r.budget_refusals == 1);
  CHECK(r.tracked_peak_bytes == (std::size_t{5} << 20));
  CHECK(r.reserved_at_exit_bytes == r.reserved_at_entry_bytes);
}
