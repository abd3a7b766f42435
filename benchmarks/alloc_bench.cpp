// SPDX-License-Identifier: Apache-2.0
// Benchmark 1: hot-path allocate/free pairs, 256 B to 1 GiB.
//
// For each size, six ways of allocating and freeing run side by side, interleaved in rounds (the
// order rotates each round) so that drift affects them all alike:
//   raw pool           cudaMallocFromPoolAsync + cudaFreeAsync on a pool tuned as the CUDA docs
//                      advise (release threshold UINT64_MAX): the baseline;
//   memory_pool        cuscope::memory_pool::allocate + deallocate (keep_all);
//   device_buffer      a cuscope::device_buffer<std::byte> constructed and destroyed;
//   cudaMalloc         cudaMalloc + cudaFree (synchronous);
//   default t0 + sync  cudaMallocAsync + cudaFreeAsync from the default pool with its release
//                      threshold at 0, plus a stream synchronization per pair, as a training loop
//                      has: the memory goes back to the driver at every synchronization;
//   raw pool + sync    the baseline plus the same synchronization per pair, to compare with.
// A batch of pairs is timed with the host clock, the stream synchronized at its end; its length
// is calibrated so that a batch lasts about --batch-us. Reported: the median over rounds of the
// time per pair, its spread (interquartile range over the median) and the ratios to the baseline.
#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <string>
#include <vector>

#include "bench.hpp"

namespace {

namespace cb = cuscope_bench;

enum alternative : std::size_t {
  raw,
  pool_pair,
  buffer,
  cuda_malloc,
  default_t0_sync,
  raw_sync,
  alternative_count
};

constexpr std::array<const char*, alternative_count> names = {
    "raw pool",   "memory_pool",       "device_buffer",
    "cudaMalloc", "default t0 + sync", "raw pool + sync"};
constexpr std::array<const char*, alternative_count> keys = {
    "raw_pool",   "memory_pool",          "device_buffer",
    "cudaMalloc", "default_pool_t0_sync", "raw_pool_sync"};

struct setup {
  cuscope::stream& stream;
  cuscope::memory_pool& pool;
  cb::raw_pool& raw;
};

// Runs count pairs of one alternative and returns the nanoseconds per pair.
double run_batch(const setup& s, std::size_t a, std::size_t bytes, std::size_t count) {
  const cudaStream_t st = s.stream.get();
  const cudaMemPool_t rp = s.raw.get();
  const auto start = cb::steady::now();
  switch (a) {
    case raw:
      for (std::size_t i = 0; i < count; ++i) {
        void* p = nullptr;
        CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, bytes, rp, st));
        CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
      }
      break;
    case pool_pair:
      for (std::size_t i = 0; i < count; ++i) {
        void* p = s.pool.allocate(s.stream, bytes);
        s.pool.deallocate(s.stream, p, bytes);
      }
      break;
    case buffer:
      for (std::size_t i = 0; i < count; ++i) {
        const cuscope::device_buffer<std::byte> b(s.stream, bytes, s.pool);
      }
      break;
    case cuda_malloc:
      for (std::size_t i = 0; i < count; ++i) {
        void* p = nullptr;
        CUSCOPE_BENCH_CHECK(cudaMalloc(&p, bytes));
        CUSCOPE_BENCH_CHECK(cudaFree(p));
      }
      break;
    case default_t0_sync:
      for (std::size_t i = 0; i < count; ++i) {
        void* p = nullptr;
        CUSCOPE_BENCH_CHECK(cudaMallocAsync(&p, bytes, st));
        CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
        CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
      }
      break;
    case raw_sync:
      for (std::size_t i = 0; i < count; ++i) {
        void* p = nullptr;
        CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, bytes, rp, st));
        CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
        CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
      }
      break;
    default:
      break;
  }
  CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
  return cb::ns_between(start, cb::steady::now()) / static_cast<double>(count);
}

