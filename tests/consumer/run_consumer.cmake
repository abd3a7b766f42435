# SPDX-License-Identifier: Apache-2.0
# cmake -DMETHOD=<find_package|add_subdirectory|FetchContent> -DWORK_DIR=<dir> [-DPREFIX=<install
#   prefix>] [-DSOURCE_DIR=<cuscope source>] <see consumer_common.cmake> -P run_consumer.cmake
# Builds tests/consumer/project with the method, runs it and checks it ran on the simulated device.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

# Options for the cuscope that add_subdirectory and FetchContent build inside the consumer: none of
# its tests, examples or benchmarks, and no CUDA language (nothing here needs nvcc).
set(inner_cuscope
  -DCUSCOPE_BUILD_TESTS=OFF -DCUSCOPE_BUILD_EXAMPLES=OFF -DCUSCOPE_BUILD_BENCHMARKS=OFF
  -DCUSCOPE_REAL_RUNTIME=OFF)

if(METHOD STREQUAL "find_package")
  if(NOT IS_DIRECTORY "${PREFIX}")
    message(FATAL_ERROR "find_package: no install prefix at '${PREFIX}' (test consumer.install)")
  endif()
  # Only the install prefix: the consumer must not find cuscope anywhere else.
  cuscope_consumer(${WORK_DIR} find_package -DCMAKE_PREFIX_PATH=${PREFIX}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  cuscope_check_found_in(${WORK_DIR} ${PREFIX})
elseif(METHOD STREQUAL "add_subdirectory" OR METHOD STREQUAL "FetchContent")
  cuscope_consumer(${WORK_DIR} ${METHOD} -DCUSCOPE_SOURCE_DIR=${SOURCE_DIR} ${inner_cuscope})
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown METHOD '${METHOD}'")
endif()
