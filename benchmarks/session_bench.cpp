// SPDX-License-Identifier: Apache-2.0
// Benchmark 5: session exit. N GiB are allocated in chunks, filled (so that the GPU has touched
// every page), the GPU work is waited for, and the chunks are freed; then the work ends, timed:
//   session            cuscope::session::finish() on a cuscope::memory_pool (keep_all): it
//                      synchronizes the stream, checks for leaks and trims the pool to its reserve
//                      at entry;
//   raw sync + trim    cudaStreamSynchronize + cudaMemPoolTrimTo(pool, 0) on a tuned raw pool;
//   default t0 sync    cudaStreamSynchronize on the default pool at release threshold 0, which
//                      hands the memory back at the synchronization.
// The three run side by side, interleaved in rounds. For each: the exit time; the bytes returned
// against the bytes expected (the unused reserve above what the pool held at entry), from the pool
// statistics and from the cudaMemGetInfo difference across the exit; and the cost of allocating
// again afterwards: the first chunk, and all N GiB, right after the exit (cold) and again once the
// memory is held (warm).
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cuscope/cuscope.hpp>
#include <string>
#include <vector>

#include "bench.hpp"

namespace {

namespace cb = cuscope_bench;

enum alternative : std::size_t { session_exit, raw_trim, default_sync, alternative_count };
constexpr std::array<const char*, alternative_count> keys = {"session", "raw_sync_trim",
                                                             "default_pool_t0_sync"};

struct setup {
  cuscope::stream& stream;
  cuscope::memory_pool& pool;
  cb::raw_pool& raw;
};

struct exit_result {
  double exit_ns = 0;
  std::size_t expected_bytes = 0;  // unused reserve above the entry reserve, when the work ended
  std::size_t pool_returned_bytes = 0;
  double driver_returned_bytes = 0;  // cudaMemGetInfo free after minus before (may be negative)
  double first_cold_ns = 0;
  double first_warm_ns = 0;
  double all_cold_ns = 0;
  double all_warm_ns = 0;
};

std::size_t device_free() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  CUSCOPE_BENCH_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

std::vector<std::size_t> chunks_of(std::size_t total, std::size_t chunk) {
  std::vector<std::size_t> out;
  for (std::size_t done = 0; done < total; done += chunk)
    out.push_back(std::min(chunk, total - done));
  return out;
}

// Allocates the chunks through alternative a; allocate_one(bytes) returns the pointer.
class allocator {
 public:
  allocator(const setup& s, std::size_t a) : s_(s), a_(a) {}
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaStream_t st = s_.stream.get();
    if (a_ == session_exit)
      p = s_.pool.allocate(s_.stream, bytes);
    else if (a_ == raw_trim)
      CUSCOPE_BENCH_CHECK(cudaMallocFromPoolAsync(&p, bytes, s_.raw.get(), st));
    else
      CUSCOPE_BENCH_CHECK(cudaMallocAsync(&p, bytes, st));
    return p;
  }
  void free(void* p, std::size_t bytes) {
    if (a_ == session_exit)
      s_.pool.deallocate(s_.stream, p, bytes);
    else
      CUSCOPE_BENCH_CHECK(cudaFreeAsync(p, s_.stream.get()));
  }
  // Allocates every chunk, synchronizes, returns the nanoseconds it took.
  double allocate_all(const std::vector<std::size_t>& chunks, std::vector<void*>& out) {
    const auto start = cb::steady::now();
    for (const std::size_t c : chunks)
      out.push_back(allocate(c));
    s_.stream.synchronize();
    return cb::ns_between(start, cb::steady::now());
  }
  void free_all(const std::vector<std::size_t>& chunks, std::vector<void*>& ptrs) {
    for (std::size_t i = 0; i < ptrs.size(); ++i)
      free(ptrs[i], chunks[i]);
    ptrs.clear();
    s_.stream.synchronize();
  }

 private:
  const setup& s_;
  std::size_t a_;
};

cudaMemPool_t handle_of(const setup& s, std::size_t a) {
  return a == session_exit ? s.pool.get() : a == raw_trim ? s.raw.get() : cb::default_pool();
}

// Leaves the alternative's pool holding nothing.
void empty_pool(const setup& s, std::size_t a) {
  s.stream.synchronize();
  CUSCOPE_BENCH_CHECK(cudaMemPoolTrimTo(handle_of(s, a), 0));
}

