// SPDX-License-Identifier: Apache-2.0
// batches(): the batches hold the source's elements in order, whatever the sizes and depth; the
// copies, the user's work and the copies of results back are ordered by events; memory is
// allocated once, adapted to what fits, and returned.
//
// The "compute" on each batch runs in stream order on the user's stream. On the simulated device
// it is a slow host function that reads the batch through sim::host_view and writes its results
// the same way; in deferred mode work runs only when the host synchronizes with it, so a missing
// ordering event lets a copy overtake the work, or the work a copy, and the sums come out wrong.
// Against the real runtime the same work is a device-to-host copy of the batch, a host function,
// and a host-to-device copy of its results.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cuscope/batch.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

using cuscope::batch;
using cuscope::batch_options;
using cuscope::batch_range;
using cuscope::batches;
using cuscope::memory_pool;
using cuscope::pinned_buffer;
using cuscope::stream;
using cuscope::stream_ref;
using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(std::is_trivially_copyable_v<batch<int>>);
static_assert(std::is_trivially_copyable_v<batch<float, double>>);
static_assert(!std::is_copy_constructible_v<batch_range<int>>);
static_assert(!std::is_copy_assignable_v<batch_range<int>>);
static_assert(std::is_nothrow_move_constructible_v<batch_range<int>>);
static_assert(std::is_nothrow_move_assignable_v<batch_range<int, float>>);
static_assert(std::is_nothrow_destructible_v<batch_range<int, float>>);
static_assert(std::is_same_v<std::iterator_traits<batch_range<int>::iterator>::iterator_category,
                             std::input_iterator_tag>);
static_assert(std::is_same_v<decltype(std::declval<const batch<int>&>().span()),
                             cuscope::device_span<const int>>);
static_assert(std::is_same_v<decltype(std::declval<const batch<int, float>&>().output()),
                             cuscope::device_span<float>>);

