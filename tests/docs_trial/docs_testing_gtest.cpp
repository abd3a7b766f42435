// SPDX-License-Identifier: Apache-2.0
// A GoogleTest suite linked with gtest_main under cuscope's per-test GPU leak check, as
// docs/testing.md shows it: CUSCOPE_GTEST_LEAK_CHECK() at namespace scope and the suite's pool
// watched from a global test environment. The disabled test leaks; CTest runs it on its own and
// expects it to fail, naming the pool and the bytes.
#include <cuscope/cuscope.hpp>
#include <cuscope/testing/gtest.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <optional>

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

class suite_environment : public ::testing::Environment {
 public:
  void SetUp() override {
    pool.emplace();
    stream.emplace();
    watched.emplace(*pool, "suite pool");
  }
  void TearDown() override {
    watched.reset();
    stream.reset();
    pool.reset();
  }
  std::optional<cuscope::memory_pool> pool;
  std::optional<cuscope::stream> stream;
  std::optional<cuscope::testing::watch_pool> watched;
};

suite_environment* const suite =
    static_cast<suite_environment*>(::testing::AddGlobalTestEnvironment(new suite_environment));

}  // namespace

CUSCOPE_GTEST_LEAK_CHECK();

TEST(Suite, LeavesMemoryCached) {
  suite->pool->set_release_threshold(64 * MiB);
  { auto b = cuscope::device_buffer<char>(*suite->stream, 8 * MiB, *suite->pool); }
  suite->stream->synchronize();
  EXPECT_EQ(suite->pool->stats().used_bytes, 0u);
  EXPECT_GE(suite->pool->stats().reserved_bytes, 8 * MiB);
}

TEST(Suite, FindsThePoolTrimmedAfterTheTestBefore) {
  EXPECT_EQ(suite->pool->stats().reserved_bytes, 0u);
}

TEST(Suite, DISABLED_LeaksARawPoolAllocation) {
  (void)suite->pool->allocate(*suite->stream, 4 * KiB);
}
