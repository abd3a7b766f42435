// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Batch iterators: batches() stages a host dataset to the device batch by batch, the
/// copies of the next batches overlapping the work on the current one, and can copy a result per
/// batch back into a host output.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "device.hpp"
#include "device_buffer.hpp"
#include "device_span.hpp"
#include "error.hpp"
#include "event.hpp"
#include "memory_pool.hpp"
#include "pinned_buffer.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief How batches() cuts and stages its source.
struct batch_options {
  /// @brief Batches in flight: staging and device buffers of this many batches (at least 1). With
  /// 2, batch k+1 is copied while batch k is worked on.
  std::size_t depth = 2;
  /// @brief Elements per sample. batch_size counts samples, so a batch never splits one; the
  /// source must hold a whole number of samples.
  std::size_t sample_elements = 1;
  /// @brief When the buffers do not fit: synchronize the device, trim the pool and retry, then
  /// halve the batch size down to min_batch. The size used is batch_range::batch_size().
  bool adapt_to_memory = false;
  /// @brief The smallest batch size, in samples, that adapt_to_memory may choose (at least 1).
  std::size_t min_batch = 1;
};

/// @brief A source of samples that a callback writes into page-locked staging memory, for data
/// read from files or decoders. Make one with from_producer().
template <class T>
struct producer_source {
  /// @brief Total number of samples.
  std::size_t samples = 0;
  /// @brief Called on the iterating thread as fill(first_sample, samples, out): writes samples
  /// samples (samples x batch_options::sample_elements elements) to out, page-locked memory.
  std::function<void(std::size_t, std::size_t, T*)> fill;
};

/// @brief A producer of samples samples of T; fill(first_sample, count, T* out) writes count
/// samples starting at first_sample to out.
template <class T, class F>
[[nodiscard]] producer_source<T> from_producer(std::size_t samples, F&& fill) {
  static_assert(std::is_invocable_v<F&, std::size_t, std::size_t, T*>,
                "from_producer: fill must be callable as fill(first_sample, samples, T* out)");
  return producer_source<T>{samples, std::forward<F>(fill)};
}

/// @brief Where the results of batches go on the host: a range of host memory and how many
/// result elements each sample (or each batch) has. Make one with output_per_sample() or
/// output_per_batch().
template <class U>
class batch_output {
  static_assert(std::is_trivially_copyable_v<U>, "batch_output<U> needs a trivially copyable U");
  static_assert(!std::is_const_v<U>, "batch_output<U> is written to: U cannot be const");

 public:
  /// @brief Results of elements_per_sample elements per sample, in sample order: the results of
  /// sample i are at data[i * elements_per_sample]. data holds count elements.
  /// @throws std::invalid_argument when elements_per_sample is 0 or data is null with count > 0.
  [[nodiscard]] static batch_output per_sample(U* data, std::size_t count,
                                               std::size_t elements_per_sample) {
    return batch_output(data, count, elements_per_sample, 0);
  }
  /// @brief Results of elements_per_batch elements per batch: those of batch k are at
  /// data[k * elements_per_batch]. data holds count elements.
  /// @throws std::invalid_argument when elements_per_batch is 0 or data is null with count > 0.
  [[nodiscard]] static batch_output per_batch(U* data, std::size_t count,
                                              std::size_t elements_per_batch) {
    return batch_output(data, count, 0, elements_per_batch);
  }

  /// @brief The host memory.
  [[nodiscard]] U* data() const noexcept { return data_; }
  /// @brief Its number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// @brief Result elements per sample; 0 for results per batch.
  [[nodiscard]] std::size_t elements_per_sample() const noexcept { return per_sample_; }
  /// @brief Result elements per batch; 0 for results per sample.
  [[nodiscard]] std::size_t elements_per_batch() const noexcept { return per_batch_; }

 private:
  batch_output(U* data, std::size_t count, std::size_t per_sample, std::size_t per_batch)
      : data_(data), size_(count), per_sample_(per_sample), per_batch_(per_batch) {
    if (per_sample == 0 && per_batch == 0)
      throw std::invalid_argument(
          "cuscope::batch_output: results need at least one element per sample or per batch");
    if (data == nullptr && count != 0)
      throw std::invalid_argument("cuscope::batch_output: null host output of " +
                                  std::to_string(count) + " elements");
  }

  U* data_;
  std::size_t size_;
  std::size_t per_sample_;
  std::size_t per_batch_;
};

namespace detail {

// The element type of a contiguous range; also the type that names a writable one.
template <class R>
using range_value_t = std::remove_pointer_t<decltype(std::declval<R&>().data())>;

struct batch_access;

template <class R, class = void>
struct is_contiguous_range : std::false_type {};
template <class R>
struct is_contiguous_range<
    R, std::void_t<decltype(std::declval<R&>().data()), decltype(std::declval<R&>().size())>>
    : std::is_pointer<decltype(std::declval<R&>().data())> {};

}  // namespace detail

