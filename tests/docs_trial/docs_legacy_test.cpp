// SPDX-License-Identifier: Apache-2.0
// A legacy codebase as docs/interop.md and docs/adopting.md describe taking cuscope in: its own
// cudaStream_t and cudaMemPool_t, raw cudaMallocAsync pointers adopted by buffers, a session
// wrapped around a step that also hands out memory on a second stream, and Thrust storage from
// the session where the docs say it runs (a plain C++ compiler: storage management only).
// A plain C++ compiler: Thrust's CPP device system (storage management only, docs/interop.md).
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP

#include <cuscope/cuscope.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/thrust.hpp>

#include <thrust/device_vector.h>
#include <thrust/memory.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
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

namespace {

std::vector<std::string> cleanup_reports;

void collect(const cuscope::cleanup_error& e) noexcept {
  cleanup_reports.push_back(std::string(e.operation) + " for " + e.object + ": " + e.message);
}

}  // namespace

TEST_CASE("legacy code: a buffer that outlives its stream, or its pool", "[docs][interop]") {
  cuscope::test::device_guard device;
  cleanup_reports.clear();
  cuscope::scoped_cleanup_handler handler(&collect);
  cuscope::memory_pool pool;
  cudaStream_t raw = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) == cudaSuccess);
  std::optional<cuscope::device_buffer<float>> b(std::in_place, raw, 1024, pool);
  float* const p = b->data();
  REQUIRE(cudaStreamDestroy(raw) == cudaSuccess);  // misuse: the stream goes first
  b.reset();                                       // its free fails, and is reported
  REQUIRE(cleanup_reports.size() == 1);
  CHECK_THAT(cleanup_reports[0], cuscope::test::contains("cudaFreeAsync"));
  // Still allocated: the program frees it on another stream (on a GPU it would be a leak).
  cuscope::stream other;
  pool.deallocate(other, p, 1024 * sizeof(float));
  other.synchronize();

  // A pool destroyed first is allowed: CUDA releases it after its last allocation is freed.
  cleanup_reports.clear();
  std::optional<cuscope::memory_pool> gone(std::in_place);
  cuscope::device_buffer<float> last(other, 1024, *gone);
  gone.reset();
  last = cuscope::device_buffer<float>();
  other.synchronize();
  CHECK(cleanup_reports.empty());
}

TEST_CASE("legacy code: a session's cuda::mr resource", "[docs][interop][session]") {
  cuscope::test::device_guard device;
  legacy_state legacy;
  cuscope::memory_pool_ref pool(legacy.pool, 0);
  cuscope::session_options o;
  o.name = "mr step";
  o.budget_bytes = MiB;
  cuscope::session step(pool, legacy.compute, o);
  {
    cuscope::pool_resource res(step);
    void* p = res.allocate_sync(4096, 256);
    CHECK_THROWS_AS(res.allocate_sync(2 * MiB, 256), cuscope::out_of_memory);  // the budget
    CHECK_THROWS_AS(res.allocate_sync(4096, 512), std::invalid_argument);      // alignment
    res.deallocate_sync(p, 4096, 256);
  }
  const cuscope::session_report& r = step.finish();
  INFO(r.to_string());
  CHECK(r.allocations == 1);
  CHECK(r.frees == 1);
  CHECK(r.budget_refusals == 1);
  CHECK_FALSE(r.leaked());
}

TEST_CASE("legacy code: a pool, stream and session on a second device", "[docs][interop]") {
  cuscope::test::device_setup two;
  two.device_count = 2;
  cuscope::test::device_guard device(two);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const auto current = [] {
    int d = -1;
    REQUIRE(cudaGetDevice(&d) == cudaSuccess);
    return d;
  };
  cuscope::pool_options po;
  po.device = 1;
  cuscope::memory_pool pool(po);
  CHECK(current() == 0);
  cuscope::stream_options so;
  so.device = 1;
  cuscope::stream s(so);
  CHECK(current() == 0);
  {
    cuscope::session epoch(pool, s, "on device 1");
    CHECK(current() == 0);
    { auto b = epoch.make_buffer<float>(40 * MiB / sizeof(float)); }
    const cuscope::session_report& r = epoch.finish();
    CHECK(r.device == 1);
    CHECK(r.returned_bytes > 0);
    CHECK_FALSE(r.leaked());
  }
  CHECK(current() == 0);
}
