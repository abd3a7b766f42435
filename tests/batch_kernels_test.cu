// SPDX-License-Identifier: Apache-2.0
// batches() on a GPU, with kernels for the work: the scenarios of batch_test.cpp, where the work
// on each batch is a kernel that waits a little (so that a copy not ordered after it would
// overwrite its batch first) and then sums the batch, and the results are written by kernels.
// nvcc only; labelled gpu, Skipped without a GPU.
#include <algorithm>
#include <cstdint>
#include <cuscope/batch.hpp>
#include <cuscope/device_buffer.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"

using cuscope::batch;
using cuscope::batch_options;
using cuscope::batches;
using cuscope::device_buffer;
using cuscope::device_span;
using cuscope::memory_pool;
using cuscope::pinned_buffer;
using cuscope::stream;
using cuscope::test::device_guard;

// Functions are static rather than in an unnamed namespace: nvcc renames unnamed namespaces in
// the host code it generates, which -Wmissing-declarations then reports.

using value_t = std::int32_t;
using result_t = long long;

constexpr int threads = 256;

static value_t value_at(std::size_t i) {
  return static_cast<value_t>((i * 2654435761u) % 2001u) - 1000;
}

static std::vector<value_t> make_source(std::size_t n) {
  std::vector<value_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = value_at(i);
  return v;
}

static result_t sum_of(const value_t* p, std::size_t n) {
  result_t s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += p[i];
  return s;
}

static __device__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// One block: waits, then sums x into *sum (and, per batch, into out[0] with the index in out[1]).
static __global__ void sum_batch(device_span<const value_t> x, result_t* sum, long long cycles,
                                 device_span<result_t> out, unsigned long long index) {
  __shared__ result_t partial[threads];
  if (threadIdx.x == 0) spin(cycles);
  __syncthreads();
  result_t s = 0;
  for (std::size_t i = threadIdx.x; i < x.size(); i += blockDim.x)
    s += x[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int step = threads / 2; step > 0; step /= 2) {
    if (static_cast<int>(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *sum = partial[0];
    if (out.size() >= 2) {
      out[0] = partial[0];
      out[1] = static_cast<result_t>(index);
    }
  }
}

// The sum of each sample of x into out (one result per sample).
static __global__ void sum_samples(device_span<const value_t> x, std::size_t sample_elements,
                                   device_span<result_t> out, long long cycles) {
  if (threadIdx.x == 0 && blockIdx.x == 0) spin(cycles);
  for (std::size_t s = blockIdx.x * blockDim.x + threadIdx.x; s < out.size();
       s += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    result_t r = 0;
    for (std::size_t e = 0; e < sample_elements; ++e)
      r += x[s * sample_elements + e];
    out[s] = r;
  }
}

enum class output_kind { none, per_sample, per_batch };
enum class source_kind { pageable, pinned, producer };

struct config {
  std::size_t samples = 0;
  std::size_t batch_size = 1;
  std::size_t sample_elements = 1;
  std::size_t depth = 2;
};

constexpr long long slow_cycles = 20000;  // some 10 us

template <class Out>
static void work_on(const batch<value_t, Out>& b, result_t* sums, output_kind out) {
  device_span<result_t> results;
  if constexpr (!std::is_void_v<Out>) results = b.output();
  if (out == output_kind::per_sample) {
    sum_samples<<<4, threads, 0, b.stream().get()>>>(b.span(), b.size() / b.samples(), results,
                                                     slow_cycles);
    CUSCOPE_CUDA_TRY(cudaGetLastError());
  }
  sum_batch<<<1, threads, 0, b.stream().get()>>>(
      b.span(), sums + b.index(), slow_cycles,
      out == output_kind::per_batch ? results : device_span<result_t>(),
      static_cast<unsigned long long>(b.index()));
  CUSCOPE_CUDA_TRY(cudaGetLastError());
}

static void check(stream& s, memory_pool& pool, const config& c, source_kind kind,
                  output_kind out) {
  INFO(c.samples << " samples of " << c.sample_elements << ", batches of " << c.batch_size
                 << ", depth " << c.depth << ", source " << static_cast<int>(kind) << ", output "
                 << static_cast<int>(out));
  batch_options o;
  o.depth = c.depth;
  o.sample_elements = c.sample_elements;
  const std::size_t elements = c.samples * c.sample_elements;
  const std::size_t count = (c.samples + c.batch_size - 1) / c.batch_size;
  const std::vector<value_t> data = make_source(elements);
  pinned_buffer<value_t> pinned(elements);
  std::copy(data.begin(), data.end(), pinned.begin());
  device_buffer<result_t> sums(s, std::max<std::size_t>(count, 1), pool);
  std::vector<result_t> results(out == output_kind::per_sample  ? c.samples
                                : out == output_kind::per_batch ? 2 * count
                                                                : 0,
                                -1);
  const auto fill = [&](std::size_t first, std::size_t n, value_t* to) {
    std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(first * c.sample_elements),
                n * c.sample_elements, to);
  };
  std::size_t seen = 0;
  const auto run = [&](auto&& range) {
    CHECK(range.batch_count() == count);
    for (const auto& b : range) {
      CHECK(b.index() == seen++);
      work_on(b, sums.data(), out);
    }
  };
  const auto go = [&](auto&&... output) {
    if (kind == source_kind::pageable) run(batches(s, data, c.batch_size, pool, output..., o));
    if (kind == source_kind::pinned) run(batches(s, pinned, c.batch_size, pool, output..., o));
    if (kind == source_kind::producer)
      run(batches(s, cuscope::from_producer<value_t>(c.samples, fill), c.batch_size, pool,
                  output..., o));
  };
  if (out == output_kind::none) go();
  if (out == output_kind::per_sample) go(cuscope::output_per_sample(results, 1));
  if (out == output_kind::per_batch) go(cuscope::output_per_batch(results, 2));
  CHECK(seen == count);
  const std::vector<result_t> got = sums.to_vector(s);
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t first = k * c.batch_size;
    const std::size_t n = std::min(c.batch_size, c.samples - first);
    const result_t want = sum_of(data.data() + first * c.sample_elements, n * c.sample_elements);
    INFO("batch " << k);
    REQUIRE(got[k] == want);
    if (out == output_kind::per_batch) {
      REQUIRE(results[2 * k] == want);
      REQUIRE(results[2 * k + 1] == static_cast<result_t>(k));
    }
  }
  if (out == output_kind::per_sample) {
    for (std::size_t i = 0; i < c.samples; ++i) {
      INFO("sample " << i);
      REQUIRE(results[i] == sum_of(data.data() + i * c.sample_elements, c.sample_elements));
    }
  }
}

