// SPDX-License-Identifier: Apache-2.0
// Benchmark 3: several streams, each running short kernels with an allocation before each kernel
// and its free after it, the pool free to hand memory freed on one stream to another. How much of
// the possible concurrency survives the allocations?
//
// Each kernel spins for --kernel-us microseconds (on the GPU's global timer, one block, so that
// many fit on the GPU at once), then touches its buffer (a byte per 4 KiB page) and counts itself.
// Per stream count S, side by side and interleaved in rounds:
//   serial             all S x K kernels on one stream, buffers allocated up front: the total
//                      kernel time if serialized;
//   preallocated       S streams, a buffer per stream allocated up front: the best the GPU does;
//   memory_pool        S streams, a cuscope::device_buffer per kernel from a cuscope::memory_pool
//                      (keep_all, CUDA's default reuse policy), freed on its stream after it;
//   memory_pool, no internal deps  the same with reuse_policy::allow_internal_dependencies off,
//                      so that CUDA never makes one stream wait for another's free;
//   raw pool           cudaMallocFromPoolAsync/cudaFreeAsync on a tuned raw pool.
// Achieved concurrency = serial wall time / wall time; the ideal is S. Also reported: the pool's
// reserved peak in buffers (S means that the streams shared the memory without growing the pool).
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cuscope/cuscope.hpp>
#include <string>
#include <vector>

#include "bench.hpp"

// nvcc gives anonymous namespaces a name, which -Wmissing-declarations then flags: the functions
// here are static instead.
namespace streams_bench {

namespace cb = cuscope_bench;

static __device__ unsigned long long global_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void spin_and_touch(unsigned char* buffer, std::size_t bytes,
                                      unsigned long long ns, unsigned* counter) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
  for (std::size_t i = std::size_t{threadIdx.x} * 4096; i < bytes;
       i += std::size_t{blockDim.x} * 4096)
    buffer[i] = 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    buffer[bytes - 1] = 1;
    atomicAdd(counter, 1u);
  }
}

enum alternative : std::size_t {
  serial,
  preallocated,
  cuscope_pool,
  cuscope_no_internal,
  raw,
  alternative_count
};
constexpr std::array<const char*, alternative_count> keys = {
    "serial", "preallocated", "memory_pool", "memory_pool_no_internal_deps", "raw_pool"};

struct setup {
  std::vector<cuscope::stream>& streams;
  cuscope::memory_pool& pool;
  cuscope::memory_pool& pool_no_internal;
  cb::raw_pool& raw;
  std::vector<cuscope::device_buffer<unsigned char>>& fixed;  // one per stream, up front
  unsigned* counters;                                         // one per stream, on the device
  std::size_t bytes;
  unsigned long long kernel_ns;
};

static void launch(const setup& s, unsigned char* buffer, std::size_t stream_index,
                   cudaStream_t st) {
  spin_and_touch<<<1, 128, 0, st>>>(buffer, s.bytes, s.kernel_ns, s.counters + stream_index);
}

struct run_result {
  double ns = 0;
  std::size_t reserved_peak = 0;
};

