// SPDX-License-Identifier: Apache-2.0
// A training-style loop as docs/batch.md describes it: host data staged to the device batch by
// batch (page-locked double buffers, copies on the range's own stream overlapping the work on the
// user's), over several epochs inside sessions with budgets, with a ragged last batch, an early
// break, exceptions thrown from the loop body and from a producer, an empty source, the user's own
// stream, page-locked and producer sources, results copied back, and every staged byte copied
// back from the device and compared with its source.
#include <cuscope/cuscope.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::uint32_t sentinel = 0xFFFFFFFFu;

// A dataset whose every element (and nearly every byte) differs from its neighbours.
std::vector<std::uint32_t> make_data(std::size_t elements) {
  std::vector<std::uint32_t> v(elements);
  for (std::size_t i = 0; i < elements; ++i)
    v[i] = static_cast<std::uint32_t>(i * 2654435761u) ^ 0x5A5A5A5Au;
  return v;
}

// The loop body's "kernel": copies the batch into its place in a device buffer that holds the
// whole dataset, in order on the batch's stream.
template <class Batch, class T>
void gather(const Batch& b, cuscope::device_buffer<T>& all) {
  REQUIRE(b.offset() + b.size() <= all.size());
  REQUIRE(cudaMemcpyAsync(all.data() + b.offset(), b.span().data(), b.span().size_bytes(),
                          cudaMemcpyDeviceToDevice, b.stream()) == cudaSuccess);
}

// The loop body's result: the batch's elements copied into b.output() (as many results per
// sample as elements per sample).
template <class Batch>
void echo(const Batch& b) {
  REQUIRE(b.output().size() == b.size());
  REQUIRE(cudaMemcpyAsync(b.output().data(), b.span().data(), b.span().size_bytes(),
                          cudaMemcpyDeviceToDevice, b.stream()) == cudaSuccess);
}

// The loop body's per-batch result: the batch's first element.
template <class Batch>
void first_element(const Batch& b) {
  REQUIRE(b.output().size() == 1);
  REQUIRE(cudaMemcpyAsync(b.output().data(), b.span().data(), sizeof(std::uint32_t),
                          cudaMemcpyDeviceToDevice, b.stream()) == cudaSuccess);
}

// Detects whether batches(args...) is a call that compiles.
template <class, class... Args>
struct batches_callable : std::false_type {};
template <class... Args>
struct batches_callable<std::void_t<decltype(cuscope::batches(std::declval<Args>()...))>, Args...>
    : std::true_type {};
template <class... Args>
constexpr bool can_batch = batches_callable<void, Args...>::value;

using u32_vector = std::vector<std::uint32_t>;
using u32_output = cuscope::batch_output<std::uint32_t>;

// "passing a temporary does not compile" (docs/batch.md, Sources), for every form of batches().
static_assert(
    can_batch<cuscope::stream_ref, const u32_vector&, std::size_t, cuscope::memory_pool_ref>);
static_assert(!can_batch<cuscope::stream_ref, u32_vector, std::size_t, cuscope::memory_pool_ref>);
static_assert(can_batch<cuscope::stream_ref, const u32_vector&, std::size_t,
                        cuscope::memory_pool_ref, const u32_output&>);
static_assert(!can_batch<cuscope::stream_ref, u32_vector, std::size_t, cuscope::memory_pool_ref,
                         const u32_output&>);
static_assert(can_batch<cuscope::session&, const u32_vector&, std::size_t>);
static_assert(!can_batch<cuscope::session&, u32_vector, std::size_t>);
static_assert(can_batch<cuscope::session&, const u32_vector&, std::size_t, const u32_output&>);
static_assert(!can_batch<cuscope::session&, u32_vector, std::size_t, const u32_output&>);

}  // namespace

