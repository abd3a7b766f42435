# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD_DIR=<cuscope build> -DPREFIX=<dir> [-DCONFIG=<config>] -P install_prefix.cmake
# Installs the build into an empty prefix, as a user's cmake --install would.
cmake_minimum_required(VERSION 3.24)

file(REMOVE_RECURSE ${PREFIX})
# Only a multi-config build needs --config; a single-config one installs what it built.
set(config_args "")
if(NOT "${CONFIG}" STREQUAL "")
  set(config_args --config ${CONFIG})
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} ${config_args}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed (exit ${result})")
endif()
# The per-configuration part of the exported targets says where the archive is.
file(GLOB_RECURSE configured ${PREFIX}/cuscopeTargets-*.cmake)
if(NOT EXISTS ${PREFIX}/include/cuscope/version.hpp OR NOT configured)
  message(FATAL_ERROR "cmake --install left no version.hpp or no cuscopeTargets-<config>.cmake "
                      "in ${PREFIX}")
endif()
