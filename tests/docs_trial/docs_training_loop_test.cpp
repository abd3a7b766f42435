// SPDX-License-Identifier: Apache-2.0
// A training loop as README.md, docs/concepts.md and docs/batch.md describe it: one pool with a
// limit and a release threshold, a session per epoch with a budget, batches staging host data
// through the session, and each epoch's report checked.
#include <cuscope/cuscope.hpp>

#include <cuda_runtime_api.h>

#include <stdlib.h>  // setenv

#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

}  // namespace

TEST_CASE("training loop: a session per epoch over batches staged from host data",
          "[docs][session][batch]") {
  cuscope::test::device_guard device;

  // The limit as a fraction of the device's memory, from the environment where the operator set
  // it; the release threshold keeps the cache across synchronizations.
  cuscope::pool_options defaults;
  defaults.max_bytes = 128 * MiB;
  defaults.release_threshold_bytes = 64 * MiB;
  REQUIRE(::setenv("CUSCOPE_TRAINING_MAX_BYTES", "6.25%", 1) == 0);
  const cuscope::pool_options po = cuscope::pool_options::from_env("training", defaults);
  REQUIRE(::unsetenv("CUSCOPE_TRAINING_MAX_BYTES") == 0);
  CHECK(po.max_bytes == 256 * MiB);  // of the simulated device's 4 GiB
  CHECK(po.name == "training");
  CHECK_THAT(po.origin, cuscope::test::contains("CUSCOPE_TRAINING_MAX_BYTES"));
  cuscope::memory_pool pool(po);
  cuscope::stream stream;
  CHECK(pool.release_threshold() == 64 * MiB);

  constexpr std::size_t sample = 16;  // floats per sample
  constexpr std::size_t samples = 10000;
  constexpr std::size_t batch = 512;
  constexpr std::size_t batch_count = (samples + batch - 1) / batch;
  std::vector<float> data(samples * sample);
  std::iota(data.begin(), data.end(), 0.0f);

  cuscope::batch_options options;
  options.sample_elements = sample;

  for (int e = 0; e < 3; ++e) {
    cuscope::session_options so;
    so.name = "epoch " + std::to_string(e);
    so.budget_bytes = 4 * MiB;
    cuscope::session epoch(pool, stream, so);

    std::vector<float> first(batch_count);  // each batch's first element, as the device saw it
    std::size_t steps = 0;
    std::size_t staged = 0;
    {
      auto range =
          cuscope::batches(epoch, data, batch, cuscope::output_per_batch(first, 1), options);
      staged = range.device_bytes();
      for (const auto& b : range) {
        auto activations = epoch.make_buffer<float>(b.size(), "activations");
        REQUIRE(cudaMemcpyAsync(activations.data(), b.span().data(), b.size() * sizeof(float),
                                cudaMemcpyDeviceToDevice, b.stream()) == cudaSuccess);
        REQUIRE(cudaMemcpyAsync(b.output().data(), activations.data(), sizeof(float),
                                cudaMemcpyDeviceToDevice, b.stream()) == cudaSuccess);
        ++steps;
      }
    }
    const cuscope::session_report& r = epoch.finish();
    INFO(r.to_string());

    CHECK(steps == batch_count);
    for (std::size_t k = 0; k < batch_count; ++k)
      CHECK(first[k] == data[k * batch * sample]);

    CHECK(r.complete());
    CHECK_FALSE(r.leaked());
    CHECK(r.leaked_allocations == 0);
    CHECK(r.leaks.empty());
    CHECK(r.allocations > steps);  // the range's buffers and one activation per step
    CHECK(r.frees == r.allocations);
    CHECK(r.budget_refusals == 0);
    CHECK(r.pool_refusals == 0);
    // The range's buffers and one full batch of activations, counted exactly under a budget.
    CHECK(staged > 0);
    CHECK(r.tracked_peak_bytes == staged + batch * sample * sizeof(float));
    CHECK_FALSE(r.tracked_peak_upper_bound);
    CHECK(r.tracked_peak_bytes <= so.budget_bytes);
    CHECK_FALSE(r.synchronized_device);
    // The threshold kept the epoch's reserve across synchronizations; the end trimmed it back.
    CHECK(r.trimmed);
    CHECK(r.returned_bytes > 0);
    CHECK(r.reserved_at_entry_bytes == 0);
    CHECK(r.reserved_at_exit_bytes == r.reserved_at_entry_bytes);
    CHECK(r.returned_bytes == r.reserved_at_finish_bytes - r.reserved_at_exit_bytes);
    CHECK(pool.stats().reserved_bytes == 0);
    CHECK(pool.stats().used_bytes == 0);
  }

  // Outside a session, the cache stays until emptied.
  { cuscope::device_buffer<float> eval(stream, MiB, pool); }
  CHECK(pool.stats().reserved_bytes > 0);
  CHECK(cuscope::empty_cache(pool) > 0);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("training loop: a budget too small for the batch halves it", "[docs][session][batch]") {
  cuscope::test::device_guard device;
  cuscope::pool_options po;
  po.max_bytes = 256 * MiB;
  po.release_threshold_bytes = 64 * MiB;
  cuscope::memory_pool pool(po);
  cuscope::stream stream;

  std::vector<float> data(4096 * 16, 1.0f);
  cuscope::batch_options options;
  options.sample_elements = 16;
  options.adapt_to_memory = true;

  cuscope::session_options so;
  so.name = "small epoch";
  so.budget_bytes = 48 * KiB;  // two slots of 512 samples x 64 B would need 64 KiB alone
  cuscope::session epoch(pool, stream, so);
  std::size_t seen = 0;
  {
    auto range = cuscope::batches(epoch, data, 512, options);
    CHECK(range.adapted());
    CHECK(range.batch_size() < 512);
    CHECK(range.requested_batch_size() == 512);
    for (const auto& b : range) {
      auto scratch = epoch.make_buffer<float>(b.size(), "scratch");
      seen += b.samples();
    }
  }
  const cuscope::session_report& r = epoch.finish();
  INFO(r.to_string());
  CHECK(seen == 4096);
  CHECK(r.budget_refusals >= 1);
  CHECK(r.pool_refusals == 0);
  CHECK(r.tracked_peak_bytes <= so.budget_bytes);
  CHECK_FALSE(r.leaked());

  // Without adapt_to_memory the range's buffers over the budget are an out_of_memory from
  // batches(), with status cudaSuccess: CUDA was not asked.
  cuscope::session tight(pool, stream, so);
  options.adapt_to_memory = false;
  try {
    auto range = cuscope::batches(tight, data, 4096, options);
    FAIL("batches() over the session's budget did not throw");
  } catch (const cuscope::out_of_memory& e) {
    CHECK(e.status() == cudaSuccess);
    CHECK_THAT(e.what(), cuscope::test::contains("small epoch"));
  }
  const cuscope::session_report& t = tight.finish();
  CHECK(t.budget_refusals == 1);
  CHECK(t.allocations == t.frees);
  CHECK_FALSE(t.leaked());
}
