# SPDX-License-Identifier: Apache-2.0
# Smoke tests of the benchmarks, labelled "bench": every simulated-device build runs with --quick,
# and the two figures measurable without a GPU (instructions per allocate/free pair under callgrind,
# the compile cost of <cuscope/cuscope.hpp>) run the same way. Each checks only that the program ran
# and wrote valid JSON: nothing asserts a timing.

if(NOT CUSCOPE_BUILD_SIM)
  return()
endif()

set(cuscope_bench_out ${CMAKE_CURRENT_BINARY_DIR}/smoke)
file(MAKE_DIRECTORY ${cuscope_bench_out})

foreach(source IN LISTS cuscope_benchmark_sources)
  get_filename_component(name ${source} NAME_WE)
  if(NOT TARGET ${name}_sim)
    continue()
  endif()
  set(json ${cuscope_bench_out}/${name}.json)
  add_test(NAME bench.${name}
    COMMAND ${CMAKE_COMMAND} -DJSON=${json} -P ${CMAKE_CURRENT_SOURCE_DIR}/run_and_check.cmake
            -- $<TARGET_FILE:${name}_sim> --quick --json ${json})
  set_tests_properties(bench.${name} PROPERTIES LABELS "bench" TIMEOUT 120)
endforeach()

find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "cuscope benchmarks: no Python 3; the callgrind and compile-cost tests are not added")
  return()
endif()

if(TARGET overhead_bench_sim)
  set(json ${cuscope_bench_out}/overhead_callgrind.json)
  add_test(NAME bench.overhead_callgrind
    COMMAND ${CMAKE_COMMAND} -DJSON=${json} -P ${CMAKE_CURRENT_SOURCE_DIR}/run_and_check.cmake
            -- ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/callgrind_overhead.py
               --exe $<TARGET_FILE:overhead_bench_sim> --quick --json ${json})
  set_tests_properties(bench.overhead_callgrind PROPERTIES
    LABELS "bench" TIMEOUT 300 SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()

set(json ${cuscope_bench_out}/compile_cost.json)
set(system_includes "")
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  list(APPEND system_includes --system-include ${dir})
endforeach()
add_test(NAME bench.compile_cost
  COMMAND ${CMAKE_COMMAND} -DJSON=${json} -P ${CMAKE_CURRENT_SOURCE_DIR}/run_and_check.cmake
          -- ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/compile_cost.py
             --cxx ${CMAKE_CXX_COMPILER} --include ${PROJECT_SOURCE_DIR}/include
             ${system_includes} --quick --json ${json})
set_tests_properties(bench.compile_cost PROPERTIES LABELS "bench" TIMEOUT 120)

# stream.hpp beside RMM's cuda_stream.hpp and CCCL's stream headers (instructions under callgrind,
# CPU time, lines): only with RMM and CCCL 3.5 already in the caches that host_cost.py and
# scripts/toolchains.sh fill (--no-download: a test does not download), and with valgrind; else
# Skipped. `compile_cost.py --peers` without --quick measures every pair.
set(json ${cuscope_bench_out}/header_peers.json)
add_test(NAME bench.header_peers
  COMMAND ${CMAKE_COMMAND} -DJSON=${json} -P ${CMAKE_CURRENT_SOURCE_DIR}/run_and_check.cmake
          -- ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/compile_cost.py --peers
             --cxx ${CMAKE_CXX_COMPILER} --include ${PROJECT_SOURCE_DIR}/include
             ${system_includes} --no-download --quick --json ${json})
set_tests_properties(bench.header_peers PROPERTIES
  LABELS "bench" TIMEOUT 300 SKIP_REGULAR_EXPRESSION "SKIPPED:")

# cuscope's allocation paths beside CCCL's resource_ref, under callgrind, on the simulated device and
# the no-op runtime (RMM and CCCL 3.5 need a download, which CI does not make: --no-rmm --no-cccl35;
# benchmarks/peers/host_cost.py without them adds them).
if(TARGET cuscope_sim_runtime AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(json ${cuscope_bench_out}/host_cost.json)
  list(GET CUDAToolkit_INCLUDE_DIRS 0 cuda_include)
  add_test(NAME bench.host_cost
    COMMAND ${CMAKE_COMMAND} -DJSON=${json} -P ${CMAKE_CURRENT_SOURCE_DIR}/run_and_check.cmake
            -- ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/peers/host_cost.py
               --cxx ${CMAKE_CXX_COMPILER} --sim-lib $<TARGET_FILE:cuscope_sim_runtime>
               --cuda-include ${cuda_include} --no-rmm --no-cccl35 --quick --json ${json})
  set_tests_properties(bench.host_cost PROPERTIES
    LABELS "bench" TIMEOUT 300 SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()