// Allocates once through alternative a, fills the memory and reads it back.
void self_check(const setup& s, std::size_t a, std::size_t bytes) {
  const cudaStream_t st = s.stream.get();
  const std::string what = std::string(names[a]) + ", " + cb::format_bytes(bytes);
  const auto value = static_cast<unsigned char>(0x40 + a);
  void* p = nullptr;
  switch (a) {
    case buffer: {
      cuscope::device_buffer<std::byte> b(s.stream, bytes, s.pool);
      cb::verify_memory(b.data(), bytes, st, value, what);
      return;
    }
    case pool_pair:
      p = s.pool.allocate(s.stream, bytes);
      cb::verify_memory(p, bytes, st, value, what);
      s.pool.deallocate(s.stream, p, bytes);
      break;
    case cuda_malloc:
      CUSCOPE_BENCH_CHECK(cudaMalloc(&p, bytes));
      cb::verify_memory(p, bytes, st, value, what);
      CUSCOPE_BENCH_CHECK(cudaFree(p));
      break;
    case default_t0_sync:
      CUSCOPE_BENCH_CHECK(cudaMallocAsync(&p, bytes, st));
      cb::verify_memory(p, bytes, st, value, what);
      CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
      break;
    default:
      CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, bytes, s.raw.get(), st));
      cb::verify_memory(p, bytes, st, value, what);
      CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
      break;
  }
  CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
}

