// SPDX-License-Identifier: Apache-2.0
// Sizes, durations and ratios as text, and sizes parsed from the command line.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "common.hpp"

namespace cuscope_bench {

// Sizes and text
// -----------------------------------------------------------------------------------

/// "256 B", "64 KiB", "1 GiB", "1.5 MiB".
inline std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

/// A number with a fixed count of decimals.
inline std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// A duration in nanoseconds, shown with a unit that keeps three significant digits or so.
inline std::string format_ns(double ns) {
  if (!std::isfinite(ns)) return "-";
  char buf[64];
  if (ns < 1e4)
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e7)
    std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  return buf;
}

/// "1.02x".
inline std::string format_ratio(double r) {
  if (!std::isfinite(r)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, r < 10 ? "%.2fx" : "%.1fx", r);
  return buf;
}

/// Parses "256", "4K", "64M", "1G" (binary units; a trailing "iB" or "B" is accepted).
inline std::size_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  const unsigned long long n = std::stoull(text, &pos);
  std::string unit = text.substr(pos);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  std::size_t scale = 1;
  if (unit == "K" || unit == "k")
    scale = KiB;
  else if (unit == "M" || unit == "m")
    scale = MiB;
  else if (unit == "G" || unit == "g")
    scale = GiB;
  else if (!unit.empty() && unit != "B" && unit != "b")
    throw std::invalid_argument("not a size: '" + text + "' (try 256, 4K, 64M or 1G)");
  return static_cast<std::size_t>(n) * scale;
}

}  // namespace cuscope_bench
