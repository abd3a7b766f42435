// SPDX-License-Identifier: Apache-2.0
// What nearly every test includes, precompiled once per set of compile flags (tests/CMakeLists.txt,
// CUSCOPE_TEST_PCH): Catch2, the test support and the library. Each test still includes what it
// uses, so that it compiles the same without it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cuscope/cuscope.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "test_support.hpp"
