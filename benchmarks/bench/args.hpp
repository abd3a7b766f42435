// SPDX-License-Identifier: Apache-2.0
// The command line every benchmark shares: --quick, --json FILE, --help and its own options.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "text.hpp"

namespace cuscope_bench {

// Command line
// -------------------------------------------------------------------------------------

/// The options of a benchmark: --quick, --json FILE, --help and the benchmark's own valued options.
class args {
 public:
  /// value_options lists the benchmark's own options that take a value, with their help text.
  args(int argc, char** argv, std::string description,
       std::vector<std::pair<std::string, std::string>> value_options)
      : description_(std::move(description)), options_(std::move(value_options)) {
    program_ = argc > 0 ? argv[0] : "benchmark";
    for (int i = 1; i < argc; ++i)
      command_line_ += (i > 1 ? " " : "") + std::string(argv[i]);
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--quick") {
        quick_ = true;
      } else if (a == "--help" || a == "-h") {
        usage(stdout);
        std::exit(0);
      } else if (a == "--json" || known(a)) {
        if (i + 1 >= argc) fail(a + " needs a value");
        values_.emplace_back(a, argv[++i]);
      } else {
        fail("unknown option " + a);
      }
    }
  }

  [[nodiscard]] bool quick() const noexcept { return quick_; }
  [[nodiscard]] std::string json_path() const { return get("--json", ""); }
  [[nodiscard]] const std::string& command_line() const noexcept { return command_line_; }
  [[nodiscard]] bool has(const std::string& name) const {
    for (const auto& v : values_)
      if (v.first == name) return true;
    return false;
  }
  [[nodiscard]] std::string get(const std::string& name, const std::string& fallback) const {
    std::string r = fallback;
    for (const auto& v : values_)
      if (v.first == name) r = v.second;
    return r;
  }
  [[nodiscard]] long long integer(const std::string& name, long long fallback) const {
    if (!has(name)) return fallback;
    try {
      return std::stoll(get(name, ""));
    } catch (const std::exception&) {
      fail(name + " needs an integer");
    }
  }
  [[nodiscard]] std::size_t count(const std::string& name, std::size_t fallback) const {
    const long long v = integer(name, static_cast<long long>(fallback));
    if (v < 1) fail(name + " must be at least 1");
    return static_cast<std::size_t>(v);
  }
  [[nodiscard]] double number(const std::string& name, double fallback) const {
    if (!has(name)) return fallback;
    try {
      return std::stod(get(name, ""));
    } catch (const std::exception&) {
      fail(name + " needs a number");
    }
  }
  /// A comma-separated list of sizes ("256,4K,1G").
  [[nodiscard]] std::vector<std::size_t> sizes(const std::string& name,
                                               std::vector<std::size_t> fallback) const {
    if (!has(name)) return fallback;
    std::vector<std::size_t> out;
    const std::string text = get(name, "");
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      try {
        out.push_back(parse_size(text.substr(start, comma - start)));
      } catch (const std::exception&) {
        fail(name + ": '" + text + "' is not a list of sizes such as 256,4K,64M,1G");
      }
      if (out.back() == 0) fail(name + ": sizes must be positive");
      start = comma + 1;
    }
    return out;
  }
  /// A comma-separated list of positive integers.
  [[nodiscard]] std::vector<std::size_t> counts(const std::string& name,
                                                std::vector<std::size_t> fallback) const {
    return has(name) ? sizes(name, {}) : fallback;
  }

 private:
  bool known(const std::string& a) const {
    for (const auto& o : options_)
      if (o.first == a) return true;
    return false;
  }
  void usage(FILE* f) const {
    std::fprintf(f, "%s\n\nusage: %s [--quick] [--json FILE]", description_.c_str(),
                 program_.c_str());
    for (const auto& o : options_)
      std::fprintf(f, " [%s VALUE]", o.first.c_str());
    std::fprintf(f,
                 "\n  --quick        tiny sizes and iteration counts (a smoke run)\n"
                 "  --json FILE    also write the results as JSON to FILE\n");
    for (const auto& o : options_)
      std::fprintf(f, "  %-14s %s\n", o.first.c_str(), o.second.c_str());
  }
  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), message.c_str());
    usage(stderr);
    std::exit(2);
  }

  std::string description_;
  std::vector<std::pair<std::string, std::string>> options_;
  std::vector<std::pair<std::string, std::string>> values_;
  std::string program_;
  std::string command_line_;
  bool quick_ = false;
};

}  // namespace cuscope_bench
