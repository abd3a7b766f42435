# SPDX-License-Identifier: Apache-2.0
# cmake -DPKG_CONFIG=<exe> -DPREFIX=<install prefix> -DWORK_DIR=<dir>
#   <see consumer_common.cmake> -P check_pkg_config.cmake
# Compiles tests/consumer/project/main.cpp with nothing but what pkg-config says for cuscope-sim
# (which requires cuscope), runs it and checks it ran on the simulated device.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

file(GLOB_RECURSE pc_files ${PREFIX}/cuscope.pc)
list(LENGTH pc_files count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one cuscope.pc under ${PREFIX}, found: '${pc_files}'")
endif()
get_filename_component(pkgconfig_dir ${pc_files} DIRECTORY)
# Only the installed .pc files: nothing else on the machine may satisfy the look-up.
set(ENV{PKG_CONFIG_LIBDIR} ${pkgconfig_dir})
set(ENV{PKG_CONFIG_PATH} "")

foreach(package IN ITEMS cuscope cuscope-sim)
  cuscope_run("pkg-config ${package}: version" COMMAND ${PKG_CONFIG} --modversion ${package})
  string(STRIP "${cuscope_run_output}" version)
  if(NOT version STREQUAL EXPECTED_VERSION)
    message(FATAL_ERROR "${package}.pc says version '${version}', cuscope is ${EXPECTED_VERSION}")
  endif()
endforeach()

cuscope_run("pkg-config: flags" COMMAND ${PKG_CONFIG} --cflags cuscope-sim)
separate_arguments(cflags UNIX_COMMAND "${cuscope_run_output}")
cuscope_run("pkg-config: libs" COMMAND ${PKG_CONFIG} --libs cuscope-sim)
separate_arguments(libs UNIX_COMMAND "${cuscope_run_output}")

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(program ${WORK_DIR}/consumer${CMAKE_EXECUTABLE_SUFFIX})
cuscope_run("pkg-config: build" COMMAND
  ${CXX_COMPILER} -std=c++17 -Wall -Wextra -Wpedantic -Werror
    "-DCUSCOPE_CONSUMER_METHOD=\"pkg-config\""
    "-DCUSCOPE_CONSUMER_EXPECTED_VERSION=\"${EXPECTED_VERSION}\""
    ${cflags} ${CONSUMER_DIR}/main.cpp -o ${program} ${libs})
cuscope_run("pkg-config: run" COMMAND ${program})
cuscope_check_ran("pkg-config" "${cuscope_run_output}")
