// SPDX-License-Identifier: Apache-2.0
// The host cost that cuscope adds to an allocate/free pair, measured by the functions below: each
// runs a number of 256-byte pairs on one stream, through the raw API or through cuscope.
//
// Under callgrind (benchmarks/callgrind_overhead.py, on the simulated device, where the count is
// deterministic) it is run once per function with --only NAME --pairs N, and the instructions
// executed inside that function (--toggle-collect) are counted; the difference between two values
// of N gives the instructions per pair. Run on its own it times the same functions with the host
// clock, interleaved in rounds (on the simulated device that timing measures the simulation).
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <string>
#include <vector>

#include "bench.hpp"
#if CUSCOPE_BENCH_SIMULATED
#  include <cuscope/sim.hpp>
#endif

#if defined(__GNUC__)
#  define CUSCOPE_BENCH_MEASURED __attribute__((noinline, noclone))
#else
#  define CUSCOPE_BENCH_MEASURED
#endif

namespace {

namespace cb = cuscope_bench;

// The measured functions. Their names are what callgrind_overhead.py looks for.

CUSCOPE_BENCH_MEASURED void overhead_raw_pairs(cudaMemPool_t pool, cudaStream_t stream,
                                               std::size_t bytes, std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = nullptr;
    CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool, stream));
    CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, stream));
  }
}

CUSCOPE_BENCH_MEASURED void overhead_pool_pairs(const cuscope::memory_pool& pool,
                                                const cuscope::stream& stream, std::size_t bytes,
                                                std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    void* p = pool.allocate(stream, bytes);
    pool.deallocate(stream, p, bytes);
  }
}

CUSCOPE_BENCH_MEASURED void overhead_buffer_pairs(const cuscope::memory_pool& pool,
                                                  const cuscope::stream& stream, std::size_t bytes,
                                                  std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const cuscope::device_buffer<std::byte> b(stream, bytes, pool);
  }
}

CUSCOPE_BENCH_MEASURED void overhead_session_pairs(cuscope::session& session, std::size_t bytes,
                                                   std::size_t pairs) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto b = session.make_buffer<std::byte>(bytes);
  }
}

// The last three run the same measured functions on a pool with a recorder attached.
constexpr std::array<const char*, 7> functions = {
    "raw", "pool", "buffer", "session", "pool_recorded", "buffer_recorded", "session_recorded"};

// A recorder that samples only once an hour: the count is of recording itself, deterministic.
// Sampling (two pool attributes and cudaMemGetInfo) happens at most once per sample_interval.
cuscope::recorder_options no_sampling() {
  cuscope::recorder_options o;
  o.sample_interval = std::chrono::hours(1);
  return o;
}

// The recorder is attached to recorded_pool only while a _recorded function runs: the others
// measure a process where no pool records, which is the default.
struct fixture {
  cuscope::memory_pool pool;
  cuscope::stream stream;
  cuscope::session session{pool, stream, "overhead"};
  cuscope::recorder recorder{no_sampling()};
  cuscope::memory_pool recorded_pool;
  cuscope::session recorded_session{recorded_pool, stream, recorded_options(recorder)};
  std::size_t bytes = 256;

  static cuscope::session_options recorded_options(cuscope::recorder& r) {
    cuscope::session_options o;
    o.name = "overhead, recorded";
    o.record_into = &r;
    return o;
  }

  static bool recorded(std::size_t f) { return f >= 4; }

  // Attaches the recorder for function f, or detaches it.
  void record_for(std::size_t f) {
    if (recorded(f))
      recorded_pool.set_recorder(&recorder, "recorded");
    else
      recorded_pool.set_recorder(nullptr);
  }

  // Runs pairs through function f.
  void run(std::size_t f, std::size_t pairs) {
    switch (f) {
      case 0:
        overhead_raw_pairs(pool.get(), stream.get(), bytes, pairs);
        break;
      case 1:
        overhead_pool_pairs(pool, stream, bytes, pairs);
        break;
      case 2:
        overhead_buffer_pairs(pool, stream, bytes, pairs);
        break;
      case 3:
        overhead_session_pairs(session, bytes, pairs);
        break;
      case 4:
        overhead_pool_pairs(recorded_pool, stream, bytes, pairs);
        break;
      case 5:
        overhead_buffer_pairs(recorded_pool, stream, bytes, pairs);
        break;
      default:
        overhead_session_pairs(recorded_session, bytes, pairs);
        break;
    }
  }
};

