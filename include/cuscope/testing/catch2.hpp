// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The per-test leak check (<cuscope/testing.hpp>) as a Catch2 listener, for Catch2 v3 and
/// v2.13. Include it in one translation unit of the test program, after Catch2's own header for
/// v2; watch the suite's pools (cuscope::testing::watch_pool). Every run of a test case (each
/// leaf section is one run) is then checked: a leak fails the test case with one line per
/// leaked allocation. docs/testing.md.
#pragma once

#if __has_include(<catch2/reporters/catch_reporter_event_listener.hpp>)
#  include <catch2/catch_test_macros.hpp>
#  include <catch2/reporters/catch_reporter_event_listener.hpp>
#  include <catch2/reporters/catch_reporter_registrars.hpp>
#  define CUSCOPE_DETAIL_CATCH2_V3 1
#else
#  include <catch2/catch.hpp>
#  define CUSCOPE_DETAIL_CATCH2_V3 0
#endif

#include <string>

#include "../testing.hpp"

namespace cuscope::testing::detail {

#if CUSCOPE_DETAIL_CATCH2_V3
using catch2_listener_base = Catch::EventListenerBase;
#else
using catch2_listener_base = Catch::TestEventListenerBase;
#endif

/// Begins the check when a run of a test case enters its outermost section, and ends it when
/// that section ends: the test case's totals are counted after it, so a failure reported there
/// fails the test case.
class catch2_leak_listener : public catch2_listener_base {
 public:
  using catch2_listener_base::catch2_listener_base;

  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    catch2_listener_base::testCaseStarting(info);
    test_ = info.name;
    depth_ = 0;
  }

  void sectionStarting(Catch::SectionInfo const& info) override {
    catch2_listener_base::sectionStarting(info);
    if (depth_++ == 0) leak_check::instance().begin(test_);
  }

  void sectionEnded(Catch::SectionStats const& stats) override {
    catch2_listener_base::sectionEnded(stats);
    if (--depth_ != 0) return;
    std::string leaks;
    try {
      leaks = leak_check::instance().end();
    } catch (const std::exception& e) {
      leaks = std::string("the leak check failed: ") + e.what();
    }
    if (!leaks.empty()) FAIL_CHECK("cuscope leak check:\n" << leaks);
  }

 private:
  std::string test_;
  int depth_ = 0;
};

}  // namespace cuscope::testing::detail

// Catch2 v2 pastes the name into an identifier: it must be unqualified.
using cuscope_catch2_leak_listener = cuscope::testing::detail::catch2_leak_listener;
CATCH_REGISTER_LISTENER(cuscope_catch2_leak_listener)