namespace {

// A temporary is never the source of the range, nor the host output of its results.
template <class Source, class = void>
struct can_batch : std::false_type {};
template <class Source>
struct can_batch<Source,
                 std::void_t<decltype(batches(std::declval<stream_ref>(), std::declval<Source>(),
                                              std::size_t{1}, std::declval<memory_pool&>()))>>
    : std::true_type {};
static_assert(can_batch<const std::vector<int>&>::value);
static_assert(can_batch<std::vector<int>&>::value);
static_assert(!can_batch<std::vector<int>>::value);
static_assert(!can_batch<std::vector<int>&&>::value);

template <class Out, class = void>
struct can_output : std::false_type {};
template <class Out>
struct can_output<
    Out, std::void_t<decltype(cuscope::output_per_sample(std::declval<Out>(), std::size_t{1}))>>
    : std::true_type {};
static_assert(can_output<std::vector<float>&>::value);
static_assert(!can_output<std::vector<float>>::value);

[[maybe_unused]] constexpr std::size_t MiB = std::size_t{1} << 20;

using value_t = std::int32_t;
using result_t = std::int64_t;

// Source values that differ from batch to batch and from the simulated device's poison.
value_t value_at(std::size_t i) {
  return static_cast<value_t>((i * 2654435761u) % 2001u) - 1000;
}

std::vector<value_t> make_source(std::size_t n) {
  std::vector<value_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = value_at(i);
  return v;
}

result_t sum_of(const value_t* p, std::size_t n) {
  result_t s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += p[i];
  return s;
}

enum class output_kind { none, per_sample, per_batch };
enum class source_kind { pageable, pinned, producer };

const char* name_of(output_kind o) {
  return o == output_kind::none         ? "none"
         : o == output_kind::per_sample ? "per sample"
                                        : "per batch";
}
const char* name_of(source_kind s) {
  return s == source_kind::pageable ? "pageable" : s == source_kind::pinned ? "pinned" : "producer";
}

// The work on one batch. Its results: the batch's sum, on the host; per sample, each sample's
// sum; per batch, the batch's sum and its index.
struct job {
  const value_t* device = nullptr;
  std::size_t size = 0;
  std::size_t index = 0;
  std::size_t sample_elements = 1;
  output_kind out = output_kind::none;
  result_t* out_device = nullptr;
  std::size_t out_size = 0;
  result_t* sum = nullptr;
  bool slow = true;
#if !CUSCOPE_TEST_SIMULATED
  value_t* mirror = nullptr;    // page-locked copy of the batch
  result_t* results = nullptr;  // page-locked results, copied to out_device afterwards
#endif
};

void run_job(void* data) {
  job& j = *static_cast<job*>(data);
  // Slow on purpose, so that on a real device (or an eager simulation) work that is not
  // ordered has time to overtake it.
  if (j.slow) std::this_thread::sleep_for(std::chrono::microseconds(20));
#if CUSCOPE_TEST_SIMULATED
  const value_t* x = j.size == 0 ? nullptr : cuscope::sim::host_view(j.device, j.size);
  result_t* out = j.out_size == 0 ? nullptr : cuscope::sim::host_view(j.out_device, j.out_size);
#else
  const value_t* x = j.mirror;  // copied from the batch before, in stream order
  result_t* out = j.results;
#endif
  *j.sum = sum_of(x, j.size);
  if (j.out == output_kind::per_sample) {
    for (std::size_t s = 0; s < j.out_size; ++s)
      out[s] = sum_of(x + s * j.sample_elements, j.sample_elements);
  } else if (j.out == output_kind::per_batch) {
    out[0] = *j.sum;
    out[1] = static_cast<result_t>(j.index);
  }
}

// Page-locked scratch for the real runtime's version of the work.
struct scratch {
#if !CUSCOPE_TEST_SIMULATED
  pinned_buffer<value_t> mirror;
  pinned_buffer<result_t> results;
#endif
  scratch(std::size_t elements, std::size_t results_count) {
#if !CUSCOPE_TEST_SIMULATED
    mirror = pinned_buffer<value_t>(elements);
    results = pinned_buffer<result_t>(results_count);
#else
    (void)elements;
    (void)results_count;
#endif
  }
};

// Enqueues the work on batch b on its stream.
template <class Out>
void enqueue_work(const batch<value_t, Out>& b, job& j, scratch& tmp, std::size_t result_offset) {
  j.device = b.span().data();
  j.size = b.size();
  j.index = b.index();
  if constexpr (!std::is_void_v<Out>) {
    j.out_device = b.output().data();
    j.out_size = b.output().size();
  }
#if CUSCOPE_TEST_SIMULATED
  (void)tmp;
  (void)result_offset;
  CUSCOPE_CUDA_TRY(cudaLaunchHostFunc(b.stream().get(), &run_job, &j));
#else
  j.mirror = tmp.mirror.data() + b.offset();
  j.results = tmp.results.data() + result_offset;
  if (j.size != 0)
    CUSCOPE_CUDA_TRY(cudaMemcpyAsync(j.mirror, j.device, j.size * sizeof(value_t),
                                     cudaMemcpyDeviceToHost, b.stream().get()));
  CUSCOPE_CUDA_TRY(cudaLaunchHostFunc(b.stream().get(), &run_job, &j));
  if (j.out_size != 0)
    CUSCOPE_CUDA_TRY(cudaMemcpyAsync(j.out_device, j.results, j.out_size * sizeof(result_t),
                                     cudaMemcpyHostToDevice, b.stream().get()));
#endif
}

struct config {
  std::size_t samples = 0;
  std::size_t batch_size = 1;
  std::size_t sample_elements = 1;
  std::size_t depth = 2;
};

std::string describe(const config& c) {
  return std::to_string(c.samples) + " samples of " + std::to_string(c.sample_elements) +
         ", batches of " + std::to_string(c.batch_size) + ", depth " + std::to_string(c.depth);
}

// The data and the range over it, for each kind of source.
struct source_data {
  std::vector<value_t> pageable;
  pinned_buffer<value_t> pinned;
  std::vector<std::pair<std::size_t, std::size_t>> produced;  // (first, samples) per call
};

template <class... Output>
auto make_range(stream_ref s, memory_pool& pool, source_data& data, source_kind kind,
                const config& c, const batch_options& o, const Output&... output) {
  const std::size_t elements = c.samples * c.sample_elements;
  data.pageable = make_source(elements);
  if (kind == source_kind::pinned) {
    data.pinned = pinned_buffer<value_t>(elements);
    for (std::size_t i = 0; i < elements; ++i)
      data.pinned[i] = data.pageable[i];
  }
  std::optional<decltype(batches(s, data.pageable, c.batch_size, pool, output..., o))> r;
  if (kind == source_kind::pageable) {
    r.emplace(batches(s, data.pageable, c.batch_size, pool, output..., o));
  } else if (kind == source_kind::pinned) {
    r.emplace(batches(s, data.pinned, c.batch_size, pool, output..., o));
  } else {
    const std::size_t se = c.sample_elements;
    const auto fill = [&data, se](std::size_t first, std::size_t n, value_t* out) {
      data.produced.emplace_back(first, n);
      for (std::size_t i = 0; i < n * se; ++i)
        out[i] = value_at(first * se + i);
    };
    r.emplace(batches(s, cuscope::from_producer<value_t>(c.samples, fill), c.batch_size, pool,
                      output..., o));
  }
  return std::move(*r);
}

// Iterates over the batches of c with the work above on each and checks every batch, every sum
// and every result. sync_each: synchronize the user's stream in the loop body after each batch's
// work, which runs the work at once on the simulated device.
void check_batches(stream& s, memory_pool& pool, const config& c, source_kind kind, output_kind out,
                   bool sync_each) {
  INFO(describe(c) << ", source " << name_of(kind) << ", output " << name_of(out)
                   << (sync_each ? ", synchronized each batch" : ""));
  batch_options o;
  o.depth = c.depth;
  o.sample_elements = c.sample_elements;
  const std::size_t elements = c.samples * c.sample_elements;
  const std::size_t batch_count = (c.samples + c.batch_size - 1) / c.batch_size;
  const std::size_t per_batch = 2;
  const std::size_t results_count = out == output_kind::per_sample  ? c.samples
                                    : out == output_kind::per_batch ? batch_count * per_batch
                                                                    : 0;
  constexpr result_t untouched = -777777;
  std::vector<result_t> results(results_count, untouched);
  std::vector<result_t> sums(batch_count, untouched);
  std::vector<job> jobs(batch_count);
  scratch tmp(elements, results_count);
  source_data data;
  std::size_t seen = 0;
  const auto body = [&](const auto& b, std::size_t result_offset) {
    const std::size_t k = seen++;
    REQUIRE(b.index() == k);
    REQUIRE(k < batch_count);
    const std::size_t samples = std::min(c.batch_size, c.samples - k * c.batch_size);
    CHECK(b.first_sample() == k * c.batch_size);
    CHECK(b.offset() == k * c.batch_size * c.sample_elements);
    CHECK(b.samples() == samples);
    CHECK(b.size() == samples * c.sample_elements);
    CHECK(b.span().size() == b.size());
    CHECK(b.stream() == s.ref());
    job& j = jobs[k];
    j.sum = &sums[k];
    j.sample_elements = c.sample_elements;
    j.out = out;
    enqueue_work(b, j, tmp, result_offset);
    if (sync_each) s.synchronize();
  };
  if (out == output_kind::none) {
    auto range = make_range(s, pool, data, kind, c, o);
    CHECK(range.batch_count() == batch_count);
    CHECK(range.direct() == (kind == source_kind::pinned && elements != 0));
    for (const auto& b : range)
      body(b, 0);
    CHECK(range.finished());
  } else {
    const auto output = out == output_kind::per_sample
                            ? cuscope::output_per_sample(results, 1)
                            : cuscope::output_per_batch(results, per_batch);
    auto range = make_range(s, pool, data, kind, c, o, output);
    for (const auto& b : range) {
      CHECK(b.output().size() == (out == output_kind::per_sample ? b.samples() : per_batch));
      body(b, out == output_kind::per_sample ? b.first_sample() : b.index() * per_batch);
    }
    // The host output is complete when the iteration ends, before any synchronization here.
    CHECK(range.finished());
    const std::vector<value_t>& src = data.pageable;
    for (std::size_t k = 0; k < batch_count; ++k) {
      const std::size_t first = k * c.batch_size;
      const std::size_t samples = std::min(c.batch_size, c.samples - first);
      if (out == output_kind::per_sample) {
        for (std::size_t i = first; i < first + samples; ++i) {
          INFO("sample " << i << " of batch " << k);
          REQUIRE(results[i] == sum_of(src.data() + i * c.sample_elements, c.sample_elements));
        }
      } else {
        INFO("batch " << k);
        REQUIRE(results[k * per_batch] ==
                sum_of(src.data() + first * c.sample_elements, samples * c.sample_elements));
        REQUIRE(results[k * per_batch + 1] == static_cast<result_t>(k));
      }
    }
  }
  s.synchronize();
  CHECK(seen == batch_count);
  for (std::size_t k = 0; k < batch_count; ++k) {
    INFO("batch " << k);
    const std::size_t first = k * c.batch_size;
    const std::size_t samples = std::min(c.batch_size, c.samples - first);
    REQUIRE(sums[k] ==
            sum_of(data.pageable.data() + first * c.sample_elements, samples * c.sample_elements));
  }
  if (kind == source_kind::producer) {
    REQUIRE(data.produced.size() == batch_count);
    for (std::size_t k = 0; k < batch_count; ++k) {
      CHECK(data.produced[k].first == k * c.batch_size);
      CHECK(data.produced[k].second == std::min(c.batch_size, c.samples - k * c.batch_size));
    }
  }
  CHECK(pool.stats().used_bytes == 0);
}

// The edge cases, then random sizes.
std::vector<config> configs(std::size_t random_count) {
  std::vector<config> list = {
      {0, 4, 1, 2},      // empty source
      {1, 1, 1, 2},      // one element
      {1, 8, 1, 2},      // batch larger than the source
      {5, 100, 3, 4},    // batch larger than the source, samples of 3
      {10, 3, 1, 1},     // not divisible, depth 1
      {10, 3, 1, 2},     // not divisible, depth 2
      {10, 3, 1, 4},     // not divisible, depth 4
      {12, 4, 1, 4},     // divisible, fewer batches than... depth 4 of 3 batches
      {40, 5, 7, 2},     // samples of 7
      {64, 8, 2, 4},     // divisible, depth 4
      {100, 7, 3, 3},    // depth 3, not divisible
      {1000, 33, 1, 2},  // many batches
  };
  std::mt19937 rng(20261122u);
  const auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  const std::size_t depths[] = {1, 2, 4};
  for (std::size_t i = 0; i < random_count; ++i) {
    config c;
    c.samples = pick(0, 3) == 0 ? pick(0, 3) : pick(1, 600);
    c.sample_elements = pick(0, 2) == 0 ? pick(2, 9) : 1;
    c.batch_size = pick(0, 4) == 0 ? c.samples + pick(1, 10) : pick(1, 64);
    c.depth = depths[pick(0, 2)];
    list.push_back(c);
  }
  return list;
}

}  // namespace