/// @brief Results per sample into host (a contiguous container, written when results arrive).
template <class Range, std::enable_if_t<detail::is_contiguous_range<Range>::value, int> = 0>
[[nodiscard]] auto output_per_sample(Range& host, std::size_t elements_per_sample) {
  using U = detail::range_value_t<Range>;
  static_assert(!std::is_const_v<U>, "output_per_sample: the host output must be writable");
  return batch_output<U>::per_sample(host.data(), static_cast<std::size_t>(host.size()),
                                     elements_per_sample);
}
/// @brief Deleted: the temporary would be gone before the results arrive.
template <class Range, std::enable_if_t<detail::is_contiguous_range<Range>::value &&
                                            !std::is_lvalue_reference_v<Range>,
                                        int> = 0>
auto output_per_sample(Range&& host, std::size_t elements_per_sample) = delete;
/// @brief Results per sample into count elements at data.
template <class U>
[[nodiscard]] batch_output<U> output_per_sample(U* data, std::size_t count,
                                                std::size_t elements_per_sample) {
  return batch_output<U>::per_sample(data, count, elements_per_sample);
}

/// @brief Results per batch into host (a contiguous container, written when results arrive).
template <class Range, std::enable_if_t<detail::is_contiguous_range<Range>::value, int> = 0>
[[nodiscard]] auto output_per_batch(Range& host, std::size_t elements_per_batch) {
  using U = detail::range_value_t<Range>;
  static_assert(!std::is_const_v<U>, "output_per_batch: the host output must be writable");
  return batch_output<U>::per_batch(host.data(), static_cast<std::size_t>(host.size()),
                                    elements_per_batch);
}
/// @brief Deleted: the temporary would be gone before the results arrive.
template <class Range, std::enable_if_t<detail::is_contiguous_range<Range>::value &&
                                            !std::is_lvalue_reference_v<Range>,
                                        int> = 0>
auto output_per_batch(Range&& host, std::size_t elements_per_batch) = delete;
/// @brief Results per batch into count elements at data.
template <class U>
[[nodiscard]] batch_output<U> output_per_batch(U* data, std::size_t count,
                                               std::size_t elements_per_batch) {
  return batch_output<U>::per_batch(data, count, elements_per_batch);
}

template <class T, class Out>
class batch_range;

/// @brief One batch, as the loop body sees it: a view of its elements in device memory, where
/// they came from, and (with an output) the device memory for its results. Trivially copyable.
///
/// The elements are ready in stream order on stream(): work enqueued there may read them, and
/// write output(), until the iterator advances.
template <class T, class Out = void>
class batch {
  using out_t = std::conditional_t<std::is_void_v<Out>, unsigned char, Out>;

 public:
  /// @brief An empty batch.
  batch() noexcept = default;

  /// @brief The batch's elements on the device, read-only.
  [[nodiscard]] device_span<const T> span() const noexcept { return {data_, size_}; }
  /// @brief Position of the batch: 0 for the first.
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  /// @brief Position of the first element in the source, in elements.
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }
  /// @brief Number of elements (samples() x sample_elements; the last batch may be short).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// @brief Position of the first sample in the source.
  [[nodiscard]] std::size_t first_sample() const noexcept { return first_sample_; }
  /// @brief Number of samples.
  [[nodiscard]] std::size_t samples() const noexcept { return samples_; }
  /// @brief The stream on which the elements are ready: the stream given to batches().
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief Device memory for the batch's results, to be written in stream order on stream();
  /// the range copies it to its place in the host output after the iterator advances.
  template <class O = Out, std::enable_if_t<!std::is_void_v<O>, int> = 0>
  [[nodiscard]] device_span<O> output() const noexcept {
    return {out_, out_size_};
  }

 private:
  friend class batch_range<T, Out>;

  const T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;
  std::size_t first_sample_ = 0;
  std::size_t samples_ = 0;
  cudaStream_t stream_ = nullptr;
  out_t* out_ = nullptr;
  std::size_t out_size_ = 0;
};

namespace detail {

/// Whether count elements at p can be copied without staging: page-locked host memory, device
/// or managed memory.
inline bool is_dma_ready(const void* p, std::size_t bytes) noexcept {
  if (p == nullptr || bytes == 0) return false;
  const auto ready = [](const void* q) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, q) != cudaSuccess) {
      (void)cudaGetLastError();  // older runtimes fail for pageable memory
      return false;
    }
    return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeDevice ||
           a.type == cudaMemoryTypeManaged;
  };
  return ready(p) && ready(static_cast<const unsigned char*>(p) + (bytes - 1));
}

}  // namespace detail

