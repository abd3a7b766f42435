// SPDX-License-Identifier: Apache-2.0
// The Catch2 that the build found: v3, or v2.13 as Debian packages it.
#pragma once

#include <string>

#if CUSCOPE_CATCH2_MAJOR >= 3
#  include <catch2/catch_test_macros.hpp>
#  include <catch2/generators/catch_generators.hpp>
#  include <catch2/generators/catch_generators_range.hpp>
#  include <catch2/matchers/catch_matchers_string.hpp>
#else
#  include <catch2/catch.hpp>
#endif

namespace cuscope::test {

/// Matches a string that contains text (Catch2 v3 ContainsSubstring, v2 Contains).
inline auto contains(const std::string& text) {
#if CUSCOPE_CATCH2_MAJOR >= 3
  return Catch::Matchers::ContainsSubstring(text);
#else
  return Catch::Matchers::Contains(text);
#endif
}

}  // namespace cuscope::test