static run_result run_once(const setup& s, std::size_t a, std::size_t stream_count,
                           std::size_t per_stream) {
  cudaMemPool_t handle = nullptr;
  if (a == cuscope_pool) handle = s.pool.get();
  if (a == cuscope_no_internal) handle = s.pool_no_internal.get();
  if (a == raw) handle = s.raw.get();
  if (handle != nullptr) cb::reset_pool_peaks(handle);
  CUSCOPE_BENCH_CHECK(cudaMemset(s.counters, 0, sizeof(unsigned) * s.streams.size()));
  CUSCOPE_BENCH_CHECK(cudaDeviceSynchronize());

  const auto start = cb::steady::now();
  for (std::size_t k = 0; k < per_stream; ++k) {
    for (std::size_t i = 0; i < stream_count; ++i) {
      const cuscope::stream& st = s.streams[a == serial ? 0 : i];
      switch (a) {
        case serial:
        case preallocated:
          launch(s, s.fixed[i].data(), i, st.get());
          break;
        case cuscope_pool:
        case cuscope_no_internal: {
          cuscope::device_buffer<unsigned char> b(st, s.bytes,
                                                  a == cuscope_pool ? s.pool : s.pool_no_internal);
          launch(s, b.data(), i, st.get());
          break;
        }
        default: {
          void* p = nullptr;
          CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, s.bytes, s.raw.get(), st.get()));
          launch(s, static_cast<unsigned char*>(p), i, st.get());
          CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, st.get()));
          break;
        }
      }
    }
  }
  CUSCOPE_BENCH_CHECK(cudaGetLastError());
  CUSCOPE_BENCH_CHECK(cudaDeviceSynchronize());
  run_result r;
  r.ns = cb::ns_between(start, cb::steady::now());
  if (handle != nullptr)
    r.reserved_peak = cb::pool_attribute(handle, cudaMemPoolAttrReservedMemHigh);

  // Self-check: every kernel ran.
  std::vector<unsigned> counts(s.streams.size());
  CUSCOPE_BENCH_CHECK(cudaMemcpy(counts.data(), s.counters, sizeof(unsigned) * counts.size(),
                                 cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < stream_count; ++i) {
    if (counts[i] != per_stream)
      throw std::runtime_error("self-check failed: " + std::string(keys[a]) + ", " +
                               std::to_string(stream_count) + " streams: stream " +
                               std::to_string(i) + " ran " + std::to_string(counts[i]) +
                               " kernels of " + std::to_string(per_stream));
  }
  return r;
}

