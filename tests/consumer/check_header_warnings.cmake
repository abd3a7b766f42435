# SPDX-License-Identifier: Apache-2.0
# cmake -DPKG_CONFIG=<exe> -DPREFIX=<install prefix> -DWORK_DIR=<dir> [-DCLANG=<clang++>]
#   [-DCUDA_COMPILER=<nvcc>] <see consumer_common.cmake> -P check_header_warnings.cmake
# The installed public headers, included the way pkg-config users include them (cuscope's
# directory with -I, so that none of its warnings are hidden), compile without a warning under a
# strict set of flags, as errors: with the compiler of this build (g++ adds -Wuseless-cast), with
# clang++ and with nvcc (host code through -Xcompiler) when they are given. A second g++ and clang++
# pass gives CUDA's own include directory with -I too, as hand-written Makefiles often do, over the
# headers that do not include CCCL (whose code is not cuscope's). With nvcc, <cuscope/kernel.hpp>
# is also compiled alone in a file with a kernel and a launcher, through the device pass too.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

file(GLOB_RECURSE pc_files ${PREFIX}/cuscope.pc)
list(LENGTH pc_files count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one cuscope.pc under ${PREFIX}, found: '${pc_files}'")
endif()
get_filename_component(pkgconfig_dir ${pc_files} DIRECTORY)
set(ENV{PKG_CONFIG_LIBDIR} ${pkgconfig_dir})
set(ENV{PKG_CONFIG_PATH} "")
cuscope_run("pkg-config: flags" COMMAND ${PKG_CONFIG} --cflags cuscope)
separate_arguments(cflags UNIX_COMMAND "${cuscope_run_output}")
if(NOT cflags MATCHES "(^|;)-I[^;]*include")
  message(FATAL_ERROR "pkg-config --cflags cuscope gives no -I for cuscope's headers: ${cflags}")
endif()

# The toolkit's directories with -I instead of -isystem; CCCL's stays a system directory.
set(cflags_cuda_on_i "")
set(after_isystem FALSE)
foreach(flag IN LISTS cflags)
  if(after_isystem)
    set(after_isystem FALSE)
    if(flag MATCHES "/cccl$")
      list(APPEND cflags_cuda_on_i -isystem ${flag})
    else()
      list(APPEND cflags_cuda_on_i -I${flag})
    endif()
  elseif(flag STREQUAL "-isystem")
    set(after_isystem TRUE)
  else()
    list(APPEND cflags_cuda_on_i ${flag})
  endif()
endforeach()

file(GLOB headers RELATIVE ${PREFIX}/include/cuscope ${PREFIX}/include/cuscope/*.hpp)
list(REMOVE_ITEM headers sim.hpp)  # the simulated device's control header, not cuscope's
list(SORT headers)
list(LENGTH headers header_count)
if(header_count LESS 10)
  message(FATAL_ERROR "expected cuscope's public headers under ${PREFIX}/include/cuscope, found "
                      "${header_count}: ${headers}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(all "")
set(without_cccl "")
foreach(header IN LISTS headers)
  string(APPEND all "#include <cuscope/${header}>\n")
  file(STRINGS ${PREFIX}/include/cuscope/${header} cccl_includes
       REGEX "^#[ ]*include <(cuda/|thrust/|cub/)")
  if(NOT cccl_includes)
    string(APPEND without_cccl "#include <cuscope/${header}>\n")
  endif()
endforeach()
file(WRITE ${WORK_DIR}/all.cpp "${all}")
file(WRITE ${WORK_DIR}/without_cccl.cpp "${without_cccl}")
file(WRITE ${WORK_DIR}/all.cu "${all}")

set(warnings -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wcast-align -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wundef -Wnon-virtual-dtor
  -Woverloaded-virtual -Wmissing-declarations -Werror)

# check(<name> <compiler> <extra warnings> <flags> <source>)
function(check name compiler extra flags source)
  cuscope_run("${name}" COMMAND ${compiler} -std=c++17 -fsyntax-only ${warnings} ${extra}
    ${flags} ${source})
endfunction()

set(gnu_extra "")
execute_process(COMMAND ${CXX_COMPILER} --version OUTPUT_VARIABLE version)
if(version MATCHES "Free Software Foundation")
  set(gnu_extra -Wuseless-cast)
endif()
check("${CXX_COMPILER}, pkg-config's flags" ${CXX_COMPILER} "${gnu_extra}" "${cflags}"
  ${WORK_DIR}/all.cpp)
check("${CXX_COMPILER}, CUDA with -I" ${CXX_COMPILER} "${gnu_extra}" "${cflags_cuda_on_i}"
  ${WORK_DIR}/without_cccl.cpp)
if(CLANG)
  check("clang++, pkg-config's flags" ${CLANG} "-Wshadow-all" "${cflags}" ${WORK_DIR}/all.cpp)
  check("clang++, CUDA with -I" ${CLANG} "-Wshadow-all" "${cflags_cuda_on_i}"
    ${WORK_DIR}/without_cccl.cpp)
endif()
if(CUDA_COMPILER)
  # nvcc rewrites the host code before the host compiler sees it (functional casts become C-style
  # casts, line markers take the GNU form), so -Wold-style-cast and -Wpedantic would judge nvcc's
  # output; the rest applies.
  set(host -Wall -Wextra -Wshadow -Wconversion -Wsign-conversion -Wcast-align -Wnull-dereference
    -Wdouble-promotion -Wformat=2 -Wundef -Wnon-virtual-dtor -Woverloaded-virtual ${gnu_extra})
  string(REPLACE ";" "," host "${host}")
  cuscope_run("nvcc, pkg-config's flags" COMMAND ${CUDA_COMPILER} -std=c++17 -c
    -ccbin ${CXX_COMPILER} -Werror=all-warnings -Xcompiler=${host},-Werror ${cflags}
    ${WORK_DIR}/all.cu -o ${WORK_DIR}/all.o)
  # The light header for kernel files, alone, in a kernel file: host and device passes.
  file(WRITE ${WORK_DIR}/kernel.cu [=[
#include <cuscope/kernel.hpp>
__global__ void scale(cuscope::device_span<float> x, float by) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < x.size()) x[i] *= by;
}
cuscope::launch_status launch_scale(cudaStream_t stream, cuscope::device_span<float> x, float by);
cuscope::launch_status launch_scale(cudaStream_t stream, cuscope::device_span<float> x, float by) {
  scale<<<static_cast<unsigned>((x.size() + 255) / 256), 256, 0, stream>>>(x, by);
  return CUSCOPE_LAUNCH_STATUS(scale);
}
]=])
  cuscope_run("nvcc, <cuscope/kernel.hpp> in a kernel file" COMMAND ${CUDA_COMPILER} -std=c++17
    -c -arch=sm_90 -ccbin ${CXX_COMPILER} -Werror=all-warnings -Xcompiler=${host},-Werror
    ${cflags} ${WORK_DIR}/kernel.cu -o ${WORK_DIR}/kernel.o)
endif()
message(STATUS "${header_count} public headers compile without warnings: ${headers}")
