// SPDX-License-Identifier: Apache-2.0
// A GoogleTest suite under the per-test leak check (<cuscope/testing/gtest.hpp>). Run as it is,
// every test passes, including one that leaves memory cached in the pool; the DISABLED_ tests each
// leak and must fail, naming what they left (tests/testing/CMakeLists.txt runs them one by one
// with --gtest_also_run_disabled_tests and checks the exit status and the output).
#include <cuscope/testing/gtest.hpp>

#include <cuscope/cuscope.hpp>

#include <cstddef>
#include <stdexcept>

namespace {

cuscope::memory_pool* suite_pool = nullptr;
cuscope::stream* suite_stream = nullptr;

TEST(LeakCheck, FreesEverything) {
  auto b = cuscope::device_buffer<float>(*suite_stream, 1024, *suite_pool);
  EXPECT_EQ(b.size(), 1024u);
}

TEST(LeakCheck, CachedMemoryIsNoLeak) {
  { auto b = cuscope::device_buffer<char>(*suite_stream, std::size_t{8} << 20, *suite_pool); }
  suite_stream->synchronize();
  EXPECT_GE(suite_pool->stats().reserved_bytes, std::size_t{8} << 20);
}

TEST(LeakCheck, NestedSessions) {
  cuscope::session outer(*suite_pool, *suite_stream, "outer");
  {
    cuscope::session inner(outer, "inner");
    auto b = inner.make_buffer<double>(256);
    EXPECT_EQ(b.size(), 256u);
  }
  EXPECT_EQ(outer.finish().leaked_allocations, 0u);
}

TEST(LeakCheck, ThrowingCodeIsChecked) {
  EXPECT_THROW(([] {
                 auto b = cuscope::device_buffer<int>(*suite_stream, 64, *suite_pool);
                 throw std::runtime_error("thrown by the test");
               }()),
               std::runtime_error);
}

TEST(LeakCheck, DISABLED_LeaksRawPoolMemory) {
  void* p = suite_pool->allocate(*suite_stream, 4096);
  EXPECT_NE(p, nullptr);  // never freed
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  cuscope::testing::install_gtest_listener();
  cuscope::stream stream;
  cuscope::pool_options options;
  options.release_threshold_bytes = cuscope::pool_options::keep_all;
  cuscope::memory_pool pool(options);
  suite_pool = &pool;
  suite_stream = &stream;
  const cuscope::testing::watch_pool watched(pool, "the suite's pool");
  const int failed = RUN_ALL_TESTS();
  stream.synchronize();
  return failed;
}
