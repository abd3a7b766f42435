// SPDX-License-Identifier: Apache-2.0
// What every benchmark shares: command-line options, CUDA error checks, statistics, a table
// printed on stdout and the JSON file written with --json. The JSON layout ("schema":
// "cuscope-bench/1") is described in benchmarks/README.md; benchmarks/collect.py reads it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#ifndef CUSCOPE_BENCH_SIMULATED
#  define CUSCOPE_BENCH_SIMULATED 0
#endif

namespace cuscope_bench {

inline constexpr bool simulated = CUSCOPE_BENCH_SIMULATED != 0;
inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

// Errors ------------------------------------------------------------------------------------------

/// Throws std::runtime_error naming the call and the CUDA error when status is not cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(std::string(what) + " failed with " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ")");
}

}  // namespace cuscope_bench

/// Checks a CUDA runtime call; the benchmark stops with a non-zero exit code when it fails.
#define CUSCOPE_BENCH_CHECK(call) ::cuscope_bench::check((call), #call)

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

// Time and statistics
// -------------------------------------------------------------------------------

using steady = std::chrono::steady_clock;

/// Nanoseconds between two time points.
inline double ns_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

/// Median, quartiles and extremes of a sample.
struct summary {
  double median = 0;
  double p25 = 0;
  double p75 = 0;
  double min = 0;
  double max = 0;
  std::size_t n = 0;

  /// Interquartile range relative to the median, in percent: the spread reported beside medians.
  [[nodiscard]] double spread_pct() const {
    return median > 0 ? (p75 - p25) / median * 100.0 : 0.0;
  }
  [[nodiscard]] json to_json() const {
    json j = json::object();
    j.set("median", median);
    j.set("p25", p25);
    j.set("p75", p75);
    j.set("min", min);
    j.set("max", max);
    j.set("n", n);
    j.set("spread_pct", spread_pct());
    return j;
  }
};

inline summary summarize(std::vector<double> v) {
  summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    const double x = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(x));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (x - static_cast<double>(lo));
  };
  s.median = at(0.5);
  s.p25 = at(0.25);
  s.p75 = at(0.75);
  s.min = v.front();
  s.max = v.back();
  s.n = v.size();
  return s;
}

/// "312 ns ±2%": a median duration and its spread.
inline std::string format_ns_spread(const summary& s) {
  return format_ns(s.median) + " ±" + fixed(s.spread_pct(), 0) + "%";
}

/// The order in which alternatives run in a round: rotated by one each round, so that no
/// alternative always runs first (or always right after another).
inline std::vector<std::size_t> round_order(std::size_t alternatives, std::size_t round) {
  std::vector<std::size_t> order(alternatives);
  for (std::size_t i = 0; i < alternatives; ++i)
    order[i] = (i + round) % alternatives;
  return order;
}

/// Geometric mean of positive values; NaN when there are none.
inline double geometric_mean(const std::vector<double>& v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double log_sum = 0;
  for (const double x : v)
    log_sum += std::log(x);
  return std::exp(log_sum / static_cast<double>(v.size()));
}

// Tables
// -------------------------------------------------------------------------------------------

/// A table printed on stdout and kept in the JSON (the results report shows it again).
class table {
 public:
  table(std::string title, std::vector<std::string> columns)
      : title_(std::move(title)), columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) {
    cells.resize(columns_.size());
    rows_.push_back(std::move(cells));
  }

  void print(FILE* f = stdout) const {
    std::vector<std::size_t> width(columns_.size());
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      width[c] = columns_[c].size();
      for (const auto& r : rows_)
        width[c] = std::max(width[c], display_width(r[c]));
    }
    std::fprintf(f, "\n%s\n", title_.c_str());
    const auto line = [&](const std::vector<std::string>& cells) {
      std::string out;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const std::size_t fill = width[c] - std::min(width[c], display_width(cells[c]));
        if (c == 0)
          out += cells[c] + std::string(fill, ' ');
        else
          out += "  " + std::string(fill, ' ') + cells[c];
      }
      std::fprintf(f, "%s\n", out.c_str());
    };
    line(columns_);
    std::size_t total = 0;
    for (const std::size_t w : width)
      total += w + 2;
    std::fprintf(f, "%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
    for (const auto& r : rows_)
      line(r);
  }

  [[nodiscard]] json to_json() const {
    json j = json::object();
    j.set("title", title_);
    json cols = json::array();
    for (const auto& c : columns_)
      cols.push(c);
    j.set("columns", std::move(cols));
    json rows = json::array();
    for (const auto& r : rows_) {
      json row = json::array();
      for (const auto& c : r)
        row.push(c);
      rows.push(std::move(row));
    }
    j.set("rows", std::move(rows));
    return j;
  }

 private:
  // Counts UTF-8 code points, so that "±" takes one column.
  static std::size_t display_width(const std::string& s) {
    std::size_t n = 0;
    for (const char c : s)
      if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
    return n;
  }

  std::string title_;
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// The device --------------------------------------------------------------------------------------