TEST_CASE("batch: the batches hold the source's elements for random sizes, samples and depths",
          "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(40)) {
    check_batches(s, pool, c, source_kind::pageable, output_kind::none, false);
    check_batches(s, pool, c, source_kind::pageable, output_kind::none, true);
  }
}

TEST_CASE("batch: page-locked sources are copied straight, without staging", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(12)) {
    check_batches(s, pool, c, source_kind::pinned, output_kind::none, false);
    check_batches(s, pool, c, source_kind::pinned, output_kind::none, true);
  }
  const pinned_buffer<value_t> pinned(1000);
  const std::vector<value_t> pageable(1000);
  auto direct = batches(s, pinned, 100, pool);
  CHECK(direct.direct());
  CHECK(direct.pinned_bytes() == 0);
  CHECK(direct.device_bytes() == 2 * 100 * sizeof(value_t));
  auto staged = batches(s, pageable, 100, pool);
  CHECK_FALSE(staged.direct());
  CHECK(staged.pinned_bytes() == 2 * 100 * sizeof(value_t));
  CHECK(staged.device_bytes() == 2 * 100 * sizeof(value_t));
}

TEST_CASE("batch: memory the caller registered as page-locked is copied straight", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  std::vector<value_t> data = make_source(4096);
  REQUIRE(cudaHostRegister(data.data(), data.size() * sizeof(value_t), cudaHostRegisterDefault) ==
          cudaSuccess);
  std::vector<result_t> sums;
  {
    auto range = batches(s, data, 1000, pool);
    CHECK(range.direct());
    scratch tmp(data.size(), 0);
    std::vector<job> jobs(range.batch_count());
    sums.assign(range.batch_count(), 0);
    for (const auto& b : range) {
      jobs[b.index()].sum = &sums[b.index()];
      enqueue_work(b, jobs[b.index()], tmp, 0);
    }
    s.synchronize();
  }
  REQUIRE(cudaHostUnregister(data.data()) == cudaSuccess);
  REQUIRE(sums.size() == 5);
  for (std::size_t k = 0; k < 5; ++k)
    CHECK(sums[k] == sum_of(data.data() + k * 1000, std::min<std::size_t>(1000, 4096 - k * 1000)));
}

