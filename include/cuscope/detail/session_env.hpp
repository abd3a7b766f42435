// SPDX-License-Identifier: Apache-2.0
// session_options::from_env: a session's trim policy, budget and admission from CUSCOPE_<NAME>_*
// environment variables, read only when the code asks. Included at the end of session.hpp.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "../device.hpp"
#include "../memory_pool.hpp"  // detail::env_prefix, parse_env_amount, device_total_bytes
#include "config.hpp"
#include "format.hpp"

// Host code only (detail/config.hpp).
#if CUSCOPE_DETAIL_HOST_CODE

namespace cuscope {

inline session_options session_options::from_env(const std::string& name) {
  return from_env(name, session_options{});
}

inline session_options session_options::from_env(const std::string& name, session_options defaults,
                                                 int device) {
  const char* who = "cuscope::session_options::from_env";
  const std::string prefix = detail::env_prefix(name, who);
  session_options options = std::move(defaults);
  std::string origin;
  std::size_t total = 0;  // read when a fraction of the device needs it
  const auto note = [&](const std::string& what) {
    if (!origin.empty()) origin += "; ";
    origin += what;
  };
  const auto bad = [&](const std::string& variable, const std::string& value,
                       const char* expected) {
    return std::invalid_argument(std::string(who) + ": " + variable + "=\"" + value + "\" is not " +
                                 expected);
  };
  const char* amount_text =
      "a byte count (\"1073741824\", \"512MiB\", \"1.5GiB\", \"2GB\") or a fraction of the "
      "device's memory (\"0.8\", \"80%\")";

  // Reads one amount; a fraction is of the device's total memory, or handed to fraction_into.
  const auto amount = [&](const char* suffix, const char* field, auto&& store_bytes,
                          double* fraction_into) {
    const std::string variable = prefix + suffix;
    const char* text = std::getenv(variable.c_str());
    if (text == nullptr) return;
    const std::string value = text;
    detail::env_amount parsed;
    if (!detail::parse_env_amount(value, parsed)) throw bad(variable, value, amount_text);
    if (!parsed.fraction) {
      const auto bytes = static_cast<std::size_t>(parsed.value);
      store_bytes(bytes);
      note(std::string(field) + " = " + detail::format_bytes(bytes) + " from " + variable + "=" +
           value);
      return;
    }
    if (fraction_into != nullptr) {
      *fraction_into = parsed.value;
      note(std::string(field) + " = a fraction " + value + " of the device from " + variable);
      return;
    }
    if (total == 0) {
      if (device == -1) device = current_device();
      detail::check_device(device, who);
      total = detail::device_total_bytes(device);
    }
    // floor, the product being >= 0: <cmath> is left out of the core headers.
    const auto bytes = static_cast<std::size_t>(parsed.value * static_cast<double>(total));
    store_bytes(bytes);
    note(std::string(field) + " = " + detail::format_bytes(bytes) + " from " + variable + "=" +
         value + " of " + detail::format_bytes(total) + " on device " + std::to_string(device));
  };

  // Reads one switch: on or off.
  const auto on_off = [&](const char* suffix, const char* field, bool& store) {
    const std::string variable = prefix + suffix;
    const char* text = std::getenv(variable.c_str());
    if (text == nullptr) return;
    const std::string value = text;
    if (value == "on" || value == "true" || value == "1" || value == "yes") {
      store = true;
    } else if (value == "off" || value == "false" || value == "0" || value == "no") {
      store = false;
    } else {
      throw bad(variable, value, "on or off (true/false, 1/0, yes/no)");
    }
    note(std::string(field) + " = " + (store ? "on" : "off") + " from " + variable + "=" + value);
  };

  on_off("TRIM", "trim", options.trim);
  amount(
      "KEEP_BYTES", "keep_bytes", [&](std::size_t b) { options.keep_bytes = b; }, nullptr);
  amount(
      "BUDGET_BYTES", "budget_bytes", [&](std::size_t b) { options.budget_bytes = b; }, nullptr);
  double admit_fraction = -1;  // set when ADMIT_BYTES is a fraction
  amount(
      "ADMIT_BYTES", "admission",
      [&](std::size_t b) {
        options.admission.bytes = b;
        options.admission.device_fraction = 0;
      },
      &admit_fraction);
  if (admit_fraction >= 0) {
    options.admission.device_fraction = admit_fraction;
    options.admission.bytes = 0;
  }
  if (const char* text = std::getenv((prefix + "ADMISSION").c_str()); text != nullptr) {
    const std::string value = text;
    if (value == "refuse") {
      options.admission.on_shortfall = admission_policy::refuse;
    } else if (value == "trim_and_retry") {
      options.admission.on_shortfall = admission_policy::trim_and_retry;
    } else {
      throw bad(prefix + "ADMISSION", value, "refuse or trim_and_retry");
    }
    note("admission.on_shortfall = " + value + " from " + prefix + "ADMISSION");
  }
  on_off("ADMISSION_CACHE", "admission.count_cache", options.admission.count_cache);
  if (const char* text = std::getenv((prefix + "ADMISSION_NVML").c_str()); text != nullptr) {
    const std::string value = text;
    if (value == "never") {
      options.admission.query_nvml = nvml_query::never;
    } else if (value == "on_refusal") {
      options.admission.query_nvml = nvml_query::on_refusal;
    } else if (value == "always") {
      options.admission.query_nvml = nvml_query::always;
    } else {
      throw bad(prefix + "ADMISSION_NVML", value, "never, on_refusal or always");
    }
    note("admission.query_nvml = " + value + " from " + prefix + "ADMISSION_NVML");
  }
  options.origin = origin.empty() ? "no " + prefix + "* variable set: the values of the code"
                                  : origin + "; the rest from the code";
  return options;
}

}  // namespace cuscope

#endif  // CUSCOPE_DETAIL_HOST_CODE