int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "alloc_bench: hot-path allocate/free pairs, cuscope against raw CUDA",
                   {{"--sizes", "sizes to allocate, e.g. 256,4K,1M,1G"},
                    {"--rounds", "rounds of interleaved batches (median over them)"},
                    {"--batch-us", "target duration of one timed batch, in microseconds"},
                    {"--max-pairs", "most pairs in one batch"}});
  const bool small = a.quick() || cb::simulated;
  std::vector<std::size_t> default_sizes;
  for (std::size_t s = 256; s <= (small ? cb::MiB : cb::GiB); s *= (a.quick() ? 64u : 4u))
    default_sizes.push_back(s);
  const std::vector<std::size_t> sizes = a.sizes("--sizes", default_sizes);
  const std::size_t rounds = a.count("--rounds", a.quick() ? 3 : (cb::simulated ? 5 : 21));
  const double batch_ns = a.number("--batch-us", a.quick() ? 50 : 2000) * 1e3;
  const std::size_t max_pairs = a.count("--max-pairs", a.quick() ? 64 : 20000);

  cb::report rep("alloc", a);
  rep.config.set("sizes", cb::to_json(sizes));
  rep.config.set("rounds", rounds);
  rep.config.set("batch_ns", batch_ns);
  rep.config.set("max_pairs_per_batch", max_pairs);

  cuscope::stream stream;
  cuscope::memory_pool pool;  // keep_all: the tuned setting, as for the raw pool
  cb::raw_pool raw_pool;
  const cb::default_pool_threshold t0(0);
  rep.note(t0.note());
  rep.note(
      "'default t0 + sync' and 'raw pool + sync' synchronize the stream after every pair, "
      "as a training loop does once per iteration; the other alternatives synchronize only at "
      "the end of a batch. Compare 'default t0 + sync' with 'raw pool + sync'.");
  const setup s{stream, pool, raw_pool};

  cb::table t(
      "allocate/free pair, median time per pair (±spread = IQR/median) and ratio to the raw "
      "pool",
      {"size", "raw pool", "memory_pool", "ratio", "device_buffer", "ratio", "cudaMalloc", "ratio",
       "default t0 + sync", "raw pool + sync", "t0/raw (synced)"});
  // Warm-up of every alternative before the first size is measured: the runtime's lazy
  // initialization and the first use of each path stay out of the figures.
  for (std::size_t alt = 0; alt < alternative_count; ++alt) {
    const auto until = cb::steady::now() + std::chrono::milliseconds(a.quick() ? 1 : 50);
    while (cb::steady::now() < until)
      (void)run_batch(s, alt, sizes.front(), 16);
  }

  std::vector<double> buffer_ratios;
  std::vector<double> pool_ratios;
  double buffer_256 = std::numeric_limits<double>::quiet_NaN();
  double pool_256 = buffer_256;
  for (const std::size_t bytes : sizes) {
    // Warm up (the pools reserve their memory, the runtime loads what it needs), then calibrate
    // the batch length of each alternative.
    std::array<std::size_t, alternative_count> pairs{};
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      self_check(s, alt, bytes);
      (void)run_batch(s, alt, bytes, 2);
      double per_pair = run_batch(s, alt, bytes, 1);
      if (per_pair * 64 < batch_ns) per_pair = run_batch(s, alt, bytes, 64);
      const double n = per_pair > 0 ? batch_ns / per_pair : static_cast<double>(max_pairs);
      pairs[alt] =
          std::max<std::size_t>(1, std::min(max_pairs, static_cast<std::size_t>(std::min(n, 1e9))));
    }
    std::array<std::vector<double>, alternative_count> samples;
    for (std::size_t r = 0; r < rounds; ++r)
      for (const std::size_t alt : cb::round_order(alternative_count, r))
        samples[alt].push_back(run_batch(s, alt, bytes, pairs[alt]));
    std::array<cb::summary, alternative_count> sum;
    for (std::size_t alt = 0; alt < alternative_count; ++alt)
      sum[alt] = cb::summarize(samples[alt]);

    const double base = sum[raw].median;
    const auto ratio = [&](std::size_t alt) { return sum[alt].median / base; };
    const double synced = sum[default_t0_sync].median / sum[raw_sync].median;
    t.add_row({cb::format_bytes(bytes), cb::format_ns_spread(sum[raw]),
               cb::format_ns_spread(sum[pool_pair]), cb::format_ratio(ratio(pool_pair)),
               cb::format_ns_spread(sum[buffer]), cb::format_ratio(ratio(buffer)),
               cb::format_ns_spread(sum[cuda_malloc]), cb::format_ratio(ratio(cuda_malloc)),
               cb::format_ns_spread(sum[default_t0_sync]), cb::format_ns_spread(sum[raw_sync]),
               cb::format_ratio(synced)});
    buffer_ratios.push_back(ratio(buffer));
    pool_ratios.push_back(ratio(pool_pair));
    if (bytes == 256) {
      buffer_256 = ratio(buffer);
      pool_256 = ratio(pool_pair);
    }

    cb::json row = cb::json::object();
    row.set("bytes", bytes);
    cb::json alts = cb::json::object();
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      cb::json j = sum[alt].to_json();
      j.set("unit", "ns per pair");
      j.set("pairs_per_batch", pairs[alt]);
      alts.set(keys[alt], std::move(j));
    }
    row.set("alternatives", std::move(alts));
    cb::json ratios = cb::json::object();
    for (std::size_t alt = 1; alt < alternative_count; ++alt)
      ratios.set(std::string(keys[alt]) + "/raw_pool", ratio(alt));
    ratios.set("default_pool_t0_sync/raw_pool_sync", synced);
    row.set("ratios", std::move(ratios));
    rep.results.push(std::move(row));
  }
  rep.add_table(t);

  rep.headline("alloc: device_buffer pair / raw pool pair, 256 B", buffer_256, "x", "at most", 1.05,
               "cuscope::device_buffer<std::byte> constructed and destroyed vs "
               "cudaMallocFromPoolAsync + cudaFreeAsync on a tuned pool");
  rep.headline("alloc: memory_pool pair / raw pool pair, 256 B", pool_256, "x", "at most", 1.05);
  rep.headline("alloc: device_buffer / raw pool, geometric mean over sizes",
               cb::geometric_mean(buffer_ratios), "x", "at most", 1.05);
  rep.headline("alloc: memory_pool / raw pool, geometric mean over sizes",
               cb::geometric_mean(pool_ratios), "x", "at most", 1.05);
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("alloc_bench", [&] { return run(argc, argv); });
}
