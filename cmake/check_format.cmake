# SPDX-License-Identifier: Apache-2.0
# cmake -DCLANG_FORMAT=<exe> -DSOURCE_DIR=<repo> -P check_format.cmake
# Fails when any C++ or CUDA source differs from what clang-format makes of it.
file(GLOB_RECURSE sources
  ${SOURCE_DIR}/include/*.hpp ${SOURCE_DIR}/sim/*.hpp ${SOURCE_DIR}/sim/*.cpp
  ${SOURCE_DIR}/tests/*.hpp ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.cu
  ${SOURCE_DIR}/examples/*.hpp ${SOURCE_DIR}/examples/*.cpp ${SOURCE_DIR}/examples/*.cu
  ${SOURCE_DIR}/examples/*.cuh
  ${SOURCE_DIR}/benchmarks/*.hpp ${SOURCE_DIR}/benchmarks/*.cpp ${SOURCE_DIR}/benchmarks/*.cu
  ${SOURCE_DIR}/test_package/*.cpp)
list(FILTER sources EXCLUDE REGEX "/build[^/]*/")
list(SORT sources)
execute_process(
  COMMAND ${CLANG_FORMAT} --dry-run --Werror --style=file ${sources}
  WORKING_DIRECTORY ${SOURCE_DIR}
  RESULT_VARIABLE result)
list(LENGTH sources count)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "clang-format: sources differ from the style in .clang-format; "
                      "run: clang-format -i <files>")
endif()
message(STATUS "clang-format: ${count} files clean")
