# SPDX-License-Identifier: Apache-2.0
# cmake -DPROGRAM=<exe> -DARG=<argument> -DCODE=<exit status> -DEXPECT=<regex> -P expect_exit.cmake
execute_process(COMMAND ${PROGRAM} ${ARG} RESULT_VARIABLE result OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
if(NOT "${result}" STREQUAL "${CODE}")
  message(FATAL_ERROR "${PROGRAM} ${ARG} exited with ${result}, not ${CODE}:\n${out}${err}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "${PROGRAM} ${ARG} did not print what matches '${EXPECT}':\n${out}${err}")
endif()
message(STATUS "${PROGRAM} ${ARG} exited with ${result} as expected")
