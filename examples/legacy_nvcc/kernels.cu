// SPDX-License-Identifier: Apache-2.0
// The kernels' translation unit: the only file nvcc compiles for the device. It includes the
// kernels (kernels.cuh, unchanged) and <cuscope/kernel.hpp> through launchers.hpp, not
// <cuscope/cuscope.hpp>: nvcc parses what a .cu file includes once for the host and once per
// architecture, and the light header adds almost nothing to that (docs/adopting.md, "Compile
// time").
#include "kernels.cuh"
#include "launchers.hpp"

namespace {

int element_count(std::size_t size) {
  return static_cast<int>(size);
}

unsigned blocks_for(std::size_t size) {
  return static_cast<unsigned>((size + 255) / 256);
}

}  // namespace

cuscope::launch_status launch_fill(cudaStream_t stream, cuscope::device_span<float> x,
                                   float value) {
  fill<<<blocks_for(x.size()), 256, 0, stream>>>(x.data(), element_count(x.size()), value);
  return CUSCOPE_LAUNCH_STATUS(fill);
}

cuscope::launch_status launch_axpy(cudaStream_t stream, cuscope::device_span<float> y,
                                   cuscope::device_span<const float> x, float a) {
  axpy<<<blocks_for(y.size()), 256, 0, stream>>>(y.data(), x.data(), element_count(y.size()), a);
  return CUSCOPE_LAUNCH_STATUS(axpy);
}

std::size_t squared_norm_workspace_bytes(int n) {
  return norm_workspace_bytes(n);
}

cuscope::launch_status launch_squared_norm(cudaStream_t stream, const float* x, int n,
                                           float* result, void* workspace,
                                           std::size_t workspace_bytes) {
  squared_norm(x, n, result, workspace, workspace_bytes, stream);
  return CUSCOPE_LAUNCH_STATUS(squared_norm);
}
