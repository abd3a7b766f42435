# SPDX-License-Identifier: Apache-2.0
# cmake -DPREFIX=<install prefix> -DWORK_DIR=<dir> -DCUDA_COMPILER=<nvcc> -DPKG_CONFIG=<exe>
#   -DNVCC_DIR=<tests/nvcc> <see consumer_common.cmake> -P check_nvcc.cmake
# tests/nvcc/app.cu, kernels and all, compiled by nvcc and run on the simulated device, built two
# ways against the installed package with nothing else on the command line:
#   1. a CMake project whose CUDA-language target links cuscope::cuscope and cuscope::sim;
#   2. nvcc app.cu $(pkg-config --cflags --libs cuscope-sim).
# Each program must stop a kernel launch that has no stand-in, naming the kernel, and run the
# kernels through registered host stand-ins.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

# check(<how> <program>): runs both modes of the program and checks what they print.
function(check how program)
  execute_process(COMMAND ${program} RESULT_VARIABLE result OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message(STATUS "[${how}] no stand-in: exit ${result}\n${out}${err}")
  if(NOT result EQUAL 0 OR NOT out MATCHES "nvcc program ran on the simulated device")
    message(FATAL_ERROR "${how}: the program without stand-ins failed (exit ${result})")
  endif()
  if(NOT out MATCHES "cudaErrorNoKernelImageForDevice")
    message(FATAL_ERROR "${how}: the launch without a stand-in did not fail as expected")
  endif()
  if(NOT err MATCHES "kernel scale\\(float\\*, int, float\\) was launched[^\n]*kernels do not run on the simulated device")
    message(FATAL_ERROR "${how}: stderr does not name the kernel that has no stand-in")
  endif()
  cuscope_run("${how}: stand-ins" COMMAND ${program} --stand-ins)
  if(NOT cuscope_run_output MATCHES "stand-ins ran: every element is 6")
    message(FATAL_ERROR "${how}: the stand-ins did not do the kernels' work")
  endif()
endfunction()

# 1. CMake, a CUDA-language target ---------------------------------------------------------------
set(build ${WORK_DIR}/cmake)
file(REMOVE_RECURSE ${build})
cuscope_run("nvcc-cmake: configure" COMMAND
  ${CMAKE_COMMAND} -S ${NVCC_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=${CONFIG} -DCUDAToolkit_ROOT=${CUDA_ROOT}
    -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
cuscope_run("nvcc-cmake: build" COMMAND ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})
check(nvcc-cmake ${build}/bin/nvcc_app)

# 2. nvcc and pkg-config ---------------------------------------------------------------------------
file(GLOB_RECURSE pc_files ${PREFIX}/cuscope-sim.pc)
get_filename_component(pkgconfig_dir "${pc_files}" DIRECTORY)
set(ENV{PKG_CONFIG_LIBDIR} ${pkgconfig_dir})
set(ENV{PKG_CONFIG_PATH} "")
cuscope_run("nvcc-pkg-config: flags" COMMAND ${PKG_CONFIG} --cflags --libs cuscope-sim)
separate_arguments(flags UNIX_COMMAND "${cuscope_run_output}")
set(program ${WORK_DIR}/pkg-config/nvcc_app)
file(REMOVE_RECURSE ${WORK_DIR}/pkg-config)
file(MAKE_DIRECTORY ${WORK_DIR}/pkg-config)
cuscope_run("nvcc-pkg-config: build" COMMAND
  ${CUDA_COMPILER} -std=c++17 -arch=sm_90 -ccbin ${CXX_COMPILER} -Werror=all-warnings
    ${NVCC_DIR}/app.cu -o ${program} ${flags})
check(nvcc-pkg-config ${program})
