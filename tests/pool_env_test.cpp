// SPDX-License-Identifier: Apache-2.0
// pool_options::from_env: limits from CUSCOPE_<NAME>_* variables, read only when asked.
#include <cuscope/memory_pool.hpp>

#include <stdlib.h>  // setenv, unsetenv (POSIX)

#include <cstddef>
#include <stdexcept>
#include <string>

#include "test_support.hpp"

using cuscope::memory_pool;
using cuscope::pool_options;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Sets a variable for the life of the object.
class env_var {
 public:
  env_var(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  env_var(const env_var&) = delete;
  env_var& operator=(const env_var&) = delete;
  ~env_var() { unsetenv(name_); }

 private:
  const char* name_;
};

std::size_t device_total() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  return total;
}

}  // namespace

TEST_CASE("pool_options::from_env: without variables the code's values stay", "[env]") {
  device_guard device;
  pool_options defaults;
  defaults.max_bytes = 64 * MiB;
  const pool_options o = pool_options::from_env("cuscope_test_unset", defaults);
  CHECK(o.max_bytes == 64 * MiB);
  CHECK(o.release_threshold_bytes == pool_options::keep_all);
  CHECK_THAT(o.origin, contains("no CUSCOPE_CUSCOPE_TEST_UNSET_* variable set"));
}

TEST_CASE("pool_options::from_env: byte counts with and without units", "[env]") {
  device_guard device;
  const env_var max("CUSCOPE_TRAIN_MAX_BYTES", "512MiB");
  const env_var threshold("CUSCOPE_TRAIN_RELEASE_THRESHOLD", "1.5 GiB");
  const env_var initial("CUSCOPE_TRAIN_INITIAL_BYTES", "2000000");
  const pool_options o = pool_options::from_env("train");
  CHECK(o.max_bytes == 512 * MiB);
  CHECK(o.release_threshold_bytes == 1536 * MiB);
  CHECK(o.initial_bytes == 2000000);
  CHECK_THAT(o.origin, contains("max_bytes = 512.00 MiB from CUSCOPE_TRAIN_MAX_BYTES=512MiB"));
  CHECK_THAT(o.origin, contains("initial_bytes = 1.91 MiB from CUSCOPE_TRAIN_INITIAL_BYTES"));
  const env_var decimal("CUSCOPE_TRAIN_MAX_BYTES", "2GB");
  CHECK(pool_options::from_env("TRAIN").max_bytes == 2000000000);
  const env_var keep("CUSCOPE_TRAIN_RELEASE_THRESHOLD", "keep_all");
  CHECK(pool_options::from_env("TRAIN").release_threshold_bytes == pool_options::keep_all);
}

TEST_CASE("pool_options::from_env: a fraction of the device's memory", "[env]") {
  device_guard device;
  const std::size_t total = device_total();
  {
    const env_var max("CUSCOPE_SERVE_MAX_BYTES", "0.5");
    const pool_options o = pool_options::from_env("serve");
    CHECK(o.max_bytes == total / 2);
    CHECK_THAT(o.origin, contains("from CUSCOPE_SERVE_MAX_BYTES=0.5 of"));
    CHECK_THAT(o.origin, contains("on device 0"));
    memory_pool pool(o);  // the limit reaches the pool
    CHECK(pool.max_bytes() >= total / 2);
  }
  const env_var percent("CUSCOPE_SERVE_MAX_BYTES", "25%");
  CHECK(pool_options::from_env("serve").max_bytes == total / 4);
}

TEST_CASE("pool_options::from_env: a malformed value names its variable", "[env]") {
  device_guard device;
  for (const char* bad :
       {"abc", "-1", "", "0.0", "1.5", "150%", "0%", "12 parsecs", "1.5B", "1e400", "+5"}) {
    const env_var max("CUSCOPE_BAD_MAX_BYTES", bad);
    CHECK_THROWS_WITH(pool_options::from_env("bad"),
                      contains(std::string("CUSCOPE_BAD_MAX_BYTES=\"") + bad + "\" is not"));
  }
  const env_var threshold("CUSCOPE_BAD2_RELEASE_THRESHOLD", "lots");
  CHECK_THROWS_WITH(pool_options::from_env("bad2"),
                    contains("CUSCOPE_BAD2_RELEASE_THRESHOLD=\"lots\"") && contains("or keep_all"));
  const env_var device_var("CUSCOPE_BAD3_DEVICE", "gpu0");
  CHECK_THROWS_AS(pool_options::from_env("bad3"), std::invalid_argument);
  CHECK_THROWS_WITH(pool_options::from_env("bad3"), contains("CUSCOPE_BAD3_DEVICE=\"gpu0\""));
  CHECK_THROWS_WITH(pool_options::from_env("my-pool"), contains("\"my-pool\" may hold only"));
  CHECK_THROWS_AS(pool_options::from_env(""), std::invalid_argument);
}

TEST_CASE("pool_options::from_env: a fraction on a device that does not exist", "[env]") {
  device_guard device;
  const env_var device_var("CUSCOPE_FAR_DEVICE", "7");
  const env_var max("CUSCOPE_FAR_MAX_BYTES", "0.5");
  CHECK_THROWS_AS(pool_options::from_env("far"), std::invalid_argument);
}
