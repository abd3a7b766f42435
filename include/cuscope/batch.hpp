// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Batch iterators: batches() stages a host dataset to the device batch by batch, the
/// copies of the next batches overlapping the work on the current one, and can copy a result per
/// batch back into a host output.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>  // std::input_iterator_tag in libstdc++, libc++ and Microsoft's library
#include <type_traits>
#include <utility>
// The standard declares std::input_iterator_tag in <iterator> alone, which costs more to parse
// than the rest of this header's standard headers; the libraries that declare it with <string>
// are spared it.
#if !defined(__GLIBCXX__) && !defined(_LIBCPP_VERSION) && !defined(_MSVC_STL_VERSION)
#  include <iterator>
#endif

#include "detail/batch_pipeline.hpp"
#include "detail/batch_plan.hpp"
#include "detail/callback.hpp"
#include "detail/config.hpp"
#include "detail/format.hpp"
#include "device_span.hpp"
#include "memory_pool.hpp"
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
  /// halve the batch size down to min_batch. The size used is batch_range::batch_size(). A
  /// session's budget refusing halves at once, without the synchronization and the trim.
  bool adapt_to_memory = false;
  /// @brief The smallest batch size, in samples, that adapt_to_memory may choose (at least 1).
  std::size_t min_batch = 1;
  /// @brief Where the page-locked staging buffers come from: a pool of pinned host memory
  /// (pinned_memory_pool), or cudaHostAlloc when empty.
  std::optional<memory_pool_ref> staging_pool;
};

/// @brief A source of samples that a callback writes into page-locked staging memory, for data
/// read from files or decoders. Make one with from_producer().
template <class T>
struct producer_source {
  /// @brief Total number of samples.
  std::size_t samples = 0;
  /// @brief Called on the iterating thread as fill(first_sample, samples, out): writes samples
  /// samples (samples x batch_options::sample_elements elements) to out, page-locked memory.
  detail::callback<void(std::size_t, std::size_t, T*)> fill;
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
                                  detail::format_count(count, "element"));
  }

  U* data_;
  std::size_t size_;
  std::size_t per_sample_;
  std::size_t per_batch_;
};

namespace detail {

/// The one owner of a T made with new, deleted with it: what batch_range keeps its pipeline in.
/// std::unique_ptr without <memory>, which the core headers leave out (compile cost, in nvcc's
/// device passes too).
template <class T>
class owner {
 public:
  owner() noexcept = default;
  explicit owner(T* p) noexcept : p_(p) {}
  owner(const owner&) = delete;
  owner& operator=(const owner&) = delete;
  owner(owner&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  owner& operator=(owner&& other) noexcept {
    T* const old = std::exchange(p_, std::exchange(other.p_, nullptr));
    delete old;
    return *this;
  }
  ~owner() { delete p_; }
  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

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
  [[nodiscard]] device_span<const T> span() const noexcept { return {v_.data, v_.size}; }
  /// @brief Position of the batch: 0 for the first.
  [[nodiscard]] std::size_t index() const noexcept { return v_.index; }
  /// @brief Position of the first element in the source, in elements.
  [[nodiscard]] std::size_t offset() const noexcept { return v_.offset; }
  /// @brief Number of elements (samples() x sample_elements; the last batch may be short).
  [[nodiscard]] std::size_t size() const noexcept { return v_.size; }
  /// @brief Position of the first sample in the source.
  [[nodiscard]] std::size_t first_sample() const noexcept { return v_.first_sample; }
  /// @brief Number of samples.
  [[nodiscard]] std::size_t samples() const noexcept { return v_.samples; }
  /// @brief The stream on which the elements are ready: the stream given to batches().
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(v_.stream); }
  /// @brief Device memory for the batch's results, to be written in stream order on stream();
  /// the range copies it to its place in the host output after the iterator advances.
  template <class O = Out, std::enable_if_t<!std::is_void_v<O>, int> = 0>
  [[nodiscard]] device_span<O> output() const noexcept {
    return {v_.out, v_.out_size};
  }

 private:
  template <class, class, class>
  friend class detail::batch_pipeline;

  explicit batch(const detail::batch_view<T, out_t>& v) noexcept : v_(v) {}

