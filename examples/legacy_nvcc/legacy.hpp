// SPDX-License-Identifier: Apache-2.0
// The host side of a small C-style CUDA program, converted from cudaMalloc/cudaFree to cuscope.
// docs/adopting.md walks through each change; the comments marked "was:" show the original.
//
// The original kept a global stream, global raw pointers filled by cudaMalloc, a workspace that it
// regrew with cudaFree + cudaMalloc, and copied checkpoints with cudaMemcpy on the legacy default
// stream. The kernels (kernels.cuh) and the struct of raw pointers are unchanged; this file, like
// the whole host side, is C++ and reaches the kernels through their launchers (launchers.hpp,
// defined in kernels.cu, the one file nvcc compiles for the device).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <optional>
#include <vector>

#include "launchers.hpp"

// The program's view of the model: raw pointers, unchanged, for the library-style call
// (launch_squared_norm). Owners hold the memory (below); this struct only points into it, and is
// rebuilt whenever an owner changes. The other launchers take the owners' spans.
struct model {
  float* weights;
  float* grads;
  float* norm;  // one float
  int n;
};

// was: static cudaStream_t g_stream; static float *g_weights, *g_grads, *g_norm; static void*
//      g_workspace; static size_t g_workspace_bytes;
// Everything with device memory is one object, in the order it must be destroyed in reverse:
// the pool and the stream outlive every buffer on them.
struct training_state {
  explicit training_state(int count)
      : n(count),
        weights(stream, static_cast<std::size_t>(count), pool),
        grads(stream, static_cast<std::size_t>(count), pool),
        norm(stream, 1, pool) {}

  cuscope::memory_pool pool;  // was: the device's default pool, through cudaMalloc
  cuscope::stream stream;     // was: cudaStreamCreate; now non-blocking (see docs/adopting.md)
  int n;
  cuscope::device_buffer<float> weights;
  cuscope::device_buffer<float> grads;
  cuscope::device_buffer<float> norm;
  cuscope::device_buffer<std::byte> workspace;  // empty until a library call needs one

  model view() { return {weights.data(), grads.data(), norm.data(), n}; }

  // was: if (bytes > g_workspace_bytes) { cudaFree(g_workspace); cudaMalloc(&g_workspace, bytes); }
  // The old contents are not needed: a new buffer replaces the old one (no copy, unlike resize),
  // and the old one is freed in stream order, after the work already enqueued that uses it.
  void* workspace_for(std::size_t bytes) {
    if (workspace.size_bytes() < bytes)
      workspace = cuscope::device_buffer<std::byte>(stream, bytes, pool);
    return workspace.data();
  }
};

// was: the globals themselves. A global owner would be destroyed after main returns, in an order
// the program does not control; an empty optional is filled by setup() and emptied by teardown().
inline std::optional<training_state> g_state;

inline void setup(int n) {
  g_state.emplace(n);
}

inline void teardown() {
  // was: cudaFree of each pointer, then cudaStreamDestroy (in whichever order the code had).
  g_state.reset();
}

// Initial weights and gradients, by kernels.
inline void initialize(float weight, float grad) {
  training_state& s = *g_state;
  // was: fill<<<blocks, 256, 0, g_stream>>>(g_weights, n, weight); and a check of
  // cudaGetLastError(). The launcher returns that status; check_launch throws naming the kernel.
  cuscope::check_launch(launch_fill(s.stream.get(), s.weights.span(), weight));
  cuscope::check_launch(launch_fill(s.stream.get(), s.grads.span(), grad));
}

// Initial weights and gradients from the host: the host path, with no kernel.
inline void initialize_from_host(const std::vector<float>& weights,
                                 const std::vector<float>& grads) {
  training_state& s = *g_state;
  // was: cudaMemcpy(g_weights, ..., cudaMemcpyHostToDevice) on the legacy default stream. The
  // buffers are ordered on s.stream, which is non-blocking: the copy goes on that stream too.
  s.weights.copy_from(s.stream, weights);
  s.grads.copy_from(s.stream, grads);
}

// One step: weights -= rate * grads, then the squared norm of the weights.
inline float step(float rate) {
  training_state& s = *g_state;
  cuscope::check_launch(launch_axpy(s.stream.get(), s.weights.span(), s.grads.span(), -rate));
  const model m = s.view();
  void* workspace = s.workspace_for(squared_norm_workspace_bytes(m.n));
  cuscope::check_launch(launch_squared_norm(s.stream.get(), m.weights, m.n, m.norm, workspace,
                                            s.workspace.size_bytes()));
  float norm = 0.0f;
  s.norm.copy_to(s.stream, &norm, 1);
  s.stream.synchronize();
  return norm;
}

// A checkpoint round trip: the weights to the host and back.
inline std::vector<float> save_checkpoint() {
  training_state& s = *g_state;
  // was: cudaMemcpy(host, g_weights, ..., cudaMemcpyDeviceToHost): on the legacy stream, which
  // waits for a blocking stream's work but not for a non-blocking one's.
  return s.weights.to_vector(s.stream);
}

inline void load_checkpoint(const std::vector<float>& host) {
  training_state& s = *g_state;
  s.weights.copy_from(s.stream, host.data(), host.size());
}