/// What the runtime says about the current device and itself.
inline json device_info() {
  json j = json::object();
  int device = 0;
  CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUSCOPE_BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  j.set("index", device);
  j.set("name", std::string(prop.name));
  j.set("compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
  j.set("multiprocessors", prop.multiProcessorCount);
  j.set("total_bytes", static_cast<std::size_t>(prop.totalGlobalMem));
  const auto attribute = [&](const char* name, cudaDeviceAttr attr) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess)
      j.set(name, value);
    else
      (void)cudaGetLastError();
  };
  attribute("clock_khz", cudaDevAttrClockRate);
  attribute("memory_clock_khz", cudaDevAttrMemoryClockRate);
  int version = 0;
  if (cudaDriverGetVersion(&version) == cudaSuccess) j.set("driver_api_version", version);
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) j.set("runtime_version", version);
  (void)cudaGetLastError();
  j.set("simulated", simulated);
  return j;
}

/// How this program was compiled.
inline json build_info() {
  json j = json::object();
#if defined(__OPTIMIZE__)
  j.set("optimized", true);
#else
  j.set("optimized", false);
#endif
#if defined(__VERSION__)
  j.set("compiler", std::string(__VERSION__));
#endif
#if defined(__CUDACC_VER_MAJOR__)
  j.set("nvcc", std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__));
#endif
  j.set("cudart_headers", CUDART_VERSION);
  return j;
}

// Device memory helpers -------------------------------------------------------------------------

/// Fills bytes at p with value on stream, reads the first and the last byte back and throws
/// unless both hold value: proves that the memory is usable. Synchronizes stream.
inline void verify_memory(void* p, std::size_t bytes, cudaStream_t stream, unsigned char value,
                          const std::string& what) {
  if (bytes == 0) return;
  unsigned char back[2] = {0, 0};
  auto* base = static_cast<unsigned char*>(p);
  CUSCOPE_BENCH_CHECK(cudaMemsetAsync(p, value, bytes, stream));
  CUSCOPE_BENCH_CHECK(cudaMemcpyAsync(&back[0], base, 1, cudaMemcpyDeviceToHost, stream));
  CUSCOPE_BENCH_CHECK(
      cudaMemcpyAsync(&back[1], base + (bytes - 1), 1, cudaMemcpyDeviceToHost, stream));
  CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(stream));
  if (back[0] != value || back[1] != value)
    throw std::runtime_error("self-check failed: " + what + ": wrote " + std::to_string(value) +
                             ", read back " + std::to_string(back[0]) + " and " +
                             std::to_string(back[1]));
}

/// A raw pool made with cudaMemPoolCreate and tuned as the docs advise: a release threshold of
/// UINT64_MAX keeps freed memory across synchronizations. Destroyed with the object.
class raw_pool {
 public:
  raw_pool() {
    int device = 0;
    CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    CUSCOPE_BENCH_CHECK(cudaMemPoolCreate(&pool_, &props));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  raw_pool(const raw_pool&) = delete;
  raw_pool& operator=(const raw_pool&) = delete;
  ~raw_pool() { (void)cudaMemPoolDestroy(pool_); }
  [[nodiscard]] cudaMemPool_t get() const noexcept { return pool_; }

 private:
  cudaMemPool_t pool_ = nullptr;
};

/// Reads a 64-bit attribute of a pool.
inline std::size_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t v = 0;
  CUSCOPE_BENCH_CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return static_cast<std::size_t>(v);
}