TEST_CASE("batches: epochs in sessions stage every byte of a ragged dataset intact",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::pool_options po;
  po.release_threshold_bytes = 64 * MiB;  // the cache stays across synchronizations
  cuscope::memory_pool pool(po);
  cuscope::stream stream;

  constexpr std::size_t per_sample = 3;
  constexpr std::size_t samples = 1000;  // 15 batches of 64 samples and one of 40
  constexpr std::size_t batch = 64;
  constexpr std::size_t batch_count = 16;
  const u32_vector data = make_data(samples * per_sample);

  cuscope::batch_options options;
  options.sample_elements = per_sample;

  for (int e = 0; e < 3; ++e) {
    cuscope::session_options so;
    so.name = "epoch " + std::to_string(e);
    so.budget_bytes = MiB;
    cuscope::session epoch(pool, stream, so);

    auto all = epoch.make_buffer<std::uint32_t>(data.size(), "gathered");
    u32_vector echoed(data.size(), sentinel);
    std::size_t range_bytes = 0;
    std::size_t seen = 0;
    {
      auto range = cuscope::batches(epoch, data, batch,
                                    cuscope::output_per_sample(echoed, per_sample), options);
      CHECK(range.batch_count() == batch_count);
      CHECK(range.sample_count() == samples);
      CHECK(range.sample_elements() == per_sample);
      CHECK(range.batch_size() == batch);
      CHECK_FALSE(range.adapted());
      CHECK(range.depth() == 2);
      CHECK_FALSE(range.direct());  // a pageable std::vector is staged
      CHECK(range.stream() == stream.ref());
      // depth x (batch + results per batch) on the device, the same page-locked for staging.
      const std::size_t slot = batch * per_sample * sizeof(std::uint32_t);
      CHECK(range.device_bytes() == 2 * (slot + slot));
      CHECK(range.pinned_bytes() == range.device_bytes());
      range_bytes = range.device_bytes();
      for (const auto& b : range) {
        const std::size_t k = b.index();
        CHECK(k == seen);
        CHECK(b.first_sample() == k * batch);
        CHECK(b.offset() == k * batch * per_sample);
        CHECK(b.samples() == (k + 1 < batch_count ? batch : samples - k * batch));
        CHECK(b.size() == b.samples() * per_sample);
        CHECK(b.span().size() == b.size());
        CHECK(b.stream() == stream.ref());
        gather(b, all);
        echo(b);
        ++seen;
      }
      CHECK(range.finished());
    }
    CHECK(seen == batch_count);
    CHECK(echoed == data);                 // complete when the iteration ends
    CHECK(all.to_vector(stream) == data);  // every byte staged arrived
    all = cuscope::device_buffer<std::uint32_t>();

    const cuscope::session_report& r = epoch.finish();
    INFO(r.to_string());
    CHECK(r.complete());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == r.frees);
    CHECK(r.allocations > 1);  // the gathered buffer and the range's buffers
    CHECK(r.budget_refusals == 0);
    CHECK(r.tracked_peak_bytes == range_bytes + data.size() * sizeof(std::uint32_t));
    CHECK_FALSE(r.tracked_peak_upper_bound);
    CHECK(r.trimmed);
    CHECK(r.returned_bytes > 0);
    CHECK(r.reserved_at_exit_bytes == 0);
    CHECK(pool.stats().used_bytes == 0);
    CHECK(pool.stats().reserved_bytes == 0);
  }
}

TEST_CASE("batches: the host waits once per batch, and only for the copy it refills",
          "[docs][batch]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(4096);
  auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
  std::size_t batches_seen = 0;
#if CUSCOPE_TEST_SIMULATED
  std::size_t event_waits = 0;
  std::size_t stream_waits = 0;
  std::size_t device_waits = 0;
#endif
  {
    auto range = cuscope::batches(stream, data, 256, pool);
    CHECK(range.batch_count() == 16);
    for (const auto& b : range) {
#if CUSCOPE_TEST_SIMULATED
      // Between the first batch and the last, the only host waits: one per advance.
      if (b.index() == 0) {
        event_waits = cuscope::sim::call_count("cudaEventSynchronize");
        stream_waits = cuscope::sim::call_count("cudaStreamSynchronize");
        device_waits = cuscope::sim::call_count("cudaDeviceSynchronize");
      } else if (b.index() == 15) {
        event_waits = cuscope::sim::call_count("cudaEventSynchronize") - event_waits;
        stream_waits = cuscope::sim::call_count("cudaStreamSynchronize") - stream_waits;
        device_waits = cuscope::sim::call_count("cudaDeviceSynchronize") - device_waits;
      }
#endif
      gather(b, all);
      ++batches_seen;
    }
  }
  CHECK(batches_seen == 16);
#if CUSCOPE_TEST_SIMULATED
  CHECK(event_waits <= 15);
  CHECK(stream_waits == 0);
  CHECK(device_waits == 0);
#endif
  CHECK(all.to_vector(stream) == data);
}