int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "overhead_bench: the host cost cuscope adds to an allocate/free pair "
                   "(run under callgrind by benchmarks/callgrind_overhead.py)",
                   {{"--only",
                     "run only this function once (raw, pool, buffer, session, or the last three "
                     "with _recorded): the mode callgrind_overhead.py uses"},
                    {"--pairs", "pairs per call"},
                    {"--rounds", "rounds of interleaved timed calls (timing mode)"}});
#if CUSCOPE_BENCH_SIMULATED
  // Eager execution: every operation runs when it is enqueued, so that nothing piles up.
  cuscope::sim::device_config config;
  config.mode = cuscope::sim::execution::eager;
  cuscope::sim::reset(config);
#endif
  const std::size_t pairs = a.count("--pairs", a.quick() ? 1000 : 20000);
  fixture fx;
  // Warm-up outside the measured functions: the pool reserves its first block.
  {
    void* p = nullptr;
    CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, fx.bytes, fx.pool.get(), fx.stream.get()));
    CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, fx.stream.get()));
    CUSCOPE_BENCH_CHECK(
        cudaMallocFromPoolAsync(&p, fx.bytes, fx.recorded_pool.get(), fx.stream.get()));
    CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, fx.stream.get()));
    fx.stream.synchronize();
  }

  if (a.has("--only")) {
    const std::string only = a.get("--only", "");
    std::size_t f = functions.size();
    for (std::size_t i = 0; i < functions.size(); ++i)
      if (only == functions[i]) f = i;
    if (f == functions.size()) {
      std::fprintf(stderr,
                   "overhead_bench: --only takes raw, pool, buffer, session, pool_recorded, "
                   "buffer_recorded or session_recorded\n");
      return 2;
    }
    fx.record_for(f);
    fx.run(f, pairs);
    fx.stream.synchronize();
    (void)fx.session.finish();
    (void)fx.recorded_session.finish();
    std::printf("ran %zu pairs through %s\n", pairs, functions[f]);
    return 0;
  }

  const std::size_t rounds = a.count("--rounds", a.quick() ? 3 : 21);
  cb::report rep("overhead_timing", a);
  rep.config.set("pairs", pairs);
  rep.config.set("rounds", rounds);
  rep.config.set("bytes", fx.bytes);
  for (std::size_t f = 0; f < functions.size(); ++f) {
    fx.record_for(f);
    fx.run(f, pairs / 10 + 1);  // warm-up
  }
  std::array<std::vector<double>, functions.size()> samples;
  for (std::size_t r = 0; r < rounds; ++r) {
    for (const std::size_t f : cb::round_order(functions.size(), r)) {
      fx.record_for(f);
      const auto start = cb::steady::now();
      fx.run(f, pairs);
      fx.stream.synchronize();
      samples[f].push_back(cb::ns_between(start, cb::steady::now()) / static_cast<double>(pairs));
    }
  }
  (void)fx.session.finish();
  (void)fx.recorded_session.finish();
  cb::table t("host time per 256-byte pair (median ±spread) and ratio to the raw API",
              {"function", "time per pair", "ratio"});
  const cb::summary raw = cb::summarize(samples[0]);
  for (std::size_t f = 0; f < functions.size(); ++f) {
    const cb::summary s = cb::summarize(samples[f]);
    t.add_row({functions[f], cb::format_ns_spread(s), cb::format_ratio(s.median / raw.median)});
    cb::json row = s.to_json();
    row.set("function", functions[f]);
    row.set("unit", "ns per pair");
    row.set("ratio_to_raw", s.median / raw.median);
    rep.results.push(std::move(row));
  }
  rep.add_table(t);
  rep.note(
      "Instruction counts, which do not depend on the machine's load, come from "
      "benchmarks/callgrind_overhead.py.");
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("overhead_bench", [&] { return run(argc, argv); });
}
