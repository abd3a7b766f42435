// SPDX-License-Identifier: Apache-2.0
// An existing loop written against the raw runtime (its own cudaStream_t, cudaMallocAsync,
// cudaFreeAsync), taking cuscope in one piece at a time. Each step computes the same checksum;
// only the ownership of the memory changes.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <exception>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t n = std::size_t{1} << 20;  // floats per batch
constexpr int batches = 4;

// The legacy code's own error check, kept as it was.
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// The work of one batch, in the legacy style: copy in, copy across, copy out, on the raw stream.
double work(cudaStream_t stream, float* in, float* out, std::vector<float>& host) {
  check(cudaMemcpyAsync(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
        "copy in");
  check(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "copy");
  check(cudaMemcpyAsync(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
        "copy out");
  check(cudaStreamSynchronize(stream), "synchronize");
  return std::accumulate(host.begin(), host.end(), 0.0);
}

// Step 0: the loop as it was. Memory comes from the device's current pool, whose release
// threshold (0 by default) hands it back to the driver at every synchronization.
double legacy(cudaStream_t stream, std::vector<float>& host) {
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    void* in = nullptr;
    void* out = nullptr;
    check(cudaMallocAsync(&in, n * sizeof(float), stream), "cudaMallocAsync");
    check(cudaMallocAsync(&out, n * sizeof(float), stream), "cudaMallocAsync");
    sum += work(stream, static_cast<float*>(in), static_cast<float*>(out), host);
    check(cudaFreeAsync(out, stream), "cudaFreeAsync");  // skipped if work() throws: a leak
    check(cudaFreeAsync(in, stream), "cudaFreeAsync");
  }
  return sum;
}

// Step 2: the same allocations, adopted by device_buffer: freed on the stream even when work()
// throws. The rest of the loop is unchanged; release() would hand a pointer back.
double adopted(cudaStream_t stream, std::vector<float>& host, int device) {
  const cuscope::memory_pool_ref pool = cuscope::memory_pool_ref::device_current(device);
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    void* raw_in = nullptr;
    void* raw_out = nullptr;
    check(cudaMallocAsync(&raw_in, n * sizeof(float), stream), "cudaMallocAsync");
    auto in = cuscope::device_buffer<float>::adopt(stream, static_cast<float*>(raw_in), n, pool);
    check(cudaMallocAsync(&raw_out, n * sizeof(float), stream), "cudaMallocAsync");
    auto out = cuscope::device_buffer<float>::adopt(stream, static_cast<float*>(raw_out), n, pool);
    sum += work(stream, in.data(), out.data(), host);
  }
  return sum;
}

// Step 3: buffers allocated by cuscope from a pool of its own, which keeps its memory between
// batches; the stream is still the legacy code's.
double own_pool(cudaStream_t stream, std::vector<float>& host, cuscope::memory_pool& pool) {
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    cuscope::device_buffer<float> in(stream, n, pool);
    cuscope::device_buffer<float> out(stream, n, pool);
    sum += work(stream, in.data(), out.data(), host);
  }
  return sum;
}

// Step 4: the loop inside a session, which checks for leaks at its end and trims the pool, here
// down to nothing.
double in_session(cudaStream_t stream, std::vector<float>& host, cuscope::memory_pool& pool,
                  cuscope::session_report& report) {
  cuscope::session_options options;
  options.name = "epoch";
  options.keep_bytes = 0;
  cuscope::session epoch(pool, stream, options);
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    auto in = epoch.make_buffer<float>(n);
    auto out = epoch.make_buffer<float>(n);
    sum += work(stream, in.data(), out.data(), host);
  }
  report = epoch.finish();
  return sum;
}

int run() {
  const int device = cuscope::current_device();
  std::printf("existing_codebase on device %d (%s)\n", device,
              CUSCOPE_EXAMPLE_SIMULATED ? "simulated" : "GPU");
  std::vector<float> host(n, 0.5f);
  const double expected = 0.5 * static_cast<double>(n) * batches;
  bool ok = true;
  const auto show = [&](const char* step, double sum, const std::string& more = {}) {
    ok = ok && sum == expected;
    std::printf("%-58s checksum %.0f%s\n", step, sum, more.c_str());
  };

  cudaStream_t raw = nullptr;  // the legacy code's stream, destroyed by hand, leaked on a throw
  check(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  show("step 0, legacy loop: raw stream, cudaMallocAsync", legacy(raw, host));

  // From here on cuscope owns the stream and destroys it when run() returns, however it returns.
  const cuscope::stream stream = cuscope::stream::adopt(raw, device);
  show("step 1, the stream adopted by cuscope::stream", legacy(stream.get(), host));
  show("step 2, the pointers adopted by device_buffer", adopted(stream.get(), host, device));

  cuscope::memory_pool pool;
  const double sum = own_pool(stream.get(), host, pool);
  show("step 3, buffers from a cuscope pool", sum,
       ", " + std::to_string(pool.stats().reserved_bytes >> 20) + " MiB kept between batches");

  cuscope::session_report report;
  const double in_epoch = in_session(stream.get(), host, pool, report);
  show("step 4, the loop inside a session", in_epoch,
       ", " + std::to_string(report.returned_bytes >> 20) + " MiB returned at its end, " +
           (report.leaked() ? "LEAKS" : "no leaks"));
  ok = ok && !report.leaked() && pool.stats().reserved_bytes == 0;
  std::printf("%s\n", ok ? "all steps agree" : "MISMATCH");
  return ok ? 0 : 1;
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
