// SPDX-License-Identifier: Apache-2.0
// The engine behind batch_range: the slots of batches in flight (device buffer, staging buffer,
// results and their events), the copy and results streams, the steps of the iteration, copying
// results back, and the release. One object, owned by its range through a unique_ptr, so that the
// range moves without touching it and its iterators, which point here, survive the move.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../device.hpp"
#include "../device_allocation.hpp"
#include "../device_buffer.hpp"
#include "../error.hpp"
#include "../event.hpp"
#include "../graph.hpp"
#include "../memory_pool.hpp"
#include "../pinned_buffer.hpp"
#include "../stream.hpp"
#include "batch_plan.hpp"
#include "callback.hpp"
#include "config.hpp"
#include "ledger_fwd.hpp"

namespace cuscope::detail {

/// What the loop body sees of one batch; batch<T, Out> is its public face.
template <class T, class O>
struct batch_view {
  const T* data = nullptr;
  std::size_t size = 0;
  std::size_t index = 0;
  std::size_t offset = 0;
  std::size_t first_sample = 0;
  std::size_t samples = 0;
  cudaStream_t stream = nullptr;
  O* out = nullptr;
  std::size_t out_size = 0;
};

/// Whether bytes at p can be copied without staging: page-locked host memory, device or managed
/// memory. Since CUDA 11.0 cudaPointerGetAttributes answers cudaMemoryTypeUnregistered for
/// pageable memory, so a failure is an error, never an answer: taken for "pageable", it would
/// have the host memcpy from device memory.
/// @throws cuda_error naming cudaPointerGetAttributes.
inline bool is_dma_ready(const void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0) return false;
  const auto ready = [](const void* q) {
    cudaPointerAttributes a{};
    CUSCOPE_DETAIL_TRY_FOR(cudaPointerGetAttributes(&a, q),
                           "cuscope::batches: the source at " + format_pointer(q));
    return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeDevice ||
           a.type == cudaMemoryTypeManaged;
  };
  return ready(p) && ready(static_cast<const unsigned char*>(p) + (bytes - 1));
}

/// The pipeline of a batch range over T with results of Out (void for none); Batch is the view
/// type handed to the loop body, constructible from batch_view.
template <class T, class Out, class Batch>
class batch_pipeline {
  using out_t = std::conditional_t<std::is_void_v<Out>, unsigned char, Out>;
  static constexpr bool has_output = !std::is_void_v<Out>;
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

 public:
  using producer = callback<void(std::size_t, std::size_t, T*)>;

  /// Validates, cuts the source, and makes the streams, events and buffers (shrinking the batch
  /// when config.adapt_to_memory allows and memory is short). Nothing is enqueued until begin().
  batch_pipeline(stream_ref stream, const T* host, std::size_t elements, producer produce,
                 std::size_t requested_batch_size, memory_pool_ref pool, const batch_config& config,
                 out_t* out_data, const batch_out_spec* out);

  batch_pipeline(const batch_pipeline&) = delete;
  batch_pipeline& operator=(const batch_pipeline&) = delete;

  /// Finishes the results (unless an exception is unwinding), then releases everything after the
  /// copies and the user's work so far; never throws.
  ~batch_pipeline() { release(); }

  /// Starts the copies of the first batches, on the first call.
  void begin();

  /// Hands the current batch back and moves to the next one.
  void advance();

  /// See batch_range::finish.
  void finish();

  const Batch& view() const noexcept { return view_; }
  bool done() const noexcept { return done_; }
  bool finished() const noexcept { return finished_; }
  const batch_plan& plan() const noexcept { return plan_; }
  stream_ref stream() const noexcept { return stream_ref(stream_); }
  bool direct() const noexcept { return kind_ == source_kind::direct; }
  std::size_t depth() const noexcept { return slots_.size(); }

  std::size_t device_bytes() const noexcept;
  std::size_t pinned_bytes() const noexcept;

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

  std::string describe() const;

  // The buffers of min(depth, batches) slots, once. Out of memory, with adapt_to_memory:
  // synchronize and trim, retry, then shrink the batch (batch_plan::shrink) down to min_batch.
  // A session's budget refusing (status cudaSuccess: CUDA was not asked) is not helped by a
  // synchronization or a trim, which would only cost the pool's cache: the batch shrinks at once.
  void allocate(const batch_config& c);

