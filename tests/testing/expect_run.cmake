# SPDX-License-Identifier: Apache-2.0
# Runs a test program and checks its exit status and output:
#   cmake -DPROGRAM=<exe> -DARGS=<;-list> -DEXPECT=pass|fail -DMATCH=<;-list of regexes> -P ...
# Every regex in MATCH must be found in stdout+stderr.
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
set(all "${out}${err}")
if(EXPECT STREQUAL "pass" AND NOT status EQUAL 0)
  message(FATAL_ERROR "expected ${PROGRAM} ${ARGS} to pass, it exited with ${status}:\n${all}")
elseif(EXPECT STREQUAL "fail" AND status EQUAL 0)
  message(FATAL_ERROR "expected ${PROGRAM} ${ARGS} to fail, it exited with 0:\n${all}")
endif()
foreach(regex IN LISTS MATCH)
  if(NOT all MATCHES "${regex}")
    message(FATAL_ERROR "the output of ${PROGRAM} ${ARGS} lacks \"${regex}\":\n${all}")
  endif()
endforeach()
message(STATUS "${PROGRAM} ${ARGS}: exit ${status} as expected")