TEST_CASE("batches: depth 1, 2 and 3 deliver the same bytes; a producer runs depth batches ahead",
          "[docs][batch]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  constexpr std::size_t per_sample = 5;
  constexpr std::size_t samples = 333;  // ragged at every batch size below
  constexpr std::size_t batch = 32;
  const u32_vector data = make_data(samples * per_sample);

  for (std::size_t depth = 1; depth <= 3; ++depth) {
    INFO("depth " << depth);
    cuscope::batch_options options;
    options.sample_elements = per_sample;
    options.depth = depth;

    // A pageable source.
    {
      auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
      auto range = cuscope::batches(stream, data, batch, pool, options);
      CHECK(range.depth() == depth);
      CHECK(range.device_bytes() == depth * batch * per_sample * sizeof(std::uint32_t));
      for (const auto& b : range)
        gather(b, all);
      CHECK(all.to_vector(stream) == data);
    }

    // A producer: it fills page-locked staging memory on the iterating thread, in begin() and as
    // the iterator advances, so batch k+depth-1 is produced while batch k is worked on.
    std::vector<std::pair<std::size_t, std::size_t>> produced;  // (first sample, samples)
    auto source = cuscope::from_producer<std::uint32_t>(
        samples, [&](std::size_t first, std::size_t n, std::uint32_t* out) {
          cudaPointerAttributes attributes{};
          REQUIRE(cudaPointerGetAttributes(&attributes, out) == cudaSuccess);
          CHECK(attributes.type == cudaMemoryTypeHost);  // page-locked
          for (std::size_t i = 0; i < n * per_sample; ++i)
            out[i] = data[first * per_sample + i];
          produced.emplace_back(first, n);
        });
    auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
    std::size_t batch_count = 0;
    {
      auto range = cuscope::batches(stream, source, batch, pool, options);
      batch_count = range.batch_count();
      CHECK(produced.empty());  // nothing before begin()
      for (const auto& b : range) {
        const std::size_t ahead = std::min(b.index() + depth, range.batch_count());
        CHECK(produced.size() == ahead);
        gather(b, all);
      }
    }
    REQUIRE(produced.size() == batch_count);
    for (std::size_t k = 0; k < batch_count; ++k) {
      CHECK(produced[k].first == k * batch);
      CHECK(produced[k].second == std::min(batch, samples - k * batch));
    }
    CHECK(all.to_vector(stream) == data);
  }
}

TEST_CASE("batches: a producer inside a session, with results per sample, epoch after epoch",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  constexpr std::size_t per_sample = 4;
  constexpr std::size_t samples = 777;
  const u32_vector data = make_data(samples * per_sample);
  cuscope::batch_options options;
  options.sample_elements = per_sample;

  for (int e = 0; e < 2; ++e) {
    cuscope::session_options so;
    so.name = "decoded epoch " + std::to_string(e);
    so.budget_bytes = MiB;
    cuscope::session s(pool, stream, so);
    std::size_t calls = 0;
    auto source = cuscope::from_producer<std::uint32_t>(
        samples, [&](std::size_t first, std::size_t n, std::uint32_t* out) {
          for (std::size_t i = 0; i < n * per_sample; ++i)
            out[i] = data[first * per_sample + i];
          ++calls;
        });
    u32_vector echoed(data.size(), sentinel);
    std::size_t range_bytes = 0;
    {
      auto range =
          cuscope::batches(s, source, 100, cuscope::output_per_sample(echoed, per_sample), options);
      range_bytes = range.device_bytes();
      CHECK(range_bytes == 2 * 2 * 100 * per_sample * sizeof(std::uint32_t));
      CHECK(s.live_bytes() == range_bytes);  // counted by the session
      for (const auto& b : range)
        echo(b);
    }
    CHECK(calls == 8);
    CHECK(echoed == data);
    const cuscope::session_report& r = s.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == r.frees);
    CHECK(r.tracked_peak_bytes == range_bytes);
  }
}