/// @brief The range batches() returns: a single-pass (input) range of batch<T, Out> that owns
/// its copy streams, events, page-locked staging and device buffers.
///
/// The buffers (depth of each, for one batch) are allocated when the range is made; begin()
/// starts copying the first depth batches. Batch k is handed out once the user's stream waits for
/// its copy; advancing past it records an event on the user's stream after which its device
/// buffer may be refilled (and its results copied back). Move-only; moving invalidates iterators.
/// Destruction never throws: it orders the release after every copy and after the work enqueued
/// so far on the user's stream, waits for the range's own streams (and so for that work), and
/// frees everything, also in the middle of the iteration or while an exception unwinds from the
/// loop body. The user's stream must belong to the pool's device.
template <class T, class Out = void>
class batch_range {
  static_assert(std::is_trivially_copyable_v<T>, "batches of T need a trivially copyable T");
  using out_t = std::conditional_t<std::is_void_v<Out>, unsigned char, Out>;
  static constexpr bool has_output = !std::is_void_v<Out>;
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

 public:
  /// @brief What iterating yields.
  using value_type = batch<T, Out>;

  /// @brief An input iterator over the batches; advancing it hands the previous batch back.
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;  ///< Single pass.
    using value_type = batch<T, Out>;                   ///< The batch view.
    using difference_type = std::ptrdiff_t;             ///< Distances.
    using pointer = const value_type*;                  ///< Pointer to the batch.
    using reference = const value_type&;                ///< Reference to the batch.

    /// @brief The end iterator.
    iterator() noexcept = default;
    /// @brief The current batch.
    reference operator*() const noexcept { return range_->view_; }
    /// @brief The current batch.
    pointer operator->() const noexcept { return &range_->view_; }
    /// @brief Hands the current batch back and moves to the next one (see batch_range).
    iterator& operator++() {
      range_->advance();
      return *this;
    }
    /// @brief As ++it, returning the batch it was on.
    value_type operator++(int) {
      value_type previous = range_->view_;
      range_->advance();
      return previous;
    }
    /// @brief True when both are at the end, or neither is.
    friend bool operator==(const iterator& a, const iterator& b) noexcept {
      return a.at_end() == b.at_end();
    }
    /// @brief Negation of ==.
    friend bool operator!=(const iterator& a, const iterator& b) noexcept { return !(a == b); }

