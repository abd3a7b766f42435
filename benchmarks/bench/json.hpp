// SPDX-License-Identifier: Apache-2.0
// JSON values written with --json (schema "cuscope-bench/1", described in benchmarks/README.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuscope_bench {

// JSON ------------------------------------------------------------------------------------------

/// A JSON value that keeps the order of object members, enough to write results.
class json {
 public:
  enum class kind {
    null,
    boolean,
    number,
    signed_integer,
    unsigned_integer,
    string,
    array,
    object
  };

  json() = default;
  json(std::nullptr_t) {}                                              // NOLINT: implicit
  json(bool b) : kind_(kind::boolean), bool_(b) {}                     // NOLINT: implicit
  json(double d) : kind_(kind::number), number_(d) {}                  // NOLINT: implicit
  json(const char* s) : kind_(kind::string), string_(s) {}             // NOLINT: implicit
  json(std::string s) : kind_(kind::string), string_(std::move(s)) {}  // NOLINT: implicit
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  json(T v) {  // NOLINT: implicit
    if constexpr (std::is_signed_v<T>) {
      kind_ = kind::signed_integer;
      signed_ = static_cast<std::int64_t>(v);
    } else {
      kind_ = kind::unsigned_integer;
      unsigned_ = static_cast<std::uint64_t>(v);
    }
  }

  [[nodiscard]] static json array() {
    json j;
    j.kind_ = kind::array;
    return j;
  }
  [[nodiscard]] static json object() {
    json j;
    j.kind_ = kind::object;
    return j;
  }

  /// Appends to an array.
  json& push(json v) {
    if (kind_ != kind::array) throw std::logic_error("json::push on a non-array");
    items_.push_back(std::move(v));
    return *this;
  }

  /// Sets a member of an object, replacing one of the same name.
  json& set(const std::string& key, json v) {
    if (kind_ != kind::object) throw std::logic_error("json::set on a non-object");
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      if (keys_[i] == key) {
        items_[i] = std::move(v);
        return *this;
      }
    }
    keys_.push_back(key);
    items_.push_back(std::move(v));
    return *this;
  }

  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }

  /// The text, indented by two spaces per level.
  [[nodiscard]] std::string dump() const {
    std::string out;
    write(out, 0);
    out += '\n';
    return out;
  }

 private:
  static std::string quote(const std::string& s) {
    std::string out = "\"";
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
        case '\r':
          out += "\\r";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out += buf;
          } else {
            out += c;
          }
      }
    }
    return out + "\"";
  }

  void write(std::string& out, int depth) const {
    const std::string pad(static_cast<std::size_t>(depth + 1) * 2, ' ');
    const std::string end_pad(static_cast<std::size_t>(depth) * 2, ' ');
    char buf[64];
    switch (kind_) {
      case kind::null:
        out += "null";
        return;
      case kind::boolean:
        out += bool_ ? "true" : "false";
        return;
      case kind::number:
        if (!std::isfinite(number_)) {
          out += "null";
          return;
        }
        std::snprintf(buf, sizeof buf, "%.9g", number_);
        out += buf;
        return;
      case kind::signed_integer:
        out += std::to_string(signed_);
        return;
      case kind::unsigned_integer:
        out += std::to_string(unsigned_);
        return;
      case kind::string:
        out += quote(string_);
        return;
      case kind::array: {
        if (items_.empty()) {
          out += "[]";
          return;
        }
        // Arrays of scalars stay on one line.
        const bool flat = std::all_of(items_.begin(), items_.end(), [](const json& j) {
          return j.kind_ != kind::array && j.kind_ != kind::object;
        });
        out += flat ? "[" : "[\n";
        for (std::size_t i = 0; i < items_.size(); ++i) {
          if (!flat) out += pad;
          items_[i].write(out, depth + 1);
          if (i + 1 < items_.size()) out += flat ? ", " : ",\n";
        }
        out += flat ? "]" : "\n" + end_pad + "]";
        return;
      }
      case kind::object: {
        if (items_.empty()) {
          out += "{}";
          return;
        }
        out += "{\n";
        for (std::size_t i = 0; i < items_.size(); ++i) {
          out += pad + quote(keys_[i]) + ": ";
          items_[i].write(out, depth + 1);
          if (i + 1 < items_.size()) out += ",\n";
        }
        out += "\n" + end_pad + "}";
        return;
      }
    }
  }

  kind kind_ = kind::null;
  bool bool_ = false;
  double number_ = 0;
  std::int64_t signed_ = 0;
  std::uint64_t unsigned_ = 0;
  std::string string_;
  std::vector<json> items_;        // array elements, or object member values
  std::vector<std::string> keys_;  // object member names
};

/// A JSON array of numbers.
template <class T>
json to_json(const std::vector<T>& values) {
  json j = json::array();
  for (const T& v : values)
    j.push(v);
  return j;
}

}  // namespace cuscope_bench
