// SPDX-License-Identifier: Apache-2.0
// cuscope-benchmark: also simulated
//
// Benchmark: cuscope::batches, host data staged to the device batch by batch.
//
// Per batch size, over the same --total bytes, side by side and interleaved in rounds:
//   raw pinned      cudaMemcpyAsync of each batch from page-locked memory into one of two device
//                   buffers, back to back on one stream: what the copy engine does at best;
//   batches pinned  batches() over the same page-locked memory (copied without staging), with an
//                   empty loop body;
//   batches staged  batches() over pageable memory: each batch is copied by the host into
//                   page-locked staging, then to the device;
//   batches producer  batches() from a producer callback that copies each batch from pageable
//                   memory into the staging buffer (as a file reader or a decoder would);
//   compute         a kernel per batch on device-resident data, sized so that its time matches the
//                   raw copy time of a batch;
//   overlap pinned  batches pinned with that kernel on every batch;
//   overlap staged  batches staged with that kernel on every batch.
// Throughput ratio = raw pinned time / batches time (goal: at least 0.9). Overlap ratio = overlap
// time / max(copy time of the same source without compute, compute time) (goal: at most 1.05; 1 is
// perfect overlap, 2 is none).
//
// Self-checks: every batch of every path is summed by a kernel in a verification pass, and every
// timed overlap run, and the sums must equal the host's; the benchmark fails otherwise.
//
// nvcc builds it for the GPU (batch_bench). The same file compiled as C++ runs on the simulated
// device (batch_bench_sim), where a host function stands in for the kernel: only the self-checks
// mean anything there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cuscope/cuscope.hpp>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"

#if !defined(__CUDACC__)
#  if !CUSCOPE_BENCH_SIMULATED
#    error "without nvcc, batch_bench runs on the simulated device only"
#  endif
#  include <cuscope/sim.hpp>
#endif

// nvcc gives unnamed namespaces a name, which -Wmissing-declarations then flags: the functions
// here are static instead.
namespace batch_bench {

namespace cb = cuscope_bench;

using word = std::uint32_t;
using checksum_t = unsigned long long;

static word value_at(std::size_t i) {
  return static_cast<word>((i * 2654435761u) ^ (i >> 7));
}

// The work on one batch: the sum of its words into *checksum, after rounds of arithmetic per word
// (whose result only guards against the compiler dropping them).
struct work_item {
  const word* data = nullptr;
  std::size_t count = 0;
  unsigned rounds = 0;
  checksum_t* checksum = nullptr;
  checksum_t* sink = nullptr;
};

#if defined(__CUDACC__)

constexpr unsigned threads = 256;

static __global__ void work_kernel(work_item w) {
  checksum_t sum = 0;
  word acc = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < w.count;
       i += stride) {
    word v = w.data[i];
    sum += v;
    for (unsigned r = 0; r < w.rounds; ++r)
      v = v * 1664525u + 1013904223u;
    acc ^= v;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
    acc ^= __shfl_down_sync(0xffffffffu, acc, offset);
  }
  if ((threadIdx.x & 31u) == 0) {
    atomicAdd(w.checksum, sum);
    if (acc == 0x9e3779b9u) atomicAdd(w.sink, 1ull);
  }
}

static unsigned work_blocks() {
  int device = 0;
  CUSCOPE_BENCH_CHECK(cudaGetDevice(&device));
  int sms = 0;
  CUSCOPE_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned>(sms) * 4;
}

static void enqueue_work(cudaStream_t stream, work_item& w) {
  static const unsigned blocks = work_blocks();
  work_kernel<<<blocks, threads, 0, stream>>>(w);
  CUSCOPE_BENCH_CHECK(cudaGetLastError());
}

#else

// On the simulated device: the same sum, by a host function in stream order (rounds are ignored).
static void host_work(void* data) {
  const work_item& w = *static_cast<const work_item*>(data);
  const word* x = cuscope::sim::host_view(w.data, w.count);
  checksum_t* out = cuscope::sim::host_view(w.checksum, 1);
  checksum_t sum = 0;
  for (std::size_t i = 0; i < w.count; ++i)
    sum += x[i];
  *out += sum;
}

static void enqueue_work(cudaStream_t stream, work_item& w) {
  CUSCOPE_BENCH_CHECK(cudaLaunchHostFunc(stream, &host_work, &w));
}