   private:
    friend class batch_range;
    explicit iterator(batch_range* range) noexcept : range_(range) {}
    bool at_end() const noexcept { return range_ == nullptr || range_->done_; }
    batch_range* range_ = nullptr;
  };

  batch_range(const batch_range&) = delete;
  batch_range& operator=(const batch_range&) = delete;

  /// @brief Takes over other's buffers, streams and position; other becomes empty.
  batch_range(batch_range&& other) noexcept : pool_(other.pool_) { take(other); }
  /// @brief Releases this range's resources (as the destructor does), then takes over other's.
  batch_range& operator=(batch_range&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }

  /// @brief Finishes the results (unless an exception is unwinding), then releases everything
  /// after the copies and the user's work so far; never throws.
  ~batch_range() { release(); }

  /// @brief Starts the copies of the first batches (on the first call) and returns an iterator
  /// on the current batch. Enqueued; does not synchronize.
  /// @throws cuda_error; whatever a producer throws.
  [[nodiscard]] iterator begin() {
    if (!started_) {
      started_ = true;
      guarded([&] { start(); });
    }
    return iterator(this);
  }
  /// @brief The end iterator.
  [[nodiscard]] iterator end() noexcept { return iterator(); }

  /// @brief Ends the iteration early or confirms its end: the current batch counts as processed,
  /// and every result of the batches handed out is copied into the host output. With an output,
  /// blocks until their work on the user's stream has completed; without one, does not block.
  /// A second call does nothing.
  /// @throws cuda_error; std::logic_error after an iteration step failed.
  void finish() {
    if (finished_) return;
    if (failed_)
      throw std::logic_error("cuscope::batches: finish() after a failed step of the iteration");
    guarded([&] {
      if (started_ && !done_) {
        done_ = true;
        hand_back(current_);
      }
      done_ = true;
      drain_all();
      finished_ = true;
    });
  }

  /// @brief Batch size in samples: the one asked for, or the smaller one that adapt_to_memory
  /// chose.
  [[nodiscard]] std::size_t batch_size() const noexcept { return batch_size_; }
  /// @brief The batch size asked for.
  [[nodiscard]] std::size_t requested_batch_size() const noexcept { return requested_; }
  /// @brief True when adapt_to_memory made the batch size smaller than asked.
  [[nodiscard]] bool adapted() const noexcept { return batch_size_ < requested_; }
  /// @brief Number of batches.
  [[nodiscard]] std::size_t batch_count() const noexcept { return batch_count_; }
  /// @brief Number of samples in the source.
  [[nodiscard]] std::size_t sample_count() const noexcept { return samples_; }
  /// @brief Elements per sample.
  [[nodiscard]] std::size_t sample_elements() const noexcept { return sample_elements_; }
  /// @brief Batches in flight: depth buffers of each kind, fewer for fewer batches.
  [[nodiscard]] std::size_t depth() const noexcept { return slots_.size(); }
  /// @brief The user's stream.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief Whether the source is copied straight from its memory (page-locked or device),
  /// without a staging copy.
  [[nodiscard]] bool direct() const noexcept { return kind_ == source_kind::direct; }
  /// @brief Device memory the range holds from the pool: depth x (batch + results) bytes.
  [[nodiscard]] std::size_t device_bytes() const noexcept {
    std::size_t n = 0;
    for (const slot& s : slots_)
      n += s.in.size_bytes() + s.out.size_bytes();
    return n;
  }
  /// @brief Page-locked host memory the range holds for staging batches and results.
  [[nodiscard]] std::size_t pinned_bytes() const noexcept {
    std::size_t n = 0;
    for (const slot& s : slots_)
      n += s.staging.size_bytes() + s.out_staging.size_bytes();
    return n;
  }
  /// @brief Whether finish() has run, or the iteration reached its end.
  [[nodiscard]] bool finished() const noexcept { return finished_; }

 private:
  enum class source_kind { staged, direct, produced };

  // Everything one batch in flight needs. Batch k uses slot k % depth. Made with the pool's
  // device current: the events are that device's.
  struct slot {
    device_buffer<T> in;                // the batch on the device
    pinned_buffer<T> staging;           // its page-locked copy (not for direct sources)
    device_buffer<out_t> out;           // its results on the device
    pinned_buffer<out_t> out_staging;   // their page-locked copy
    event loaded;                       // copy stream: the batch is on the device
    event consumed;                     // user's stream: the work on the batch is done
    std::optional<event> unloaded;      // results stream: the results are in out_staging
    bool was_loaded = false;            // loaded has been recorded
    bool was_consumed = false;          // consumed has been recorded
    bool was_unloaded = false;          // unloaded has been recorded
    std::size_t pending_result = none;  // batch whose results wait in out_staging
  };

  friend struct detail::batch_access;

  batch_range(stream_ref stream, const T* host, std::size_t elements,
              std::function<void(std::size_t, std::size_t, T*)> produce, std::size_t batch_size,
              memory_pool_ref pool, const batch_options& options, const batch_output<Out>* output)
      : stream_(stream.get()),
        pool_(pool),
        host_(host),
        produce_(std::move(produce)),
        requested_(batch_size),
        batch_size_(batch_size),
        sample_elements_(options.sample_elements),
        exceptions_at_entry_(std::uncaught_exceptions()) {
    validate(elements, options);
    samples_ = elements / sample_elements_;
    if constexpr (has_output) {
      out_data_ = output->data();
      out_size_ = output->size();
      out_per_sample_ = output->elements_per_sample();
      out_per_batch_ = output->elements_per_batch();
      check_output();
    } else {
      (void)output;
    }
    batch_count_ = count_batches(batch_size_);
    if (batch_count_ == 0) return;  // nothing to stage: no stream, no buffer
    // The events are the pool's device's, and an event is recorded only on a stream of its own
    // device: refused here rather than at the first step of the loop.
    // A default stream handle names the default stream of whatever device is current when the
    // range uses it, so that device must be the pool's.
    const int stream_device = detail::is_default_stream(stream.get())
                                  ? current_device()
                                  : detail::stream_device(stream, pool_.device());
    if (stream_device != pool_.device())
      throw std::invalid_argument("cuscope::batches: " + stream.describe() + " belongs to device " +
                                  std::to_string(stream_device) + ", not to device " +
                                  std::to_string(pool_.device()) + " of the pool");
    if (produce_) {
      kind_ = source_kind::produced;
    } else if (detail::is_dma_ready(host_, elements * sizeof(T))) {
      kind_ = source_kind::direct;
    }
    try {
      scoped_device on(pool_.device());
      stream_options so;
      so.device = pool_.device();
      copy_.emplace(so);
      if (has_output) results_.emplace(so);
      final_.emplace();
      allocate(options);
    } catch (...) {
      release();
      throw;
    }
  }

  void validate(std::size_t elements, const batch_options& o) const {
    const auto fail = [](const std::string& what) {
      throw std::invalid_argument("cuscope::batches: " + what);
    };
    if (batch_size_ == 0) fail("the batch size must be at least 1 sample");
    if (o.depth == 0) fail("depth must be at least 1");
    if (o.sample_elements == 0) fail("sample_elements must be at least 1");
    if (o.min_batch == 0) fail("min_batch must be at least 1 sample");
    if (elements % o.sample_elements != 0)
      fail("a source of " + std::to_string(elements) +
           " elements is not a whole number of samples of sample_elements = " +
           std::to_string(o.sample_elements) + " elements");
    if (host_ == nullptr && !produce_ && elements != 0)
      fail("null source of " + std::to_string(elements) + " elements");
  }

  std::size_t count_batches(std::size_t batch) const noexcept {
    return samples_ / batch + (samples_ % batch != 0 ? 1 : 0);
  }

  // Results of batch k, in elements, and where they go in the host output.
  std::size_t out_count(std::size_t samples) const noexcept {
    return out_per_batch_ != 0 ? out_per_batch_ : samples * out_per_sample_;
  }
  std::size_t out_offset(std::size_t k) const noexcept {
    return out_per_batch_ != 0 ? k * out_per_batch_ : k * batch_size_ * out_per_sample_;
  }

  void check_output() const {
    const std::size_t units = out_per_batch_ != 0 ? count_batches(batch_size_) : samples_;
    const std::size_t per = out_per_batch_ != 0 ? out_per_batch_ : out_per_sample_;  // >= 1
    // Compared by division: a product that wraps around would let a short output through.
    if (units > out_size_ / per)
      throw std::invalid_argument(
          "cuscope::batches: a host output of " + std::to_string(out_size_) +
          " elements cannot hold the results: " +
          (out_per_batch_ != 0
               ? std::to_string(units) + " batches of " + std::to_string(batch_size_) + " samples"
               : std::to_string(units) + " samples") +
          " x " + std::to_string(per) + " elements = " +
          (units > std::numeric_limits<std::size_t>::max() / per
               ? std::string("more than a size_t holds")
               : std::to_string(units * per)));
  }

  std::string describe() const {
    return "batches of " + std::to_string(batch_size_) + " x " + std::to_string(sample_elements_) +
           " elements of " + std::to_string(sizeof(T)) + " bytes on " +
           stream_ref(stream_).describe();
  }

  // The buffers of min(depth, batches) slots, once. Out of memory, with adapt_to_memory:
  // synchronize and trim, retry, then halve the batch size down to min_batch.
  void allocate(const batch_options& o) {
    bool retried = false;
    for (;;) {
      try {
        allocate_slots(o.depth);
        return;
      } catch (const out_of_memory& e) {
        slots_.clear();  // frees what was allocated, in order on the copy stream
        if (!o.adapt_to_memory) throw;
        const std::size_t largest = batch_size_ < samples_ ? batch_size_ : samples_;
        const std::size_t floor = o.min_batch < largest ? o.min_batch : largest;
        if (retried && largest <= floor)
          throw out_of_memory(e.requested_bytes(),
                              "cuscope::batches: out of memory even at the smallest batch size "
                              "allowed (min_batch = " +
                                  std::to_string(o.min_batch) + " samples, depth " +
                                  std::to_string(o.depth) + "): " + e.what(),
                              e.status());
        reclaim();
        if (retried) {
          batch_size_ = largest / 2 > floor ? largest / 2 : floor;
          batch_count_ = count_batches(batch_size_);
          if (out_per_batch_ != 0) check_output();
        }
        retried = true;
      }
    }
  }

  // Frees still in flight become reusable once they complete, and a trim gives back reserve
  // that is too fragmented for the request.
  void reclaim() {
    {
      scoped_device on(pool_.device());
      CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), describe());
    }
    pool_.trim_to(0);
  }

  void allocate_slots(std::size_t depth) {
    const std::size_t largest = batch_size_ < samples_ ? batch_size_ : samples_;
    const std::size_t n = depth < batch_count_ ? depth : batch_count_;
    if (largest > std::numeric_limits<std::size_t>::max() / sample_elements_)
      throw std::length_error("cuscope::batches: a batch of " + std::to_string(largest) +
                              " samples of " + std::to_string(sample_elements_) +
                              " elements overflows the element count");
    const std::size_t elements = largest * sample_elements_;
    const std::size_t results = has_output ? out_count(largest) : 0;
    slots_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      slot s;
      s.in = device_buffer<T>(*copy_, elements, pool_);
      if (kind_ != source_kind::direct) s.staging = pinned_buffer<T>(elements);
      if (has_output) {
        s.out = device_buffer<out_t>(*copy_, results, pool_);
        s.out_staging = pinned_buffer<out_t>(results);
        s.unloaded.emplace();
      }
      slots_.push_back(std::move(s));
    }
  }

  // Runs step; a failure stops the iteration for good (the destructor still cleans up).
  template <class F>
  void guarded(F&& step) {
    try {
      step();
    } catch (...) {
      failed_ = true;
      done_ = true;
      throw;
    }
  }

  slot& slot_of(std::size_t k) noexcept { return slots_[k % slots_.size()]; }

  std::size_t samples_in(std::size_t k) const noexcept {
    const std::size_t first = k * batch_size_;
    return samples_ - first < batch_size_ ? samples_ - first : batch_size_;
  }

  void start() {
    if (batch_count_ == 0) {
      done_ = true;
      finished_ = true;
      return;
    }
    for (std::size_t k = 0; k < slots_.size(); ++k)
      load(k);
    present(0);
  }

  // Stages batch k into its slot and enqueues its copy to the device on the copy stream.
  void load(std::size_t k) {
    slot& s = slot_of(k);
    const std::size_t samples = samples_in(k);
    const std::size_t elements = samples * sample_elements_;
    const std::size_t first = k * batch_size_;
    const T* from = kind_ == source_kind::produced ? nullptr : host_ + first * sample_elements_;
    if (kind_ != source_kind::direct) {
      // The host refills the staging buffer only after its previous copy has read it.
      if (s.was_loaded) s.loaded.synchronize();
      if (kind_ == source_kind::produced) {
        produce_(first, samples, s.staging.data());
      } else {
        std::memcpy(s.staging.data(), from, elements * sizeof(T));
      }
      from = s.staging.data();
    }
    // The device buffer is refilled only after the user's stream has finished with it.
    if (s.was_consumed) copy_->wait(s.consumed);
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemcpyAsync(s.in.data(), from, elements * sizeof(T), cudaMemcpyDefault, copy_->get()),
        describe());
    s.loaded.record(*copy_);
    s.was_loaded = true;
  }

  // Makes batch k the current one: the user's stream waits for its copy (and, when its results
  // buffer is reused, for the copy of the previous results out of it).
  void present(std::size_t k) {
    slot& s = slot_of(k);
    const stream_ref user(stream_);
    user.wait(s.loaded);
    if (has_output && s.was_unloaded) user.wait(*s.unloaded);
    const std::size_t samples = samples_in(k);
    batch<T, Out> b;
    b.data_ = s.in.data();
    b.size_ = samples * sample_elements_;
    b.index_ = k;
    b.first_sample_ = k * batch_size_;
    b.offset_ = b.first_sample_ * sample_elements_;
    b.samples_ = samples;
    b.stream_ = stream_;
    if (has_output) {
      b.out_ = s.out.data();
      b.out_size_ = out_count(samples);
    }
    view_ = b;
    current_ = k;
  }

  // The user is done with batch k: record that on the user's stream and, with an output, copy
  // its results back on the results stream.
  void hand_back(std::size_t k) {
    slot& s = slot_of(k);
    s.consumed.record(stream_ref(stream_));
    s.was_consumed = true;
    if constexpr (has_output) {
      if (s.pending_result != none) drain(s);
      results_->wait(s.consumed);
      const std::size_t n = out_count(samples_in(k));
      if (n != 0)
        CUSCOPE_DETAIL_TRY_FOR(
            cudaMemcpyAsync(s.out_staging.data(), s.out.data(), n * sizeof(out_t),
                            cudaMemcpyDefault, results_->get()),
            describe());
      s.unloaded->record(*results_);
      s.was_unloaded = true;
      s.pending_result = k;
    }
  }

  // Copies the results waiting in s's staging buffer to their place in the host output.
  void drain(slot& s) {
    s.unloaded->synchronize();
    const std::size_t k = s.pending_result;
    const std::size_t n = out_count(samples_in(k));
    if (n != 0) std::memcpy(out_data_ + out_offset(k), s.out_staging.data(), n * sizeof(out_t));
    s.pending_result = none;
  }

  void drain_all() {
    if constexpr (has_output) {
      for (slot& s : slots_)
        if (s.pending_result != none) drain(s);
    }
  }

  void advance() {
    if (done_) return;
    guarded([&] {
      const std::size_t k = current_;
      hand_back(k);
      if (k + slots_.size() < batch_count_) load(k + slots_.size());
      if (k + 1 < batch_count_) {
        present(k + 1);
      } else {
        done_ = true;
        drain_all();
        finished_ = true;
      }
    });
  }

  void release() noexcept {
    if (!copy_) return;
    if (started_ && !finished_ && !failed_ && std::uncaught_exceptions() <= exceptions_at_entry_) {
      try {
        finish();
      } catch (...) {
        CUSCOPE_DETAIL_CLEANUP_CAUGHT("batch_range::finish", "cuscope::batch_range", this);
      }
    }
    if (started_) {
      // Everything enqueued so far on the user's stream may read the buffers: the frees wait
      // for it. Without the event, wait for the stream itself.
      bool ordered = false;
      try {
        final_->record(stream_ref(stream_));
        copy_->wait(*final_);
        ordered = true;
      } catch (...) {
        CUSCOPE_DETAIL_CLEANUP_CAUGHT("batch_range: ordering the release after the user's stream",
                                      "cuscope::batch_range", this);
      }
      if (!ordered)
        (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(stream_), "cuscope::batch_range", this);
    }
    // The results stream reads the device buffers: it must be done before they are freed.
    if (results_)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(results_->get()), "cuscope::batch_range",
                                   this);
    for (slot& s : slots_) {
      s.in = device_buffer<T>();  // freed in order on the copy stream
      s.out = device_buffer<out_t>();
    }
    // The copies read the staging buffers, and the frees must have completed for a session
    // around the loop to see the memory back in the pool.
    (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(copy_->get()), "cuscope::batch_range", this);
    slots_.clear();
    final_.reset();
    results_.reset();
    copy_.reset();
  }

  void take(batch_range& o) noexcept {
    stream_ = o.stream_;
    pool_ = o.pool_;
    host_ = o.host_;
    produce_ = std::move(o.produce_);
    kind_ = o.kind_;
    requested_ = o.requested_;
    batch_size_ = o.batch_size_;
    batch_count_ = o.batch_count_;
    samples_ = o.samples_;
    sample_elements_ = o.sample_elements_;
    out_data_ = o.out_data_;
    out_size_ = o.out_size_;
    out_per_sample_ = o.out_per_sample_;
    out_per_batch_ = o.out_per_batch_;
    copy_ = std::move(o.copy_);
    o.copy_.reset();
    results_ = std::move(o.results_);
    o.results_.reset();
    final_ = std::move(o.final_);
    slots_ = std::move(o.slots_);
    o.slots_.clear();
    view_ = o.view_;
    current_ = o.current_;
    started_ = o.started_;
    done_ = o.done_;
    finished_ = o.finished_;
    failed_ = o.failed_;
    exceptions_at_entry_ = o.exceptions_at_entry_;
    o.started_ = o.done_ = o.finished_ = true;
    o.batch_count_ = 0;
  }

  cudaStream_t stream_ = nullptr;
  memory_pool_ref pool_;
  const T* host_ = nullptr;
  std::function<void(std::size_t, std::size_t, T*)> produce_;
  source_kind kind_ = source_kind::staged;
  std::size_t requested_ = 0;
  std::size_t batch_size_ = 0;
  std::size_t batch_count_ = 0;
  std::size_t samples_ = 0;
  std::size_t sample_elements_ = 1;
  out_t* out_data_ = nullptr;
  std::size_t out_size_ = 0;
  std::size_t out_per_sample_ = 0;
  std::size_t out_per_batch_ = 0;
  std::optional<cuscope::stream> copy_;     // the copies to the device
  std::optional<cuscope::stream> results_;  // the copies of results back to the host
  std::optional<event> final_;              // the user's stream: the frees wait for it
  std::vector<slot> slots_;
  batch<T, Out> view_;
  std::size_t current_ = 0;
  bool started_ = false;
  bool done_ = false;
  bool finished_ = false;
  bool failed_ = false;
  int exceptions_at_entry_ = 0;
};