TEST_CASE("batch: a producer fills each batch in order and its samples arrive whole", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(12)) {
    check_batches(s, pool, c, source_kind::producer, output_kind::none, false);
    check_batches(s, pool, c, source_kind::producer, output_kind::none, true);
  }
}

TEST_CASE("batch: results per sample and per batch land in their place in the host output",
          "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  for (const config& c : configs(24)) {
    for (const output_kind out : {output_kind::per_sample, output_kind::per_batch}) {
      check_batches(s, pool, c, source_kind::pageable, out, false);
      check_batches(s, pool, c, source_kind::pageable, out, true);
    }
  }
  const config c{300, 16, 3, 2};
  for (const source_kind kind : {source_kind::pinned, source_kind::producer}) {
    check_batches(s, pool, c, kind, output_kind::per_sample, false);
    check_batches(s, pool, c, kind, output_kind::per_batch, true);
  }
}

TEST_CASE("batch: an empty source yields no batch and allocates nothing", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> none;
  auto range = batches(s, none, 16, pool);
  CHECK(range.batch_count() == 0);
  CHECK(range.depth() == 0);
  CHECK(range.device_bytes() == 0);
  CHECK(range.begin() == range.end());
  CHECK(pool.stats().reserved_bytes == 0);
  std::vector<float> results;
  auto with_results = batches(s, none, 16, pool, cuscope::output_per_batch(results, 1));
  int count = 0;
  for (const auto& b : with_results) {
    (void)b;
    ++count;
  }
  CHECK(count == 0);
  with_results.finish();
  CHECK(with_results.finished());
}

