// SPDX-License-Identifier: Apache-2.0
// The simulated device's own cost: stream-ordered allocate/free pairs per second, so that fault
// injection sweeps (thousands of runs of an operation) stay fast. Prints a table and, with
// --json <file>, writes the figures as JSON.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuscope/sim.hpp>
#include <string>
#include <vector>

namespace {

struct result {
  std::string name;
  double pairs_per_second;
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorName(e));
    std::exit(1);
  }
}

result run(const char* name, cuscope::sim::execution mode, int sync_every, int live) {
  cuscope::sim::device_config config;
  config.mode = mode;
  cuscope::sim::reset(config);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  std::uint64_t keep = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "threshold");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  std::vector<void*> held(static_cast<std::size_t>(live));
  for (void*& p : held)
    check(cudaMallocFromPoolAsync(&p, 4096, pool, s), "hold");
  constexpr int pairs = 200000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    void* p = nullptr;
    check(cudaMallocFromPoolAsync(&p, 256 + static_cast<std::size_t>(i % 64) * 256, pool, s),
          "cudaMallocFromPoolAsync");
    check(cudaFreeAsync(p, s), "cudaFreeAsync");
    if (sync_every > 0 && i % sync_every == 0) check(cudaStreamSynchronize(s), "sync");
  }
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (void* p : held)
    check(cudaFreeAsync(p, s), "release");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  check(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy");
  return {name, pairs / seconds};
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) json = argv[i + 1];
  std::vector<result> results;
  results.push_back(run("eager", cuscope::sim::execution::eager, 0, 0));
  results.push_back(
      run("deferred, synchronize every 64", cuscope::sim::execution::deferred, 64, 0));
  results.push_back(run("eager, 1000 live allocations", cuscope::sim::execution::eager, 0, 1000));
  std::printf("%-36s %16s\n", "simulated device", "pairs per second");
  for (const result& r : results)
    std::printf("%-36s %16.0f\n", r.name.c_str(), r.pairs_per_second);
  if (json != nullptr) {
    FILE* f = std::fopen(json, "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "{\n  \"benchmark\": \"sim\",\n  \"results\": [\n");
    for (std::size_t i = 0; i < results.size(); ++i)
      std::fprintf(f, "    {\"name\": \"%s\", \"pairs_per_second\": %.0f}%s\n",
                   results[i].name.c_str(), results[i].pairs_per_second,
                   i + 1 < results.size() ? "," : "");
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
