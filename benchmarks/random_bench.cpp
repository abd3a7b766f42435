// SPDX-License-Identifier: Apache-2.0
// Benchmark 2: random allocations. A fixed pseudo-random sequence of operations (sizes uniform in
// [1, max], three allocations for every free, the freed allocation picked at random among the live
// ones, so that many are live at once and the pool fragments) runs on three allocators, side by
// side and interleaved in rounds:
//   memory_pool    cuscope::device_buffer<std::byte> from a cuscope::memory_pool (keep_all);
//   raw pool       cudaMallocFromPoolAsync/cudaFreeAsync on a pool with release threshold max;
//   default pool   cudaMallocAsync/cudaFreeAsync on the device's default pool at threshold 0.
// Timed: the whole sequence and one stream synchronization at its end, per operation. The first
// round finds the pools empty (cold); later rounds find them holding the first round's reserve
// (warm), except the default pool, which its threshold of 0 empties at every synchronization.
// Also reported: each pool's reserved and used peaks (cudaMemPoolAttrReservedMemHigh and
// UsedMemHigh, started afresh before each run) and their ratio.
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cuscope/cuscope.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"

namespace {

namespace cb = cuscope_bench;

enum alternative : std::size_t { cuscope_pool, raw, default_pool, alternative_count };
constexpr std::array<const char*, alternative_count> keys = {"memory_pool", "raw_pool",
                                                             "default_pool_t0"};

struct operation {
  bool allocate;
  std::size_t bytes;   // for an allocation
  std::uint64_t pick;  // for a free: picks the victim among the live allocations
};

// The sequence: three allocations for every free, on average.
std::vector<operation> make_sequence(std::size_t ops, std::size_t max_bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<operation> seq;
  seq.reserve(ops);
  std::size_t live = 0;
  for (std::size_t i = 0; i < ops; ++i) {
    const bool alloc = live == 0 || rng() % 4 != 0;
    operation op{alloc, 1 + static_cast<std::size_t>(rng() % max_bytes), rng()};
    live = alloc ? live + 1 : live - 1;
    seq.push_back(op);
  }
  return seq;
}

struct run_result {
  double ns_per_op = 0;
  std::size_t reserved_peak = 0;
  std::size_t used_peak = 0;
  std::size_t live_at_end = 0;
};

struct setup {
  cuscope::stream& stream;
  cuscope::memory_pool& pool;
  cb::raw_pool& raw;
  cudaMemPool_t default_pool;
};

cudaMemPool_t handle_of(const setup& s, std::size_t a) {
  return a == cuscope_pool ? s.pool.get() : a == raw ? s.raw.get() : s.default_pool;
}

run_result run_once(const setup& s, std::size_t a, const std::vector<operation>& seq) {
  const cudaStream_t st = s.stream.get();
  const cudaMemPool_t handle = handle_of(s, a);
  cb::reset_pool_peaks(handle);
  std::vector<cuscope::device_buffer<std::byte>> buffers;
  std::vector<void*> pointers;
  buffers.reserve(seq.size());
  pointers.reserve(seq.size());
  const auto start = cb::steady::now();
  if (a == cuscope_pool) {
    for (const operation& op : seq) {
      if (op.allocate) {
        buffers.emplace_back(s.stream, op.bytes, s.pool);
      } else {
        const std::size_t victim = static_cast<std::size_t>(op.pick % buffers.size());
        buffers[victim] = std::move(buffers.back());  // frees the victim
        buffers.pop_back();
      }
    }
  } else {
    for (const operation& op : seq) {
      if (op.allocate) {
        void* p = nullptr;
        if (a == raw)
          CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, op.bytes, handle, st));
        else
          CUSCOPE_BENCH_CHECK(cudaMallocAsync(&p, op.bytes, st));
        pointers.push_back(p);
      } else {
        const std::size_t victim = static_cast<std::size_t>(op.pick % pointers.size());
        CUSCOPE_BENCH_CHECK(cudaFreeAsync(pointers[victim], st));
        pointers[victim] = pointers.back();
        pointers.pop_back();
      }
    }
  }
  CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
  run_result r;
  r.ns_per_op = cb::ns_between(start, cb::steady::now()) / static_cast<double>(seq.size());
  r.reserved_peak = cb::pool_attribute(handle, cudaMemPoolAttrReservedMemHigh);
  r.used_peak = cb::pool_attribute(handle, cudaMemPoolAttrUsedMemHigh);
  r.live_at_end = a == cuscope_pool ? buffers.size() : pointers.size();

  // Self-check on the newest live allocation, then free everything (not timed).
  const std::string what = std::string(keys[a]) + " random run";
  if (a == cuscope_pool && !buffers.empty())
    cb::verify_memory(buffers.back().data(), buffers.back().size_bytes(), st, 0x5A, what);
  if (a != cuscope_pool && !pointers.empty()) {
    // After an allocation the last pointer is that allocation; after a free it is some live
    // allocation, of at least 1 byte.
    const std::size_t bytes = seq.back().allocate ? seq.back().bytes : 1;
    cb::verify_memory(pointers.back(), bytes, st, 0x5A, what);
  }
  buffers.clear();
  for (void* p : pointers)
    CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st));
  CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
  return r;
}