static int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "streams_bench: concurrency of short kernels on several streams with "
                   "allocations between them",
                   {{"--streams", "stream counts, e.g. 1,2,4,8,16"},
                    {"--per-stream", "kernels per stream"},
                    {"--kernel-us", "duration of each kernel, in microseconds"},
                    {"--bytes", "size of each kernel's buffer, e.g. 4M"},
                    {"--rounds", "rounds of interleaved runs (median over them)"}});
  const std::vector<std::size_t> stream_counts =
      a.counts("--streams",
               a.quick() ? std::vector<std::size_t>{2} : std::vector<std::size_t>{1, 2, 4, 8, 16});
  const std::size_t per_stream = a.count("--per-stream", a.quick() ? 4 : 40);
  const double kernel_us = a.number("--kernel-us", a.quick() ? 10 : 100);
  const std::size_t bytes = a.sizes("--bytes", {4 * cb::MiB}).front();
  const std::size_t rounds = a.count("--rounds", a.quick() ? 2 : 7);
  std::size_t max_streams = 1;
  for (const std::size_t n : stream_counts)
    max_streams = std::max(max_streams, n);

  cb::report rep("streams", a);
  rep.config.set("streams", cb::to_json(stream_counts));
  rep.config.set("kernels_per_stream", per_stream);
  rep.config.set("kernel_us", kernel_us);
  rep.config.set("buffer_bytes", bytes);
  rep.config.set("rounds", rounds);
  rep.note(
      "Kernels are one block of 128 threads spinning on the global timer, so that up to the "
      "GPU's limit of concurrent kernels can run at once. Achieved concurrency = wall time of "
      "the serial run / wall time; the ideal is the stream count. 'reserved peak' is the "
      "pool's reserved high-water mark in buffers of " +
      cb::format_bytes(bytes) +
      ": at the stream count, the streams shared memory without "
      "growing the pool.");

  std::vector<cuscope::stream> streams;
  for (std::size_t i = 0; i < max_streams; ++i)
    streams.emplace_back();
  cuscope::memory_pool pool;
  cuscope::pool_options no_internal;
  no_internal.reuse.allow_internal_dependencies = false;
  cuscope::memory_pool pool_no_internal(no_internal);
  cb::raw_pool raw_pool;
  // The preallocated buffers come from a pool of their own, so that they do not count in the
  // reserved peaks of the pools measured.
  cuscope::memory_pool fixed_pool;
  std::vector<cuscope::device_buffer<unsigned char>> fixed;
  for (std::size_t i = 0; i < max_streams; ++i)
    fixed.emplace_back(streams[i], bytes, fixed_pool);
  void* counters = nullptr;
  CUSCOPE_BENCH_CHECK(cudaMalloc(&counters, sizeof(unsigned) * max_streams));
  const setup s{streams,
                pool,
                pool_no_internal,
                raw_pool,
                fixed,
                static_cast<unsigned*>(counters),
                bytes,
                static_cast<unsigned long long>(kernel_us * 1e3)};

  cb::table t(
      "streams: wall time, achieved concurrency (ideal = streams) and reserved peak",
      {"streams", "serial", "preallocated", "concurrency", "memory_pool", "concurrency",
       "no internal deps", "concurrency", "raw pool", "concurrency", "peak (pool/raw, buffers)"});
  const std::size_t headline_streams = [&] {
    std::size_t best = stream_counts.front();
    for (const std::size_t n : stream_counts)
      if (n <= 8 && (best > 8 || n > best)) best = n;
    return best;
  }();
  double headline_vs_pre = std::numeric_limits<double>::quiet_NaN();
  double headline_vs_ideal = headline_vs_pre;
  for (const std::size_t n : stream_counts) {
    for (std::size_t alt = 0; alt < alternative_count; ++alt)
      (void)run_once(s, alt, n, std::min<std::size_t>(per_stream, 2));  // warm-up
    std::array<std::vector<double>, alternative_count> samples;
    std::array<std::size_t, alternative_count> peak{};
    for (std::size_t r = 0; r < rounds; ++r) {
      for (const std::size_t alt : cb::round_order(alternative_count, r)) {
        const run_result res = run_once(s, alt, n, per_stream);
        samples[alt].push_back(res.ns);
        peak[alt] = std::max(peak[alt], res.reserved_peak);
      }
    }
    std::array<cb::summary, alternative_count> sum;
    for (std::size_t alt = 0; alt < alternative_count; ++alt)
      sum[alt] = cb::summarize(samples[alt]);
    const auto concurrency = [&](std::size_t alt) { return sum[serial].median / sum[alt].median; };
    const auto in_buffers = [&](std::size_t alt) {
      return cb::fixed(static_cast<double>(peak[alt]) / static_cast<double>(bytes), 1);
    };
    t.add_row({std::to_string(n), cb::format_ns_spread(sum[serial]),
               cb::format_ns_spread(sum[preallocated]), cb::fixed(concurrency(preallocated), 2),
               cb::format_ns_spread(sum[cuscope_pool]), cb::fixed(concurrency(cuscope_pool), 2),
               cb::format_ns_spread(sum[cuscope_no_internal]),
               cb::fixed(concurrency(cuscope_no_internal), 2), cb::format_ns_spread(sum[raw]),
               cb::fixed(concurrency(raw), 2), in_buffers(cuscope_pool) + " / " + in_buffers(raw)});
    if (n == headline_streams) {
      headline_vs_pre = concurrency(cuscope_pool) / concurrency(preallocated);
      headline_vs_ideal = concurrency(cuscope_pool) / static_cast<double>(n);
    }
    cb::json row = cb::json::object();
    row.set("streams", n);
    cb::json alts = cb::json::object();
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      cb::json j = cb::json::object();
      j.set("wall_ns", sum[alt].to_json());
      j.set("concurrency", concurrency(alt));
      j.set("efficiency", concurrency(alt) / static_cast<double>(n));
      if (alt >= cuscope_pool) j.set("reserved_peak_bytes", peak[alt]);
      alts.set(keys[alt], std::move(j));
    }
    row.set("alternatives", std::move(alts));
    cb::json ratios = cb::json::object();
    ratios.set("memory_pool/preallocated (concurrency)",
               concurrency(cuscope_pool) / concurrency(preallocated));
    ratios.set("raw_pool/preallocated (concurrency)", concurrency(raw) / concurrency(preallocated));
    ratios.set("memory_pool/ideal (concurrency)",
               concurrency(cuscope_pool) / static_cast<double>(n));
    row.set("ratios", std::move(ratios));
    rep.results.push(std::move(row));
  }
  rep.add_table(t);
  CUSCOPE_BENCH_CHECK(cudaFree(counters));
  const std::string label = std::to_string(headline_streams) + " streams";
  rep.headline("streams: memory_pool concurrency / preallocated concurrency, " + label,
               headline_vs_pre, "x");
  rep.headline("streams: memory_pool concurrency / ideal, " + label, headline_vs_ideal, "x");
  return rep.finish();
}

}  // namespace streams_bench

int main(int argc, char** argv) {
  return cuscope_bench::run_main("streams_bench", [&] { return streams_bench::run(argc, argv); });
}