TEST_CASE("batches: break ends the loop early; finish() or the destructor writes the results",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  constexpr std::size_t batch = 100;
  const u32_vector data = make_data(1000);  // 10 batches

  for (const bool call_finish : {true, false}) {
    INFO((call_finish ? "finish()" : "destructor"));
    cuscope::session s(pool, stream, "early exit");
    u32_vector firsts(10, sentinel);
    {
      auto range = cuscope::batches(s, data, batch, cuscope::output_per_batch(firsts, 1));
      for (const auto& b : range) {
        first_element(b);
        if (b.index() == 4) break;  // batch 4 counts as done
      }
      CHECK_FALSE(range.finished());
      if (call_finish) {
        range.finish();
        CHECK(range.finished());
        range.finish();  // a second call does nothing
        for (std::size_t k = 0; k < 10; ++k)
          CHECK(firsts[k] == (k <= 4 ? data[k * batch] : sentinel));
        // After finish() the loop is over: begin() is end().
        CHECK(range.begin() == range.end());
      }
    }
    for (std::size_t k = 0; k < 10; ++k)
      CHECK(firsts[k] == (k <= 4 ? data[k * batch] : sentinel));
    const cuscope::session_report& r = s.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == r.frees);
    CHECK(pool.stats().used_bytes == 0);
  }

  // Without an output the break leaves nothing behind either.
  cuscope::session s(pool, stream, "early exit, no output");
  auto all = s.make_buffer<std::uint32_t>(data.size(), "gathered");
  {
    std::size_t n = 0;
    for (const auto& b : cuscope::batches(s, data, batch)) {
      gather(b, all);
      if (++n == 3) break;
    }
  }
  const u32_vector back = all.to_vector(stream);
  CHECK(std::equal(data.begin(), data.begin() + 3 * batch, back.begin()));
  all = cuscope::device_buffer<std::uint32_t>();
  const cuscope::session_report& r = s.finish();
  CHECK_FALSE(r.leaked());
  CHECK(r.allocations == r.frees);
}

TEST_CASE("batches: an exception thrown from the loop body leaves nothing allocated",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::pool_options po;
  po.release_threshold_bytes = 64 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream stream;
  constexpr std::size_t batch = 100;
  const u32_vector data = make_data(1000);

  // Caught inside the session: the range is gone, the session finds every byte back.
  {
    cuscope::session s(pool, stream, "throwing step");
    u32_vector firsts(10, sentinel);
    try {
      for (const auto& b : cuscope::batches(s, data, batch, cuscope::output_per_batch(firsts, 1))) {
        first_element(b);
        if (b.index() == 3) throw std::runtime_error("bad batch 3");
      }
      FAIL("the loop body's exception did not come out of the loop");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "bad batch 3");
    }
    // Batch 0's result was copied out when the iterator left batch 2, whose results reused its
    // slot; while the exception unwound, the destructor wrote nothing more.
    for (std::size_t k = 0; k < 10; ++k)
      CHECK(firsts[k] == (k < 1 ? data[k * batch] : sentinel));
    const cuscope::session_report& r = s.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == r.frees);
    CHECK(r.trimmed);
    CHECK(r.reserved_at_exit_bytes == 0);
  }

  // Through the session: the session ends unwinding, and still reports no leak.
  cuscope::session_report seen;
  try {
    cuscope::session_options so;
    so.name = "unwound epoch";
    so.on_finish = [&](const cuscope::session_report& r) { seen = r; };
    cuscope::session s(pool, stream, so);
    for (const auto& b : cuscope::batches(s, data, batch)) {
      (void)b;
      throw std::length_error("out of patience");
    }
    FAIL("the loop body's exception did not come out of the loop");
  } catch (const std::length_error& e) {
    CHECK(std::string(e.what()) == "out of patience");
  }
  INFO(seen.to_string());
  CHECK(seen.name == "unwound epoch");
  CHECK(seen.unwinding);
  CHECK_FALSE(seen.leaked());
  CHECK(seen.allocations > 0);
  CHECK(seen.allocations == seen.frees);
  CHECK(pool.stats().used_bytes == 0);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("batches: a producer's exception comes out of begin() or ++it and frees everything",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(1000);

  for (const std::size_t failing : {std::size_t{0}, std::size_t{1}, std::size_t{500}}) {
    INFO("the producer fails at sample " << failing);
    cuscope::session s(pool, stream, "reader");
    auto source = cuscope::from_producer<std::uint32_t>(
        data.size(), [&](std::size_t first, std::size_t n, std::uint32_t* out) {
          if (first <= failing && failing < first + n) throw std::runtime_error("unreadable file");
          for (std::size_t i = 0; i < n; ++i)
            out[i] = data[first + i];
        });
    std::size_t handed_out = 0;
    try {
      for (const auto& b : cuscope::batches(s, source, 100)) {
        (void)b;
        ++handed_out;
      }
      FAIL("the producer's exception did not come out of the loop");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "unreadable file");
    }
    // Depth 2: begin() produces batches 0 and 1, ++it from batch k produces batch k+2.
    CHECK(handed_out == (failing < 200 ? 0 : failing / 100 - 1));
    const cuscope::session_report& r = s.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == r.frees);
    CHECK(pool.stats().used_bytes == 0);
  }
}

