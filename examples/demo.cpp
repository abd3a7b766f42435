// SPDX-License-Identifier: Apache-2.0
// The demo of the README's quick start: a pool, three epochs each inside a session, buffers made
// and freed batch by batch, and after each epoch the report of what went back to the driver.
// With --trace FILE it records the run and writes it as a Chrome trace (scripts/memory_plot.py
// draws it; docs/observability.md).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuscope/cuscope.hpp>
#include <cuscope/trace.hpp>
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

int run(const char* trace_path) {
  const int device = cuscope::current_device();
  cudaDeviceProp prop{};
  CUSCOPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  std::printf("cuscope demo on %s, device %d (%s)\n\n", prop.name, device,
              CUSCOPE_EXAMPLE_SIMULATED ? "the simulated device: no GPU was found" : "a GPU");

  // Records only when attached, below; samples pool and device memory every millisecond at most.
  cuscope::recorder_options recording;
  recording.sample_interval = std::chrono::milliseconds(1);
  cuscope::recorder recorder(recording);
  cuscope::memory_pool pool;  // keeps its memory across synchronizations until trimmed
  if (trace_path != nullptr) pool.set_recorder(&recorder, "demo pool");
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
  if (trace_path != nullptr) {
    cuscope::write_chrome_trace(recorder, trace_path);
    std::printf("\nwrote the trace of %llu events to %s\n",
                static_cast<unsigned long long>(recorder.recorded()), trace_path);
  }
  std::size_t free_at_end = 0;
  CUSCOPE_CUDA_TRY(cudaMemGetInfo(&free_at_end, &total));
  std::printf("\ndevice free memory: %s before the epochs, %s after them (%s)\n",
              cuscope::format_bytes(free_at_start).c_str(),
              cuscope::format_bytes(free_at_end).c_str(),
              free_at_end == free_at_start ? "all of it back" : "not all back");
  return free_at_end == free_at_start ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* trace_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      trace_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--trace FILE]\n", argv[0]);
      return 2;
    }
  }
  try {
    return run(trace_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
