# SPDX-License-Identifier: Apache-2.0
# cmake -DPYTHON=<python3> -DSOURCE_DIR=<cuscope source> -DWORK_DIR=<dir>
#   <see consumer_common.cmake> -P check_conan.cmake
# Runs `conan create` on the recipe (conanfile.py) with no remote: it builds the package and then
# builds and runs test_package/ on the simulated device.
#   - conan 2 is installed from PyPI into a virtual environment, <WORK_DIR>/venv, kept between
#     runs; when it has to be installed and pip cannot, the test fails.
#   - CONAN_HOME is <WORK_DIR>/home, made afresh each run, with a detected default profile.
#   - conan works on a copy of the source tree (<WORK_DIR>/source), because it writes build folders
#     and CMakeUserPresets.json next to test_package/.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

if(NOT PYTHON OR NOT EXISTS "${PYTHON}")
  message(FATAL_ERROR "conan: no Python 3 interpreter ('${PYTHON}'): install python3 with venv")
endif()

# 1. conan in a virtual environment --------------------------------------------------------------
set(venv ${WORK_DIR}/venv)
set(conan ${venv}/bin/conan)
set(have_conan FALSE)
if(EXISTS ${conan})
  execute_process(COMMAND ${conan} --version RESULT_VARIABLE result OUTPUT_VARIABLE version_text)
  if(result EQUAL 0 AND version_text MATCHES "Conan version 2\\.")
    set(have_conan TRUE)
    message(STATUS "conan: reusing ${venv} (${version_text})")
  endif()
endif()
if(NOT have_conan)
  file(REMOVE_RECURSE ${venv})
  cuscope_run("conan: venv" COMMAND ${PYTHON} -m venv ${venv})
  cuscope_run("conan: pip install (needs PyPI)" COMMAND
    ${venv}/bin/python -m pip install --disable-pip-version-check --quiet "conan>=2.0,<3")
endif()

# 2. A fresh CONAN_HOME, the source tree copied ---------------------------------------------------
set(ENV{CONAN_HOME} ${WORK_DIR}/home)
file(REMOVE_RECURSE ${WORK_DIR}/home ${WORK_DIR}/source)
# Build trees and local clutter (as in .gitignore) stay behind; the copy is what a checkout holds.
# Any build tree (it has a CMakeCache.txt) stays behind too, above all the one running this test.
file(GLOB entries RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/* ${SOURCE_DIR}/.*)
set(copied "")
foreach(entry IN LISTS entries)
  set(path ${SOURCE_DIR}/${entry})
  string(FIND "${WORK_DIR}/" "${path}/" inside)
  if(entry MATCHES "^(\\.git|build|build-.*|out|\\.deps|\\.whl|\\.gl|CMakeUserPresets\\.json)$"
     OR EXISTS ${path}/CMakeCache.txt OR inside EQUAL 0)
    continue()
  endif()
  list(APPEND copied ${path})
endforeach()
file(COPY ${copied} DESTINATION ${WORK_DIR}/source
  REGEX "/test_package/(build|CMakeUserPresets\\.json)$" EXCLUDE
  REGEX "/__pycache__$" EXCLUDE)
# The toolkit cuscope's build found, for the recipe and for CMake's FindCUDAToolkit.
set(ENV{CUDAToolkit_ROOT} ${CUDA_ROOT})
# conan's own compiler detection reads CXX.
set(ENV{CXX} ${CXX_COMPILER})
cuscope_run("conan: profile detect" COMMAND ${conan} profile detect)

# 3. conan create, no remote ---------------------------------------------------------------------
cuscope_run("conan: create" COMMAND
  ${conan} create ${WORK_DIR}/source --build=missing --no-remote -s build_type=${CONFIG}
  WORKING_DIRECTORY ${WORK_DIR})
set(output "${cuscope_run_output}")
if(NOT output MATCHES "cuscope/${EXPECTED_VERSION}")
  message("${output}")
  message(FATAL_ERROR "conan create did not make cuscope/${EXPECTED_VERSION}")
endif()
cuscope_check_ran(Conan "${output}")
