// SPDX-License-Identifier: Apache-2.0
// The converted program.
//   legacy_app [--host-only] [n]
// Without --host-only it runs a few training steps with kernels. --host-only runs the host path
// alone: setup, data from the host, a checkpoint round trip, the workspace, teardown. Linked with
// cuscope::sim, the host path runs without a GPU; a kernel launch stops the program with the
// kernel's name unless a test gives the kernel a stand-in (legacy_test.cpp). This file is C++:
// the kernels and their launches are in kernels.cu.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "legacy.hpp"

namespace {

int host_path(int n) {
  setup(n);
  std::vector<float> weights(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    weights[static_cast<std::size_t>(i)] = static_cast<float>(i % 7);
  const std::vector<float> grads(static_cast<std::size_t>(n), 0.5f);
  initialize_from_host(weights, grads);
  std::vector<float> saved = save_checkpoint();  // synchronizes: the host data may go
  if (saved != weights) {
    std::printf("FAILED: the checkpoint differs from the weights\n");
    return 1;
  }
  saved[0] = 100.0f;
  load_checkpoint(saved);
  if (save_checkpoint() != saved) {
    std::printf("FAILED: the checkpoint round trip\n");
    return 1;
  }
  void* workspace = g_state->workspace_for(squared_norm_workspace_bytes(n));
  if (workspace == nullptr || g_state->workspace.size_bytes() < squared_norm_workspace_bytes(n)) {
    std::printf("FAILED: no workspace\n");
    return 1;
  }
  teardown();
  std::printf("host path: %d weights, checkpoint round trip and workspace done\n", n);
  return 0;
}

int train(int n) {
  setup(n);
  initialize(1.0f, 0.5f);
  float norm = 0.0f;
  for (int i = 0; i < 3; ++i)
    norm = step(0.1f);
  teardown();
  std::printf("trained: squared norm %.4f\n", static_cast<double>(norm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool host_only = false;
  int n = 1000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--host-only") == 0)
      host_only = true;
    else
      n = std::atoi(argv[i]);
  }
  try {
    return host_only ? host_path(n) : train(n);
  } catch (const std::exception& e) {
    std::printf("stopped: %s\n", e.what());
    return 1;
  }
}