static std::vector<config> configs(std::size_t random_count) {
  std::vector<config> list = {
      {0, 4, 1, 2},
      {1, 1, 1, 2},
      {1, 8, 1, 2},
      {5, 100, 3, 4},
      {10, 3, 1, 1},
      {10, 3, 1, 2},
      {10, 3, 1, 4},
      {40, 5, 7, 2},
      {100, 7, 3, 3},
      {1000, 33, 1, 2},
      {1 << 16, 1 << 12, 4, 2},  // 1 MiB in 64 KiB batches
  };
  std::mt19937 rng(20261122u);
  const auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  const std::size_t depths[] = {1, 2, 4};
  for (std::size_t i = 0; i < random_count; ++i) {
    config c;
    c.samples = pick(1, 5000);
    c.sample_elements = pick(0, 2) == 0 ? pick(2, 9) : 1;
    c.batch_size = pick(0, 4) == 0 ? c.samples + 1 : pick(1, 512);
    c.depth = depths[pick(0, 2)];
    list.push_back(c);
  }
  return list;
}

TEST_CASE("batch: kernels see every batch whole, for random sizes, samples and depths",
          "[batch][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(20))
    check(s, pool, c, source_kind::pageable, output_kind::none);
}

TEST_CASE("batch: kernels see every batch of page-locked and produced sources", "[batch][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(8)) {
    check(s, pool, c, source_kind::pinned, output_kind::none);
    check(s, pool, c, source_kind::producer, output_kind::none);
  }
}

TEST_CASE("batch: results written by kernels land in their place in the host output",
          "[batch][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(12)) {
    check(s, pool, c, source_kind::pageable, output_kind::per_sample);
    check(s, pool, c, source_kind::pageable, output_kind::per_batch);
  }
  check(s, pool, {1 << 16, 1 << 12, 4, 2}, source_kind::pinned, output_kind::per_sample);
  check(s, pool, {1 << 16, 1 << 12, 4, 3}, source_kind::producer, output_kind::per_batch);
}

TEST_CASE("batch: a large source in many batches keeps copies and kernels in order",
          "[batch][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  // 64 MiB in 256 KiB batches: copies and slow kernels overlap all along.
  for (const std::size_t depth : {1u, 2u, 4u})
    check(s, pool, {1 << 24, 1 << 16, 1, depth}, source_kind::pageable, output_kind::per_batch);
}

TEST_CASE("batch: an exception from a loop with kernels in flight leaves nothing allocated",
          "[batch][gpu]") {
  device_guard device;
  cuscope::pool_options po;
  po.release_threshold_bytes = 0;
  memory_pool pool(po);
  stream s;
  const std::vector<value_t> data = make_source(1 << 20);
  device_buffer<result_t> sums(s, 64, pool);
  std::vector<result_t> results(128, -1);
  try {
    for (const auto& b : batches(s, data, 1 << 14, pool, cuscope::output_per_batch(results, 2))) {
      work_on(b, sums.data(), output_kind::per_batch);
      if (b.index() == 9) throw std::runtime_error("the loop body failed");
    }
    FAIL("no exception");
  } catch (const std::runtime_error&) {
  }
  const std::vector<result_t> got = sums.to_vector(s);
  for (std::size_t k = 0; k <= 9; ++k)
    CHECK(got[k] == sum_of(data.data() + (k << 14), 1 << 14));
  CHECK(cudaGetLastError() == cudaSuccess);
  sums = device_buffer<result_t>();
  s.synchronize();
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("batch: a session around a loop with kernels sees the buffers returned", "[batch][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> data = make_source(1 << 22);
  cuscope::session_report report;
  std::size_t device_bytes = 0;
  {
    cuscope::session epoch(pool, s, "epoch");
    device_buffer<result_t> sums = epoch.make_buffer<result_t>(64);
    {
      batch_options o;
      o.depth = 3;
      auto range = batches(s, data, 1 << 16, pool, o);
      device_bytes = range.device_bytes();
      CHECK(device_bytes == 3 * (std::size_t{1} << 16) * sizeof(value_t));
      for (const auto& b : range)
        work_on(b, sums.data(), output_kind::none);
    }
    const std::vector<result_t> got = sums.to_vector(s);
    for (std::size_t k = 0; k < 64; ++k)
      CHECK(got[k] == sum_of(data.data() + (k << 16), 1 << 16));
    sums = device_buffer<result_t>();
    report = epoch.finish();
  }
  CHECK(report.peak_used_bytes >= device_bytes);
  CHECK(report.used_at_exit_bytes == 0);
  CHECK(report.reserved_at_exit_bytes == 0);
  CHECK(report.returned_bytes >= device_bytes);
  CHECK_FALSE(report.leaked());
}