TEST_CASE("batch: wrong sizes and options are refused with a message naming them", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> ten(10);
  batch_options o;
  o.sample_elements = 3;
  CHECK_THROWS_AS(batches(s, ten, 2, pool, o), std::invalid_argument);
  CHECK_THROWS_WITH(batches(s, ten, 2, pool, o),
                    contains("a source of 10 elements is not a whole number of samples of "
                             "sample_elements = 3"));
  CHECK_THROWS_WITH(batches(s, ten, 0, pool), contains("batch size must be at least 1"));
  o = {};
  o.depth = 0;
  CHECK_THROWS_WITH(batches(s, ten, 2, pool, o), contains("depth must be at least 1"));
  o = {};
  o.min_batch = 0;
  CHECK_THROWS_WITH(batches(s, ten, 2, pool, o), contains("min_batch must be at least 1"));
  o = {};
  o.sample_elements = 0;
  CHECK_THROWS_WITH(batches(s, ten, 2, pool, o), contains("sample_elements must be at least 1"));
  CHECK_THROWS_WITH(batches(s, static_cast<const value_t*>(nullptr), 4, 2, pool),
                    contains("null source of 4 elements"));
  std::vector<float> small(4);
  CHECK_THROWS_WITH(batches(s, ten, 2, pool, cuscope::output_per_sample(small, 1)),
                    contains("a host output of 4 elements cannot hold the results: 10 samples x "
                             "1 element = 10"));
  CHECK_THROWS_WITH(batches(s, ten, 3, pool, cuscope::output_per_batch(small, 2)),
                    contains("4 batches of 3 samples x 2 elements = 8"));
  // A count of one in the singular.
  const std::vector<value_t> one(1);
  CHECK_THROWS_WITH(batches(s, one, 1, pool, cuscope::output_per_batch(small.data(), 0, 1)),
                    contains("a host output of 0 elements cannot hold the results: 1 batch of 1 "
                             "sample x 1 element = 1"));
  CHECK_THROWS_WITH(batches(s, static_cast<const value_t*>(nullptr), 1, 1, pool),
                    contains("null source of 1 element"));
  o = {};
  o.sample_elements = 2;
  CHECK_THROWS_WITH(batches(s, one, 1, pool, o),
                    contains("a source of 1 element is not a whole number of samples of "
                             "sample_elements = 2 elements"));
  CHECK_THROWS_WITH(cuscope::output_per_sample(static_cast<float*>(nullptr), 1, 1),
                    contains("null host output of 1 element"));
  CHECK_THROWS_WITH(cuscope::output_per_batch(small, 0), contains("at least one element"));
  CHECK_THROWS_WITH(batches(s, cuscope::producer_source<value_t>{4, nullptr}, 2, pool),
                    contains("a producer without a function"));
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE(
    "batch: the buffers are allocated once, and a session around the loop sees them "
    "returned",
    "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> data = make_source(64 * 1024);
  std::vector<result_t> results(64 * 1024 / 256);
  cuscope::session_report report;
  std::size_t device_bytes = 0;
  std::size_t pinned_bytes = 0;
  {
    cuscope::session epoch(pool, s, "epoch");
    batch_options o;
    o.depth = 3;
    o.sample_elements = 256;
    {
      std::vector<job> jobs(8);
      std::vector<result_t> sums(8);
      scratch tmp(data.size(), results.size());
      auto range = batches(s, data, 32, pool, cuscope::output_per_sample(results, 1), o);
      CHECK(range.batch_count() == 8);
      device_bytes = range.device_bytes();
      pinned_bytes = range.pinned_bytes();
      CHECK(device_bytes == 3 * (32 * 256 * sizeof(value_t) + 32 * sizeof(result_t)));
      CHECK(pinned_bytes == device_bytes);
#if CUSCOPE_TEST_SIMULATED
      CHECK(pool.stats().used_bytes == device_bytes);
      const std::size_t allocations = cuscope::sim::call_count("cudaMallocFromPoolAsync");
      const std::size_t host_allocations = cuscope::sim::call_count("cudaHostAlloc");
#endif
      for (const auto& b : range) {
        job& j = jobs[b.index()];
        j.sum = &sums[b.index()];
        j.sample_elements = 256;
        j.out = output_kind::per_sample;
        enqueue_work(b, j, tmp, b.first_sample());
      }
#if CUSCOPE_TEST_SIMULATED
      // Nothing allocated per batch.
      CHECK(cuscope::sim::call_count("cudaMallocFromPoolAsync") == allocations);
      CHECK(cuscope::sim::call_count("cudaHostAlloc") == host_allocations);
#endif
      CHECK(results[255] == sum_of(data.data() + 255 * 256, 256));
    }
    CHECK(pool.stats().used_bytes == 0);  // the frees have completed: the session can trim
    report = epoch.finish();
  }
  CHECK(report.peak_used_bytes >= device_bytes);
  CHECK(report.used_at_exit_bytes == 0);
  CHECK(report.returned_bytes >= device_bytes);
  CHECK(report.reserved_at_exit_bytes == 0);
  CHECK_FALSE(report.leaked());
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("batch: a session around a loop over page-locked memory sees the buffers returned",
          "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  pinned_buffer<value_t> data(20000);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = value_at(i);
  std::vector<result_t> sums(20, -1);
  std::vector<job> jobs(20);
  scratch tmp(data.size(), 0);
  cuscope::session_report report;
  {
    cuscope::session epoch(pool, s, "pinned epoch");
    {
      // No staging and no results: the range frees nothing page-locked, which would synchronize.
      auto range = batches(s, data, 1000, pool);
      CHECK(range.direct());
      for (const auto& b : range) {
        jobs[b.index()].sum = &sums[b.index()];
        enqueue_work(b, jobs[b.index()], tmp, 0);
      }
    }
    report = epoch.finish();
  }
  for (std::size_t k = 0; k < 20; ++k)
    CHECK(sums[k] == sum_of(data.data() + 1000 * k, 1000));
  CHECK(report.used_at_exit_bytes == 0);
  CHECK(report.peak_used_bytes >= 2 * 1000 * sizeof(value_t));
  CHECK(report.reserved_at_exit_bytes == 0);
  CHECK(report.returned_bytes >= 2 * 1000 * sizeof(value_t));
}

TEST_CASE("batch: an exception from the loop body leaves no copy in flight and nothing allocated",
          "[batch]") {
  device_guard device;
  // A pool that gives memory back at every synchronization: a copy still reading a buffer after
  // its free would read memory the device no longer has, an error the stream then reports.
  cuscope::pool_options po;
  po.release_threshold_bytes = 0;
  memory_pool pool(po);
  stream s;
  const std::vector<value_t> data = make_source(10000);
  for (const std::size_t depth : {1u, 2u, 4u}) {
    for (const std::size_t fail_at : {0u, 1u, 5u, 9u}) {
      INFO("depth " << depth << ", throws at batch " << fail_at);
      std::vector<result_t> results(10000, -1);
      std::vector<result_t> sums(10, -1);
      std::vector<job> jobs(10);
      scratch tmp(data.size(), results.size());
      batch_options o;
      o.depth = depth;
      try {
        for (const auto& b :
             batches(s, data, 1000, pool, cuscope::output_per_sample(results, 1), o)) {
          job& j = jobs[b.index()];
          j.sum = &sums[b.index()];
          j.out = output_kind::per_sample;
          enqueue_work(b, j, tmp, b.first_sample());
          if (b.index() == fail_at) throw std::runtime_error("the loop body failed");
        }
        FAIL("no exception");
      } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == "the loop body failed");
      }
      // The work enqueued before the exception read its batches before they were freed, and the
      // copies of results still in flight did too.
      REQUIRE_NOTHROW(s.synchronize());
      CHECK(cudaGetLastError() == cudaSuccess);
      for (std::size_t k = 0; k <= fail_at; ++k) {
        INFO("batch " << k);
        CHECK(sums[k] == sum_of(data.data() + k * 1000, 1000));
      }
      for (std::size_t k = fail_at + 1; k < 10; ++k)
        CHECK(sums[k] == -1);
      CHECK(pool.stats().used_bytes == 0);
    }
  }
}

