// SPDX-License-Identifier: Apache-2.0
// Benchmark 6: a loop of per-iteration temporaries, as in a training or inference loop. Each
// iteration allocates a temporary, computes on it (a cudaMemsetAsync over all of it, so that the
// GPU touches every page), frees it and synchronizes the stream. Side by side, interleaved in
// rounds:
//   session        cuscope: a cuscope::session around each batch of iterations (an "epoch") on a
//                  cuscope::memory_pool (keep_all), the temporary from session::make_buffer; the
//                  session's construction and finish() (synchronize, leak check, trim back to the
//                  reserve at entry) are timed with the batch;
//   memory_pool    cuscope::device_buffer from the same kind of pool, no session;
//   raw pool       cudaMallocFromPoolAsync/cudaFreeAsync on a pool with release threshold max;
//   default t0     cudaMallocAsync/cudaFreeAsync on the device's default pool at threshold 0 (the
//                  CUDA default: the memory goes back to the driver at every synchronization);
//   cudaMalloc     cudaMalloc/cudaFree.
// Reported: time per iteration (median over rounds of a batch's time / iterations, with its
// spread) and ratios. The goal on an H200: the session loop at least 10x faster than the default
// pool at threshold 0 for 64 MiB temporaries.
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cuscope/cuscope.hpp>
#include <string>
#include <vector>

#include "bench.hpp"

namespace {

namespace cb = cuscope_bench;

enum alternative : std::size_t {
  with_session,
  pool_only,
  raw,
  default_t0,
  cuda_malloc,
  alternative_count
};
constexpr std::array<const char*, alternative_count> keys = {"session", "memory_pool", "raw_pool",
                                                             "default_pool_t0", "cudaMalloc"};

struct setup {
  cuscope::stream& stream;
  cuscope::memory_pool& pool;
  cb::raw_pool& raw;
};

// The compute of an iteration: fill the temporary; on the last iteration also read its last byte
// back, to check it after the synchronization.
void compute(void* p, std::size_t bytes, std::size_t i, bool last, unsigned char* back,
             cudaStream_t st) {
  CUSCOPE_BENCH_CHECK(cudaMemsetAsync(p, static_cast<int>(i & 0xFF), bytes, st));
  if (last)
    CUSCOPE_BENCH_CHECK(cudaMemcpyAsync(back, static_cast<unsigned char*>(p) + (bytes - 1), 1,
                                        cudaMemcpyDeviceToHost, st));
}

// Runs iterations of alternative a and returns the nanoseconds per iteration.
double run_batch(const setup& s, std::size_t a, std::size_t bytes, std::size_t iterations) {
  const cudaStream_t st = s.stream.get();
  unsigned char back = 0;
  const auto start = cb::steady::now();
  switch (a) {
    case with_session: {
      cuscope::session epoch(s.pool, s.stream, "loop");
      for (std::size_t i = 0; i < iterations; ++i) {
        auto tmp = epoch.make_buffer<std::byte>(bytes);
        compute(tmp.data(), bytes, i, i + 1 == iterations, &back, st);
        tmp = {};  // freed on the stream before the synchronization, as at the end of a scope
        s.stream.synchronize();
      }
      (void)epoch.finish();
      break;
    }
    case pool_only:
      for (std::size_t i = 0; i < iterations; ++i) {
        cuscope::device_buffer<std::byte> tmp(s.stream, bytes, s.pool);
        compute(tmp.data(), bytes, i, i + 1 == iterations, &back, st);
        tmp = {};
        s.stream.synchronize();
      }
      break;
    case raw:
    case default_t0:
      for (std::size_t i = 0; i < iterations; ++i) {
        void* p = nullptr;
        if (a == raw)
          CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, bytes, s.raw.get(), st));
        else
          CUSCOPE_BENCH_CHECK(cudaMallocAsync(&p, bytes, st));
        compute(p, bytes, i, i + 1 == iterations, &back, st);
        CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
        CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
      }
      break;
    default:
      for (std::size_t i = 0; i < iterations; ++i) {
        void* p = nullptr;
        CUSCOPE_BENCH_CHECK(cudaMalloc(&p, bytes));
        compute(p, bytes, i, i + 1 == iterations, &back, st);
        // cudaFree is not promised to wait for the work that uses the memory.
        CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
        CUSCOPE_BENCH_CHECK(cudaFree(p));
      }
      break;
  }
  const double ns = cb::ns_between(start, cb::steady::now());
  const auto expected = static_cast<unsigned char>((iterations - 1) & 0xFF);
  if (back != expected)
    throw std::runtime_error("self-check failed: " + std::string(keys[a]) + ", " +
                             cb::format_bytes(bytes) + ": read back " + std::to_string(back) +
                             ", expected " + std::to_string(expected));
  return ns / static_cast<double>(iterations);
}

