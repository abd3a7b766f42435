// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A per-test leak check that caches cannot fool: the pools a suite watches are compared
/// by their *used* bytes (live allocations, never the cache) before and after each test, then
/// synchronized and trimmed so that the next test starts from the same reserve. On the simulated
/// device every allocation, stream, event and pool a test leaves behind is named as well.
///
/// Framework adapters: <cuscope/testing/catch2.hpp> (Catch2 v2 and v3) and
/// <cuscope/testing/gtest.hpp> (GoogleTest). docs/testing.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "detail/format.hpp"
#include "memory_pool.hpp"
#include "stream.hpp"

#if defined(__GNUC__) || defined(__clang__)
namespace cuscope::sim {
// Defined when the program is linked with the simulated device (cuscope::sim), null otherwise.
[[gnu::weak]] std::string outstanding_report();
}  // namespace cuscope::sim
#  define CUSCOPE_DETAIL_TESTING_SEES_SIM 1
#else
#  define CUSCOPE_DETAIL_TESTING_SEES_SIM 0
#endif

namespace cuscope::testing {

/// @brief What the leak check does around each test.
struct leak_check_options {
  /// @brief After each test, synchronize each watched pool's device and trim the pool to trim_to
  /// bytes, so that memory a test cached is not carried into the next one.
  bool trim_between_tests = true;
  /// @brief Bytes each pool keeps when trimmed between tests.
  std::size_t trim_to = 0;
  /// @brief When the program runs on the simulated device, also name every allocation, stream,
  /// event and pool that a test created and did not release.
  bool check_simulated_device = true;
};

/// @brief The leak check of a test suite: the pools it watches and the test under way. One per
/// process (instance()); the framework adapters call begin() and end() around every test.
class leak_check {
 public:
  /// @brief The process's leak check.
  static leak_check& instance() {
    static leak_check check;
    return check;
  }

  /// @brief Watches pool from now on, shown as name (its description when empty). The pool must
  /// stay alive until unwatch() or the end of the suite. Watching a pool twice changes its name.
  void watch(memory_pool_ref pool, std::string name = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (name.empty()) name = pool.describe();
    for (watched& w : pools_)
      if (w.pool == pool) {
        w.name = std::move(name);
        return;
      }
    pools_.push_back(watched{pool, std::move(name), 0, false});
  }

  /// @brief Stops watching pool (before it is destroyed).
  void unwatch(memory_pool_ref pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    pools_.erase(std::remove_if(pools_.begin(), pools_.end(),
                                [&](const watched& w) { return w.pool == pool; }),
                 pools_.end());
  }

  /// @brief Number of pools watched.
  [[nodiscard]] std::size_t watched_pools() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pools_.size();
  }

  /// @brief The options; change them before the first test.
  leak_check_options& options() noexcept { return options_; }

  /// @brief A test begins: remembers what each watched pool has in use, and what the simulated
  /// device has outstanding.
  void begin(std::string test_name) {
    std::lock_guard<std::mutex> lock(mutex_);
    test_ = std::move(test_name);
    for (watched& w : pools_) {
      w.used_at_begin = w.pool.stats().used_bytes;
      w.seen = true;
    }
    sim_at_begin_ = simulated_outstanding();
  }

  /// @brief The test ended: returns what it leaked, one line each and empty when nothing, then
  /// synchronizes and trims the watched pools (leak_check_options::trim_between_tests).
  /// @throws cuda_error when a pool cannot be read, synchronized or trimmed.
  [[nodiscard]] std::string end() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string found;
    for (watched& w : pools_) {
      if (!w.seen) continue;  // watched during the test: no figure from its beginning
      w.seen = false;
      const std::size_t used = w.pool.stats().used_bytes;
      if (used > w.used_at_begin)
        found += "test \"" + test_ + "\" left " + detail::format_bytes(used - w.used_at_begin) +
                 " in use in " + w.name + " (" + detail::format_bytes(w.used_at_begin) +
                 " at its beginning, " + detail::format_bytes(used) + " at its end)\n";
    }
    if (options_.check_simulated_device) {
      for (const std::string& line : new_lines(sim_at_begin_, simulated_outstanding()))
        found += "test \"" + test_ + "\" left on the simulated device: " + line + "\n";
    }
    if (options_.trim_between_tests) {
      for (watched& w : pools_) {
        const scoped_device on(w.pool.device());
        CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), w.name);
        w.pool.trim_to(options_.trim_to);
      }
    }
    return found;
  }

  /// @brief Whether the program runs on the simulated device (linked with cuscope::sim).
  [[nodiscard]] static bool simulated() noexcept {
#if CUSCOPE_DETAIL_TESTING_SEES_SIM
    return &cuscope::sim::outstanding_report != nullptr;
#else
    return false;
#endif
  }

 private:
  struct watched {
    memory_pool_ref pool;
    std::string name;
    std::size_t used_at_begin = 0;
    bool seen = false;
  };

  leak_check() = default;

  [[nodiscard]] std::string simulated_outstanding() const {
#if CUSCOPE_DETAIL_TESTING_SEES_SIM
    if (options_.check_simulated_device && simulated()) return cuscope::sim::outstanding_report();
#endif
    return {};
  }

  // The lines of after that before does not have (as many times as they are new).
  static std::vector<std::string> new_lines(const std::string& before, const std::string& after) {
    const auto split = [](const std::string& text) {
      std::vector<std::string> lines;
      std::size_t start = 0;
      while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        if (end > start) lines.push_back(text.substr(start, end - start));
        start = end + 1;
      }
      std::sort(lines.begin(), lines.end());
      return lines;
    };
    const std::vector<std::string> a = split(before);
    const std::vector<std::string> b = split(after);
    std::vector<std::string> out;
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(out));
    return out;
  }

  mutable std::mutex mutex_;
  std::vector<watched> pools_;
  leak_check_options options_;
  std::string test_;
  std::string sim_at_begin_;
};

/// @brief Watches pool for the life of this object (a suite's fixture or main()).
class watch_pool {
 public:
  explicit watch_pool(memory_pool_ref pool, std::string name = {}) : pool_(pool) {
    leak_check::instance().watch(pool, std::move(name));
  }
  watch_pool(const watch_pool&) = delete;
  watch_pool& operator=(const watch_pool&) = delete;
  ~watch_pool() { leak_check::instance().unwatch(pool_); }

 private:
  memory_pool_ref pool_;
};

}  // namespace cuscope::testing