TEST_CASE("batch: leaving the loop early hands the current batch back and finishes its results",
          "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> data = make_source(5000);
  std::vector<result_t> results(10, -1);
  std::vector<result_t> sums(5, -1);
  std::vector<job> jobs(5);
  scratch tmp(data.size(), results.size());
  {
    auto range = batches(s, data, 1000, pool, cuscope::output_per_batch(results, 2));
    for (const auto& b : range) {
      job& j = jobs[b.index()];
      j.sum = &sums[b.index()];
      j.out = output_kind::per_batch;
      enqueue_work(b, j, tmp, b.index() * 2);
      if (b.index() == 2) break;
    }
    CHECK_FALSE(range.finished());
    range.finish();
    CHECK(range.finished());
    CHECK(range.begin() == range.end());
    for (std::size_t k = 0; k < 3; ++k) {
      CHECK(results[2 * k] == sum_of(data.data() + k * 1000, 1000));
      CHECK(results[2 * k + 1] == static_cast<result_t>(k));
    }
    CHECK(results[6] == -1);
  }
  // The destructor does the same when finish() was not called.
  results.assign(10, -1);
  {
    auto range = batches(s, data, 1000, pool, cuscope::output_per_batch(results, 2));
    for (const auto& b : range) {
      enqueue_work(b, jobs[b.index()], tmp, b.index() * 2);
      if (b.index() == 1) break;
    }
  }
  CHECK(results[0] == sum_of(data.data(), 1000));
  CHECK(results[2] == sum_of(data.data() + 1000, 1000));
  CHECK(results[4] == -1);
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("batch: a moved range carries on where it was", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> data = make_source(100);
  std::vector<result_t> sums(10, -1);
  std::vector<job> jobs(10);
  scratch tmp(data.size(), 0);
  auto first = batches(s, data, 10, pool);
  auto it = first.begin();
  jobs[0].sum = &sums[0];
  enqueue_work(*it, jobs[0], tmp, 0);
  batch_range<value_t> second(std::move(first));
  CHECK(first.begin() == first.end());  // NOLINT(bugprone-use-after-move): the moved-from state
  CHECK(first.depth() == 0);
  batch_range<value_t> third = batches(s, data, 50, pool);
  third = std::move(second);
  auto at = third.begin();
  CHECK(at->index() == 0);
  for (++at; at != third.end(); ++at) {
    jobs[at->index()].sum = &sums[at->index()];
    enqueue_work(*at, jobs[at->index()], tmp, 0);
  }
  s.synchronize();
  for (std::size_t k = 0; k < 10; ++k)
    CHECK(sums[k] == sum_of(data.data() + 10 * k, 10));
}

TEST_CASE("batch: iterators survive a move of the range, which keeps their position", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> data = make_source(100);
  std::vector<result_t> sums(10, -1);
  std::vector<job> jobs(10);
  scratch tmp(data.size(), 0);
  auto first = batches(s, data, 10, pool);
  auto it = first.begin();
  jobs[0].sum = &sums[0];
  enqueue_work(*it, jobs[0], tmp, 0);
  ++it;
  const auto moved = std::make_unique<batch_range<value_t>>(std::move(first));
  CHECK(first.finished());  // NOLINT(bugprone-use-after-move): the moved-from state
  CHECK(first.batch_count() == 0);
  first.finish();  // nothing to do
  // The iterator taken before the move goes on through the moved range, from where it was.
  CHECK(it->index() == 1);
  CHECK(it != moved->end());
  for (; it != moved->end(); ++it) {
    jobs[it->index()].sum = &sums[it->index()];
    enqueue_work(*it, jobs[it->index()], tmp, 0);
  }
  CHECK(moved->finished());
  s.synchronize();
  for (std::size_t k = 0; k < 10; ++k)
    CHECK(sums[k] == sum_of(data.data() + 10 * k, 10));
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("batch: out of memory without adapt_to_memory throws and leaves nothing allocated",
          "[batch][sim]") {
  cuscope::test::device_setup small;
  small.total_bytes = 96 * MiB;
  small.context_bytes = 16 * MiB;
  device_guard device(small);
  memory_pool pool;
  stream s;
  const std::vector<value_t> data(64 * MiB / sizeof(value_t));
  try {
    auto range = batches(s, data, data.size() / 4, pool);  // 2 x 16 MiB fit in 80 MiB
    CHECK(range.batch_size() == data.size() / 4);
    batch_options o;
    o.depth = 4;
    (void)batches(s, data, data.size() / 4, pool, o);  // 4 more x 16 MiB do not
    FAIL("no exception");
  } catch (const cuscope::out_of_memory& e) {
    CHECK_THAT(std::string(e.what()), contains("out of memory"));
  }
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("batch: adapt_to_memory halves the batch size until the buffers fit", "[batch][sim]") {
  cuscope::test::device_setup small;
  small.total_bytes = 96 * MiB;
  small.context_bytes = 16 * MiB;
  device_guard device(small);
  memory_pool pool;
  stream s;
  const std::size_t n = 64 * MiB / sizeof(value_t);
  const std::vector<value_t> data = make_source(n);
  batch_options o;
  o.adapt_to_memory = true;
  o.depth = 2;
  auto range = batches(s, data, n / 4, pool, o);  // 2 x 16 MiB fit in 80 MiB
  CHECK_FALSE(range.adapted());
  o.depth = 4;
  {
    // In the 48 MiB left, 4 x 32 MiB do not fit, nor 4 x 16 MiB; 4 x 8 MiB do.
    const std::size_t calls = cuscope::sim::call_count("cudaMallocFromPoolAsync");
    const std::size_t trims = cuscope::sim::call_count("cudaMemPoolTrimTo");
    auto adapted = batches(s, data, n / 2, pool, o);
    CHECK(adapted.adapted());
    CHECK(adapted.requested_batch_size() == n / 2);
    CHECK(adapted.batch_size() == n / 8);
    CHECK(adapted.batch_count() == 8);
    CHECK(adapted.device_bytes() == 4 * 8 * MiB);
    CHECK(cuscope::sim::call_count("cudaMemPoolTrimTo") - trims == 3);
    CHECK(cuscope::sim::call_count("cudaMallocFromPoolAsync") - calls > 4);
    std::vector<result_t> sums(8, -1);
    std::vector<job> jobs(8);
    scratch tmp(n, 0);
    for (const auto& b : adapted) {
      CHECK(b.samples() == n / 8);
      jobs[b.index()].sum = &sums[b.index()];
      jobs[b.index()].slow = false;
      enqueue_work(b, jobs[b.index()], tmp, 0);
    }
    s.synchronize();
    for (std::size_t k = 0; k < 8; ++k)
      CHECK(sums[k] == sum_of(data.data() + k * (n / 8), n / 8));
  }
  // A floor the buffers do not fit at: out of memory, saying so.
  o.min_batch = n / 4;
  try {
    (void)batches(s, data, n / 2, pool, o);
    FAIL("no exception");
  } catch (const cuscope::out_of_memory& e) {
    CHECK_THAT(std::string(e.what()), contains("even at the smallest batch size allowed"));
    CHECK_THAT(std::string(e.what()), contains("min_batch = " + std::to_string(n / 4)));
  }
  CHECK(pool.stats().used_bytes == range.device_bytes());
}

TEST_CASE("batch: adapt_to_memory keeps the batch size when a trim makes room", "[batch][sim]") {
  cuscope::test::device_setup small;
  small.total_bytes = 96 * MiB;
  small.context_bytes = 16 * MiB;
  device_guard device(small);
  // Memory freed on another stream is not reused before that free has completed.
  cuscope::pool_options po;
  po.reuse = {false, false, false};
  memory_pool pool(po);
  stream s;
  stream other;
  pool.deallocate(other, pool.allocate(other, 64 * MiB), 64 * MiB);  // pending: still reserved
  const std::vector<value_t> data = make_source(32 * MiB / sizeof(value_t));
  batch_options o;
  o.adapt_to_memory = true;
  const std::size_t trims = cuscope::sim::call_count("cudaMemPoolTrimTo");
  auto range = batches(s, data, data.size() / 2, pool, o);  // 2 x 16 MiB after the trim
  CHECK_FALSE(range.adapted());
  CHECK(range.batch_size() == data.size() / 2);
  CHECK(cuscope::sim::call_count("cudaMemPoolTrimTo") - trims == 1);
  CHECK(pool.stats().reserved_bytes < 64 * MiB);
}

TEST_CASE("batch: adapt_to_memory retries after an injected failure, then halves", "[batch][sim]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> data = make_source(4096);
  batch_options o;
  o.adapt_to_memory = true;
  o.min_batch = 256;
  {
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
    auto range = batches(s, data, 1024, pool, o);
    CHECK_FALSE(range.adapted());
    CHECK(range.batch_size() == 1024);
  }
  {
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 2, cudaErrorMemoryAllocation);
    auto range = batches(s, data, 1024, pool, o);
    CHECK(range.adapted());
    CHECK(range.batch_size() == 512);
    std::vector<result_t> sums(8, -1);
    std::vector<job> jobs(8);
    scratch tmp(data.size(), 0);
    for (const auto& b : range) {
      jobs[b.index()].sum = &sums[b.index()];
      enqueue_work(b, jobs[b.index()], tmp, 0);
    }
    s.synchronize();
    for (std::size_t k = 0; k < 8; ++k)
      CHECK(sums[k] == sum_of(data.data() + k * 512, 512));
  }
  {
    // The second allocation of the third attempt fails too: 512 halves to the floor of 256.
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 2, cudaErrorMemoryAllocation);
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 4, cudaErrorMemoryAllocation);
    auto range = batches(s, data, 1024, pool, o);
    CHECK(range.batch_size() == 256);
    CHECK(range.batch_count() == 16);
  }
  {
    // Page-locked staging that cannot be had counts as well.
    cuscope::sim::fail_api("cudaHostAlloc", 1, cudaErrorMemoryAllocation);
    auto range = batches(s, data, 1024, pool, o);
    CHECK(range.batch_size() == 1024);
  }
  {
    batch_options strict;
    cuscope::sim::fail_api("cudaMallocFromPoolAsync", 2, cudaErrorMemoryAllocation);
    CHECK_THROWS_AS(batches(s, data, 1024, pool, strict), cuscope::out_of_memory);
  }
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("batch: a producer that throws stops the iteration and leaves nothing allocated",
          "[batch][sim]") {
  device_guard device;
  memory_pool pool;
  stream s;
  std::size_t calls = 0;
  const auto fill = [&](std::size_t first, std::size_t n, value_t* out) {
    if (++calls == 4) throw std::runtime_error("the file is truncated");
    for (std::size_t i = 0; i < n; ++i)
      out[i] = value_at(first + i);
  };
  std::vector<result_t> results(100, -1);
  std::size_t seen = 0;
  {
    auto range = batches(s, cuscope::from_producer<value_t>(100, fill), 10, pool,
                         cuscope::output_per_batch(results, 2));
    try {
      for (const auto& b : range) {
        (void)b;
        ++seen;
      }
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "the file is truncated");
    }
    CHECK(seen == 2);  // batches 0 and 1; loading batch 3 failed when leaving batch 1
    CHECK(range.begin() == range.end());
    CHECK_THROWS_WITH(range.finish(), contains("after a failed step"));
  }
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("batch: a failing runtime call at any point leaves nothing allocated or in flight",
          "[batch][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep([](cuscope::test::fault_point& fault) {
    memory_pool pool;
    stream s;
    const std::vector<value_t> data = make_source(60);
    std::vector<result_t> results(6 * 2, -1);
    std::vector<result_t> sums(6, -1);
    std::vector<job> jobs(6);
    scratch tmp(data.size(), results.size());
    std::size_t seen = 0;
    const bool completed = fault.run([&] {
      for (const auto& b : batches(s, data, 10, pool, cuscope::output_per_batch(results, 2))) {
        job& j = jobs[b.index()];
        j.sum = &sums[b.index()];
        j.out = output_kind::per_batch;
        j.slow = false;
        enqueue_work(b, j, tmp, b.index() * 2);
        ++seen;
      }
    });
    if (completed) {
      CHECK(seen == 6);
      for (std::size_t k = 0; k < 6; ++k)
        CHECK(results[2 * k] == sum_of(data.data() + 10 * k, 10));
    }
    (void)CUSCOPE_CUDA_TRY_NOTHROW(cudaStreamSynchronize(s.get()));
    CHECK(pool.stats().used_bytes == 0);
  });
  CHECK(runs > 20);
}

