// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The per-test leak check (<cuscope/testing.hpp>) as a GoogleTest event listener. Call
/// cuscope::testing::install_gtest_listener() once before RUN_ALL_TESTS(), or write
/// CUSCOPE_GTEST_LEAK_CHECK(); at namespace scope in one translation unit (for gtest_main), and
/// watch the suite's pools (cuscope::testing::watch_pool). A test that leaks then fails with one
/// line per leaked allocation. docs/testing.md.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "../testing.hpp"

namespace cuscope::testing {

namespace detail {

/// Checks each test between OnTestStart and OnTestEnd. GoogleTest still counts failures for the
/// test in OnTestEnd, and calls the listeners' OnTestEnd in reverse order, so this one, appended
/// after the result printer, reports before the test's result is printed.
class gtest_leak_listener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override {
    leak_check::instance().begin(std::string(info.test_suite_name()) + "." + info.name());
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::string leaks;
    try {
      leaks = leak_check::instance().end();
    } catch (const std::exception& e) {
      leaks = std::string("the leak check failed: ") + e.what();
    }
    if (!leaks.empty()) ADD_FAILURE() << "cuscope leak check:\n" << leaks;
  }
};

}  // namespace detail

/// @brief Adds the leak check to GoogleTest's listeners; a second call does nothing. Returns true.
inline bool install_gtest_listener() {
  static const bool installed = [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new detail::gtest_leak_listener);
    return true;
  }();
  return installed;
}

}  // namespace cuscope::testing

/// Installs the GoogleTest leak check during static initialization (for programs that use
/// gtest_main); write it at namespace scope in one translation unit.
#define CUSCOPE_GTEST_LEAK_CHECK()                                         \
  [[maybe_unused]] static const bool cuscope_gtest_leak_check_installed_ = \
      ::cuscope::testing::install_gtest_listener()
