// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The version of cuscope, for preprocessor checks and for reports.
///
/// CMake generates this header from cmake/version.hpp.in and the version in project(); the copy
/// in include/cuscope/ serves those who use the headers without CMake, and configuring fails when
/// the two differ.
#pragma once

/// @brief Major version: incremented for changes that break the public contract.
#define CUSCOPE_VERSION_MAJOR 0

/// @brief Minor version: incremented for additions that keep the public contract.
#define CUSCOPE_VERSION_MINOR 1

/// @brief Patch version: incremented for fixes.
#define CUSCOPE_VERSION_PATCH 0

/// @brief The version as one number, major * 10000 + minor * 100 + patch (1.2.3 is 10203).
#define CUSCOPE_VERSION 100

/// @brief The version as a string, "major.minor.patch".
#define CUSCOPE_VERSION_STRING "0.1.0"
