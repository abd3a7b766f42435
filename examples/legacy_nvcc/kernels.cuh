// SPDX-License-Identifier: Apache-2.0
// The kernels of a small C-style CUDA program, in a header as such programs keep them. They take
// raw pointers and sizes; cuscope changes nothing here.
#pragma once

#include <cuda_runtime.h>

__global__ void fill(float* x, int n, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = value;
}

// y += a * x
__global__ void axpy(float* y, const float* x, int n, float a) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] += a * x[i];
}

// One partial sum of squares per block, into the caller's workspace.
__global__ void partial_sum_squares(const float* x, int n, float* partial) {
  __shared__ float sums[256];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  sums[threadIdx.x] = i < n ? x[i] * x[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

// Adds the partial sums: one thread.
__global__ void finish_sum(const float* partial, int count, float* result) {
  float total = 0.0f;
  for (int i = 0; i < count; ++i)
    total += partial[i];
  *result = total;
}

// A library-style entry point: it needs a workspace of norm_workspace_bytes(n) from the caller.
inline std::size_t norm_workspace_bytes(int n) {
  return static_cast<std::size_t>((n + 255) / 256) * sizeof(float);
}

inline void squared_norm(const float* x, int n, float* result, void* workspace,
                         std::size_t workspace_bytes, cudaStream_t stream) {
  const int blocks = (n + 255) / 256;
  if (workspace_bytes < norm_workspace_bytes(n)) return;  // the caller's mistake
  auto* partial = static_cast<float*>(workspace);
  partial_sum_squares<<<blocks, 256, 0, stream>>>(x, n, partial);
  finish_sum<<<1, 1, 0, stream>>>(partial, blocks, result);
}