namespace detail {

struct batch_access {
  template <class T, class Out>
  static batch_range<T, Out> make(stream_ref stream, const T* host, std::size_t elements,
                                  std::function<void(std::size_t, std::size_t, T*)> produce,
                                  std::size_t batch_size, memory_pool_ref pool,
                                  const batch_options& options, const batch_output<Out>* output) {
    return batch_range<T, Out>(stream, host, elements, std::move(produce), batch_size, pool,
                               options, output);
  }
};

template <class R>
using source_value_t = std::remove_cv_t<range_value_t<const R>>;

// Elements of samples samples, refusing an overflow.
inline std::size_t sample_elements_of(std::size_t samples, const batch_options& options) {
  const std::size_t per = options.sample_elements == 0 ? 1 : options.sample_elements;
  if (samples > std::numeric_limits<std::size_t>::max() / per)
    throw std::length_error("cuscope::batches: " + std::to_string(samples) + " samples of " +
                            std::to_string(per) + " elements overflow the element count");
  return samples * per;
}

}  // namespace detail

/// @brief The count elements at data in batches of batch_size samples, staged to the device on
/// stream (of the pool's device) through buffers from pool. data must stay valid and unchanged
/// while the range exists.
/// Page-locked (or device) memory is copied without a staging copy.
/// Allocates the buffers; begin() starts the copies. Enqueued; does not synchronize.
/// @throws std::invalid_argument for a batch size, depth or min_batch of 0, a count that is not
/// a whole number of samples, or a stream of another device; out_of_memory; cuda_error.
template <class T>
[[nodiscard]] batch_range<T> batches(stream_ref stream, const T* data, std::size_t count,
                                     std::size_t batch_size, memory_pool_ref pool,
                                     const batch_options& options = {}) {
  return detail::batch_access::make<T, void>(stream, data, count, {}, batch_size, pool, options,
                                             nullptr);
}

