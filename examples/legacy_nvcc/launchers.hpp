// SPDX-License-Identifier: Apache-2.0
// The launchers of the kernels in kernels.cuh, as the host code sees them: plain C++ declarations,
// defined in kernels.cu, the one translation unit nvcc compiles for the device. The host files
// (legacy.hpp, app.cpp, legacy_test.cpp) are C++ and never see a kernel.
//
// This header includes only <cuscope/kernel.hpp>: device_span<T> for the memory and
// launch_status for what the launches returned, which the host code hands to
// cuscope::check_launch. Streams are cudaStream_t (cuscope::stream_ref converts implicitly;
// cuscope::stream through get()).
#pragma once

#include <cstddef>
#include <cuscope/kernel.hpp>

// x[i] = value for every element.
cuscope::launch_status launch_fill(cudaStream_t stream, cuscope::device_span<float> x, float value);

// y += a * x (y and x of the same size).
cuscope::launch_status launch_axpy(cudaStream_t stream, cuscope::device_span<float> y,
                                   cuscope::device_span<const float> x, float a);

// The library-style entry point of kernels.cuh, as a C library declares it: raw pointers and
// sizes. *result = the sum of x[i]^2, through a workspace of at least
// squared_norm_workspace_bytes(n).
std::size_t squared_norm_workspace_bytes(int n);
cuscope::launch_status launch_squared_norm(cudaStream_t stream, const float* x, int n,
                                           float* result, void* workspace,
                                           std::size_t workspace_bytes);
