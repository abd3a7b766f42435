# SPDX-License-Identifier: Apache-2.0
# cmake -DPREFIX=<install prefix> -DWORK_DIR=<dir> -DREADELF=<readelf> -DNM=<nm>
#   -DCUDA_COMPILER=<nvcc> [-DPKG_CONFIG=<exe>] <see consumer_common.cmake> -P check_runtime.cmake
# Builds tests/consumer/runtime against the installed package and reads back from each program
# which CUDA runtime it uses: the one its CUDA_RUNTIME_LIBRARY names (Static by default, for CUDA
# and C++ targets alike), and none at all when it links the simulated device, which it then runs.
# With pkg-config: nvcc and g++ with `pkg-config --libs cuscope` keep the static runtime, and nvcc
# -cudart shared with the cudart variable emptied gets the shared one alone.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

set(source ${CMAKE_CURRENT_LIST_DIR}/runtime)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${build})
cuscope_run("runtime: configure" COMMAND
  ${CMAKE_COMMAND} -S ${source} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=${CONFIG} -DCUDAToolkit_ROOT=${CUDA_ROOT}
    -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
cuscope_run("runtime: build" COMMAND ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})

set(errors "")
# expect(<program> <shared|static|none>): the program's CUDA runtime, from its dynamic section
# (libcudart.so) and its symbol table (cudaGetExportTable is defined by libcudart_static alone).
function(expect program want)
  set(binary ${build}/bin/${program})
  execute_process(COMMAND ${READELF} -d ${binary} OUTPUT_VARIABLE dynamic RESULT_VARIABLE r1)
  execute_process(COMMAND ${NM} --defined-only ${binary} OUTPUT_VARIABLE symbols RESULT_VARIABLE r2)
  if(NOT r1 EQUAL 0 OR NOT r2 EQUAL 0)
    message(FATAL_ERROR "cannot read ${binary} with ${READELF} and ${NM}")
  endif()
  set(got none)
  if(dynamic MATCHES "NEEDED[^\n]*libcudart\\.so")
    set(got shared)
  endif()
  if(symbols MATCHES "[\n ]T cudaGetExportTable\n")
    if(got STREQUAL "shared")
      set(got "shared and static")
    else()
      set(got static)
    endif()
  endif()
  message(STATUS "[runtime] ${program}: ${got} CUDA runtime (expected ${want})")
  if(NOT got STREQUAL want)
    set(errors "${errors}\n  ${program}: ${got} CUDA runtime, expected ${want}" PARENT_SCOPE)
  endif()
endfunction()

expect(cu_default static)
expect(cu_shared shared)
expect(cxx_default static)
expect(cxx_shared shared)
expect(cxx_none static)
expect(cu_sim none)
expect(cxx_sim none)
if(PKG_CONFIG)
  file(GLOB_RECURSE pc_files ${PREFIX}/cuscope.pc)
  get_filename_component(pkgconfig_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_LIBDIR} ${pkgconfig_dir})
  set(ENV{PKG_CONFIG_PATH} "")
  # pc_build(<name> <pkg-config arguments> <compiler and its arguments>...)
  function(pc_build name pc_args)
    separate_arguments(pc_args UNIX_COMMAND "${pc_args}")
    cuscope_run("runtime: pkg-config ${name}" COMMAND ${PKG_CONFIG} ${pc_args} --cflags --libs cuscope)
    separate_arguments(flags UNIX_COMMAND "${cuscope_run_output}")
    cuscope_run("runtime: build ${name}" COMMAND ${ARGN} -o ${build}/bin/${name} ${flags})
  endfunction()
  pc_build(nvcc_pc_default "" ${CUDA_COMPILER} -std=c++17 -arch=sm_90 -ccbin ${CXX_COMPILER}
    ${source}/app.cu)
  pc_build(nvcc_pc_shared "--define-variable=cudart=" ${CUDA_COMPILER} -std=c++17 -arch=sm_90
    -ccbin ${CXX_COMPILER} -cudart shared ${source}/app.cu)
  pc_build(cxx_pc_default "" ${CXX_COMPILER} -std=c++17 ${source}/app.cpp)
  expect(nvcc_pc_default static)
  expect(nvcc_pc_shared shared)
  expect(cxx_pc_default static)
endif()
if(errors)
  message(FATAL_ERROR "linking cuscope changed a program's CUDA runtime:${errors}")
endif()

# The programs on the simulated device run there, with no GPU.
foreach(program IN ITEMS cu_sim cxx_sim)
  cuscope_run("runtime: run ${program}" COMMAND ${build}/bin/${program})
  if(NOT cuscope_run_output MATCHES "ran on cuscope simulated device")
    message(FATAL_ERROR "${program} did not run on the simulated device:\n${cuscope_run_output}")
  endif()
endforeach()
