# SPDX-License-Identifier: Apache-2.0
# cmake -DSOURCE_DIR=<cuscope source> -DWORK_DIR=<dir> <see consumer_common.cmake>
#   -P check_vcpkg_port.cmake
# Checks ports/cuscope the way vcpkg would use it, without vcpkg (which cannot be installed here):
#   1. vcpkg.json parses, names cuscope at this version and depends on the "cuda" port;
#   2. cuscope is configured with exactly the -D options that portfile.cmake passes, built, and
#      installed into a staging prefix;
#   3. the staging prefix has the layout the portfile expects: every header and version.hpp, the
#      CMake package where vcpkg_cmake_config_fixup looks for it, the pkg-config files, and no
#      library but the simulated runtime's archive (cuscope::cuscope is header-only);
#   4. the version file accepts this version from any architecture and refuses another major;
#   5. the usage file names only targets the package defines;
#   6. the consumer project builds and runs against the staging prefix.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

set(port ${SOURCE_DIR}/ports/cuscope)
set(staging ${WORK_DIR}/staging)
set(errors "")
# problem(<text>...): records a problem (the texts joined), so that one run reports all of them.
function(problem)
  set(text "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE ${last})
    string(APPEND text "${ARGV${i}}")
  endforeach()
  set(errors "${errors}\n  ${text}" PARENT_SCOPE)
endfunction()

# 1. vcpkg.json -----------------------------------------------------------------------------------
file(READ ${port}/vcpkg.json manifest)
string(JSON name ERROR_VARIABLE json_error GET "${manifest}" name)
if(json_error)
  message(FATAL_ERROR "ports/cuscope/vcpkg.json is not valid JSON with a name: ${json_error}")
endif()
if(NOT name STREQUAL "cuscope")
  problem("vcpkg.json: name is '${name}', not 'cuscope'")
endif()
set(port_version "")
foreach(field IN ITEMS version version-semver version-string)
  string(JSON value ERROR_VARIABLE missing GET "${manifest}" ${field})
  if(NOT missing)
    set(port_version "${value}")
  endif()
endforeach()
if(NOT port_version STREQUAL EXPECTED_VERSION)
  problem("vcpkg.json: version is '${port_version}', the project is ${EXPECTED_VERSION}")
endif()
set(dependencies "")
string(JSON count ERROR_VARIABLE missing LENGTH "${manifest}" dependencies)
if(missing)
  set(count 0)
endif()
set(index 0)
while(index LESS count)
  string(JSON type TYPE "${manifest}" dependencies ${index})
  if(type STREQUAL "STRING")
    string(JSON dependency GET "${manifest}" dependencies ${index})
  else()
    string(JSON dependency GET "${manifest}" dependencies ${index} name)
  endif()
  list(APPEND dependencies ${dependency})
  math(EXPR index "${index} + 1")
endwhile()
foreach(dependency IN ITEMS cuda vcpkg-cmake vcpkg-cmake-config)
  if(NOT dependency IN_LIST dependencies)
    problem("vcpkg.json: no dependency on '${dependency}'")
  endif()
endforeach()

# 2. The portfile's options, configure, build, install --------------------------------------------
file(READ ${port}/portfile.cmake portfile)
foreach(call IN ITEMS vcpkg_cmake_configure vcpkg_cmake_install vcpkg_cmake_config_fixup
                      vcpkg_install_copyright)
  if(NOT portfile MATCHES "\n${call}\\(")
    problem("portfile.cmake: no call of ${call}")
  endif()
endforeach()
if(NOT portfile MATCHES "vcpkg_cmake_configure\\(([^)]*)\\)")
  message(FATAL_ERROR "portfile.cmake: no vcpkg_cmake_configure(...) to take the options from")
endif()
string(REGEX MATCHALL "-D[A-Za-z0-9_]+(:[A-Z]+)?=[^ \t\r\n\"]*" options "${CMAKE_MATCH_1}")
# The one vcpkg variable the options may use: the toolkit that vcpkg_find_cuda returns.
list(TRANSFORM options REPLACE "\\\${cuda_toolkit_root}" "${CUDA_ROOT}")
foreach(option IN LISTS options)
  if(option MATCHES "\\\$")
    message(FATAL_ERROR "portfile.cmake: option ${option} uses a variable this check cannot supply")
  endif()
endforeach()
foreach(required IN ITEMS -DCUSCOPE_BUILD_TESTS=OFF -DCUSCOPE_BUILD_EXAMPLES=OFF
                          -DCUSCOPE_BUILD_BENCHMARKS=OFF)
  if(NOT required IN_LIST options)
    problem("portfile.cmake: ${required} is not among its options")
  endif()
endforeach()
if(NOT portfile MATCHES "vcpkg_cmake_config_fixup\\([^)]*CONFIG_PATH[ \t\r\n]+([^ \t\r\n)]+)")
  message(FATAL_ERROR "portfile.cmake: vcpkg_cmake_config_fixup(CONFIG_PATH ...) not found")
endif()
set(config_path ${CMAKE_MATCH_1})
if(errors)
  message(FATAL_ERROR "ports/cuscope:${errors}")
endif()
message(STATUS "portfile options: ${options}")

set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${build} ${staging})
# vcpkg_cmake_configure also fixes the install directories, whatever the platform's defaults.
cuscope_run("port: configure" COMMAND
  ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${CONFIG}
    -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_INSTALL_BINDIR=bin -DCMAKE_INSTALL_INCLUDEDIR=include
    -DCMAKE_INSTALL_DATAROOTDIR=share
    ${options})
