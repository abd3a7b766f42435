// SPDX-License-Identifier: Apache-2.0
// Time, statistics of samples and the order of alternatives in interleaved rounds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "json.hpp"
#include "text.hpp"

namespace cuscope_bench {

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

}  // namespace cuscope_bench
