// SPDX-License-Identifier: Apache-2.0
// A Catch2 suite under cuscope's per-test GPU leak check, as docs/testing.md shows it: the pool
// watched from main, tests that leave memory cached (not a leak) or free without synchronizing
// (not a leak), and hidden tests that leak, a raw pool allocation, a cudaMalloc block and a
// buffer whose free fails by an injected fault, each run on its own by CTest, which checks that
// the program fails and names the pool, the bytes and the allocation
// (tests/docs_trial/expect_failure.cmake).
#include <cuda_runtime_api.h>

#if CUSCOPE_CATCH2_MAJOR >= 3
#  define CATCH_CONFIG_CONSOLE_WIDTH 300
#  include <catch2/catch_session.hpp>
#  include <catch2/catch_test_macros.hpp>
#else
#  define CATCH_CONFIG_RUNNER
#  define CATCH_CONFIG_CONSOLE_WIDTH 300  // one line per message, for the checks in CTest
#  include <catch2/catch.hpp>
#endif
#include <cuscope/cuscope.hpp>
#include <cuscope/sim.hpp>
#include <cuscope/testing/catch2.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

cuscope::memory_pool* suite_pool = nullptr;  // the suite's pool and stream, made in main
cuscope::stream* suite_stream = nullptr;

int cleanup_failures = 0;
void count_cleanup(const cuscope::cleanup_error&) noexcept {
  ++cleanup_failures;
}

}  // namespace

TEST_CASE("the check's options are the documented defaults", "[docs][testing]") {
  const auto& o = cuscope::testing::leak_check::instance().options();
  CHECK(o.trim_between_tests);
  CHECK(o.trim_to == 0);
  CHECK(o.check_simulated_device);
}

TEST_CASE("leaves 8 MiB cached in the pool", "[docs][testing]") {
  cuscope::stream s;
  suite_pool->set_release_threshold(64 * MiB);  // keep the freed memory cached
  { auto b = cuscope::device_buffer<char>(s, 8 * MiB, *suite_pool); }
  s.synchronize();
  CHECK(suite_pool->stats().used_bytes == 0);
  CHECK(suite_pool->stats().reserved_bytes >= 8 * MiB);  // cached: not a leak
}

TEST_CASE("finds the pool trimmed by the check after the test before", "[docs][testing]") {
  CHECK(suite_pool->stats().reserved_bytes == 0);
  CHECK(suite_pool->stats().used_bytes == 0);
}

TEST_CASE("frees on a stream and returns without synchronizing", "[docs][testing]") {
  void* p = suite_pool->allocate(*suite_stream, 64 * KiB);
  suite_pool->deallocate(*suite_stream, p, 64 * KiB);  // enqueued: not in use any more
  CHECK(cuscope::sim::pending_operations() > 0);       // and not run yet
}

TEST_CASE("a fault injected into an allocation throws and leaks nothing", "[docs][testing]") {
  cuscope::stream s;
  cuscope::sim::fail_api("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  CHECK_THROWS_AS(cuscope::device_buffer<float>(s, 1024, *suite_pool), cuscope::out_of_memory);
  auto ok = cuscope::device_buffer<float>(s, 1024, *suite_pool);
  CHECK(ok.size() == 1024);
}

TEST_CASE("runs sections, each checked", "[docs][testing]") {
  cuscope::stream s;
  auto shared = cuscope::device_buffer<int>(s, 256, *suite_pool);
  SECTION("one") {
    auto b = cuscope::device_buffer<int>(s, 16, *suite_pool);
  }
  SECTION("two") {
    auto b = cuscope::device_buffer<int>(s, 32, *suite_pool);
  }
}

// Hidden: each is run on its own by CTest, which expects the program to fail.
TEST_CASE("leaks a raw pool allocation", "[.][leak]") {
  (void)suite_pool->allocate(*suite_stream, 4 * KiB);
}

TEST_CASE("leaks a cudaMalloc block", "[.][leak]") {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1000) == cudaSuccess);
}

TEST_CASE("leaks a buffer whose free fails", "[.][leak]") {
  cuscope::scoped_cleanup_handler counted(&count_cleanup);
  cuscope::stream s;
  {
    auto b = cuscope::device_buffer<char>(s, 3 * KiB, *suite_pool);
    cuscope::sim::fail_api("cudaFreeAsync", 1, cudaErrorInvalidValue);
  }  // the destructor's cudaFreeAsync fails: the cleanup handler hears of it, the memory stays
  CHECK(cleanup_failures == 1);
}

int main(int argc, char** argv) {
  cuscope::memory_pool pool;  // the suite's pool
  cuscope::stream stream;
  suite_stream = &stream;
  cuscope::testing::watch_pool watched(pool, "suite pool");  // checked around every test
  suite_pool = &pool;
  return Catch::Session().run(argc, argv);
}