/// Starts a pool's reserved and used peaks afresh (changes no setting of the pool).
inline void reset_pool_peaks(cudaMemPool_t pool) {
  std::uint64_t zero = 0;
  CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  zero = 0;
  CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

/// The current device's default pool.
inline cudaMemPool_t default_pool() {
  int device = 0;
  CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool = nullptr;
  CUSCOPE_BENCH_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

/// Sets the release threshold of the device's default pool (shared with every library in the
/// process) and restores the previous value when destroyed. note() says so, for the output.
class default_pool_threshold {
 public:
  explicit default_pool_threshold(std::uint64_t bytes) : pool_(default_pool()) {
    CUSCOPE_BENCH_CHECK(
        cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &previous_));
    CUSCOPE_BENCH_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &bytes));
    int device = 0;
    CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
    cudaMemPool_t current = nullptr;
    CUSCOPE_BENCH_CHECK(cudaDeviceGetMemPool(&current, device));
    current_is_default_ = current == pool_;
    bytes_ = bytes;
  }
  default_pool_threshold(const default_pool_threshold&) = delete;
  default_pool_threshold& operator=(const default_pool_threshold&) = delete;
  ~default_pool_threshold() {
    if (cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &previous_) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "warning: could not restore the default pool's release threshold\n");
    }
  }
  [[nodiscard]] cudaMemPool_t pool() const noexcept { return pool_; }
  [[nodiscard]] std::string note() const {
    std::string n =
        "The device's default pool is shared by the whole process: this benchmark set "
        "its release threshold from " +
        std::to_string(previous_) + " to " + std::to_string(bytes_) +
        " bytes for the default-pool runs and restores " + std::to_string(previous_) +
        " before it exits.";
    if (!current_is_default_)
      n += " cudaMallocAsync does NOT use the default pool here (cudaDeviceSetMemPool was called).";
    return n;
  }

 private:
  cudaMemPool_t pool_ = nullptr;
  std::uint64_t previous_ = 0;
  std::uint64_t bytes_ = 0;
  bool current_is_default_ = true;
};

// Reports ----------------------------------------------------------------------------------------

/// Collects what a benchmark prints and writes: configuration, notes, tables, rows of results and
/// the headline figures (ratios with the goal they are measured against).
class report {
 public:
  report(std::string benchmark, const args& a) : args_(a) {
    root_.set("schema", "cuscope-bench/1");
    root_.set("benchmark", std::move(benchmark));
    root_.set("simulated", simulated);
    root_.set("quick", a.quick());
    root_.set("command_line", a.command_line());
    root_.set("device", device_info());
    root_.set("build", build_info());
  }

  json config = json::object();  ///< What was run: sizes, rounds, iterations.
  json results = json::array();  ///< One entry per measured configuration.

  /// A sentence printed after the tables and kept in the JSON.
  void note(std::string text) { notes_.push_back(std::move(text)); }

  /// Prints the table now and keeps it.
  void add_table(const table& t) {
    t.print();
    tables_.push(t.to_json());
  }

  /// A headline figure. goal is "at most" or "at least" the target (or "" for none): the report
  /// and the plot mark whether the figure meets it.
  void headline(const std::string& name, double value, const std::string& unit,
                const std::string& goal = "", double target = 0, const std::string& detail = "") {
    json h = json::object();
    h.set("name", name);
    h.set("value", value);
    h.set("unit", unit);
    if (!goal.empty()) {
      h.set("goal", goal);
      h.set("target", target);
      const bool meets = goal == "at most" ? value <= target : value >= target;
      h.set("meets", std::isfinite(value) ? json(meets) : json());
    }
    if (!detail.empty()) h.set("detail", detail);
    headlines_.push(std::move(h));
    std::string line = "headline: " + name + ": " + fixed(value, value < 10 ? 3 : 1) +
                       (unit == "x" || unit == "%" ? unit : " " + unit);
    if (!goal.empty()) {
      line += " (goal: " + goal + " " + fixed(target, 2) + ": ";
      line += !std::isfinite(value)                                     ? "not measured)"
              : (goal == "at most" ? value <= target : value >= target) ? "met)"
                                                                        : "NOT met)";
    }
    headline_lines_.push_back(line);
  }

  /// Prints the notes and headlines and writes the JSON file when --json was given.
  /// Returns the exit code for main.
  int finish() {
    if (simulated)
      note(
          "Simulated device: timings measure the simulation on the host, not a GPU; only the "
          "shape of the output and the self-checks mean anything.");
    std::printf("\n");
    for (const auto& n : notes_)
      std::printf("note: %s\n", n.c_str());
    for (const auto& h : headline_lines_)
      std::printf("%s\n", h.c_str());
    const std::string path = args_.json_path();
    if (path.empty()) return 0;
    root_.set("config", config);
    json notes = json::array();
    for (const auto& n : notes_)
      notes.push(n);
    root_.set("notes", std::move(notes));
    root_.set("tables", tables_);
    root_.set("results", results);
    root_.set("headline", headlines_);
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    const std::string text = root_.dump();
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", path.c_str());
    return 0;
  }

 private:
  const args& args_;
  json root_ = json::object();
  json tables_ = json::array();
  json headlines_ = json::array();
  std::vector<std::string> notes_;
  std::vector<std::string> headline_lines_;
};

/// Runs a benchmark's body: an exception (a CUDA error, a failed self-check) ends it with exit
/// code 1 and a message on stderr.
template <class F>
int run_main(const char* name, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace cuscope_bench
