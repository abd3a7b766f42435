// SPDX-License-Identifier: Apache-2.0
// The source of each <runner>_pch object library, which makes the precompiled test headers
// (tests/CMakeLists.txt): CMake makes them for a target only where one of its sources uses them,
// and the runner's main.cpp cannot (it defines CATCH_CONFIG_RUNNER before including Catch2).
#include "test_pch.hpp"
