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
