# SPDX-License-Identifier: Apache-2.0
# cmake -DPROGRAM=<exe> -DEXPECT=<regex> -P expect_abort.cmake
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result MATCHES "^[0-9]+$")
  message(FATAL_ERROR "${PROGRAM} exited normally with ${result}; it should have aborted\n${out}${err}")
endif()
if(NOT "${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "${PROGRAM} died (${result}) without printing to stderr what matches '${EXPECT}':\nstdout:\n${out}\nstderr:\n${err}")
endif()
message(STATUS "${PROGRAM} died as expected (${result})")