exit_result run_once(const setup& s, std::size_t a, std::size_t total, std::size_t chunk) {
  const cudaStream_t st = s.stream.get();
  const cudaMemPool_t handle = handle_of(s, a);
  const std::vector<std::size_t> chunks = chunks_of(total, chunk);
  exit_result r;
  empty_pool(s, a);

  // The work: fill every chunk, wait for the GPU, free them all (in stream order).
  const auto fill = [&](void* p, std::size_t bytes, std::size_t i) {
    CUSCOPE_BENCH_CHECK(cudaMemsetAsync(p, static_cast<int>(i & 0x7F), bytes, st));
  };
  if (a == session_exit) {
    cuscope::session_options o;
    o.name = "exit of " + cb::format_bytes(total);
    o.on_leak = cuscope::leak_policy::throw_exception;
    cuscope::session work(s.pool, s.stream, o);
    {
      std::vector<cuscope::device_buffer<std::byte>> held;
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        held.push_back(work.make_buffer<std::byte>(chunks[i]));
        fill(held.back().data(), chunks[i], i);
      }
      cb::verify_memory(held.back().data(), chunks.back(), st, 0x33, "session chunk");
      s.stream.synchronize();
    }  // freed on the stream
    const std::size_t free_before = device_free();
    const auto start = cb::steady::now();
    const cuscope::session_report& rep = work.finish();
    r.exit_ns = cb::ns_between(start, cb::steady::now());
    r.driver_returned_bytes = static_cast<double>(device_free()) - static_cast<double>(free_before);
    r.expected_bytes = rep.reserved_at_finish_bytes - rep.reserved_at_entry_bytes;
    r.pool_returned_bytes = rep.returned_bytes;
  } else {
    allocator alloc(s, a);
    std::vector<void*> held;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      held.push_back(alloc.allocate(chunks[i]));
      fill(held.back(), chunks[i], i);
    }
    cb::verify_memory(held.back(), chunks.back(), st, 0x33, std::string(keys[a]) + " chunk");
    CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
    for (std::size_t i = 0; i < held.size(); ++i)
      alloc.free(held[i], chunks[i]);
    const std::size_t reserved_before =
        cb::pool_attribute(handle, cudaMemPoolAttrReservedMemCurrent);
    const std::size_t free_before = device_free();
    const auto start = cb::steady::now();
    CUSCOPE_BENCH_CHECK(cudaStreamSynchronize(st));
    if (a == raw_trim) CUSCOPE_BENCH_CHECK(cudaMemPoolTrimTo(handle, 0));
    r.exit_ns = cb::ns_between(start, cb::steady::now());
    r.driver_returned_bytes = static_cast<double>(device_free()) - static_cast<double>(free_before);
    const std::size_t reserved_after =
        cb::pool_attribute(handle, cudaMemPoolAttrReservedMemCurrent);
    r.expected_bytes = reserved_before;
    r.pool_returned_bytes = reserved_before - std::min(reserved_before, reserved_after);
  }

  // Allocating again: the first chunk and then everything, right after the exit and once held.
  allocator alloc(s, a);
  std::vector<void*> ptrs;
  std::vector<std::size_t> first = {chunks.front()};
  r.first_cold_ns = alloc.allocate_all(first, ptrs);
  alloc.free_all(first, ptrs);
  r.first_warm_ns = alloc.allocate_all(first, ptrs);
  alloc.free_all(first, ptrs);
  empty_pool(s, a);
  r.all_cold_ns = alloc.allocate_all(chunks, ptrs);
  alloc.free_all(chunks, ptrs);
  r.all_warm_ns = alloc.allocate_all(chunks, ptrs);
  alloc.free_all(chunks, ptrs);
  empty_pool(s, a);
  return r;
}

