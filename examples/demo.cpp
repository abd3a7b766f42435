// SPDX-License-Identifier: Apache-2.0
// The demo of the README's quick start: a pool, three epochs each inside a session, buffers made
// and freed batch by batch, and after each epoch the report of what went back to the driver.
#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// One batch of a pretend training step: inputs copied in, activations and gradients made, all of
// it freed (in stream order) when the buffers go out of scope.
void run_batch(cuscope::session& epoch, const std::vector<float>& inputs, std::size_t scale) {
  auto x = epoch.make_buffer<float>(inputs.size());
  x.copy_from(epoch.stream(), inputs);
  auto activations = epoch.make_buffer<float>(scale * 4 * MiB);
  auto gradients = epoch.make_buffer<float>(scale * 2 * MiB);
  CUSCOPE_CUDA_TRY(
      cudaMemsetAsync(activations.data(), 0, activations.size_bytes(), epoch.stream().get()));
  CUSCOPE_CUDA_TRY(
      cudaMemsetAsync(gradients.data(), 0, gradients.size_bytes(), epoch.stream().get()));
}

int run() {
  const int device = cuscope::current_device();
  cudaDeviceProp prop{};
  CUSCOPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  std::printf("cuscope demo on %s, device %d (%s)\n\n", prop.name, device,
              CUSCOPE_EXAMPLE_SIMULATED ? "the simulated device: no GPU was found" : "a GPU");

  cuscope::memory_pool pool;  // keeps its memory across synchronizations until trimmed
  cuscope::stream stream;
  const std::vector<float> inputs(MiB, 1.0f);

  std::size_t free_at_start = 0;
  std::size_t total = 0;
  CUSCOPE_CUDA_TRY(cudaMemGetInfo(&free_at_start, &total));

  for (int e = 1; e <= 3; ++e) {
    cuscope::session epoch(pool, stream, "epoch " + std::to_string(e));
    for (std::size_t batch = 0; batch < 8; ++batch)
      run_batch(epoch, inputs, 1 + batch % 3);
    const cuscope::session_report& report = epoch.finish();
    std::printf("%s", report.to_string().c_str());
  }

  std::printf(
      "\n%s",
      cuscope::memory_report(device, cuscope::named_pool{"demo pool", pool}).to_string().c_str());
  std::size_t free_at_end = 0;
  CUSCOPE_CUDA_TRY(cudaMemGetInfo(&free_at_end, &total));
  std::printf("\ndevice free memory: %s before the epochs, %s after them (%s)\n",
              cuscope::format_bytes(free_at_start).c_str(),
              cuscope::format_bytes(free_at_end).c_str(),
              free_at_end == free_at_start ? "all of it back" : "not all back");
  return free_at_end == free_at_start ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