/// @brief As batches(stream, data, count, batch_size, pool, options), with device memory for
/// each batch's results, copied into output after the iterator leaves the batch.
template <class T, class U>
[[nodiscard]] batch_range<T, U> batches(stream_ref stream, const T* data, std::size_t count,
                                        std::size_t batch_size, memory_pool_ref pool,
                                        const batch_output<U>& output,
                                        const batch_options& options = {}) {
  return detail::batch_access::make<T, U>(stream, data, count, {}, batch_size, pool, options,
                                          &output);
}

/// @brief The elements of source (a contiguous container: std::vector, std::array,
/// pinned_buffer...) in batches; see batches(stream, data, count, ...). source must outlive the
/// range.
template <class Range, std::enable_if_t<detail::is_contiguous_range<Range>::value, int> = 0>
[[nodiscard]] batch_range<detail::source_value_t<Range>> batches(
    stream_ref stream, const Range& source, std::size_t batch_size, memory_pool_ref pool,
    const batch_options& options = {}) {
  return batches(stream, source.data(), static_cast<std::size_t>(source.size()), batch_size, pool,
                 options);
}

/// @brief The elements of source in batches, with results copied into output.
template <class Range, class U,
          std::enable_if_t<detail::is_contiguous_range<Range>::value, int> = 0>
