# SPDX-License-Identifier: Apache-2.0
# Helpers for the cmake -P scripts of the consumer and packaging tests. Each script gets, with -D:
#   GENERATOR, CXX_COMPILER, CONFIG  how to build (as cuscope's own build; CONFIG may be empty)
#   CUDA_ROOT                        the CUDA toolkit cuscope's build found
#   EXPECTED_VERSION                 cuscope's version, which every consumer must see
#   CONSUMER_DIR                     tests/consumer/project
cmake_minimum_required(VERSION 3.24)

foreach(var IN ITEMS GENERATOR CXX_COMPILER CUDA_ROOT EXPECTED_VERSION CONSUMER_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "${CMAKE_SCRIPT_MODE_FILE}: -D${var}=... is required")
  endif()
endforeach()
if("${CONFIG}" STREQUAL "")
  set(CONFIG Release)
endif()

# cuscope_run(<step> COMMAND ...): runs a command, shows it and its output, and stops the test with
# the step's name when it fails. Sets cuscope_run_output to the command's output.
function(cuscope_run step)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "WORKING_DIRECTORY" "COMMAND")
  if(NOT arg_WORKING_DIRECTORY)
    set(arg_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  string(TIMESTAMP start "%s")
  execute_process(COMMAND ${arg_COMMAND}
    WORKING_DIRECTORY ${arg_WORKING_DIRECTORY}
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  string(TIMESTAMP stop "%s")
  math(EXPR seconds "${stop} - ${start}")
  list(JOIN arg_COMMAND " " shown)
  message(STATUS "[${step}] ${shown}  (${seconds} s, exit ${result})")
  if(NOT result EQUAL 0)
    message("${output}")
    message(FATAL_ERROR "${step} failed (exit ${result})")
  endif()
  set(cuscope_run_output "${output}" PARENT_SCOPE)
endfunction()

# cuscope_check_ran(<method> <output>): stops the test unless output has the line a consumer
# prints when it ran on the simulated device, took cuscope by method and saw this version.
function(cuscope_check_ran method output)
  set(line
    "cuscope ${EXPECTED_VERSION} via ${method} \\(CCCL [0-9.]+\\): runs on the simulated device")
  if(NOT output MATCHES "${line}")
    message("${output}")
    message(FATAL_ERROR "${method}: the program did not report a run on the simulated device as "
                        "cuscope ${EXPECTED_VERSION} taken by ${method}")
  endif()
  message(STATUS "[${method}] ${CMAKE_MATCH_0}")
endfunction()

# cuscope_consumer(<binary dir> <method> [-D<var>=<value>...]): configures tests/consumer/project
# from scratch with the given method and cache entries, builds it, runs it and checks its output.
function(cuscope_consumer binary_dir method)
  file(REMOVE_RECURSE ${binary_dir})
  cuscope_run("${method}: configure" COMMAND
    ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${binary_dir} -G ${GENERATOR}
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
      -DCMAKE_BUILD_TYPE=${CONFIG}
      -DCUDAToolkit_ROOT=${CUDA_ROOT}
      -DCUSCOPE_CONSUMER_METHOD=${method}
      -DCUSCOPE_CONSUMER_EXPECTED_VERSION=${EXPECTED_VERSION}
      ${ARGN})
  cuscope_run("${method}: build" COMMAND ${CMAKE_COMMAND} --build ${binary_dir} --config ${CONFIG})
  cuscope_run("${method}: run" COMMAND ${binary_dir}/bin/consumer${CMAKE_EXECUTABLE_SUFFIX})
  cuscope_check_ran("${method}" "${cuscope_run_output}")
endfunction()

# cuscope_check_found_in(<consumer binary dir> <prefix>): stops the test unless the consumer's
# find_package took cuscope from under prefix.
function(cuscope_check_found_in binary_dir prefix)
  file(STRINGS ${binary_dir}/CMakeCache.txt found REGEX "^cuscope_DIR:")
  string(FIND "${found}" "${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "find_package took cuscope from elsewhere than ${prefix}: ${found}")
  endif()
endfunction()
