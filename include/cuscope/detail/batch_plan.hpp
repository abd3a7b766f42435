// SPDX-License-Identifier: Apache-2.0
// How a batch range cuts its source: batch size and count, where the results of each batch go in
// the host output, and how the batch shrinks when the memory is short. Plain arithmetic, no CUDA.
#pragma once

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "config.hpp"
#include "format.hpp"

namespace cuscope::detail {

class ledger;

/// The options of batches() that the pipeline needs (batch_options, without the public type).
struct batch_config {
  std::size_t depth = 2;
  std::size_t sample_elements = 1;
  bool adapt_to_memory = false;
  std::size_t min_batch = 1;
  ledger* accounting = nullptr;          // the session that counts the buffers, if any
  cudaMemPool_t staging_pool = nullptr;  // page-locked staging from this pool, else cudaHostAlloc
  int staging_device = 0;
};

/// Where the results go: count elements at data, per_sample per sample or per_batch per batch.
struct batch_out_spec {
  std::size_t size = 0;
  std::size_t per_sample = 0;
  std::size_t per_batch = 0;
};

/// The cut of a source into batches, validated at construction.
class batch_plan {
 public:
  batch_plan() noexcept = default;

  /// Validates the request and cuts elements into batches of batch_size samples.
  /// Throws std::invalid_argument naming what is wrong.
  batch_plan(std::size_t elements, std::size_t batch_size, const batch_config& c, bool has_source,
             const batch_out_spec* out);

  std::size_t requested() const noexcept { return requested_; }
  std::size_t batch_size() const noexcept { return batch_size_; }
  std::size_t batch_count() const noexcept { return batch_count_; }
  std::size_t samples() const noexcept { return samples_; }
  std::size_t sample_elements() const noexcept { return sample_elements_; }

  /// Samples in batch k (the last one may be short).
  std::size_t samples_in(std::size_t k) const noexcept;
  /// The largest batch, in samples: what a slot's buffers hold.
  std::size_t largest() const noexcept { return batch_size_ < samples_ ? batch_size_ : samples_; }
  /// Elements of the largest batch; throws std::length_error when they overflow.
  std::size_t largest_elements() const;

  /// Result elements of a batch of samples samples, and where those of batch k go.
  std::size_t out_count(std::size_t samples) const noexcept;
  std::size_t out_offset(std::size_t k) const noexcept;

  /// The smallest batch that shrinking may reach: min_batch, or the largest batch if smaller.
  std::size_t floor(std::size_t min_batch) const noexcept;
  /// Whether the batch can still shrink toward min_batch.
  bool can_shrink(std::size_t min_batch) const noexcept { return largest() > floor(min_batch); }
  /// Halves the batch, not below the floor; re-checks that the output holds the new cut.
  void shrink(std::size_t min_batch);

 private:
  std::size_t count_batches(std::size_t batch) const noexcept;

  void check_output() const;

  std::size_t requested_ = 0;
  std::size_t batch_size_ = 0;
  std::size_t batch_count_ = 0;
  std::size_t samples_ = 0;
  std::size_t sample_elements_ = 1;
  batch_out_spec out_{};
};

}  // namespace cuscope::detail

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope::detail {

inline batch_plan::batch_plan(std::size_t elements, std::size_t batch_size, const batch_config& c,
                              bool has_source, const batch_out_spec* out)
    : requested_(batch_size), batch_size_(batch_size), sample_elements_(c.sample_elements) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("cuscope::batches: " + what);
  };
  if (batch_size == 0) fail("the batch size must be at least 1 sample");
  if (c.depth == 0) fail("depth must be at least 1");
  if (c.sample_elements == 0) fail("sample_elements must be at least 1");
  if (c.min_batch == 0) fail("min_batch must be at least 1 sample");
  if (elements % c.sample_elements != 0)
    fail("a source of " + format_count(elements, "element") +
         " is not a whole number of samples of sample_elements = " +
         format_count(c.sample_elements, "element"));
  if (!has_source && elements != 0) fail("null source of " + format_count(elements, "element"));
  samples_ = elements / c.sample_elements;
  if (out != nullptr) {
    out_ = *out;
    check_output();
  }
  batch_count_ = count_batches(batch_size_);
}

inline std::size_t batch_plan::samples_in(std::size_t k) const noexcept {
  const std::size_t first = k * batch_size_;
  return samples_ - first < batch_size_ ? samples_ - first : batch_size_;
}

inline std::size_t batch_plan::largest_elements() const {
  if (largest() > std::numeric_limits<std::size_t>::max() / sample_elements_)
    throw std::length_error("cuscope::batches: a batch of " + std::to_string(largest()) +
                            " samples of " + std::to_string(sample_elements_) +
                            " elements overflows the element count");
  return largest() * sample_elements_;
}

inline std::size_t batch_plan::out_count(std::size_t samples) const noexcept {
  return out_.per_batch != 0 ? out_.per_batch : samples * out_.per_sample;
}

inline std::size_t batch_plan::out_offset(std::size_t k) const noexcept {
  return out_.per_batch != 0 ? k * out_.per_batch : k * batch_size_ * out_.per_sample;
}

inline std::size_t batch_plan::floor(std::size_t min_batch) const noexcept {
  return min_batch < largest() ? min_batch : largest();
}

inline void batch_plan::shrink(std::size_t min_batch) {
  const std::size_t low = floor(min_batch);
  batch_size_ = largest() / 2 > low ? largest() / 2 : low;
  batch_count_ = count_batches(batch_size_);
  if (out_.per_batch != 0) check_output();
}

inline std::size_t batch_plan::count_batches(std::size_t batch) const noexcept {
  return samples_ / batch + (samples_ % batch != 0 ? 1 : 0);
}

inline void batch_plan::check_output() const {
  const std::size_t units = out_.per_batch != 0 ? count_batches(batch_size_) : samples_;
  const std::size_t per = out_.per_batch != 0 ? out_.per_batch : out_.per_sample;  // >= 1
  // Compared by division: a product that wraps around would let a short output through.
  if (units > out_.size / per)
    throw std::invalid_argument("cuscope::batches: a host output of " +
                                format_count(out_.size, "element") + " cannot hold the results: " +
                                (out_.per_batch != 0
                                     ? format_count(units, "batch", "batches") + " of " +
                                           format_count(batch_size_, "sample")
                                     : format_count(units, "sample")) +
                                " x " + format_count(per, "element") + " = " +
                                (units > std::numeric_limits<std::size_t>::max() / per
                                     ? std::string("more than a size_t holds")
                                     : std::to_string(units * per)));
}

}  // namespace cuscope::detail
#endif  // CUSCOPE_DETAIL_HOST_CODE