TEST_CASE("batches: an empty source yields no batch and allocates nothing", "[docs][batch]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector empty;
  u32_vector out;
  cuscope::session s(pool, stream, "nothing to do");
  {
    auto plain = cuscope::batches(stream, empty, 64, pool);
    auto counted = cuscope::batches(s, empty, 64, cuscope::output_per_sample(out, 1));
    auto produced = cuscope::batches(
        stream,
        cuscope::from_producer<float>(
            0, [](std::size_t, std::size_t, float*) { FAIL("a producer of nothing was called"); }),
        64, pool);
    CHECK(plain.batch_count() == 0);
    CHECK(plain.device_bytes() == 0);
    CHECK(plain.pinned_bytes() == 0);
    CHECK(counted.device_bytes() == 0);
    CHECK(counted.pinned_bytes() == 0);
    CHECK(produced.device_bytes() == 0);
    CHECK(produced.pinned_bytes() == 0);
    CHECK(plain.begin() == plain.end());
    CHECK(counted.begin() == counted.end());
    CHECK(produced.begin() == produced.end());
    CHECK(pool.stats().reserved_bytes == 0);
#if CUSCOPE_TEST_SIMULATED
    CHECK(cuscope::sim::outstanding_allocations() == 0);
#endif
  }
  const cuscope::session_report& r = s.finish();
  CHECK(r.allocations == 0);
  CHECK_FALSE(r.leaked());
}

TEST_CASE("batches: on the user's own cudaStream_t, which stays the user's", "[docs][batch]") {
  cuscope::test::device_guard device;
  cudaStream_t mine = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking) == cudaSuccess);
  {
    cuscope::memory_pool pool;
    const u32_vector data = make_data(10 * 1024 + 7);
    cuscope::device_buffer<std::uint32_t> all(mine, data.size(), pool);
    {
      auto range = cuscope::batches(mine, data, 1024, pool);
      CHECK(range.stream().get() == mine);
      for (const auto& b : range) {
        CHECK(b.stream().get() == mine);
        gather(b, all);
      }
    }
    CHECK(all.to_vector(mine) == data);

    // The per-thread default stream, named as docs/interop.md says.
    cuscope::device_buffer<std::uint32_t> again(cuscope::stream_ref::per_thread(), data.size(),
                                                pool);
    for (const auto& b : cuscope::batches(cuscope::stream_ref::per_thread(), data, 1000, pool))
      gather(b, again);
    CHECK(again.to_vector(cuscope::stream_ref::per_thread()) == data);
  }
  // Nothing in cuscope destroyed it.
  CHECK(cudaStreamDestroy(mine) == cudaSuccess);
}