int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "random_bench: random sizes, three allocations per free, many live at once",
                   {{"--max-sizes", "largest allocation of each run, e.g. 64K,1M,8M"},
                    {"--ops", "operations per run"},
                    {"--rounds", "rounds (the first is cold; the median is over the others)"},
                    {"--seed", "seed of the sequence"}});
  const std::vector<std::size_t> max_sizes =
      a.sizes("--max-sizes", a.quick() ? std::vector<std::size_t>{64 * cb::KiB}
                             : cb::simulated
                                 ? std::vector<std::size_t>{64 * cb::KiB, cb::MiB}
                                 : std::vector<std::size_t>{64 * cb::KiB, cb::MiB, 8 * cb::MiB});
  const std::size_t ops = a.count("--ops", a.quick() ? 200 : (cb::simulated ? 2000 : 8000));
  const std::size_t rounds =
      std::max<std::size_t>(2, a.count("--rounds", a.quick() ? 2 : (cb::simulated ? 3 : 7)));
  const auto seed = static_cast<std::uint64_t>(a.integer("--seed", 20251122));

  cb::report rep("random", a);
  rep.config.set("max_sizes", cb::to_json(max_sizes));
  rep.config.set("ops", ops);
  rep.config.set("rounds", rounds);
  rep.config.set("seed", seed);
  rep.config.set("allocations_per_free", 3);

  cuscope::stream stream;
  cuscope::memory_pool pool;
  cb::raw_pool raw_pool;
  const cb::default_pool_threshold t0(0);
  rep.note(t0.note() +
           " It also starts the default pool's peak statistics afresh before each run.");
  rep.note(
      "Sizes are uniform in [1, max]; about three allocations per free; every run of a "
      "round replays the same sequence. 'cold' is the first round (empty pools); 'warm' is "
      "the median of the others, whose pools (except the default pool at threshold 0) "
      "still hold the first round's reserve.");
  const setup s{stream, pool, raw_pool, t0.pool()};

  cb::table times("random allocations: time per operation (warm: median ±spread; cold: round 1)",
                  {"max size", "live at end", "memory_pool", "ratio", "raw pool", "default pool t0",
                   "ratio", "cold: memory_pool", "raw pool", "default"});
  cb::table memory("random allocations: pool peaks (reserved / used)",
                   {"max size", "memory_pool", "raw pool", "default pool t0",
                    "reserved/used (memory_pool)", "(raw)", "(default)"});
  std::vector<double> warm_ratios;
  for (const std::size_t max_bytes : max_sizes) {
    const std::vector<operation> seq = make_sequence(ops, max_bytes, seed);
    pool.trim_to(0);
    CUSCOPE_BENCH_CHECK(cudaMemPoolTrimTo(raw_pool.get(), 0));
    std::array<std::vector<double>, alternative_count> warm;
    std::array<run_result, alternative_count> cold{};
    std::array<run_result, alternative_count> last{};
    for (std::size_t r = 0; r < rounds; ++r) {
      for (const std::size_t alt : cb::round_order(alternative_count, r)) {
        const run_result res = run_once(s, alt, seq);
        if (r == 0)
          cold[alt] = res;
        else
          warm[alt].push_back(res.ns_per_op);
        last[alt] = res;
      }
    }
    std::array<cb::summary, alternative_count> sum;
    for (std::size_t alt = 0; alt < alternative_count; ++alt)
      sum[alt] = cb::summarize(warm[alt]);
    const double ratio = sum[cuscope_pool].median / sum[raw].median;
    const double default_ratio = sum[default_pool].median / sum[raw].median;
    warm_ratios.push_back(ratio);
    const auto frag = [&](std::size_t alt) {
      return last[alt].used_peak == 0 ? std::numeric_limits<double>::quiet_NaN()
                                      : static_cast<double>(last[alt].reserved_peak) /
                                            static_cast<double>(last[alt].used_peak);
    };
    // The reserved peak of a warm run is the reserve kept from before: report the cold run's.
    const auto peaks = [&](std::size_t alt) {
      return cb::format_bytes(cold[alt].reserved_peak) + " / " +
             cb::format_bytes(cold[alt].used_peak);
    };
    times.add_row({cb::format_bytes(max_bytes), std::to_string(last[raw].live_at_end),
                   cb::format_ns_spread(sum[cuscope_pool]), cb::format_ratio(ratio),
                   cb::format_ns_spread(sum[raw]), cb::format_ns_spread(sum[default_pool]),
                   cb::format_ratio(default_ratio), cb::format_ns(cold[cuscope_pool].ns_per_op),
                   cb::format_ns(cold[raw].ns_per_op),
                   cb::format_ns(cold[default_pool].ns_per_op)});
    memory.add_row({cb::format_bytes(max_bytes), peaks(cuscope_pool), peaks(raw),
                    peaks(default_pool), cb::fixed(frag(cuscope_pool), 3), cb::fixed(frag(raw), 3),
                    cb::fixed(frag(default_pool), 3)});

    cb::json row = cb::json::object();
    row.set("max_bytes", max_bytes);
    row.set("live_at_end", last[raw].live_at_end);
    cb::json alts = cb::json::object();
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      cb::json j = cb::json::object();
      j.set("warm_ns_per_op", sum[alt].to_json());
      j.set("cold_ns_per_op", cold[alt].ns_per_op);
      j.set("cold_reserved_peak_bytes", cold[alt].reserved_peak);
      j.set("cold_used_peak_bytes", cold[alt].used_peak);
      j.set("warm_reserved_peak_bytes", last[alt].reserved_peak);
      j.set("warm_used_peak_bytes", last[alt].used_peak);
      alts.set(keys[alt], std::move(j));
    }
    row.set("alternatives", std::move(alts));
    cb::json ratios = cb::json::object();
    ratios.set("memory_pool/raw_pool (warm time)", ratio);
    ratios.set("default_pool_t0/raw_pool (warm time)", default_ratio);
    ratios.set("memory_pool/raw_pool (cold time)",
               cold[cuscope_pool].ns_per_op / cold[raw].ns_per_op);
    row.set("ratios", std::move(ratios));
    rep.results.push(std::move(row));
  }
  rep.add_table(times);
  rep.add_table(memory);
  pool.trim_to(0);
  rep.headline("random: memory_pool / raw pool, time per operation (warm, geometric mean)",
               cb::geometric_mean(warm_ratios), "x");
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("random_bench", [&] { return run(argc, argv); });
}