  detail::batch_view<T, out_t> v_;
};

/// @brief The range batches() returns: a single-pass (input) range of batch<T, Out> that owns
/// its copy streams, events, page-locked staging and device buffers.
///
/// The buffers (depth of each, for one batch) are allocated when the range is made; begin()
/// starts copying the first depth batches. Batch k is handed out once the user's stream waits for
/// its copy; advancing past it records an event on the user's stream after which its device
/// buffer may be refilled (and its results copied back). Move-only: the state lives in one
/// pipeline object (detail/batch_pipeline.hpp) that the range owns, so a move keeps the
/// iterators valid; a moved-from range is empty (finished, no batches, begin() == end()).
/// Destruction never throws: it orders the release after every copy and after the work enqueued
/// so far on the user's stream, waits for the range's own streams (and so for that work), and
/// frees everything, also in the middle of the iteration or while an exception unwinds from the
/// loop body. The user's stream must belong to the pool's device.
template <class T, class Out = void>
class batch_range {
  static_assert(std::is_trivially_copyable_v<T>, "batches of T need a trivially copyable T");
  using out_t = std::conditional_t<std::is_void_v<Out>, unsigned char, Out>;
  using pipeline = detail::batch_pipeline<T, Out, batch<T, Out>>;

 public:
  /// @brief What iterating yields.
  using value_type = batch<T, Out>;

  /// @brief An input iterator over the batches; advancing it hands the previous batch back. It
  /// refers to the range's pipeline, not to the range object, so a move of the range keeps it.
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
    reference operator*() const noexcept { return state_->view(); }
    /// @brief The current batch.
    pointer operator->() const noexcept { return &state_->view(); }
    /// @brief Hands the current batch back and moves to the next one (see batch_range).
    iterator& operator++() {
      state_->advance();
      return *this;
    }
    /// @brief As ++it, returning the batch it was on.
    value_type operator++(int) {
      value_type previous = state_->view();
      state_->advance();
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
    explicit iterator(pipeline* state) noexcept : state_(state) {}
    bool at_end() const noexcept { return state_ == nullptr || state_->done(); }
    pipeline* state_ = nullptr;
  };

  batch_range(const batch_range&) = delete;
  batch_range& operator=(const batch_range&) = delete;
  /// @brief Takes over other's pipeline (its buffers, streams, position and iterators); other
  /// becomes empty.
  batch_range(batch_range&& other) noexcept = default;
  /// @brief Releases this range's resources (as the destructor does), then takes over other's.
  batch_range& operator=(batch_range&& other) noexcept = default;
  /// @brief Finishes the results (unless an exception is unwinding), then releases everything
  /// after the copies and the user's work so far; never throws.
  ~batch_range() = default;

  /// @brief Starts the copies of the first batches (on the first call) and returns an iterator
  /// on the current batch. Enqueued; does not synchronize.
  /// A moved-from range has nothing to iterate: its begin() is its end().
  /// @throws cuda_error; whatever a producer throws.
  [[nodiscard]] iterator begin() {
    if (!state_) return iterator();
    state_->begin();
    return iterator(state_.get());
  }
  /// @brief The end iterator.
  [[nodiscard]] iterator end() noexcept { return iterator(); }

  /// @brief Ends the iteration early or confirms its end: the current batch counts as processed,
  /// and every result of the batches handed out is copied into the host output. With an output,
  /// blocks until their work on the user's stream has completed; without one, does not block.
  /// A second call does nothing.
  /// A moved-from range has nothing to finish.
  /// @throws cuda_error; std::logic_error after an iteration step failed.
  void finish() {
    if (state_) state_->finish();
  }

