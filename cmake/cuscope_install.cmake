# SPDX-License-Identifier: Apache-2.0
# Install rules and package files, included at the end of the top-level CMakeLists.txt.
#
#   <include>/cuscope/         the headers, version.hpp (generated), sim.hpp
#   <lib>/libcuscope_sim.a     the simulated runtime (CUSCOPE_BUILD_SIM)
#   <lib>/cmake/cuscope/       cuscopeConfig.cmake, cuscopeConfigVersion.cmake, cuscopeTargets*
#   <lib>/pkgconfig/           cuscope.pc, cuscope-sim.pc
#   <share>/doc/cuscope/       LICENSE, CHANGELOG.md
#
# Exported targets: cuscope::headers, cuscope::cuscope, cuscope::sim and cuscope::sim_runtime, the
# archive that cuscope::sim links as a whole archive (users never name it).

if(NOT CUSCOPE_INSTALL)
  return()
endif()

include(CMakePackageConfigHelpers)

set(CUSCOPE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/cuscope" CACHE STRING
  "Where cuscope's CMake package files go, relative to the install prefix")
set(CUSCOPE_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig" CACHE STRING
  "Where cuscope's pkg-config files go, relative to the install prefix")
mark_as_advanced(CUSCOPE_INSTALL_CMAKEDIR CUSCOPE_INSTALL_PKGCONFIGDIR)

function(cuscope_install_package)
  set(package_dir ${PROJECT_BINARY_DIR}/cuscope-package)

  # Headers. version.hpp is installed from the build tree, where CMake generated it.
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cuscope
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh"
    REGEX "/include/cuscope/version\\.hpp$" EXCLUDE)
  install(FILES ${CUSCOPE_GENERATED_INCLUDE_DIR}/cuscope/version.hpp
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cuscope)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
    DESTINATION ${CMAKE_INSTALL_DOCDIR})

  # Targets.
  set_target_properties(cuscope_headers PROPERTIES EXPORT_NAME headers)
  set(targets cuscope_headers cuscope)
  if(CUSCOPE_BUILD_SIM)
    install(FILES ${PROJECT_SOURCE_DIR}/sim/include/cuscope/sim.hpp
      ${PROJECT_SOURCE_DIR}/sim/include/cuscope/sim_kernels.hpp
      DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cuscope)
    set_target_properties(cuscope_sim PROPERTIES EXPORT_NAME sim)
    set_target_properties(cuscope_sim_runtime PROPERTIES EXPORT_NAME sim_runtime)
    list(APPEND targets cuscope_sim cuscope_sim_runtime)
  endif()
  install(TARGETS ${targets} EXPORT cuscopeTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT cuscopeTargets NAMESPACE cuscope:: DESTINATION ${CUSCOPE_INSTALL_CMAKEDIR})

  # CMake package. The version file skips the pointer-size check (ARCH_INDEPENDENT): the library
  # is its headers, which serve any architecture. Only the simulated runtime, a test aid, is built
  # for one; a consumer of another architecture finds out when it links cuscope::sim.
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cuscopeConfig.cmake.in
    ${package_dir}/cuscopeConfig.cmake
    INSTALL_DESTINATION ${CUSCOPE_INSTALL_CMAKEDIR}
    NO_SET_AND_CHECK_MACRO)
  write_basic_package_version_file(${package_dir}/cuscopeConfigVersion.cmake
    VERSION ${PROJECT_VERSION}
    COMPATIBILITY SameMajorVersion
    ARCH_INDEPENDENT)
  install(FILES ${package_dir}/cuscopeConfig.cmake ${package_dir}/cuscopeConfigVersion.cmake
    DESTINATION ${CUSCOPE_INSTALL_CMAKEDIR})

  # pkg-config files. The prefix is found from the .pc file's own place (${pcfiledir}), so an
  # install tree that is moved, or installed with cmake --install --prefix, stays correct. The CUDA
  # directories are those this build found: pkg-config has no way to look for them.
  set(pc_prefix "${CMAKE_INSTALL_PREFIX}")
  if(NOT IS_ABSOLUTE "${CUSCOPE_INSTALL_PKGCONFIGDIR}")
    file(RELATIVE_PATH up "/prefix/${CUSCOPE_INSTALL_PKGCONFIGDIR}" "/prefix")
    string(REGEX REPLACE "/$" "" up "${up}")
    set(pc_prefix "\${pcfiledir}/${up}")
  endif()
  foreach(kind IN ITEMS INCLUDEDIR LIBDIR)
    set(pc_${kind} "${CMAKE_INSTALL_${kind}}")
    if(NOT IS_ABSOLUTE "${pc_${kind}}")
      set(pc_${kind} "\${prefix}/${pc_${kind}}")
    endif()
  endforeach()
  # The flags of cuscope::headers, in both files: cuscope-sim.pc does not require cuscope.pc, whose
  # libraries are the CUDA runtime's.
  # The toolkit's directories are system directories, as CMake's targets make them: a consumer's
  # warning flags then apply to its code and cuscope's, not to the toolkit's headers.
  set(pc_cflags "-I\${includedir}")
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    string(APPEND pc_cflags " -isystem ${dir}")
    if(EXISTS "${dir}/cccl")
      string(APPEND pc_cflags " -isystem ${dir}/cccl")
    endif()
  endforeach()
  get_target_property(definitions cuscope_headers INTERFACE_COMPILE_DEFINITIONS)
  foreach(definition IN LISTS definitions)
    string(APPEND pc_cflags " -D${definition}")
  endforeach()
  set(pc_cuda_libdir "${CUDAToolkit_LIBRARY_DIR}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/cuscope.pc.in ${package_dir}/cuscope.pc @ONLY)
  set(pc_files ${package_dir}/cuscope.pc)
  if(CUSCOPE_BUILD_SIM)
    get_target_property(archive cuscope_sim_runtime OUTPUT_NAME)
    set(pc_sim_archive
      "${CMAKE_STATIC_LIBRARY_PREFIX}${archive}${CMAKE_STATIC_LIBRARY_SUFFIX}")
    configure_file(${PROJECT_SOURCE_DIR}/cmake/cuscope-sim.pc.in ${package_dir}/cuscope-sim.pc
      @ONLY)
    list(APPEND pc_files ${package_dir}/cuscope-sim.pc)
  endif()
  install(FILES ${pc_files} DESTINATION ${CUSCOPE_INSTALL_PKGCONFIGDIR})
endfunction()

cuscope_install_package()