TEST_CASE("batches: a stream of another device is refused", "[docs][batch]") {
  cuscope::test::device_setup two;
  two.device_count = 2;
  cuscope::test::device_guard device(two);
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::memory_pool pool;  // device 0
  cuscope::stream_options so;
  so.device = 1;
  cuscope::stream other(so);
  const u32_vector data = make_data(100);
  CHECK_THROWS_AS(cuscope::batches(other, data, 10, pool), std::invalid_argument);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("batches: page-locked and device sources are copied without staging", "[docs][batch]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(5000);

  // A pinned_buffer.
  cuscope::pinned_buffer<std::uint32_t> pinned(data.size());
  std::copy(data.begin(), data.end(), pinned.begin());
  {
    auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
    auto range = cuscope::batches(stream, pinned, 512, pool);
    CHECK(range.direct());
    CHECK(range.pinned_bytes() == 0);
    CHECK(range.device_bytes() == 2 * 512 * sizeof(std::uint32_t));
    for (const auto& b : range)
      gather(b, all);
    CHECK(all.to_vector(stream) == data);
  }

  // Memory the user registered with cudaHostRegister.
  u32_vector registered = data;
  REQUIRE(cudaHostRegister(registered.data(), registered.size() * sizeof(std::uint32_t),
                           cudaHostRegisterDefault) == cudaSuccess);
  {
    auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
    u32_vector echoed(data.size(), sentinel);
    {
      auto range =
          cuscope::batches(stream, registered, 512, pool, cuscope::output_per_sample(echoed, 1));
      CHECK(range.direct());
      CHECK(range.pinned_bytes() == 2 * 512 * sizeof(std::uint32_t));  // results staging only
      for (const auto& b : range) {
        gather(b, all);
        echo(b);
      }
    }
    CHECK(echoed == data);
    CHECK(all.to_vector(stream) == data);
  }
  REQUIRE(cudaHostUnregister(registered.data()) == cudaSuccess);

  // Device memory.
  {
    const cuscope::device_buffer<std::uint32_t> on_device(stream, data, pool);
    auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
    auto range = cuscope::batches(stream, on_device.data(), on_device.size(), 512, pool);
    CHECK(range.direct());
    CHECK(range.pinned_bytes() == 0);
    for (const auto& b : range)
      gather(b, all);
    CHECK(all.to_vector(stream) == data);
  }
}

TEST_CASE("batches: budgets and pool limits shrink the batch or refuse the range",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::pool_options po;
  po.max_bytes = 64 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream stream;

  // A session's budget: two slots of 1024 samples x 16 B do not fit in 20 KiB; 512 do.
  constexpr std::size_t per_sample = 4;
  const u32_vector data = make_data(3000 * per_sample);
  cuscope::batch_options options;
  options.sample_elements = per_sample;
  options.adapt_to_memory = true;
  cuscope::session_options so;
  so.name = "tight epoch";
  so.budget_bytes = 20 * 1024;
  {
    cuscope::session s(pool, stream, so);
    auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);  // not counted
    std::size_t seen = 0;
    {
      auto range = cuscope::batches(s, data, 1024, options);
      CHECK(range.adapted());
      CHECK(range.requested_batch_size() == 1024);
      CHECK(range.batch_size() == 512);
      CHECK(range.batch_count() == 6);
      CHECK(range.device_bytes() <= so.budget_bytes);
      for (const auto& b : range) {
        CHECK(b.samples() == (b.index() < 5 ? 512 : 3000 - 5 * 512));
        gather(b, all);
        ++seen;
      }
    }
    CHECK(seen == 6);
    CHECK(all.to_vector(stream) == data);
    all = cuscope::device_buffer<std::uint32_t>();
    const cuscope::session_report& r = s.finish();
    INFO(r.to_string());
    CHECK(r.budget_refusals >= 1);
    CHECK(r.pool_refusals == 0);
    CHECK(r.tracked_peak_bytes <= so.budget_bytes);
    CHECK_FALSE(r.leaked());
  }

  // Without adapt_to_memory: out_of_memory from batches(), CUDA not asked, nothing left.
  {
    cuscope::session s(pool, stream, so);
    options.adapt_to_memory = false;
    try {
      auto range = cuscope::batches(s, data, 1024, options);
      FAIL("a range over the budget was made");
    } catch (const cuscope::out_of_memory& e) {
      CHECK(e.status() == cudaSuccess);
      CHECK_THAT(e.what(), cuscope::test::contains("tight epoch"));
    }
    const cuscope::session_report& r = s.finish();
    CHECK(r.budget_refusals == 1);
    CHECK(r.allocations == r.frees);
    CHECK_FALSE(r.leaked());
  }

  // The pool's hard limit: two slots of 40 MiB do not fit in 64 MiB; two of 20 MiB do.
  const std::vector<unsigned char> big(80 * MiB, 0x3C);
  try {
    auto range = cuscope::batches(stream, big, 40 * MiB, pool);
    FAIL("a range over the pool's limit was made");
  } catch (const cuscope::out_of_memory& e) {
    CHECK(e.status() == cudaErrorMemoryAllocation);
  }
  CHECK(pool.stats().used_bytes == 0);
  cuscope::batch_options adapt;
  adapt.adapt_to_memory = true;
  auto range = cuscope::batches(stream, big, 40 * MiB, pool, adapt);
  CHECK(range.adapted());
  CHECK(range.batch_size() == 20 * MiB);
  CHECK(range.batch_count() == 4);
  std::size_t bytes = 0;
  for (const auto& b : range)
    bytes += b.size();
  CHECK(bytes == big.size());
}

