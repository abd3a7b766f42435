# SPDX-License-Identifier: Apache-2.0
"""Conan 2 recipe for cuscope.

    conan create . --build=missing        # builds the package, then builds and runs test_package/
    [requires] cuscope/0.1.0              # in a consumer, with the CMakeDeps generator:
    find_package(cuscope CONFIG REQUIRED)
    target_link_libraries(app PRIVATE cuscope::cuscope)               # on the CUDA runtime
    target_link_libraries(app PRIVATE cuscope::cuscope cuscope::sim)  # on the simulated device

The library is header-only, but the package also carries the simulated CUDA runtime, a static
library, so it is built per configuration like any static library. Three components:
  headers  cuscope::headers: the include directories and the CCCL switch, no CUDA runtime;
  cuscope  cuscope::cuscope: the headers and the static CUDA runtime (libcudart_static), as nvcc
           and CMake link it by default;
  sim      cuscope::sim: the headers and the simulated runtime, linked as a whole archive, so its
           definitions are the ones a program uses even with the static CUDA runtime beside it.
CUDA is not a Conan package: the toolkit on the machine is used, looked for where CMake's
FindCUDAToolkit looks (CUDAToolkit_ROOT, CUDA_PATH, nvcc on PATH, /usr/local/cuda), when the package
is built and again, in package_info(), on the machine that consumes it.
"""

import glob
import os
import re
import shutil

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir

required_conan_version = ">=2.0"


def _cuda_root():
    """The root of the CUDA toolkit on this machine, or None."""
    candidates = [os.environ.get(name) for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(nvcc)))
    candidates.append("/usr/local/cuda")
    for root in candidates:
        if root and _cuda_dir(root, "include", "cuda_runtime_api.h"):
            return root
    return None


def _cuda_dir(root, kind, marker):
    """The directory of the toolkit at root that holds marker: <root>/<kind>, <root>/lib64 for
    libraries, or <root>/targets/<platform>/<kind>."""
    names = [kind] + (["lib64"] if kind == "lib" else [])
    dirs = [os.path.join(root, name) for name in names]
    dirs += sorted(glob.glob(os.path.join(root, "targets", "*", kind)))
    for directory in dirs:
        if glob.glob(os.path.join(directory, marker)):
            return directory
    return None


class CuscopeConan(ConanFile):
    name = "cuscope"
    description = "GPU memory tied to C++ scopes, on the CUDA stream-ordered allocator"
    license = "Apache-2.0"
    topics = ("cuda", "gpu", "memory", "raii", "header-only")
    package_type = "static-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = ("CMakeLists.txt", "LICENSE", "CHANGELOG.md", "cmake/*", "include/*",
                       "sim/*")

    def set_version(self):
        # One version for the whole project: the one in project().
        if self.version:
            return
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(\s*cuscope\s+VERSION\s+([0-9.]+)", text)
        if not match:
            raise ConanException("cuscope: no project(cuscope VERSION ...) in CMakeLists.txt")
        self.version = match.group(1)

    def layout(self):
        cmake_layout(self)

    def validate(self):
        check_min_cppstd(self, 17)
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration(
                "cuscope's simulated runtime is linked with GNU ld options: Linux only")

    def generate(self):
        toolchain = CMakeToolchain(self)
        for option in ("TESTS", "EXAMPLES", "BENCHMARKS"):
            toolchain.cache_variables[f"CUSCOPE_BUILD_{option}"] = False
        toolchain.cache_variables["CUSCOPE_BUILD_SIM"] = True
        toolchain.cache_variables["CUSCOPE_INSTALL"] = True
        toolchain.cache_variables["CUSCOPE_REAL_RUNTIME"] = "OFF"  # nothing here needs nvcc
        root = _cuda_root()
        if root:
            toolchain.cache_variables["CUDAToolkit_ROOT"] = root.replace("\\", "/")
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        CMake(self).install()
        # Consumers get their targets from package_info(). cuscope's own CMake and pkg-config files
        # would compete with those of the CMakeDeps and PkgConfigDeps generators.
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))
        rmdir(self, os.path.join(self.package_folder, "share"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "cuscope")
        # CMakeDeps also makes a target that links every component. It must not be
        # cuscope::cuscope, or that target would bring the simulated runtime into every program.
        self.cpp_info.set_property("cmake_target_name", "cuscope::all")
        self.cpp_info.set_property("pkg_config_name", "cuscope-all")

        # The CUDA toolkit of the machine that consumes the package.
        root = _cuda_root()
        include = root and _cuda_dir(root, "include", "cuda_runtime_api.h")
        libdir = root and _cuda_dir(root, "lib", "libcudart.*")
        if not include or not libdir:
            raise ConanException(
                "cuscope: no CUDA toolkit found: set CUDAToolkit_ROOT or CUDA_PATH to its root, "
                "or put nvcc on PATH")

        headers = self.cpp_info.components["headers"]
        headers.set_property("cmake_target_name", "cuscope::headers")
        headers.set_property("pkg_config_name", "cuscope-headers")
        headers.includedirs = ["include", include]
        headers.libdirs = []
        headers.bindirs = []
        # CCCL up to 3.0 hides cuda::mr behind this switch: set for every translation unit.
        headers.defines = ["LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE"]
        # CUDA 13 keeps Thrust, CUB and libcu++ under include/cccl: nvcc adds it by itself, a plain
        # C++ compiler needs it spelled out (cxxflags reach C++ compilations only).
        cccl = os.path.join(include, "cccl")
        if os.path.isdir(cccl):
            headers.cxxflags = [f"-isystem{cccl}"]

        core = self.cpp_info.components["cuscope"]
        core.set_property("cmake_target_name", "cuscope::cuscope")
        core.set_property("pkg_config_name", "cuscope")
        core.requires = ["headers"]
        core.includedirs = []
        core.libdirs = [libdir]
        core.bindirs = []
        core.system_libs = ["cudart_static", "dl", "rt", "pthread"]

        sim = self.cpp_info.components["sim"]
        sim.set_property("cmake_target_name", "cuscope::sim")
        sim.set_property("pkg_config_name", "cuscope-sim")
        sim.requires = ["headers"]
        sim.includedirs = []
        sim.libdirs = []
        sim.bindirs = []
        archive = os.path.join(self.package_folder, "lib", "libcuscope_sim.a")
        whole_archive = [f"-Wl,--whole-archive,{archive},--no-whole-archive"]
        sim.exelinkflags = whole_archive
        sim.sharedlinkflags = whole_archive
