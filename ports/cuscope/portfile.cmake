# SPDX-License-Identifier: Apache-2.0
# An overlay port that builds the cuscope checkout it belongs to (two directories up):
#   vcpkg install cuscope --overlay-ports=<cuscope>/ports
# vcpkg's binary cache knows only the port's own files: after changing the checkout, reinstall with
# --no-binarycaching (or bump port-version) to rebuild.
# The library is header-only; the package also carries the simulated CUDA runtime, a static
# library (cuscope::sim). tests/consumer/check_vcpkg_port.cmake configures cuscope with the -D
# options below, checks the installed layout and builds a consumer against it.

get_filename_component(SOURCE_PATH "${CURRENT_PORT_DIR}/../.." ABSOLUTE)

# From the "cuda" port: the toolkit the build must use.
vcpkg_find_cuda(OUT_CUDA_TOOLKIT_ROOT cuda_toolkit_root)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DCUSCOPE_BUILD_TESTS=OFF
    -DCUSCOPE_BUILD_EXAMPLES=OFF
    -DCUSCOPE_BUILD_BENCHMARKS=OFF
    -DCUSCOPE_REAL_RUNTIME=OFF
    -DCUSCOPE_INSTALL=ON
    -DCUDAToolkit_ROOT=${cuda_toolkit_root}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/cuscope)
vcpkg_fixup_pkgconfig()

file(REMOVE_RECURSE
  "${CURRENT_PACKAGES_DIR}/debug/include"
  "${CURRENT_PACKAGES_DIR}/debug/share")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