TEST_CASE("batches: bad sizes and outputs are refused naming the sizes", "[docs][batch]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(100);

  CHECK_THROWS_WITH(cuscope::batches(stream, data, 0, pool),
                    cuscope::test::contains("batch size must be at least 1"));
  cuscope::batch_options o;
  o.depth = 0;
  CHECK_THROWS_WITH(cuscope::batches(stream, data, 10, pool, o),
                    cuscope::test::contains("depth must be at least 1"));
  o = {};
  o.min_batch = 0;
  CHECK_THROWS_WITH(cuscope::batches(stream, data, 10, pool, o),
                    cuscope::test::contains("min_batch must be at least 1"));
  o = {};
  o.depth = 0;
  CHECK_THROWS_AS(cuscope::batches(stream, data, 10, pool, o), std::invalid_argument);
  o = {};
  o.sample_elements = 3;  // 100 elements are not a whole number of 3-element samples
  try {
    auto range = cuscope::batches(stream, data, 10, pool, o);
    FAIL("a source of 33.3 samples was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), cuscope::test::contains("a source of 100 elements"));
    CHECK_THAT(e.what(), cuscope::test::contains("sample_elements = 3"));
  }
  u32_vector small(9);  // 10 batches of 10 need 10 results
  try {
    auto range = cuscope::batches(stream, data, 10, pool, cuscope::output_per_batch(small, 1));
    FAIL("a host output too small was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), cuscope::test::contains("a host output of 9 elements"));
    CHECK_THAT(e.what(), cuscope::test::contains("10 batches of 10 samples"));
  }
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("batches: staging from a pinned_memory_pool, and a range moved mid-loop",
          "[docs][batch]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(8000);

  if (cuscope::pinned_memory_pool::supported(0)) {
    cuscope::pinned_memory_pool staging;
    cuscope::batch_options o;
    o.staging_pool = staging.ref();
    auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
    {
      auto range = cuscope::batches(stream, data, 1000, pool, o);
      CHECK(range.pinned_bytes() == 2 * 1000 * sizeof(std::uint32_t));
      CHECK(staging.stats().used_bytes >= range.pinned_bytes());
      for (const auto& b : range)
        gather(b, all);
    }
    CHECK(staging.stats().used_bytes == 0);
    CHECK(all.to_vector(stream) == data);
  }

  // Iterators refer to the pipeline, not to the range object: a move keeps them going.
  auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
  auto first = cuscope::batches(stream, data, 1000, pool);
  auto it = first.begin();
  gather(*it, all);
  ++it;
  auto second = std::move(first);
  CHECK(first.finished());  // NOLINT(bugprone-use-after-move): the documented moved-from state
  CHECK(first.begin() == first.end());
  CHECK(first.batch_count() == 0);
  std::size_t n = 1;
  for (; it != second.end(); ++it, ++n)
    gather(*it, all);
  CHECK(n == 8);
  CHECK(all.to_vector(stream) == data);
}

TEST_CASE(
    "batches: the examples of docs/batch.md, 17 floats per sample, results per batch and "
    "per sample",
    "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  constexpr std::size_t samples = 2000;  // 3 batches of 512 and one of 464
  std::vector<float> data(samples * 17);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<float>(i % 9973) * 0.5f;

  cuscope::batch_options options;
  options.sample_elements = 17;  // a batch never splits a sample

  // What the "kernels" write: a loss per batch and a label per sample, prepared on the device in
  // a pool of their own, so that the sessions' pool holds only what the epochs allocate.
  cuscope::memory_pool model;
  std::vector<float> expected_losses = {0.25f, 0.5f, 0.75f, 1.0f};
  std::vector<int> expected_labels(samples);
  for (std::size_t i = 0; i < samples; ++i)
    expected_labels[i] = static_cast<int>(i * 7 % 10);
  const cuscope::device_buffer<float> losses_dev(stream, expected_losses, model);
  const cuscope::device_buffer<int> labels_dev(stream, expected_labels, model);

  for (int epoch = 0; epoch < 2; ++epoch) {
    cuscope::session_options o;
    o.name = "epoch " + std::to_string(epoch);
    o.budget_bytes = 1ull << 30;
    cuscope::session s(pool, stream, o);
    auto all = s.make_buffer<float>(data.size(), "gathered");

    std::vector<float> losses(4, -1.0f);  // one per batch
    for (const auto& b :
         cuscope::batches(s, data, 512, cuscope::output_per_batch(losses, 1), options)) {
      CHECK(b.samples() == (b.index() < 3 ? 512 : 464));
      gather(b, all);
      REQUIRE(b.output().size() == 1);
      REQUIRE(cudaMemcpyAsync(b.output().data(), losses_dev.data() + b.index(), sizeof(float),
                              cudaMemcpyDeviceToDevice, b.stream()) == cudaSuccess);
    }
    CHECK(losses == expected_losses);  // complete here
    CHECK(all.to_vector(stream) == data);

    std::vector<int> labels(samples, -1);  // one per sample
    for (const auto& b :
         cuscope::batches(s, data, 512, cuscope::output_per_sample(labels, 1), options)) {
      REQUIRE(b.output().size() == b.samples());
      REQUIRE(cudaMemcpyAsync(b.output().data(), labels_dev.data() + b.first_sample(),
                              b.output().size_bytes(), cudaMemcpyDeviceToDevice,
                              b.stream()) == cudaSuccess);
    }
    CHECK(labels == expected_labels);
    all = cuscope::device_buffer<float>();
    const cuscope::session_report& r = s.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == r.frees);
    CHECK(r.returned_bytes > 0);  // the batches' memory
    CHECK(r.reserved_at_exit_bytes == 0);
  }
}

TEST_CASE("batches: a range that outlives its session's end is that session's leak",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(1000);
  auto all = cuscope::device_buffer<std::uint32_t>(stream, data.size(), pool);
  stream.synchronize();
  const std::size_t used_before = pool.stats().used_bytes;

  std::vector<cuscope::session_report> leaks;
  cuscope::session_options so;
  so.name = "short epoch";
  so.leak_sink = [&](const cuscope::session_report& r) { leaks.push_back(r); };
  cuscope::session s(pool, stream, so);
  auto range = cuscope::batches(s, data, 100);
  auto it = range.begin();
  gather(*it, all);
  const auto was = it++;  // as ++it, returning the batch it was on
  CHECK(was.index() == 0);
  CHECK(it->index() == 1);

  const cuscope::session_report& r = s.finish();  // the range still holds its buffers
  INFO(r.to_string());
  CHECK(r.leaked());
  CHECK(r.leaked_bytes == range.device_bytes());
  CHECK(r.leaked_allocations == r.allocations);
  // The pool's rounding of the range's buffers is theirs, not a second, untracked leak.
  CHECK(r.untracked_bytes == 0);
  CHECK_FALSE(r.untracked_leak);
  REQUIRE(leaks.size() == 1);
  CHECK(leaks[0].leaked_bytes == range.device_bytes());
  CHECK_THROWS_AS(cuscope::batches(s, data, 100), std::logic_error);  // a finished session

  // The range goes on and is freed later, without its session.
  for (; it != range.end(); ++it)
    gather(*it, all);
  { const auto gone = std::move(range); }
  CHECK(all.to_vector(stream) == data);
  stream.synchronize();
  CHECK(pool.stats().used_bytes == used_before);
}

TEST_CASE("batches: a per-batch output sized for the requested batch no longer fits once adapted",
          "[docs][batch][session]") {
  cuscope::test::device_guard device;
  cuscope::memory_pool pool;
  cuscope::stream stream;
  const u32_vector data = make_data(4000);
  cuscope::batch_options options;
  options.adapt_to_memory = true;
  cuscope::session_options so;
  so.name = "tight";
  so.budget_bytes = 6 * 1024;  // two slots of 1000 x 4 B (and results) do not fit; 500 do
  cuscope::session s(pool, stream, so);
  u32_vector sized_for_1000(4);  // 4 batches of 1000
  try {
    auto range =
        cuscope::batches(s, data, 1000, cuscope::output_per_batch(sized_for_1000, 1), options);
    FAIL("an output too small for the adapted batch count was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), cuscope::test::contains("a host output of 4 elements"));
    CHECK_THAT(e.what(), cuscope::test::contains("8 batches of 500 samples"));
  }
  CHECK(s.live_bytes() == 0);
  u32_vector sized_for_min(4000);  // enough at min_batch = 1
  std::size_t batches_seen = 0;
  {
    auto range =
        cuscope::batches(s, data, 1000, cuscope::output_per_batch(sized_for_min, 1), options);
    CHECK(range.adapted());
    CHECK(range.batch_size() == 500);
    for (const auto& b : range) {
      first_element(b);
      ++batches_seen;
    }
    CHECK(batches_seen == range.batch_count());
    for (std::size_t k = 0; k < range.batch_count(); ++k)
      CHECK(sized_for_min[k] == data[k * range.batch_size()]);
  }
  const cuscope::session_report& r = s.finish();
  INFO(r.to_string());
  CHECK_FALSE(r.leaked());
  CHECK(r.allocations == r.frees);
}
