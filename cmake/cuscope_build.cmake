# SPDX-License-Identifier: Apache-2.0
# Compiler settings for cuscope's own targets (tests, examples, benchmarks, the simulation).

set(CUSCOPE_CXX_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wnon-virtual-dtor -Woverloaded-virtual -Wcast-align -Wnull-dereference -Wdouble-promotion
  -Wformat=2 -Wimplicit-fallthrough -Wmissing-declarations -Wundef)

# Warnings for plain C++ sources and for the host code that nvcc hands to the host compiler.
function(cuscope_target_warnings target)
  set(cxx ${CUSCOPE_CXX_WARNINGS})
  # nvcc hands the host compiler code it has rewritten: functional casts become C-style casts and
  # line markers take the GNU form, so -Wold-style-cast and -Wpedantic would flag nvcc's output
  # rather than ours. The plain C++ builds check the same headers with both.
  set(host_list ${CUSCOPE_CXX_WARNINGS})
  list(REMOVE_ITEM host_list -Wold-style-cast -Wpedantic)
  string(REPLACE ";" "," host "${host_list}")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${host}>)
  if(CUSCOPE_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
endfunction()

set(CUSCOPE_SANITIZER_FLAGS
  -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
# -Wno-tsan: g++ warns that ThreadSanitizer does not model std::atomic_thread_fence, which the
# recorder's ring uses (a sequence lock); the accesses around it are still checked.
set(CUSCOPE_TSAN_FLAGS -fsanitize=thread -fno-omit-frame-pointer
  $<$<CXX_COMPILER_ID:GNU>:-Wno-tsan>)

# cuscope_add_program(<source> <macro> <marker> [SIM_ONLY])
# Builds an example or a benchmark twice: <name>_sim, linked with the simulated device, and
# <name>, linked with the real runtime. <macro> is defined to 1 in the first and 0 in the second.
# A .cu source builds only for the real runtime, unless it contains "cuscope-<marker>: also
# simulated": it then runs host functions instead of kernels when nvcc does not compile it, and is
# also built as C++ for the simulated device through a generated file that includes it.
function(cuscope_add_program source macro marker)
  cmake_parse_arguments(arg "SIM_ONLY" "" "" ${ARGN})
  get_filename_component(name ${source} NAME_WE)
  get_filename_component(ext ${source} LAST_EXT)
  set(sim_source "")
  if(ext STREQUAL ".cpp")
    set(sim_source ${source})
  elseif(ext STREQUAL ".cu")
    file(STRINGS ${source} also_simulated LIMIT_COUNT 1 REGEX "cuscope-${marker}: also simulated")
    if(also_simulated)
      set(sim_source ${CMAKE_CURRENT_BINARY_DIR}/simulated/${name}.cpp)
      file(CONFIGURE OUTPUT ${sim_source} CONTENT "#include \"${source}\"\n")
    endif()
  endif()
  if(sim_source AND CUSCOPE_BUILD_SIM)
    add_executable(${name}_sim ${sim_source})
    target_link_libraries(${name}_sim PRIVATE cuscope::cuscope cuscope::sim)
    target_compile_definitions(${name}_sim PRIVATE ${macro}=1)
    cuscope_target_warnings(${name}_sim)
  endif()
  if(arg_SIM_ONLY OR CUSCOPE_REAL_RUNTIME STREQUAL "OFF")
    return()
  endif()
  if(ext STREQUAL ".cpp" OR CUSCOPE_HAVE_NVCC)
    add_executable(${name} ${source})
    target_link_libraries(${name} PRIVATE cuscope::cuscope)
    target_compile_definitions(${name} PRIVATE ${macro}=0)
    cuscope_target_warnings(${name})
  endif()
endfunction()
