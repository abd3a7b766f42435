// SPDX-License-Identifier: Apache-2.0
// A Catch2 suite under the per-test leak check (<cuscope/testing/catch2.hpp>). Run as it is, every
// visible test passes, including one that leaves memory cached in the pool; the hidden tests
// ([.leak]) each leak and must fail, naming what they left (tests/testing/CMakeLists.txt runs them
// one by one and checks the exit status and the output).
#define CATCH_CONFIG_RUNNER
#include <cuscope/testing/catch2.hpp>
#if __has_include(<catch2/catch_session.hpp>)
#  include <catch2/catch_session.hpp>
#endif

#include <cuscope/cuscope.hpp>

#include <cstddef>
#include <stdexcept>
#include <vector>

namespace {

cuscope::memory_pool* suite_pool = nullptr;
cuscope::stream* suite_stream = nullptr;

}  // namespace

TEST_CASE("a test that frees everything passes") {
  auto b = cuscope::device_buffer<float>(*suite_stream, 1024, *suite_pool);
  CHECK(b.size() == 1024);
}

TEST_CASE("memory left cached in the pool is no leak") {
  { auto b = cuscope::device_buffer<char>(*suite_stream, std::size_t{8} << 20, *suite_pool); }
  suite_stream->synchronize();
  CHECK(suite_pool->stats().reserved_bytes >= (std::size_t{8} << 20));  // cached, not used
}

TEST_CASE("sections are checked run by run") {
  std::vector<cuscope::device_buffer<int>> kept;
  SECTION("one") {
    kept.emplace_back(*suite_stream, 16, *suite_pool);
  }
  SECTION("two") {
    kept.emplace_back(*suite_stream, 32, *suite_pool);
  }
  CHECK(kept.size() == 1);
}

TEST_CASE("a session nested in another inside a test") {
  cuscope::session outer(*suite_pool, *suite_stream, "outer");
  {
    cuscope::session inner(outer, "inner");
    auto b = inner.make_buffer<double>(256);
    CHECK(b.size() == 256);
  }
  CHECK(outer.finish().leaked_allocations == 0);
}

TEST_CASE("a test that throws still has its memory checked") {
  CHECK_THROWS_AS(([] {
                    auto b = cuscope::device_buffer<int>(*suite_stream, 64, *suite_pool);
                    throw std::runtime_error("thrown by the test");
                  }()),
                  std::runtime_error);
}

TEST_CASE("leaks a raw pool allocation", "[.leak]") {
  void* p = suite_pool->allocate(*suite_stream, 4096);
  CHECK(p != nullptr);  // never freed
}

TEST_CASE("leaks a released buffer", "[.leak]") {
  auto b = cuscope::device_buffer<char>(*suite_stream, 3000, *suite_pool);
  CHECK(b.release() != nullptr);  // the caller owns it now, and drops it
}

int main(int argc, char** argv) {
  cuscope::stream stream;
  cuscope::pool_options options;
  options.release_threshold_bytes = cuscope::pool_options::keep_all;
  cuscope::memory_pool pool(options);
  suite_pool = &pool;
  suite_stream = &stream;
  const cuscope::testing::watch_pool watched(pool, "the suite's pool");
  const int failed = Catch::Session().run(argc, argv);
  stream.synchronize();
  return failed;
}
