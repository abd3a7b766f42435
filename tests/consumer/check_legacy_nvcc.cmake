# SPDX-License-Identifier: Apache-2.0
# cmake -DPREFIX=<install prefix> -DWORK_DIR=<dir> -DCUDA_COMPILER=<nvcc> -DPKG_CONFIG=<exe>
#   -DMAKE=<make> -DREADELF=<readelf> -DNM=<nm> -DEXAMPLE_DIR=<examples/legacy_nvcc>
#   <see consumer_common.cmake> -P check_legacy_nvcc.cmake
# examples/legacy_nvcc, the converted C-style nvcc program of docs/adopting.md, built against the
# installed package by its CMake project and by its Makefile (pkg-config). For each build:
#   - legacy_app_sim --host-only runs the host path on the simulated device;
#   - legacy_app_sim, which launches kernels, stops with the first kernel's name;
#   - legacy_test_sim runs the training with host stand-ins for the kernels and checks it;
#   - legacy_app, on the real runtime, keeps nvcc's static CUDA runtime (not run: no GPU needed).
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

function(check how dir)
  cuscope_run("${how}: host path" COMMAND ${dir}/legacy_app_sim --host-only)
  if(NOT cuscope_run_output MATCHES "host path: 1000 weights, checkpoint round trip")
    message(FATAL_ERROR "${how}: the host path did not complete:\n${cuscope_run_output}")
  endif()
  execute_process(COMMAND ${dir}/legacy_app_sim RESULT_VARIABLE result OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(result EQUAL 0 OR NOT err MATCHES "kernel fill\\(float\\*, int, float\\) was launched[^\n]*kernels do not run on the simulated device"
     OR NOT out MATCHES "stopped: [^\n]*cudaErrorNoKernelImageForDevice")
    message(FATAL_ERROR "${how}: a kernel launch without a stand-in did not stop the program "
                        "with the kernel's name (exit ${result}):\n${out}${err}")
  endif()
  message(STATUS "[${how}] without stand-ins: ${out}")
  cuscope_run("${how}: stand-ins" COMMAND ${dir}/legacy_test_sim)
  if(NOT cuscope_run_output MATCHES "stand-ins: every weight is 0.85")
    message(FATAL_ERROR "${how}: the stand-ins' training failed:\n${cuscope_run_output}")
  endif()
  execute_process(COMMAND ${READELF} -d ${dir}/legacy_app OUTPUT_VARIABLE dynamic)
  execute_process(COMMAND ${NM} --defined-only ${dir}/legacy_app OUTPUT_VARIABLE symbols)
  if(dynamic MATCHES "NEEDED[^\n]*libcudart" OR NOT symbols MATCHES "[\n ]T cudaGetExportTable\n")
    message(FATAL_ERROR "${how}: legacy_app does not keep the static CUDA runtime")
  endif()
  message(STATUS "[${how}] legacy_app keeps the static CUDA runtime")
endfunction()

# 1. CMake ---------------------------------------------------------------------------------------
set(build ${WORK_DIR}/cmake)
file(REMOVE_RECURSE ${build})
cuscope_run("legacy-cmake: configure" COMMAND
  ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
    -DCMAKE_CUDA_HOST_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${CONFIG}
    -DCUDAToolkit_ROOT=${CUDA_ROOT} -DCMAKE_PREFIX_PATH=${PREFIX}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=${build}/bin)
cuscope_run("legacy-cmake: build" COMMAND ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})
check(legacy-cmake ${build}/bin)

# 2. make and pkg-config -------------------------------------------------------------------------
file(GLOB_RECURSE pc_files ${PREFIX}/cuscope.pc)
get_filename_component(pkgconfig_dir "${pc_files}" DIRECTORY)
set(ENV{PKG_CONFIG_LIBDIR} ${pkgconfig_dir})
set(ENV{PKG_CONFIG_PATH} "")
set(out ${WORK_DIR}/make)
file(REMOVE_RECURSE ${out})
file(MAKE_DIRECTORY ${out})
cuscope_run("legacy-make: build" COMMAND ${MAKE} -C ${EXAMPLE_DIR} OUT=${out}
  NVCC=${CUDA_COMPILER} PKG_CONFIG=${PKG_CONFIG} "NVCCFLAGS=-std=c++17 -arch=sm_90 -ccbin ${CXX_COMPILER} -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror")
check(legacy-make ${out})
