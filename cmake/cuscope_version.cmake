# SPDX-License-Identifier: Apache-2.0
# include/cuscope/version.hpp from the version in project().
#
# The header is generated into the build tree (the copy that is installed) and is also checked in
# under include/, for those who copy the headers into their tree without CMake. Configuring fails
# when the checked-in copy differs from what the template gives, so the two never drift.
# Sets CUSCOPE_GENERATED_INCLUDE_DIR, the build-tree include directory of generated headers.

function(cuscope_generate_version_header)
  foreach(part IN ITEMS major minor patch)
    string(TOUPPER ${part} upper)
    set(cuscope_version_${part} "${PROJECT_VERSION_${upper}}")
    if(cuscope_version_${part} STREQUAL "")
      set(cuscope_version_${part} 0)
    endif()
  endforeach()
  # CUSCOPE_VERSION packs minor and patch into two decimal digits each.
  if(cuscope_version_minor GREATER 99 OR cuscope_version_patch GREATER 99)
    message(FATAL_ERROR "cuscope ${PROJECT_VERSION}: CUSCOPE_VERSION (major * 10000 + minor * 100 "
                        "+ patch) needs minor and patch below 100")
  endif()
  math(EXPR cuscope_version_number
    "${cuscope_version_major} * 10000 + ${cuscope_version_minor} * 100 + ${cuscope_version_patch}")
  set(cuscope_version_string
    "${cuscope_version_major}.${cuscope_version_minor}.${cuscope_version_patch}")

  set(include_dir ${PROJECT_BINARY_DIR}/include)
  set(generated ${include_dir}/cuscope/version.hpp)
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/version.hpp.in ${generated}
    @ONLY NEWLINE_STYLE LF)
  target_include_directories(cuscope_headers INTERFACE $<BUILD_INTERFACE:${include_dir}>)
  set(CUSCOPE_GENERATED_INCLUDE_DIR ${include_dir} PARENT_SCOPE)

  # A checkout with CRLF line endings is still in step: compare the text, not the bytes.
  set(checked_in ${PROJECT_SOURCE_DIR}/include/cuscope/version.hpp)
  set(checked_in_text "")
  if(EXISTS ${checked_in})
    file(READ ${checked_in} checked_in_text)
    string(REPLACE "\r\n" "\n" checked_in_text "${checked_in_text}")
  endif()
  file(READ ${generated} generated_text)
  if(NOT checked_in_text STREQUAL generated_text)
    message(FATAL_ERROR
      "include/cuscope/version.hpp is not what cmake/version.hpp.in gives for version "
      "${cuscope_version_string} (project() in CMakeLists.txt). Update the checked-in copy:\n"
      "  cp ${generated} ${checked_in}")
  endif()
endfunction()

cuscope_generate_version_header()
