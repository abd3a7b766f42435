# SPDX-License-Identifier: Apache-2.0
# Runs PROGRAM with ARGS (separated by '|') and expects it to fail with output that contains
# each of EXPECT (separated by '|').
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${PROGRAM} ${args} OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ${ARGS} passed; it should have failed:\n${all}")
endif()
string(REPLACE "|" ";" expected "${EXPECT}")
foreach(e IN LISTS expected)
  string(FIND "${all}" "${e}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output of ${PROGRAM} ${ARGS} does not contain '${e}':\n${all}")
  endif()
endforeach()
message(STATUS "failed as expected:\n${all}")