  /// @brief Batch size in samples: the one asked for, or the smaller one that adapt_to_memory
  /// chose. 0 for a moved-from range, as are the other counts.
  [[nodiscard]] std::size_t batch_size() const noexcept { return plan().batch_size(); }
  /// @brief The batch size asked for.
  [[nodiscard]] std::size_t requested_batch_size() const noexcept { return plan().requested(); }
  /// @brief True when adapt_to_memory made the batch size smaller than asked.
  [[nodiscard]] bool adapted() const noexcept { return batch_size() < requested_batch_size(); }
  /// @brief Number of batches.
  [[nodiscard]] std::size_t batch_count() const noexcept { return plan().batch_count(); }
  /// @brief Number of samples in the source.
  [[nodiscard]] std::size_t sample_count() const noexcept { return plan().samples(); }
  /// @brief Elements per sample.
  [[nodiscard]] std::size_t sample_elements() const noexcept { return plan().sample_elements(); }
  /// @brief Batches in flight: depth buffers of each kind, fewer for fewer batches.
  [[nodiscard]] std::size_t depth() const noexcept { return state_ ? state_->depth() : 0; }
  /// @brief The user's stream.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief Whether the source is copied straight from its memory (page-locked or device),
  /// without a staging copy.
  [[nodiscard]] bool direct() const noexcept { return state_ && state_->direct(); }
  /// @brief Device memory the range holds from the pool: depth x (batch + results) bytes.
  [[nodiscard]] std::size_t device_bytes() const noexcept {
    return state_ ? state_->device_bytes() : 0;
  }
  /// @brief Page-locked host memory the range holds for staging batches and results.
  [[nodiscard]] std::size_t pinned_bytes() const noexcept {
    return state_ ? state_->pinned_bytes() : 0;
  }
  /// @brief Whether finish() has run, or the iteration reached its end; true for a moved-from
  /// range.
  [[nodiscard]] bool finished() const noexcept { return !state_ || state_->finished(); }

 private:
  friend struct detail::batch_access;

  batch_range(stream_ref stream, const T* host, std::size_t elements,
              typename pipeline::producer produce, std::size_t batch_size, memory_pool_ref pool,
              const batch_options& options, const batch_output<Out>* output,
              detail::ledger* accounting)
      : stream_(stream.get()) {
    detail::batch_config c;
    c.accounting = accounting;
    c.depth = options.depth;
    c.sample_elements = options.sample_elements;
    c.adapt_to_memory = options.adapt_to_memory;
    c.min_batch = options.min_batch;
    if (options.staging_pool) {
      c.staging_pool = options.staging_pool->get();
      c.staging_device = options.staging_pool->device();
    }
    out_t* out_data = nullptr;
    detail::batch_out_spec spec;
    if constexpr (!std::is_void_v<Out>) {
      out_data = output->data();
      spec.size = output->size();
      spec.per_sample = output->elements_per_sample();
      spec.per_batch = output->elements_per_batch();
    }
    state_ = detail::owner<pipeline>(new pipeline(stream, host, elements, std::move(produce),
                                                  batch_size, pool, c, out_data,
                                                  output != nullptr ? &spec : nullptr));
  }

  const detail::batch_plan& plan() const noexcept {
    static_assert(std::is_nothrow_default_constructible_v<detail::batch_plan>);
    return state_ ? state_->plan() : empty_plan_;
  }

