# SPDX-License-Identifier: Apache-2.0
"""Builds a program against the cuscope package with CMakeDeps and runs it on the simulated device;
conan create fails when the program does."""

import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class CuscopeTestPackageConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        # The program checks that the headers report the version of the package under test.
        version = str(self.dependencies["cuscope"].ref.version)
        toolchain.cache_variables["CUSCOPE_EXPECTED_VERSION"] = version
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
