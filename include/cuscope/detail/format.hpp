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
std::string format_bytes(std::size_t bytes);

/// "0x7f12a4000000"
std::string format_pointer(const void* p);

/// n and noun, plural unless n is 1: "1 element", "0 elements", "3 samples"; the plural is noun
/// and "s" unless given ("2 batches").
std::string format_count(std::size_t n, const char* noun, const char* plural = nullptr);

/// s as a JSON string, quotes and escapes included, appended to out.
void json_string(std::string& out, const std::string& s);

/// p as a JSON string: "0x7f12a4000000".
std::string json_pointer(const void* p);

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

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

CUSCOPE_DETAIL_COLD inline std::string format_pointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

CUSCOPE_DETAIL_COLD inline std::string format_count(std::size_t n, const char* noun,
                                                    const char* plural) {
  std::string s = std::to_string(n);
  s += ' ';
  if (n == 1 || plural == nullptr) s += noun;
  if (n != 1) s += plural != nullptr ? plural : "s";
  return s;
}

CUSCOPE_DETAIL_COLD inline void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += u;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

CUSCOPE_DETAIL_COLD inline std::string json_pointer(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "\"0x%llx\"",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return b;
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

}  // namespace cuscope::detail