cuscope_run("port: build" COMMAND ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})
cuscope_run("port: install" COMMAND
  ${CMAKE_COMMAND} --install ${build} --prefix ${staging} --config ${CONFIG})

# 3. Layout ---------------------------------------------------------------------------------------
file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR}/include ${SOURCE_DIR}/include/*.hpp)
list(APPEND headers cuscope/version.hpp cuscope/sim.hpp)
list(REMOVE_DUPLICATES headers)
foreach(header IN LISTS headers)
  if(NOT EXISTS ${staging}/include/${header})
    problem("include/${header} is not installed")
  endif()
endforeach()
if(EXISTS ${staging}/include/cuscope/version.hpp)
  file(READ ${staging}/include/cuscope/version.hpp installed_version_header)
  file(READ ${SOURCE_DIR}/include/cuscope/version.hpp source_version_header)
  string(REPLACE "\r\n" "\n" source_version_header "${source_version_header}")
  if(NOT installed_version_header STREQUAL source_version_header)
    problem("the installed version.hpp differs from include/cuscope/version.hpp")
  endif()
endif()
foreach(file IN ITEMS cuscopeConfig.cmake cuscopeConfigVersion.cmake cuscopeTargets.cmake)
  if(NOT EXISTS ${staging}/${config_path}/${file})
    problem("${config_path}/${file} is not installed (vcpkg_cmake_config_fixup looks there)")
  endif()
endforeach()
file(GLOB pc_files RELATIVE ${staging}
  ${staging}/lib/pkgconfig/*.pc ${staging}/share/pkgconfig/*.pc)
foreach(pc IN ITEMS cuscope.pc cuscope-sim.pc)
  if(NOT pc_files MATCHES "(^|;)(lib|share)/pkgconfig/${pc}(;|$)")
    problem("no pkg-config file ${pc} in lib/pkgconfig or share/pkgconfig (found: ${pc_files})")
  endif()
endforeach()

# Libraries: only the simulated runtime's archive, and cuscope::cuscope stays an interface target.
file(GLOB_RECURSE libraries RELATIVE ${staging}
  ${staging}/*.a ${staging}/*.so ${staging}/*.so.* ${staging}/*.lib ${staging}/*.dll
  ${staging}/*.dylib)
if(NOT libraries STREQUAL "lib/libcuscope_sim.a")
  problem("libraries installed: '${libraries}', expected only lib/libcuscope_sim.a")
endif()
file(GLOB target_files ${staging}/${config_path}/cuscopeTargets*.cmake)
set(targets_text "")
foreach(target_file IN LISTS target_files)
  file(READ ${target_file} text)
  string(APPEND targets_text "${text}")
endforeach()
if(NOT targets_text MATCHES "add_library\\(cuscope::cuscope INTERFACE IMPORTED\\)")
  problem("cuscope::cuscope is not an INTERFACE IMPORTED target")
endif()
string(REGEX MATCHALL "add_library\\(cuscope::[a-z_]+" defined "${targets_text}")
list(TRANSFORM defined REPLACE "add_library\\(" "")

# Nothing installed may point into the source or build tree: vcpkg moves the package around.
file(GLOB_RECURSE text_files ${staging}/*.cmake ${staging}/*.pc)
foreach(text_file IN LISTS text_files)
  file(READ ${text_file} text)
  foreach(tree IN ITEMS "${SOURCE_DIR}" "${build}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      problem("${text_file} names ${tree}")
    endif()
  endforeach()
endforeach()

# 4. Version file --------------------------------------------------------------------------------
# find_package sets these and includes the file; CMAKE_SIZEOF_VOID_P 4 stands for a 32-bit
# consumer, which ARCH_INDEPENDENT must accept.
function(cuscope_version_check requested pointer_size out)
  string(REPLACE "." ";" parts "${requested}")
  list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
  list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
  list(GET parts 2 PACKAGE_FIND_VERSION_PATCH)
  set(PACKAGE_FIND_VERSION ${requested})
  set(PACKAGE_FIND_VERSION_COUNT 3)
  set(PACKAGE_FIND_NAME cuscope)
  set(CMAKE_SIZEOF_VOID_P ${pointer_size})
  include(${staging}/${config_path}/cuscopeConfigVersion.cmake)
  if(PACKAGE_VERSION_UNSUITABLE)
    set(${out} unsuitable PARENT_SCOPE)
  elseif(PACKAGE_VERSION_COMPATIBLE)
    set(${out} compatible PARENT_SCOPE)
  else()
    set(${out} incompatible PARENT_SCOPE)
  endif()
endfunction()
if(EXISTS ${staging}/${config_path}/cuscopeConfigVersion.cmake)
  string(REPLACE "." ";" parts "${EXPECTED_VERSION}")
  list(GET parts 0 major)
  math(EXPR next_major "${major} + 1")
  # SameMajorVersion: an older minor of the same major is fine, another major is not.
  foreach(case IN ITEMS "${EXPECTED_VERSION};8;compatible" "${EXPECTED_VERSION};4;compatible"
                        "${major}.0.0;8;compatible" "${next_major}.0.0;8;incompatible")
    list(GET case 0 requested)
    list(GET case 1 pointer_size)
    list(GET case 2 want)
    cuscope_version_check(${requested} ${pointer_size} got)
    if(NOT got STREQUAL want)
      problem("cuscopeConfigVersion.cmake: ${requested} with ${pointer_size}-byte pointers is "
              "${got}, expected ${want}")
    endif()
  endforeach()
endif()

# 5. Usage ---------------------------------------------------------------------------------------
file(READ ${port}/usage usage)
if(NOT usage MATCHES "find_package\\(cuscope CONFIG REQUIRED\\)")
  problem("usage: no find_package(cuscope CONFIG REQUIRED)")
endif()
string(REGEX MATCHALL "cuscope::[a-z_]+" named "${usage}")
list(REMOVE_DUPLICATES named)
foreach(target IN LISTS named)
  if(NOT target IN_LIST defined)
    problem("usage names ${target}, which the package does not define (it defines ${defined})")
  endif()
endforeach()
if(NOT portfile MATCHES "/usage\"")
  problem("portfile.cmake does not install the usage file")
endif()

if(errors)
  message(FATAL_ERROR "installed layout of the port:${errors}")
endif()
message(STATUS "layout: ${headers}; ${libraries}; ${config_path}; ${pc_files}")

# 6. A consumer against the staging prefix --------------------------------------------------------
cuscope_consumer(${WORK_DIR}/consumer find_package -DCMAKE_PREFIX_PATH=${staging}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
cuscope_check_found_in(${WORK_DIR}/consumer ${staging})