  cudaStream_t stream_ = nullptr;
  detail::owner<pipeline> state_;
  detail::batch_plan empty_plan_{};  // what a moved-from range reports
};

namespace detail {

struct batch_access {
  template <class T, class Out>
  static batch_range<T, Out> make(stream_ref stream, const T* host, std::size_t elements,
                                  detail::callback<void(std::size_t, std::size_t, T*)> produce,
                                  std::size_t batch_size, memory_pool_ref pool,
                                  const batch_options& options, const batch_output<Out>* output,
                                  ledger* accounting = nullptr) {
    return batch_range<T, Out>(stream, host, elements, std::move(produce), batch_size, pool,
                               options, output, accounting);
  }
};

template <class R>
using source_value_t = std::remove_cv_t<range_value_t<const R>>;

// Elements of samples samples, refusing an overflow.
std::size_t sample_elements_of(std::size_t samples, const batch_options& options);

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

// Batches counted by a session ---------------------------------------------------------------

/// @brief batches(session.stream(), data, count, batch_size, session.pool(), options), its device
/// buffers counted by the session (its budget, its leak check) like its make_buffer. A budget too
/// small for the buffers refuses them as the pool would (adapt_to_memory shrinks the batch).
/// @throws std::logic_error when the session has finished; as batches().
template <class Session, class T, detail::if_session<Session> = 0>
[[nodiscard]] batch_range<T> batches(Session& session, const T* data, std::size_t count,
                                     std::size_t batch_size, const batch_options& options = {}) {
  return detail::batch_access::make<T, void>(session.stream(), data, count, {}, batch_size,
                                             session.pool(), options, nullptr,
                                             detail::accounting_of(session));
}

/// @brief As batches(session, data, count, batch_size, options), with results copied into
/// output.
template <class Session, class T, class U, detail::if_session<Session> = 0>
[[nodiscard]] batch_range<T, U> batches(Session& session, const T* data, std::size_t count,
                                        std::size_t batch_size, const batch_output<U>& output,
                                        const batch_options& options = {}) {
  return detail::batch_access::make<T, U>(session.stream(), data, count, {}, batch_size,
                                          session.pool(), options, &output,
                                          detail::accounting_of(session));
}

/// @brief The elements of source in batches counted by the session; source must outlive the
/// range.
template <class Session, class Range, detail::if_session<Session> = 0,
          std::enable_if_t<detail::is_contiguous_range<Range>::value, int> = 0>
[[nodiscard]] batch_range<detail::source_value_t<Range>> batches(
    Session& session, const Range& source, std::size_t batch_size,
    const batch_options& options = {}) {
  return batches(session, source.data(), static_cast<std::size_t>(source.size()), batch_size,
                 options);
}

/// @brief The elements of source in batches counted by the session, results copied into output.
template <class Session, class Range, class U, detail::if_session<Session> = 0,
          std::enable_if_t<detail::is_contiguous_range<Range>::value, int> = 0>
[[nodiscard]] batch_range<detail::source_value_t<Range>, U> batches(
    Session& session, const Range& source, std::size_t batch_size, const batch_output<U>& output,
    const batch_options& options = {}) {
  return batches(session, source.data(), static_cast<std::size_t>(source.size()), batch_size,
                 output, options);
}

/// @brief Deleted: the temporary would be gone while the range still copies from it.
template <
    class Session, class Range, detail::if_session<Session> = 0,
    std::enable_if_t<
        detail::is_contiguous_range<Range>::value && !std::is_lvalue_reference_v<Range>, int> = 0>
void batches(Session& session, Range&& source, std::size_t batch_size,
             const batch_options& options = {}) = delete;

/// @brief Deleted: the temporary would be gone while the range still copies from it.
template <
    class Session, class Range, class U, detail::if_session<Session> = 0,
    std::enable_if_t<
        detail::is_contiguous_range<Range>::value && !std::is_lvalue_reference_v<Range>, int> = 0>
void batches(Session& session, Range&& source, std::size_t batch_size,
             const batch_output<U>& output, const batch_options& options = {}) = delete;

/// @brief The samples a producer writes, in batches counted by the session.
template <class Session, class T, detail::if_session<Session> = 0>
[[nodiscard]] batch_range<T> batches(Session& session, producer_source<T> source,
                                     std::size_t batch_size, const batch_options& options = {}) {
  if (!source.fill) throw std::invalid_argument("cuscope::batches: a producer without a function");
  return detail::batch_access::make<T, void>(session.stream(), nullptr,
                                             detail::sample_elements_of(source.samples, options),
                                             std::move(source.fill), batch_size, session.pool(),
                                             options, nullptr, detail::accounting_of(session));
}

/// @brief The samples a producer writes, in batches counted by the session, with results copied
/// into output.
template <class Session, class T, class U, detail::if_session<Session> = 0>
[[nodiscard]] batch_range<T, U> batches(Session& session, producer_source<T> source,
                                        std::size_t batch_size, const batch_output<U>& output,
                                        const batch_options& options = {}) {
  if (!source.fill) throw std::invalid_argument("cuscope::batches: a producer without a function");
  return detail::batch_access::make<T, U>(session.stream(), nullptr,
                                          detail::sample_elements_of(source.samples, options),
                                          std::move(source.fill), batch_size, session.pool(),
                                          options, &output, detail::accounting_of(session));
}

}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope::detail {

inline std::size_t sample_elements_of(std::size_t samples, const batch_options& options) {
  const std::size_t per = options.sample_elements == 0 ? 1 : options.sample_elements;
  if (samples > std::numeric_limits<std::size_t>::max() / per)
    throw std::length_error("cuscope::batches: " + std::to_string(samples) + " samples of " +
                            std::to_string(per) + " elements overflow the element count");
  return samples * per;
}

}  // namespace cuscope::detail
#endif  // CUSCOPE_DETAIL_HOST_CODE