#endif

TEST_CASE("batch: a host output whose size needed overflows a size_t is refused", "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<float> two(2, 1.0f);
  std::vector<float> small(1);
  // 2 samples x 2^63 result elements wrap around to 0: the product must not be trusted.
  const std::size_t half = std::size_t{1} << (std::numeric_limits<std::size_t>::digits - 1);
  CHECK_THROWS_WITH(batches(s, two, 2, pool, cuscope::output_per_sample(small, half)),
                    contains("a host output of 1 element cannot hold the results: 2 samples x " +
                             std::to_string(half) + " elements = more than a size_t holds"));
  CHECK(pool.stats().reserved_bytes == 0);
}

#if CUSCOPE_HAS_STREAM_GET_DEVICE

TEST_CASE("batch: a stream of another device than the pool's is refused when the range is made",
          "[batch]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  memory_pool pool;  // on device 0
  cuscope::stream_options so;
  so.device = 1;
  stream other(so);
  const std::vector<float> data(8, 1.0f);
  // The range's events are made on the pool's device, and CUDA records an event only on a stream
  // of its own device: the loop would fail at its first step.
  CHECK_THROWS_WITH(batches(other, data, 4, pool),
                    contains("belongs to device 1, not to device 0 of the pool"));
  {
    // A default stream handle names the current device's stream.
    cuscope::scoped_device on(1);
    CHECK_THROWS_WITH(batches(cuscope::stream_ref::per_thread(), data, 4, pool),
                      contains("per-thread default stream belongs to device 1"));
  }
  CHECK(pool.stats().reserved_bytes == 0);
}

