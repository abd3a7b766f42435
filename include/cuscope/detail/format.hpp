// SPDX-License-Identifier: Apache-2.0
// Human units and small text helpers for messages and reports. Used only on cold paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "config.hpp"

namespace cuscope::detail {

/// "512 B", "1.50 KiB", "3.25 GiB".
CUSCOPE_DETAIL_COLD inline std::string format_bytes(std::size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  char buf[32];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
    return buf;
  }
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(buf, sizeof buf, "%.2f %s", value, units[unit]);
  return buf;
}

/// "0x7f12a4000000"
CUSCOPE_DETAIL_COLD inline std::string format_pointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace cuscope::detail