[[nodiscard]] batch_range<detail::source_value_t<Range>, U> batches(
    stream_ref stream, const Range& source, std::size_t batch_size, memory_pool_ref pool,
    const batch_output<U>& output, const batch_options& options = {}) {
  return batches(stream, source.data(), static_cast<std::size_t>(source.size()), batch_size, pool,
                 output, options);
}

/// @brief Deleted: the temporary would be gone while the range still copies from it.
template <class Range, std::enable_if_t<detail::is_contiguous_range<Range>::value &&
                                            !std::is_lvalue_reference_v<Range>,
                                        int> = 0>
void batches(stream_ref stream, Range&& source, std::size_t batch_size, memory_pool_ref pool,
             const batch_options& options = {}) = delete;

/// @brief Deleted: the temporary would be gone while the range still copies from it.
template <
    class Range, class U,
    std::enable_if_t<
        detail::is_contiguous_range<Range>::value && !std::is_lvalue_reference_v<Range>, int> = 0>
void batches(stream_ref stream, Range&& source, std::size_t batch_size, memory_pool_ref pool,
             const batch_output<U>& output, const batch_options& options = {}) = delete;

/// @brief The samples a producer writes, in batches: for each batch the producer fills a
/// page-locked staging buffer on the iterating thread (in begin() and when the iterator
/// advances), which is then copied to the device on the range's copy stream.
template <class T>
[[nodiscard]] batch_range<T> batches(stream_ref stream, producer_source<T> source,
                                     std::size_t batch_size, memory_pool_ref pool,
                                     const batch_options& options = {}) {
  if (!source.fill) throw std::invalid_argument("cuscope::batches: a producer without a function");
  return detail::batch_access::make<T, void>(
      stream, nullptr, detail::sample_elements_of(source.samples, options), std::move(source.fill),
      batch_size, pool, options, nullptr);
}

/// @brief The samples a producer writes, in batches, with results copied into output.
template <class T, class U>
[[nodiscard]] batch_range<T, U> batches(stream_ref stream, producer_source<T> source,
                                        std::size_t batch_size, memory_pool_ref pool,
                                        const batch_output<U>& output,
                                        const batch_options& options = {}) {
  if (!source.fill) throw std::invalid_argument("cuscope::batches: a producer without a function");
  return detail::batch_access::make<T, U>(
      stream, nullptr, detail::sample_elements_of(source.samples, options), std::move(source.fill),
      batch_size, pool, options, &output);
}

}  // namespace cuscope