#endif

// Everything the runs of one batch size share.
struct setup {
  setup(cuscope::stream_ref s, cuscope::memory_pool& p, const std::vector<word>& host,
        const cuscope::pinned_buffer<word>& locked)
      : stream(s), pool(p), pageable(host), pinned(locked) {}

  cuscope::stream_ref stream;
  cuscope::memory_pool& pool;
  const std::vector<word>& pageable;
  const cuscope::pinned_buffer<word>& pinned;
  std::size_t batch_words = 0;
  std::size_t batches = 0;
  std::size_t depth = 2;
  std::vector<checksum_t> expected;              // per batch
  cuscope::device_buffer<word> raw[2];           // raw copies' targets; raw[0] also compute's data
  cuscope::device_buffer<checksum_t> checksums;  // per batch
  cuscope::device_buffer<checksum_t> sink;       // the guard
  std::vector<work_item> items;                  // per batch, alive until its work has run
};

enum alternative : std::size_t {
  raw_pinned,
  batches_pinned,
  batches_staged,
  batches_producer,
  compute,
  overlap_pinned,
  overlap_staged,
  alternative_count
};
constexpr const char* keys[alternative_count] = {
    "raw_pinned", "batches_pinned", "batches_staged", "batches_producer",
    "compute",    "overlap_pinned", "overlap_staged"};

static std::size_t words_in(const setup& s, std::size_t k) {
  const std::size_t first = k * s.batch_words;
  return std::min(s.batch_words, s.pageable.size() - first);
}

static void reset_checksums(setup& s) {
  CUSCOPE_BENCH_CHECK(
      cudaMemsetAsync(s.checksums.data(), 0, s.checksums.size_bytes(), s.stream.get()));
}

static void check_checksums(setup& s, const char* what) {
  const std::vector<checksum_t> got = s.checksums.to_vector(s.stream);
  for (std::size_t k = 0; k < s.batches; ++k)
    if (got[k] != s.expected[k])
      throw std::runtime_error(std::string("self-check failed: ") + what + ": batch " +
                               std::to_string(k) + " of " + std::to_string(s.batches) +
                               " sums to " + std::to_string(got[k]) + ", expected " +
                               std::to_string(s.expected[k]));
}

static void work_on(setup& s, std::size_t k, const word* data, std::size_t count, unsigned rounds) {
  work_item& w = s.items[k];
  w.data = data;
  w.count = count;
  w.rounds = rounds;
  w.checksum = s.checksums.data() + k;
  w.sink = s.sink.data();
  enqueue_work(s.stream.get(), w);
}

template <class Range>
static double time_range(setup& s, Range&& range, bool with_work, unsigned rounds) {
  s.stream.synchronize();
  const auto start = cb::steady::now();
  for (const auto& b : range)
    if (with_work) work_on(s, b.index(), b.span().data(), b.size(), rounds);
  s.stream.synchronize();
  return cb::ns_between(start, cb::steady::now());
}

// One timed run of an alternative; verify adds the work (rounds 0) to the copies-only paths and
// checks the sums. Returns wall nanoseconds (construction of the range excluded).
static double run_once(setup& s, std::size_t alt, unsigned rounds, bool verify) {
  cuscope::batch_options o;
  o.depth = s.depth;
  const bool work = verify || alt == compute || alt == overlap_pinned || alt == overlap_staged;
  if (work) reset_checksums(s);
  double ns = 0;
  switch (alt) {
    case raw_pinned: {
      s.stream.synchronize();
      const auto start = cb::steady::now();
      for (std::size_t k = 0; k < s.batches; ++k) {
        word* to = s.raw[k % 2].data();
        const std::size_t n = words_in(s, k);
        CUSCOPE_BENCH_CHECK(cudaMemcpyAsync(to, s.pinned.data() + k * s.batch_words,
                                            n * sizeof(word), cudaMemcpyHostToDevice,
                                            s.stream.get()));
        if (verify) work_on(s, k, to, n, 0);
      }
      s.stream.synchronize();
      ns = cb::ns_between(start, cb::steady::now());
      break;
    }
    case batches_pinned:
    case overlap_pinned:
      ns = time_range(s, cuscope::batches(s.stream, s.pinned, s.batch_words, s.pool, o), work,
                      rounds);
      break;
    case batches_staged:
    case overlap_staged:
      ns = time_range(s, cuscope::batches(s.stream, s.pageable, s.batch_words, s.pool, o), work,
                      rounds);
      break;
    case batches_producer: {
      const std::vector<word>& from = s.pageable;
      const auto fill = [&from](std::size_t first, std::size_t n, word* to) {
        std::memcpy(to, from.data() + first, n * sizeof(word));
      };
      ns = time_range(s,
                      cuscope::batches(s.stream, cuscope::from_producer<word>(from.size(), fill),
                                       s.batch_words, s.pool, o),
                      work, rounds);
      break;
    }
    case compute: {
      s.stream.synchronize();
      const auto start = cb::steady::now();
      for (std::size_t k = 0; k < s.batches; ++k)
        work_on(s, k, s.raw[0].data(), words_in(s, k), rounds);
      s.stream.synchronize();
      ns = cb::ns_between(start, cb::steady::now());
      break;
    }
    default:
      throw std::logic_error("no such alternative");
  }
  const bool checks_sums = verify || alt == overlap_pinned || alt == overlap_staged;
  if (checks_sums) check_checksums(s, keys[alt]);
  return ns;
}