int run(int argc, char** argv) {
  const cb::args a(argc, argv, "session_bench: the exit of a piece of work that used N GiB",
                   {{"--sizes", "bytes used by the work, e.g. 1G,4G,16G"},
                    {"--chunk", "size of each allocation, e.g. 256M"},
                    {"--rounds", "rounds of interleaved runs (median over them)"}});
  const std::vector<std::size_t> sizes = a.sizes(
      "--sizes", a.quick()       ? std::vector<std::size_t>{8 * cb::MiB, 32 * cb::MiB}
                 : cb::simulated ? std::vector<std::size_t>{64 * cb::MiB, 256 * cb::MiB}
                                 : std::vector<std::size_t>{cb::GiB, 4 * cb::GiB, 16 * cb::GiB});
  const std::size_t chunk =
      a.sizes("--chunk", {a.quick() || cb::simulated ? 4 * cb::MiB : 256 * cb::MiB}).front();
  const std::size_t rounds = a.count("--rounds", a.quick() ? 2 : (cb::simulated ? 3 : 5));

  cb::report rep("session", a);
  rep.config.set("sizes", cb::to_json(sizes));
  rep.config.set("chunk_bytes", chunk);
  rep.config.set("rounds", rounds);

  cuscope::stream stream;
  cuscope::memory_pool pool;
  cb::raw_pool raw_pool;
  const cb::default_pool_threshold t0(0);
  rep.note(t0.note());
  rep.note(
      "Timed: only the exit (synchronize + trim, or session::finish()); the GPU work that "
      "filled the memory has completed before it and the frees are enqueued. 'expected' is "
      "the pool's unused reserve above its reserve at entry. 'driver' is the change of "
      "cudaMemGetInfo's free memory across the exit: it counts the whole device.");

  const setup s{stream, pool, raw_pool};
  cb::table t("session exit: time, bytes returned and allocating again (medians over rounds)",
              {"size", "alternative", "exit time", "returned (pool)", "returned (driver)",
               "1st chunk cold", "warm", "all cold", "all warm"});
  double headline_fraction = std::numeric_limits<double>::quiet_NaN();
  double headline_driver = headline_fraction;
  double headline_exit_ratio = headline_fraction;
  for (const std::size_t total : sizes) {
    const std::size_t c = std::min(chunk, total);
    std::array<std::vector<exit_result>, alternative_count> runs;
    for (std::size_t r = 0; r < rounds; ++r)
      for (const std::size_t alt : cb::round_order(alternative_count, r))
        runs[alt].push_back(run_once(s, alt, total, c));
    cb::json row = cb::json::object();
    row.set("bytes", total);
    row.set("chunk_bytes", c);
    cb::json alts = cb::json::object();
    std::array<cb::summary, alternative_count> exit_times;
    for (std::size_t alt = 0; alt < alternative_count; ++alt) {
      std::vector<double> exit_ns, pool_frac, driver_frac, fc, fw, ac, aw;
      std::size_t expected = 0;
      std::size_t returned_min = std::numeric_limits<std::size_t>::max();
      for (const exit_result& e : runs[alt]) {
        exit_ns.push_back(e.exit_ns);
        const double ex = static_cast<double>(e.expected_bytes);
        pool_frac.push_back(ex > 0 ? static_cast<double>(e.pool_returned_bytes) / ex : 0.0);
        driver_frac.push_back(ex > 0 ? e.driver_returned_bytes / ex : 0.0);
        fc.push_back(e.first_cold_ns);
        fw.push_back(e.first_warm_ns);
        ac.push_back(e.all_cold_ns);
        aw.push_back(e.all_warm_ns);
        expected = std::max(expected, e.expected_bytes);
        returned_min = std::min(returned_min, e.pool_returned_bytes);
      }
      exit_times[alt] = cb::summarize(exit_ns);
      const cb::summary pf = cb::summarize(pool_frac);
      const cb::summary df = cb::summarize(driver_frac);
      const cb::summary sfc = cb::summarize(fc), sfw = cb::summarize(fw);
      const cb::summary sac = cb::summarize(ac), saw = cb::summarize(aw);
      t.add_row({cb::format_bytes(total), keys[alt], cb::format_ns_spread(exit_times[alt]),
                 cb::fixed(pf.min * 100, 2) + "% of " + cb::format_bytes(expected),
                 cb::fixed(df.median * 100, 2) + "%", cb::format_ns(sfc.median),
                 cb::format_ns(sfw.median), cb::format_ns(sac.median), cb::format_ns(saw.median)});
      cb::json j = cb::json::object();
      j.set("exit_ns", exit_times[alt].to_json());
      j.set("expected_bytes_max", expected);
      j.set("pool_returned_bytes_min", returned_min);
      j.set("pool_returned_fraction", pf.to_json());
      j.set("driver_returned_fraction", df.to_json());
      j.set("first_chunk_cold_ns", sfc.to_json());
      j.set("first_chunk_warm_ns", sfw.to_json());
      j.set("all_cold_ns", sac.to_json());
      j.set("all_warm_ns", saw.to_json());
      alts.set(keys[alt], std::move(j));
      if (alt == session_exit && total == sizes.back()) {
        headline_fraction = pf.min * 100;
        headline_driver = df.median * 100;
      }
    }
    row.set("alternatives", std::move(alts));
    cb::json ratios = cb::json::object();
    ratios.set("session/raw_sync_trim (exit time)",
               exit_times[session_exit].median / exit_times[raw_trim].median);
    ratios.set("default_pool_t0_sync/raw_sync_trim (exit time)",
               exit_times[default_sync].median / exit_times[raw_trim].median);
    row.set("ratios", std::move(ratios));
    rep.results.push(std::move(row));
    if (total == sizes.back())
      headline_exit_ratio = exit_times[session_exit].median / exit_times[raw_trim].median;
  }
  rep.add_table(t);
  const std::string largest = cb::format_bytes(sizes.back());
  rep.headline(
      "session: unused reserve returned at exit (pool statistics, worst round), " + largest,
      headline_fraction, "%", "at least", 100.0);
  rep.headline("session: device memory freed at exit / expected (cudaMemGetInfo), " + largest,
               headline_driver, "%");
  rep.headline("session: exit time / raw sync + trim, " + largest, headline_exit_ratio, "x");
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("session_bench", [&] { return run(argc, argv); });
}