#endif

TEST_CASE("batch: batches(session, ...) are counted by the session and kept within its budget",
          "[batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  std::vector<value_t> source(1 << 20);
  for (std::size_t i = 0; i < source.size(); ++i)
    source[i] = static_cast<value_t>(i);
  const std::size_t batch_bytes = 4096 * sizeof(value_t);
  cuscope::session_options o;
  o.name = "request";
  o.budget_bytes = batch_bytes;  // one batch's buffer, where depth 2 needs two
  cuscope::session work(pool, s, o);
  CHECK_THROWS_AS(batches(work, source, 4096), cuscope::out_of_memory);
  CHECK_THROWS_WITH(batches(work, source, 4096), contains("session 'request', whose budget"));
  CHECK(work.live_bytes() == 0);
  batch_options adapt;
  adapt.adapt_to_memory = true;
  {
    auto range = batches(work, source, 4096, adapt);
    CHECK(range.batch_size() == 2048);  // halved until two buffers fit the budget
    CHECK(work.live_allocations() == 2);
    CHECK(work.live_bytes() == batch_bytes);
    std::size_t seen = 0;
    for (const auto& b : range)
      seen += b.size();
    CHECK(seen == source.size());
  }
  CHECK(work.live_bytes() == 0);
#if CUSCOPE_TEST_SIMULATED
  {
    // A budget's refusal is not the pool's: the range shrinks without synchronizing the device
    // or trimming the pool's cache.
    const std::size_t syncs = cuscope::sim::call_count("cudaDeviceSynchronize");
    const std::size_t trims = cuscope::sim::call_count("cudaMemPoolTrimTo");
    const std::size_t reserved = pool.stats().reserved_bytes;
    CHECK(reserved >= batch_bytes);  // the first range's buffers, cached by the pool
    auto range = batches(work, source, 4096, adapt);
    CHECK(range.batch_size() == 2048);
    CHECK(cuscope::sim::call_count("cudaDeviceSynchronize") == syncs);
    CHECK(cuscope::sim::call_count("cudaMemPoolTrimTo") == trims);
    CHECK(pool.stats().reserved_bytes >= reserved);
  }
#endif
  const cuscope::session_report& r = work.finish();
  CHECK(r.tracked_peak_bytes == batch_bytes);
  CHECK_FALSE(r.leaked());
  CHECK_FALSE(r.synchronized_device);  // the range synchronized its own stream
  CHECK_THROWS_AS(batches(work, source, 4096), std::logic_error);
}