  // Frees still in flight become reusable once they complete, and a trim gives back reserve
  // that is too fragmented for the request.
  void reclaim();

  // Page-locked staging of count elements, from batch_options::staging_pool when given: then
  // freed in order on stream, the stream whose copies use it.
  template <class U>
  pinned_buffer<U> staging(std::size_t count, stream_ref stream) const;

  void allocate_slots(std::size_t depth);

  // Runs step; a failure stops the iteration for good (the destructor still cleans up).
  template <class F>
  void guarded(F&& step);

  slot& slot_of(std::size_t k) noexcept { return slots_[k % slots_.size()]; }

  void start();

  // Stages batch k into its slot and enqueues its copy to the device on the copy stream.
  void load(std::size_t k);

  // Makes batch k the current one: the user's stream waits for its copy (and, when its results
  // buffer is reused, for the copy of the previous results out of it).
  void present(std::size_t k);

  // The user is done with batch k: record that on the user's stream and, with an output, copy
  // its results back on the results stream.
  void hand_back(std::size_t k);

  // Copies the results waiting in s's staging buffer to their place in the host output.
  void drain(slot& s);

  void drain_all();

  // After the end of the range failed in the destructor (a break out of the loop): delivers the
  // results of every batch handed out by synchronous copies, which need nothing the failed step
  // left half done. True when all were delivered.
  bool deliver_sync() noexcept;

  // A buffer that enqueued work may still read or write, left allocated rather than freed under
  // it, and reported with its bytes.
  void abandon(std::size_t bytes, const void* p) noexcept;

  void release() noexcept;

  batch_plan plan_;
  cudaStream_t stream_;
  memory_pool_ref pool_;
  const T* host_;
  producer produce_;
  out_t* out_data_;
  source_kind kind_ = source_kind::staged;
  std::optional<cuscope::stream> copy_;   // the copies to the device
  cudaMemPool_t staging_pool_ = nullptr;  // batch_options::staging_pool
  int staging_device_ = 0;
  std::optional<cuscope::stream> results_;  // the copies of results back to the host
  std::optional<event> final_;              // the user's stream: the frees wait for it
  std::vector<slot> slots_;
  ledger* accounting_ = nullptr;  // counts the buffers for a session, under its ledger
  Batch view_;
  std::size_t current_ = 0;
  std::size_t unreturned_ = none;  // handed to the loop body and not handed back
  bool started_ = false;
  bool done_ = false;
  bool finished_ = false;
  bool failed_ = false;
  int exceptions_at_entry_ = 0;
};

}  // namespace cuscope::detail

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
#  include "ledger.hpp"