// One epoch with the range's making and ending included: staging from cudaHostAlloc (no pool)
// or from staging, a pinned_memory_pool.
static double run_epoch(setup& s, const cuscope::pinned_memory_pool* staging) {
  cuscope::batch_options o;
  o.depth = s.depth;
  if (staging != nullptr) o.staging_pool = staging->ref();
  s.stream.synchronize();
  const auto start = cb::steady::now();
  {
    auto range = cuscope::batches(s.stream, s.pageable, s.batch_words, s.pool, o);
    for (const auto& b : range)
      (void)b;
  }
  s.stream.synchronize();
  return cb::ns_between(start, cb::steady::now());
}

// Rounds of arithmetic per word that make the kernel on one batch last about target_ns.
static unsigned calibrate(setup& s, double target_ns) {
  // The compute alternative sums raw[0], which must hold the first batch for its sums to mean
  // anything; calibration only times it.
  double rounds = 64;
  for (int i = 0; i < 3; ++i) {
    const double ns =
        run_once(s, compute, static_cast<unsigned>(rounds), false) / static_cast<double>(s.batches);
    if (ns <= 0) break;
    rounds = std::clamp(rounds * target_ns / ns, 1.0, 1e7);
  }
  return static_cast<unsigned>(rounds);
}

static int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "batch_bench: cuscope::batches throughput against raw pinned copies, and the "
                   "overlap of its copies with compute",
                   {{"--total", "bytes of data per run, e.g. 1G"},
                    {"--batch", "batch sizes, e.g. 1M,4M,16M,64M"},
                    {"--depth", "batches in flight (batch_options::depth)"},
                    {"--rounds", "rounds of interleaved runs (median over them)"}});
  const std::size_t total = a.sizes("--total", {a.quick() ? 16 * cb::MiB : cb::GiB}).front();
  const std::vector<std::size_t> batch_bytes = a.sizes(
      "--batch", a.quick()
                     ? std::vector<std::size_t>{cb::MiB, 4 * cb::MiB}
                     : std::vector<std::size_t>{cb::MiB, 4 * cb::MiB, 16 * cb::MiB, 64 * cb::MiB});
  const std::size_t depth = a.count("--depth", 2);
  const std::size_t rounds = a.count("--rounds", a.quick() ? 2 : 7);
  const std::size_t words = total / sizeof(word);
  if (words == 0) throw std::invalid_argument("--total must be at least 4 bytes");

  cb::report rep("batch", a);
  rep.config.set("total_bytes", words * sizeof(word));
  rep.config.set("batch_bytes", cb::to_json(batch_bytes));
  rep.config.set("depth", depth);
  rep.config.set("rounds", rounds);
  rep.note(
      "Throughput ratio = raw pinned time / batches time over the same bytes. Overlap ratio "
      "= time with a kernel on every batch / max(time of the same copies without the "
      "kernel, time of the kernels alone); the kernel is sized so that it lasts about as "
      "long as the raw copy of a batch. 'staged' copies pageable memory into page-locked "
      "staging on the host first: its throughput is bounded by the host's memcpy bandwidth "
      "on one thread as well as by the copy engine.");

  std::vector<word> pageable(words);
  for (std::size_t i = 0; i < words; ++i)
    pageable[i] = value_at(i);
  cuscope::pinned_buffer<word> pinned(words);
  std::copy(pageable.begin(), pageable.end(), pinned.begin());
  cuscope::memory_pool pool;
  cuscope::stream stream;
  std::optional<cuscope::pinned_memory_pool> staging_pool;
  if (cuscope::pinned_memory_pool::supported(cuscope::current_device())) staging_pool.emplace();
  cb::table staging_table(
      "batch: one staged epoch including the range's making and ending (median): staging from "
      "cudaHostAlloc against a pinned_memory_pool",
      {"batch", "batches", "cudaHostAlloc staging", "pool staging", "ratio"});

  cb::table t("batch: wall time per run of " + cb::format_bytes(words * sizeof(word)) +
                  " (median), throughput and overlap",
              {"batch", "batches", "raw pinned", "GB/s", "batches pinned", "ratio",
               "batches staged", "ratio", "producer", "ratio", "compute", "overlap pinned", "ratio",
               "overlap staged", "ratio"});
  const std::size_t headline_batch = [&] {
    std::size_t best = batch_bytes.front();
    for (const std::size_t b : batch_bytes)
      if (b <= 16 * cb::MiB && (best > 16 * cb::MiB || b > best)) best = b;
    return best;
  }();
  double h_pinned = std::numeric_limits<double>::quiet_NaN();
  double h_staged = h_pinned, h_overlap = h_pinned, h_overlap_staged = h_pinned;

  for (const std::size_t bytes : batch_bytes) {
    setup s(stream, pool, pageable, pinned);
    s.batch_words = std::max<std::size_t>(1, std::min(bytes / sizeof(word), words));
    s.batches = (words + s.batch_words - 1) / s.batch_words;
    s.depth = depth;
    s.expected.resize(s.batches);
    for (std::size_t k = 0; k < s.batches; ++k) {
      checksum_t sum = 0;
      for (std::size_t i = k * s.batch_words; i < k * s.batch_words + words_in(s, k); ++i)
        sum += pageable[i];
      s.expected[k] = sum;
    }
    s.raw[0] = cuscope::device_buffer<word>(stream, s.batch_words, pool);
    s.raw[1] = cuscope::device_buffer<word>(stream, s.batch_words, pool);
    s.checksums = cuscope::device_buffer<checksum_t>(stream, s.batches, pool);
    s.sink = cuscope::device_buffer<checksum_t>(stream, 1, pool);
    s.items.resize(s.batches);

    // Verification pass (also the warm-up): every path's batches hold the data.
    for (const std::size_t alt : {raw_pinned, batches_pinned, batches_staged, batches_producer})
      (void)run_once(s, alt, 0, true);
    std::vector<double> raw_ns;
    for (int i = 0; i < 3; ++i)
      raw_ns.push_back(run_once(s, raw_pinned, 0, false));
    const unsigned work_rounds =
        calibrate(s, cb::summarize(raw_ns).median / static_cast<double>(s.batches));
    (void)run_once(s, overlap_pinned, work_rounds, false);  // warm-up

    std::vector<std::vector<double>> samples(alternative_count);
    for (std::size_t r = 0; r < rounds; ++r)
      for (const std::size_t alt : cb::round_order(alternative_count, r))
        samples[alt].push_back(run_once(s, alt, work_rounds, false));
    std::vector<cb::summary> sum;
    for (const auto& v : samples)
      sum.push_back(cb::summarize(v));
    // Staging per epoch, both ways interleaved in the same run; the ratio is cudaHostAlloc time /
    // pool time (above 1: the pool is faster).
    std::vector<double> epoch_host_alloc, epoch_pool;
    for (std::size_t r = 0; r < rounds + 1; ++r) {
      const double a_ns = run_epoch(s, nullptr);
      const double p_ns = staging_pool ? run_epoch(s, &*staging_pool) : 0;
      if (r == 0) continue;  // warm-up: the pool reserves its memory once
      epoch_host_alloc.push_back(a_ns);
      if (staging_pool) epoch_pool.push_back(p_ns);
    }
    const cb::summary host_alloc_sum = cb::summarize(epoch_host_alloc);
    double staging_ratio = std::numeric_limits<double>::quiet_NaN();
    if (staging_pool) {
      const cb::summary pool_sum = cb::summarize(epoch_pool);
      staging_ratio = host_alloc_sum.median / pool_sum.median;
      staging_table.add_row({cb::format_bytes(s.batch_words * sizeof(word)),
                             std::to_string(s.batches), cb::format_ns_spread(host_alloc_sum),
                             cb::format_ns_spread(pool_sum), cb::fixed(staging_ratio, 3)});
    } else {
      staging_table.add_row({cb::format_bytes(s.batch_words * sizeof(word)),
                             std::to_string(s.batches), cb::format_ns_spread(host_alloc_sum),
                             "not supported", "-"});
    }
    const double moved = static_cast<double>(words * sizeof(word));
    const auto gbps = [&](std::size_t alt) { return moved / sum[alt].median; };  // bytes/ns
    const auto ratio = [&](std::size_t alt) { return sum[raw_pinned].median / sum[alt].median; };
    const double overlap =
        sum[overlap_pinned].median / std::max(sum[batches_pinned].median, sum[compute].median);
    const double overlap_st =
        sum[overlap_staged].median / std::max(sum[batches_staged].median, sum[compute].median);
    t.add_row({cb::format_bytes(s.batch_words * sizeof(word)), std::to_string(s.batches),
               cb::format_ns_spread(sum[raw_pinned]), cb::fixed(gbps(raw_pinned), 1),
               cb::format_ns_spread(sum[batches_pinned]), cb::fixed(ratio(batches_pinned), 3),
               cb::format_ns_spread(sum[batches_staged]), cb::fixed(ratio(batches_staged), 3),
               cb::format_ns_spread(sum[batches_producer]), cb::fixed(ratio(batches_producer), 3),
               cb::format_ns_spread(sum[compute]), cb::format_ns_spread(sum[overlap_pinned]),
               cb::fixed(overlap, 3), cb::format_ns_spread(sum[overlap_staged]),
               cb::fixed(overlap_st, 3)});
    cb::json row = cb::json::object();
    row.set("batch_bytes", s.batch_words * sizeof(word));
    row.set("batches", s.batches);
    row.set("work_rounds", work_rounds);
    cb::json alts = cb::json::object();
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      cb::json j = cb::json::object();
      j.set("wall_ns", sum[alt].to_json());
      if (alt != compute) j.set("gb_per_s", gbps(alt));
      alts.set(keys[alt], std::move(j));
    }
    row.set("alternatives", std::move(alts));
    cb::json ratios = cb::json::object();
    ratios.set("batches_pinned/raw_pinned (throughput)", ratio(batches_pinned));
    ratios.set("batches_staged/raw_pinned (throughput)", ratio(batches_staged));
    ratios.set("batches_producer/raw_pinned (throughput)", ratio(batches_producer));
    ratios.set("overlap_pinned (time / max(copy, compute))", overlap);
    ratios.set("overlap_staged (time / max(copy, compute))", overlap_st);
    if (staging_pool)
      ratios.set("epoch_staged cudaHostAlloc / pinned_memory_pool (time)", staging_ratio);
    row.set("ratios", std::move(ratios));
    row.set("verified", true);
    rep.results.push(std::move(row));
    if (bytes == headline_batch) {
      h_pinned = ratio(batches_pinned);
      h_staged = ratio(batches_staged);
      h_overlap = overlap;
      h_overlap_staged = overlap_st;
    }
  }
  rep.add_table(t);
  rep.add_table(staging_table);
  const std::string label = cb::format_bytes(headline_batch) + " batches";
  rep.headline("batch: batches pinned throughput / raw pinned, " + label, h_pinned, "x", "at least",
               0.9);
  rep.headline("batch: batches staged (pageable) throughput / raw pinned, " + label, h_staged, "x",
               "at least", 0.9);
  rep.headline("batch: overlap ratio, pinned source, " + label, h_overlap, "x", "at most", 1.05);
  rep.headline("batch: overlap ratio, staged source, " + label, h_overlap_staged, "x", "at most",
               1.05);
  return rep.finish();
}

}  // namespace batch_bench

int main(int argc, char** argv) {
  return cuscope_bench::run_main("batch_bench", [&] { return batch_bench::run(argc, argv); });
}