int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "loop_bench: a loop of per-iteration temporaries (allocate, compute, free, "
                   "synchronize)",
                   {{"--sizes", "temporary sizes, e.g. 1M,16M,64M,256M"},
                    {"--iterations", "iterations per timed batch"},
                    {"--rounds", "rounds of interleaved batches (median over them)"}});
  const std::vector<std::size_t> sizes =
      a.sizes("--sizes", a.quick()       ? std::vector<std::size_t>{cb::MiB}
                         : cb::simulated ? std::vector<std::size_t>{cb::MiB, 16 * cb::MiB}
                                         : std::vector<std::size_t>{cb::MiB, 16 * cb::MiB,
                                                                    64 * cb::MiB, 256 * cb::MiB});
  const std::size_t iterations = a.count("--iterations", a.quick() ? 4 : (cb::simulated ? 10 : 50));
  const std::size_t rounds = a.count("--rounds", a.quick() ? 2 : (cb::simulated ? 3 : 9));

  cb::report rep("loop", a);
  rep.config.set("sizes", cb::to_json(sizes));
  rep.config.set("iterations", iterations);
  rep.config.set("rounds", rounds);
  rep.config.set("compute", "cudaMemsetAsync over the whole temporary");

  cuscope::stream stream;
  cuscope::memory_pool pool;
  cb::raw_pool raw_pool;
  const cb::default_pool_threshold t0(0);
  rep.note(t0.note());
  rep.note(
      "Every iteration synchronizes the stream. 'session' opens a cuscope::session per batch "
      "of " +
      std::to_string(iterations) +
      " iterations and finishes it (trimming the pool) at "
      "the end of the batch, timed with it; 'memory_pool' keeps its reserve throughout.");
  const setup s{stream, pool, raw_pool};

  cb::table t("per-iteration loop: time per iteration (median ±spread) and ratios",
              {"size", "session", "memory_pool", "raw pool", "default t0", "cudaMalloc",
               "t0/session", "session/raw", "cudaMalloc/session"});
  // The headline size: 64 MiB, or the size closest to it.
  std::size_t headline_size = sizes.front();
  for (const std::size_t b : sizes) {
    const auto dist = [](std::size_t x) {
      return x > 64 * cb::MiB ? x - 64 * cb::MiB : 64 * cb::MiB - x;
    };
    if (dist(b) < dist(headline_size)) headline_size = b;
  }
  double t0_ratio = std::numeric_limits<double>::quiet_NaN();
  double raw_ratio = t0_ratio;
  for (const std::size_t bytes : sizes) {
    for (std::size_t alt = 0; alt < alternative_count; ++alt)
      (void)run_batch(s, alt, bytes, std::min<std::size_t>(iterations, 4));  // warm-up
    std::array<std::vector<double>, alternative_count> samples;
    for (std::size_t r = 0; r < rounds; ++r)
      for (const std::size_t alt : cb::round_order(alternative_count, r))
        samples[alt].push_back(run_batch(s, alt, bytes, iterations));
    std::array<cb::summary, alternative_count> sum;
    for (std::size_t alt = 0; alt < alternative_count; ++alt)
      sum[alt] = cb::summarize(samples[alt]);
    const double r_t0 = sum[default_t0].median / sum[with_session].median;
    const double r_raw = sum[with_session].median / sum[raw].median;
    const double r_malloc = sum[cuda_malloc].median / sum[with_session].median;
    t.add_row({cb::format_bytes(bytes), cb::format_ns_spread(sum[with_session]),
               cb::format_ns_spread(sum[pool_only]), cb::format_ns_spread(sum[raw]),
               cb::format_ns_spread(sum[default_t0]), cb::format_ns_spread(sum[cuda_malloc]),
               cb::format_ratio(r_t0), cb::format_ratio(r_raw), cb::format_ratio(r_malloc)});
    if (bytes == headline_size) {
      t0_ratio = r_t0;
      raw_ratio = r_raw;
    }
    cb::json row = cb::json::object();
    row.set("bytes", bytes);
    cb::json alts = cb::json::object();
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      cb::json j = sum[alt].to_json();
      j.set("unit", "ns per iteration");
      alts.set(keys[alt], std::move(j));
    }
    row.set("alternatives", std::move(alts));
    cb::json ratios = cb::json::object();
    ratios.set("default_pool_t0/session", r_t0);
    ratios.set("session/raw_pool", r_raw);
    ratios.set("memory_pool/raw_pool", sum[pool_only].median / sum[raw].median);
    ratios.set("cudaMalloc/session", r_malloc);
    row.set("ratios", std::move(ratios));
    rep.results.push(std::move(row));
  }
  rep.add_table(t);
  const std::string size = cb::format_bytes(headline_size);
  rep.headline("loop: default pool t0 / cuscope session, per iteration, " + size, t0_ratio, "x",
               "at least", 10.0);
  rep.headline("loop: cuscope session / raw tuned pool, per iteration, " + size, raw_ratio, "x");
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("loop_bench", [&] { return run(argc, argv); });
}