namespace cuscope::detail {

template <class T, class Out, class Batch>
batch_pipeline<T, Out, Batch>::batch_pipeline(stream_ref stream, const T* host,
                                              std::size_t elements, producer produce,
                                              std::size_t requested_batch_size,
                                              memory_pool_ref pool, const batch_config& config,
                                              out_t* out_data, const batch_out_spec* out)
    : plan_(elements, requested_batch_size, config, host != nullptr || static_cast<bool>(produce),
            out),
      stream_(stream.get()),
      pool_(pool),
      host_(host),
      produce_(std::move(produce)),
      out_data_(out_data),
      exceptions_at_entry_(std::uncaught_exceptions()) {
  if (plan_.batch_count() == 0) return;  // nothing to stage: no stream, no buffer
  // The events are the pool's device's, and an event is recorded only on a stream of its own
  // device: refused here rather than at the first step of the loop.
  // A default stream handle names the default stream of whatever device is current when the
  // range uses it, so that device must be the pool's.
  const int device =
      is_default_stream(stream.get()) ? current_device() : stream_device(stream, pool_.device());
  if (device != pool_.device())
    throw std::invalid_argument("cuscope::batches: " + stream.describe() + " belongs to device " +
                                std::to_string(device) + ", not to device " +
                                std::to_string(pool_.device()) + " of the pool");
  // The pipeline waits on the host for its staging buffers, which a capture cannot record.
  if (is_capturing(stream))
    throw std::logic_error("cuscope::batches: " + stream.describe() +
                           " is capturing a CUDA graph; batches wait on the host for their "
                           "staging buffers, which a graph cannot record: run the batch loop "
                           "outside the capture and capture the work on each batch instead");
  if (produce_) {
    kind_ = source_kind::produced;
  } else if (is_dma_ready(host_, elements * sizeof(T))) {
    kind_ = source_kind::direct;
  }
  try {
    const scoped_device on(pool_.device());
    stream_options so;
    so.device = pool_.device();
    copy_.emplace(so);
    if (config.accounting != nullptr) {
      if (config.accounting->closed())
        allocate_after_finish(*config.accounting, "cuscope::batches");
      // The buffers are freed on the copy stream, which release() synchronizes: the session
      // need not know of it.
      accounting_ = new ledger(config.accounting, 0, config.accounting->name() + ": batches",
                               copy_->get(), {});
    }
    if (has_output) results_.emplace(so);
    final_.emplace();
    staging_pool_ = config.staging_pool;
    staging_device_ = config.staging_device;
    allocate(config);
  } catch (...) {
    release();
    throw;
  }
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::begin() {
  if (started_) return;
  started_ = true;
  guarded([&] { start(); });
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::advance() {
  if (done_) return;
  guarded([&] {
    const std::size_t k = current_;
    hand_back(k);
    if (k + slots_.size() < plan_.batch_count()) load(k + slots_.size());
    if (k + 1 < plan_.batch_count()) {
      present(k + 1);
    } else {
      done_ = true;
      drain_all();
      finished_ = true;
    }
  });
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::finish() {
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

template <class T, class Out, class Batch>
std::size_t batch_pipeline<T, Out, Batch>::device_bytes() const noexcept {
  std::size_t n = 0;
  for (const slot& s : slots_)
    n += s.in.size_bytes() + s.out.size_bytes();
  return n;
}

template <class T, class Out, class Batch>
std::size_t batch_pipeline<T, Out, Batch>::pinned_bytes() const noexcept {
  std::size_t n = 0;
  for (const slot& s : slots_)
    n += s.staging.size_bytes() + s.out_staging.size_bytes();
  return n;
}

template <class T, class Out, class Batch>
std::string batch_pipeline<T, Out, Batch>::describe() const {
  return "batches of " + std::to_string(plan_.batch_size()) + " x " +
         format_count(plan_.sample_elements(), "element") + " of " +
         format_count(sizeof(T), "byte") + " on " + stream_ref(stream_).describe();
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::allocate(const batch_config& c) {
  bool retried = false;
  for (;;) {
    try {
      allocate_slots(c.depth);
      return;
    } catch (const out_of_memory& e) {
      slots_.clear();  // frees what was allocated, in order on the copy stream
      if (!c.adapt_to_memory) throw;
      const bool budget = e.status() == cudaSuccess;
      if ((retried || budget) && !plan_.can_shrink(c.min_batch))
        throw out_of_memory(e.requested_bytes(),
                            "cuscope::batches: out of memory even at the smallest batch size "
                            "allowed (min_batch = " +
                                format_count(c.min_batch, "sample") + ", depth " +
                                std::to_string(c.depth) + "): " + e.what(),
                            e.status());
      if (budget) {
        plan_.shrink(c.min_batch);
        continue;
      }
      reclaim();
      if (retried) plan_.shrink(c.min_batch);
      retried = true;
    }
  }
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::reclaim() {
  {
    const scoped_device on(pool_.device());
    CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), describe());
  }
  pool_.trim_to(0);
}

template <class T, class Out, class Batch>
template <class U>
pinned_buffer<U> batch_pipeline<T, Out, Batch>::staging(std::size_t count,
                                                        stream_ref stream) const {
  if (staging_pool_ == nullptr) return pinned_buffer<U>(count);
  return pinned_buffer<U>(stream, count, memory_pool_ref(staging_pool_, staging_device_));
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::allocate_slots(std::size_t depth) {
  const std::size_t n = depth < plan_.batch_count() ? depth : plan_.batch_count();
  const std::size_t elements = plan_.largest_elements();
  const std::size_t results = has_output ? plan_.out_count(plan_.largest()) : 0;
  slots_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    slot s;
    s.in = device_buffer<T>(device_allocation(*copy_, bytes_of<T>(elements, "cuscope::batches"),
                                              pool_, accounting_, "batch input", call_site{}));
    if (kind_ != source_kind::direct) s.staging = staging<T>(elements, *copy_);
    if (has_output) {
      s.out = device_buffer<out_t>(
          device_allocation(*copy_, bytes_of<out_t>(results, "cuscope::batches"), pool_,
                            accounting_, "batch results", call_site{}));
      s.out_staging = staging<out_t>(results, *results_);
      s.unloaded.emplace();
    }
    slots_.push_back(std::move(s));
  }
}

template <class T, class Out, class Batch>
template <class F>
void batch_pipeline<T, Out, Batch>::guarded(F&& step) {
  try {
    step();
  } catch (...) {
    failed_ = true;
    done_ = true;
    throw;
  }
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::start() {
  if (plan_.batch_count() == 0) {
    done_ = true;
    finished_ = true;
    return;
  }
  for (std::size_t k = 0; k < slots_.size(); ++k)
    load(k);
  present(0);
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::load(std::size_t k) {
  slot& s = slot_of(k);
  const std::size_t samples = plan_.samples_in(k);
  const std::size_t elements = samples * plan_.sample_elements();
  const std::size_t first = k * plan_.batch_size();
  const T* from =
      kind_ == source_kind::produced ? nullptr : host_ + first * plan_.sample_elements();
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

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::present(std::size_t k) {
  slot& s = slot_of(k);
  const stream_ref user(stream_);
  user.wait(s.loaded);
  if (has_output && s.was_unloaded) user.wait(*s.unloaded);
  const std::size_t samples = plan_.samples_in(k);
  batch_view<T, out_t> b;
  b.data = s.in.data();
  b.size = samples * plan_.sample_elements();
  b.index = k;
  b.first_sample = k * plan_.batch_size();
  b.offset = b.first_sample * plan_.sample_elements();
  b.samples = samples;
  b.stream = stream_;
  if (has_output) {
    b.out = s.out.data();
    b.out_size = plan_.out_count(samples);
  }
  view_ = Batch(b);
  current_ = k;
  unreturned_ = k;
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::hand_back(std::size_t k) {
  slot& s = slot_of(k);
  s.consumed.record(stream_ref(stream_));
  s.was_consumed = true;
  if constexpr (!has_output) {
    unreturned_ = none;
  } else {
    if (s.pending_result != none) drain(s);
    results_->wait(s.consumed);
    const std::size_t n = plan_.out_count(plan_.samples_in(k));
    if (n != 0)
      CUSCOPE_DETAIL_TRY_FOR(cudaMemcpyAsync(s.out_staging.data(), s.out.data(), n * sizeof(out_t),
                                             cudaMemcpyDefault, results_->get()),
                             describe());
    s.unloaded->record(*results_);
    s.was_unloaded = true;
    s.pending_result = k;
    unreturned_ = none;
  }
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::drain(slot& s) {
  s.unloaded->synchronize();
  const std::size_t k = s.pending_result;
  const std::size_t n = plan_.out_count(plan_.samples_in(k));
  if (n != 0) std::memcpy(out_data_ + plan_.out_offset(k), s.out_staging.data(), n * sizeof(out_t));
  s.pending_result = none;
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::drain_all() {
  if constexpr (has_output) {
    for (slot& s : slots_)
      if (s.pending_result != none) drain(s);
  }
}

template <class T, class Out, class Batch>
bool batch_pipeline<T, Out, Batch>::deliver_sync() noexcept {
  if constexpr (!has_output) {
    return true;
  } else {
    const char* object = "cuscope::batch_range";
    // The user's work, and the copies of results already enqueued, must have run.
    {
      const stream_device_guard_nothrow on(stream_, pool_.device());
      if (!CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(stream_), object, this)) return false;
    }
    if (!CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(results_->get()), object, this)) return false;
    for (slot& s : slots_) {
      if (s.pending_result == none) continue;
      const std::size_t k = s.pending_result;
      const std::size_t n = plan_.out_count(plan_.samples_in(k));
      if (n != 0)
        std::memcpy(out_data_ + plan_.out_offset(k), s.out_staging.data(), n * sizeof(out_t));
      s.pending_result = none;
    }
    if (unreturned_ != none) {
      // Its results are still in its device buffer: the work after it has not been enqueued.
      const std::size_t k = unreturned_;
      const std::size_t n = plan_.out_count(plan_.samples_in(k));
      const device_switch_nothrow on(pool_.device());
      if (n != 0 && !CUSCOPE_DETAIL_CLEANUP_BYTES(
                        cudaMemcpy(out_data_ + plan_.out_offset(k), slot_of(k).out.data(),
                                   n * sizeof(out_t), cudaMemcpyDefault),
                        object, this, n * sizeof(out_t)))
        return false;
      unreturned_ = none;
    }
    return true;
  }
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::abandon(std::size_t bytes, const void* p) noexcept {
  if (p != nullptr)
    report_cleanup("batch_range: a buffer that enqueued work may still use is not freed",
                   "cuscope::batch_range", p, cudaSuccess,
                   "the streams that use it could not be waited for", __FILE__, __LINE__, bytes);
}

template <class T, class Out, class Batch>
void batch_pipeline<T, Out, Batch>::release() noexcept {
  if (!copy_) return;
  if (started_ && !finished_ && !failed_ && std::uncaught_exceptions() <= exceptions_at_entry_) {
    try {
      finish();
    } catch (...) {
      if (deliver_sync())
        CUSCOPE_DETAIL_CLEANUP_CAUGHT(
            "batch_range::finish (every result delivered by synchronous copies instead)",
            "cuscope::batch_range", this);
      else
        CUSCOPE_DETAIL_CLEANUP_CAUGHT(
            "batch_range::finish (results of batches handed out are missing from the output)",
            "cuscope::batch_range", this);
    }
  }
  const char* object = "cuscope::batch_range";
  // The device buffers are freed only once nothing may read them any more: what was enqueued so
  // far on the user's stream and on the results stream. Each is waited for in stream order, or
  // else on the host; when neither can be had, the buffers are not freed but reported.
  bool safe = true;
  if (started_) {
    bool ordered = false;
    try {
      final_->record(stream_ref(stream_));
      copy_->wait(*final_);
      ordered = true;
    } catch (...) {
      CUSCOPE_DETAIL_CLEANUP_CAUGHT("batch_range: ordering the release after the user's stream",
                                    object, this);
    }
    if (!ordered) {
      const stream_device_guard_nothrow on(stream_, pool_.device());
      safe = CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(stream_), object, this);
    }
  }
  if (results_ && !CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(results_->get()), object, this)) {
    try {
      copy_->wait(results_->ref());
    } catch (...) {
      CUSCOPE_DETAIL_CLEANUP_CAUGHT("batch_range: ordering the release after the results stream",
                                    object, this);
      safe = false;
    }
  }
  for (slot& s : slots_) {
    if (safe) {
      s.in = device_buffer<T>();  // freed in order on the copy stream
      s.out = device_buffer<out_t>();
    } else {
      abandon(s.in.size_bytes(), s.in.release());
      abandon(s.out.size_bytes(), s.out.release());
    }
  }
  // The copies read the staging buffers, and the frees must have completed for a session
  // around the loop to see the memory back in the pool. cudaFreeHost is not promised to wait
  // for the copies: without a synchronization (of the copy stream, else of the device) the
  // staging buffers are not freed but reported.
  if (!CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(copy_->get()), object, this)) {
    const device_switch_nothrow on(pool_.device());
    if (!on.ok() || !CUSCOPE_DETAIL_CLEANUP(cudaDeviceSynchronize(), object, this)) {
      for (slot& s : slots_) {
        abandon(s.staging.size_bytes(), s.staging.release());
        abandon(s.out_staging.size_bytes(), s.out_staging.release());
      }
    }
  }
  slots_.clear();
  final_.reset();
  results_.reset();
  copy_.reset();
  if (accounting_ != nullptr) std::exchange(accounting_, nullptr)->end();
}

}  // namespace cuscope::detail
#endif  // CUSCOPE_DETAIL_HOST_CODE
