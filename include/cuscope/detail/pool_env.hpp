// SPDX-License-Identifier: Apache-2.0
// pool_options::from_env: a pool's limits from CUSCOPE_<NAME>_* environment variables, read only
// when the code asks. Included at the end of memory_pool.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "../device.hpp"
#include "../error.hpp"
#include "config.hpp"
#include "format.hpp"

namespace cuscope::detail {

/// "CUSCOPE_<NAME>_" for name (letters, digits and '_', upper-cased); who names the caller in the
/// std::invalid_argument thrown for an empty name or another character.
std::string env_prefix(const std::string& name, const char* who);

}  // namespace cuscope::detail

// Everything below is host code only (detail/config.hpp): the definitions of
// pool_options::from_env and of what they use.
#if CUSCOPE_DETAIL_HOST_CODE

namespace cuscope::detail {

/// A value of a CUSCOPE_<NAME>_* variable: bytes, or a fraction of the device's memory.
struct env_amount {
  bool fraction = false;
  double value = 0;  // bytes when !fraction
};

/// Parses "1073741824", "512MiB", "1.5 GiB", "2GB" (decimal), "0.8", "80%"; false when text is
/// none of them.
CUSCOPE_DETAIL_COLD inline bool parse_env_amount(const std::string& text, env_amount& out) {
  const char* begin = text.c_str();
  while (*begin == ' ')
    ++begin;
  if (*begin == '\0' || *begin == '-' || *begin == '+') return false;
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  // Not NaN, not infinite, not negative: <cmath> is left out of a header that memory_pool.hpp
  // includes.
  if (end == begin || !(number >= 0 && number <= std::numeric_limits<double>::max())) return false;
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ')
    unit.erase(unit.begin());
  while (!unit.empty() && unit.back() == ' ')
    unit.pop_back();
  for (char& c : unit)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  const bool has_point =
      std::string(begin, static_cast<std::size_t>(end - begin)).find_first_of(".eE") !=
      std::string::npos;
  if (unit.empty() && has_point) {  // a fraction of the device
    if (number <= 0 || number > 1) return false;
    out = env_amount{true, number};
    return true;
  }
  if (unit == "%") {
    if (number <= 0 || number > 100) return false;
    out = env_amount{true, number / 100};
    return true;
  }
  struct suffix {
    const char* name;
    double scale;
  };
  static const suffix suffixes[] = {{"", 1},
                                    {"b", 1},
                                    {"kib", 1024.0},
                                    {"mib", 1048576.0},
                                    {"gib", 1073741824.0},
                                    {"tib", 1099511627776.0},
                                    {"kb", 1e3},
                                    {"mb", 1e6},
                                    {"gb", 1e9},
                                    {"tb", 1e12}};
  for (const suffix& s : suffixes) {
    if (unit != s.name) continue;
    const double bytes = number * s.scale;
    if (bytes >= static_cast<double>(std::numeric_limits<std::size_t>::max())) return false;
    if (s.scale == 1 && has_point) return false;                                      // "1.5 B"
    out = env_amount{false, static_cast<double>(static_cast<std::uint64_t>(bytes))};  // floor
    return true;
  }
  return false;
}

CUSCOPE_DETAIL_COLD inline std::string env_prefix(const std::string& name, const char* who) {
  if (name.empty()) throw std::invalid_argument(std::string(who) + ": the name is empty");
  std::string prefix = "CUSCOPE_";
  for (const char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok)
      throw std::invalid_argument(std::string(who) + ": the name \"" + name +
                                  "\" may hold only letters, digits and '_'");
    prefix += (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  }
  return prefix + '_';
}

/// Total memory of device (cudaMemGetInfo's total).
inline std::size_t device_total_bytes(int device) {
  const scoped_device on(device);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CUSCOPE_DETAIL_TRY_FOR(cudaMemGetInfo(&free_bytes, &total_bytes),
                         "device " + std::to_string(device));
  return total_bytes;
}

}  // namespace cuscope::detail

namespace cuscope {

inline pool_options pool_options::from_env(const std::string& name) {
  return from_env(name, pool_options{});
}

inline pool_options pool_options::from_env(const std::string& name, pool_options defaults) {
  const char* who = "cuscope::pool_options::from_env";
  const std::string prefix = detail::env_prefix(name, who);
  pool_options options = std::move(defaults);
  int device = options.device;
  std::string origin;
  std::size_t total = 0;  // read when a fraction needs it
  const auto note = [&](const std::string& what) {
    if (!origin.empty()) origin += "; ";
    origin += what;
  };

  if (const char* text = std::getenv((prefix + "DEVICE").c_str()); text != nullptr) {
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value < -1 || value > std::numeric_limits<int>::max())
      throw std::invalid_argument(std::string(who) + ": " + prefix + "DEVICE=\"" + text +
                                  "\" is not a device ordinal (0, 1, ...) or -1 (current)");
    device = static_cast<int>(value);
    options.device = device;
    note("device " + std::to_string(device) + " from " + prefix + "DEVICE");
  }

  // Reads one amount; a fraction is of the device's total memory.
  const auto amount = [&](const char* suffix, const char* field, std::size_t& into,
                          bool allow_keep_all) {
    const std::string variable = prefix + suffix;
    const char* text = std::getenv(variable.c_str());
    if (text == nullptr) return;
    const std::string value = text;
    if (allow_keep_all && (value == "keep_all" || value == "max")) {
      into = keep_all;
      note(std::string(field) + " = keep_all from " + variable);
      return;
    }
    detail::env_amount parsed;
    if (!detail::parse_env_amount(value, parsed))
      throw std::invalid_argument(
          std::string(who) + ": " + variable + "=\"" + value +
          "\" is not a byte count (\"1073741824\", \"512MiB\", \"1.5GiB\", \"2GB\") or a "
          "fraction of the device's memory (\"0.8\", \"80%\")" +
          (allow_keep_all ? ", or keep_all" : ""));
    if (!parsed.fraction) {
      into = static_cast<std::size_t>(parsed.value);
      note(std::string(field) + " = " + detail::format_bytes(into) + " from " + variable + "=" +
           value);
      return;
    }
    if (total == 0) {
      if (device == -1) device = current_device();
      detail::check_device(device, who);
      total = detail::device_total_bytes(device);
    }
    into = static_cast<std::size_t>(parsed.value * static_cast<double>(total));  // floor: >= 0
    note(std::string(field) + " = " + detail::format_bytes(into) + " from " + variable + "=" +
         value + " of " + detail::format_bytes(total) + " on device " + std::to_string(device));
  };
  amount("MAX_BYTES", "max_bytes", options.max_bytes, false);
  amount("RELEASE_THRESHOLD", "release_threshold_bytes", options.release_threshold_bytes, true);
  amount("INITIAL_BYTES", "initial_bytes", options.initial_bytes, false);
  if (options.name.empty()) options.name = name;
  options.origin = origin.empty() ? "no " + prefix + "* variable set: the values of the code"
                                  : origin + "; the rest from the code";
  return options;
}

}  // namespace cuscope

#endif  // CUSCOPE_DETAIL_HOST_CODE
