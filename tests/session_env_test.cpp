// SPDX-License-Identifier: Apache-2.0
// session_options::from_env: trim policy, budget and admission from CUSCOPE_<NAME>_* variables.
#include <cuscope/memory_pool.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <stdlib.h>  // setenv, unsetenv (POSIX)

#include <cstddef>
#include <stdexcept>
#include <string>

#include "test_support.hpp"

using cuscope::admission_policy;
using cuscope::memory_pool;
using cuscope::session;
using cuscope::session_options;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

class env_var {
 public:
  env_var(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  env_var(const env_var&) = delete;
  env_var& operator=(const env_var&) = delete;
  ~env_var() { unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("session_options: from_env without variables keeps the code's values and says so",
          "[session][env]") {
  session_options defaults;
  defaults.name = "request";
  defaults.trim = false;
  defaults.budget_bytes = 3 * MiB;
  const session_options o = session_options::from_env("svc_env", defaults);
  CHECK(o.name == "request");
  CHECK_FALSE(o.trim);
  CHECK(o.budget_bytes == 3 * MiB);
  CHECK_FALSE(o.keep_bytes.has_value());
  CHECK(o.origin == "no CUSCOPE_SVC_ENV_* variable set: the values of the code");
}

TEST_CASE("session_options: from_env reads the trim policy, keep, budget and admission",
          "[session][env]") {
  device_guard device;
  const env_var trim("CUSCOPE_SVC_ENV_TRIM", "off");
  const env_var keep("CUSCOPE_SVC_ENV_KEEP_BYTES", "64MiB");
  const env_var budget("CUSCOPE_SVC_ENV_BUDGET_BYTES", "25%");
  const env_var admit("CUSCOPE_SVC_ENV_ADMIT_BYTES", "0.5");
  const env_var admission("CUSCOPE_SVC_ENV_ADMISSION", "trim_and_retry");
  const env_var cache("CUSCOPE_SVC_ENV_ADMISSION_CACHE", "off");
  const env_var nvml("CUSCOPE_SVC_ENV_ADMISSION_NVML", "always");
  session_options defaults;
  defaults.admission.bytes = 7;
  const session_options o = session_options::from_env("svc_env", defaults);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  CHECK_FALSE(o.trim);
  REQUIRE(o.keep_bytes.has_value());
  CHECK(*o.keep_bytes == 64 * MiB);
  CHECK(o.budget_bytes == total / 4);
  CHECK(o.admission.device_fraction == 0.5);
  CHECK(o.admission.bytes == 0);  // the variable replaces the code's admission
  CHECK(o.admission.on_shortfall == admission_policy::trim_and_retry);
  CHECK_FALSE(o.admission.count_cache);
  CHECK(o.admission.query_nvml == cuscope::nvml_query::always);
  CHECK_THAT(o.origin, contains("trim = off from CUSCOPE_SVC_ENV_TRIM=off"));
  CHECK_THAT(o.origin, contains("keep_bytes = 64.00 MiB from CUSCOPE_SVC_ENV_KEEP_BYTES=64MiB"));
  CHECK_THAT(o.origin, contains("from CUSCOPE_SVC_ENV_BUDGET_BYTES=25% of"));
  CHECK_THAT(o.origin, contains("admission = a fraction 0.5 of the device"));
  CHECK_THAT(o.origin, contains("admission.on_shortfall = trim_and_retry"));
  CHECK_THAT(o.origin,
             contains("admission.count_cache = off from CUSCOPE_SVC_ENV_ADMISSION_CACHE=off"));
  CHECK_THAT(o.origin,
             contains("admission.query_nvml = always from CUSCOPE_SVC_ENV_ADMISSION_NVML"));
  CHECK_THAT(o.origin, contains("; the rest from the code"));

  // The options do what they say: no trim at the end, and admission by half the device.
  memory_pool pool;
  cuscope::stream s;
  {
    session work(pool, s, o);
    { auto b = work.make_buffer<char>(32 * MiB); }
    const cuscope::session_report& r = work.finish();
    CHECK_FALSE(r.trimmed);
    CHECK(r.admission_required_bytes == total / 2);
    CHECK_THAT(r.admission_nvml, !contains("not asked"));  // ADMISSION_NVML=always
  }
  CHECK(pool.stats().reserved_bytes == 32 * MiB);
  pool.trim_to(0);
}

TEST_CASE("session_options: from_env names the variable and its value in every error",
          "[session][env]") {
  const auto fails_with = [](const char* variable, const char* value, const char* expected) {
    const env_var v(variable, value);
    CHECK_THROWS_AS(session_options::from_env("svc_env"), std::invalid_argument);
    CHECK_THROWS_WITH(
        session_options::from_env("svc_env"),
        contains(std::string(variable) + "=\"" + value + "\" is not") && contains(expected));
  };
  fails_with("CUSCOPE_SVC_ENV_TRIM", "sometimes", "on or off");
  fails_with("CUSCOPE_SVC_ENV_TRIM", "", "on or off");
  fails_with("CUSCOPE_SVC_ENV_KEEP_BYTES", "lots", "a byte count");
  fails_with("CUSCOPE_SVC_ENV_KEEP_BYTES", "-5", "a byte count");
  fails_with("CUSCOPE_SVC_ENV_BUDGET_BYTES", "1.5", "a byte count");
  fails_with("CUSCOPE_SVC_ENV_BUDGET_BYTES", "12 parsecs", "a byte count");
  fails_with("CUSCOPE_SVC_ENV_ADMIT_BYTES", "150%", "a fraction of the device's memory");
  fails_with("CUSCOPE_SVC_ENV_ADMISSION", "wait", "refuse or trim_and_retry");
  fails_with("CUSCOPE_SVC_ENV_ADMISSION_CACHE", "maybe", "on or off");
  fails_with("CUSCOPE_SVC_ENV_ADMISSION_NVML", "sometimes", "never, on_refusal or always");
  CHECK_THROWS_WITH(session_options::from_env("svc-env"),
                    contains("the name \"svc-env\" may hold only letters, digits and '_'"));
  CHECK_THROWS_WITH(session_options::from_env(""), contains("the name is empty"));
}
