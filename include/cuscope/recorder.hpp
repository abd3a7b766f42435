// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief recorder: a bounded, thread-safe timeline of what pools and sessions did with memory
/// (allocations, frees, synchronizations, trims, threshold changes, sessions, out-of-memory
/// errors and retries, and samples of pool and device memory), for trace.hpp to export.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/config.hpp"
#include "detail/recorder_hook.hpp"
#include "device.hpp"

namespace cuscope {

/// @brief What a memory_event records.
enum class memory_event_kind : std::uint8_t {
  allocate,       ///< ptr, bytes allocated from pool on stream; scope is the session, if any.
  free,           ///< ptr, bytes freed in stream order on stream (enqueued, not yet run).
  synchronize,    ///< stream synchronized: frees enqueued on it before have run. A null stream
                  ///< with value 1 stands for the whole device.
  trim,           ///< pool trimmed keeping bytes; value is its reserve after the trim.
  set_threshold,  ///< pool's release threshold set to bytes.
  session_begin,  ///< session scope began on pool (names: recorder::sessions()).
  session_end,    ///< session scope ended; bytes and value are its leaked bytes and allocations.
  out_of_memory,  ///< an allocation of bytes from pool failed.
  retry,          ///< an allocation of bytes from pool is retried after a synchronization and trim.
  sample,         ///< pool's used bytes (bytes) and reserved bytes (value), the device's free
                  ///< memory (device_free).
};

/// @brief The name of a memory_event_kind ("allocate", "free"...).
[[nodiscard]] inline const char* to_string(memory_event_kind k) noexcept {
  switch (k) {
    case memory_event_kind::allocate:
      return "allocate";
    case memory_event_kind::free:
      return "free";
    case memory_event_kind::synchronize:
      return "synchronize";
    case memory_event_kind::trim:
      return "trim";
    case memory_event_kind::set_threshold:
      return "set_threshold";
    case memory_event_kind::session_begin:
      return "session_begin";
    case memory_event_kind::session_end:
      return "session_end";
    case memory_event_kind::out_of_memory:
      return "out_of_memory";
    case memory_event_kind::retry:
      return "retry";
    case memory_event_kind::sample:
      return "sample";
  }
  return "unknown";
}

/// @brief One entry of a recorder's timeline. Fields a kind does not use are zero.
struct memory_event {
  std::int64_t time_ns = 0;                              ///< Since the recorder was made.
  memory_event_kind kind = memory_event_kind::allocate;  ///< What happened.
  std::uint32_t scope = 0;        ///< Session id (recorder::sessions()); 0 for none.
  int device = 0;                 ///< The device.
  cudaMemPool_t pool = nullptr;   ///< The pool, as a value (never dereferenced).
  cudaStream_t stream = nullptr;  ///< The stream, as a value.
  const void* ptr = nullptr;      ///< The allocation.
  std::size_t bytes = 0;          ///< See memory_event_kind.
  std::size_t value = 0;          ///< See memory_event_kind.
  std::size_t device_free = 0;    ///< sample: the device's free memory (cudaMemGetInfo).
};

/// @brief A session as the recorder knows it.
struct recorded_session {
  std::uint32_t id = 0;          ///< Its scope id, from 1.
  std::uint32_t parent = 0;      ///< The enclosing session's id; 0 for none.
  std::string name;              ///< session_options::name.
  int device = 0;                ///< The device of its pool.
  cudaMemPool_t pool = nullptr;  ///< Its pool, as a value.
};

/// @brief How a recorder is made.
struct recorder_options {
  /// @brief Events kept; rounded up to a power of two. The ring holds the most recent ones and
  /// counts those it dropped. Each takes 72 bytes, all allocated when the recorder is made.
  std::size_t capacity = std::size_t{1} << 16;
  /// @brief Least time between two samples of pool and device memory taken on an allocation or
  /// a free (sessions, trims and errors always sample).
  std::chrono::nanoseconds sample_interval = std::chrono::milliseconds(10);
};

/// @brief A bounded timeline of memory events, written by the pools, buffers and sessions it is
/// attached to (memory_pool::set_recorder, session_options::recorder).
///
/// The ring of events is allocated when the recorder is made; recording allocates nothing and
/// takes no lock, from any number of threads. When it is full the oldest events are overwritten
/// and counted by dropped(). Pools, streams and pointers are kept as values: a recorder may
/// outlive everything it recorded. A recorder destroyed before the pools attached to it detaches
/// itself from them (no thread may be allocating from them then); it must outlive the sessions
/// that record into it. Not copyable or movable.
class recorder final : public detail::recorder_hook {
 public:
  /// @brief A recorder with options.
  /// @throws std::invalid_argument for a capacity of 0 or above 2^40.
  explicit recorder(recorder_options options = {});
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;
  recorder(recorder&&) = delete;
  recorder& operator=(recorder&&) = delete;
  ~recorder() override;

  /// @brief Events the ring holds.
  [[nodiscard]] std::size_t capacity() const noexcept { return mask_ + 1; }
  /// @brief Events recorded since the recorder was made, dropped ones included.
  [[nodiscard]] std::uint64_t recorded() const noexcept;
  /// @brief Events overwritten by newer ones: the oldest, once the ring is full.
  [[nodiscard]] std::uint64_t dropped() const noexcept;

  /// @brief The events the ring holds, oldest first. Events being written while it reads are
  /// left out. Allocates; takes no lock.
  [[nodiscard]] std::vector<memory_event> events() const;

  /// @brief The sessions that began while recording, by id.
  [[nodiscard]] std::vector<recorded_session> sessions() const;

  /// @brief Shows pool under name in exports ("activations"); the last name given wins.
  void name_pool(cudaMemPool_t pool, std::string name);

  /// @brief The names given by name_pool().
  [[nodiscard]] std::vector<std::pair<cudaMemPool_t, std::string>> pool_names() const;

  /// @brief Nanoseconds per tick of the recorder's clock, as last measured.
  [[nodiscard]] double nanoseconds_per_tick() const noexcept;

  // Recording. Called by pools, buffers and sessions; callable by anyone who allocates on their
  // own. None allocates or throws.

  // record_allocate(device, pool, stream, ptr, bytes, scope) and record_free(device, pool,
  // stream, ptr, bytes), the hot path, are detail::recorder_hook's.

  /// @brief Records that stream (every stream of device when whole_device) was synchronized:
  /// the frees enqueued on it before have run.
  void record_synchronize(int device, cudaStream_t stream, bool whole_device = false) noexcept;

  /// @brief Records a trim of pool keeping keep_bytes, then samples it.
  void record_trim(int device, cudaMemPool_t pool, std::size_t keep_bytes) noexcept;

  /// @brief Records a change of pool's release threshold to bytes.
  void record_threshold(int device, cudaMemPool_t pool, std::size_t bytes) noexcept;

  /// @brief Records a failed allocation of bytes from pool, then samples it.
  void record_out_of_memory(int device, cudaMemPool_t pool, cudaStream_t stream, std::size_t bytes,
                            std::uint32_t scope = 0) noexcept;

  /// @brief Records that a failed allocation of bytes is retried after a synchronization and trim.
  void record_retry(int device, cudaMemPool_t pool, cudaStream_t stream,
                    std::size_t bytes) noexcept;

  /// @brief Records the beginning of a session named name (nested in parent, 0 for none) and
  /// returns its id; samples the pool. Allocates (the name); returns 0, recording nothing, when
  /// that fails.
  [[nodiscard]] std::uint32_t begin_session(const std::string& name, std::uint32_t parent,
                                            int device, cudaMemPool_t pool) noexcept;

  /// @brief Records the end of session id, with leaked_allocations of leaked_bytes still live;
  /// samples its pool.
  void end_session(std::uint32_t id, std::size_t leaked_allocations,
                   std::size_t leaked_bytes) noexcept;

  /// @brief Records a sample of pool's used and reserved bytes and of device's free memory (a
  /// null pool samples the device only). Makes CUDA calls; restores the current device and
  /// clears only the errors it caused.
  void sample(int device, cudaMemPool_t pool) noexcept;

 private:
  // What pools, allocations and sessions call, through detail::recorder_hook.
  void on_trim(int device, cudaMemPool_t pool, std::size_t keep_bytes) noexcept override;
  void on_threshold(int device, cudaMemPool_t pool, std::size_t bytes) noexcept override;
  void on_retry(int device, cudaMemPool_t pool, cudaStream_t stream,
                std::size_t bytes) noexcept override;
  void on_out_of_memory(int device, cudaMemPool_t pool, cudaStream_t stream, std::size_t bytes,
                        std::uint32_t scope) noexcept override;

  // The steady clock's nanoseconds, the ticks where there is no time-stamp counter.
  static std::uint64_t steady_ticks() noexcept;

  // Converts ticks to nanoseconds with the rate measured between construction and now.
  void calibrate() const noexcept;

  // Out of line, so that recording an allocation or a free saves no registers for it.
  void sample_at(std::uint64_t now, std::uint64_t next, int device,
                 cudaMemPool_t pool) noexcept override;

  // The time of the sample after one at ticks t (saturated: never, past the counter's range).
  std::uint64_t after(std::uint64_t t) const noexcept;

  void put(std::uint64_t now, memory_event_kind kind, std::uint32_t scope, int device,
           cudaMemPool_t pool, cudaStream_t stream, const void* ptr, std::size_t bytes,
           std::size_t value, std::size_t device_free) noexcept;

  bool read(std::uint64_t i, memory_event& e) const noexcept;

  static_assert(static_cast<std::uint64_t>(memory_event_kind::allocate) == allocate_event &&
                    static_cast<std::uint64_t>(memory_event_kind::free) == free_event,
                "the hook writes allocations and frees with these codes");
  mutable std::atomic<double> ns_per_tick_{1.0};
  std::int64_t interval_ns_ = 0;
  std::uint64_t start_ticks_;
  std::chrono::steady_clock::time_point start_;
  // The sessions and the pools' names, under their lock; defined with the members, so that
  // nvcc's device passes need no <mutex>.
  struct names;
  names* names_ = nullptr;  // owned
};

}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
#  include <mutex>

namespace cuscope {

// Kept in containers of their own rather than std::vector, whose growth every translation unit
// that includes cuscope would instantiate; the exports build their vectors at their size.
struct recorder::names {
  struct pool_node {
    cudaMemPool_t pool;
    std::string name;
    pool_node* next;
  };

  names() = default;
  names(const names&) = delete;
  names& operator=(const names&) = delete;
  ~names() {
    delete[] sessions;
    while (pool_node* n = pools) {
      pools = n->next;
      delete n;
    }
  }

  // Appends s; its id is its index + 1. Throws std::bad_alloc, leaving the sessions as they were.
  void add_session(recorded_session s) {
    if (session_count == session_capacity) {
      const std::size_t capacity = session_capacity == 0 ? 16 : 2 * session_capacity;
      recorded_session* const bigger = new recorded_session[capacity];
      for (std::size_t i = 0; i < session_count; ++i)
        bigger[i] = std::move(sessions[i]);
      delete[] sessions;
      sessions = bigger;
      session_capacity = capacity;
    }
    sessions[session_count++] = std::move(s);
  }

  std::mutex mutex;
  recorded_session* sessions = nullptr;  // by id - 1: session_count of session_capacity in use
  std::size_t session_count = 0;
  std::size_t session_capacity = 0;
  pool_node* pools = nullptr;  // in the order they were first named
  pool_node** pools_end = &pools;
  std::size_t pool_count = 0;
};

inline recorder::~recorder() {
  detail::detach_hook(this);
  delete[] slots_;
  delete names_;
}

inline recorder::recorder(recorder_options options)
    : detail::recorder_hook(&steady_ticks),
      start_ticks_(ticks()),
      start_(std::chrono::steady_clock::now()) {
  if (options.capacity == 0 || options.capacity > (std::size_t{1} << 40))
    throw std::invalid_argument("cuscope::recorder: capacity must be between 1 and 2^40 events");
  std::size_t cap = 1;
  while (cap < options.capacity)
    cap <<= 1;
  mask_ = cap - 1;
  names_ = new names;
  try {
    slots_ = new slot[cap];
  } catch (...) {
    delete names_;
    throw;
  }
  for (std::size_t i = 0; i < cap; ++i)
    slots_[i].seq.store(0, std::memory_order_relaxed);
  interval_ns_ = options.sample_interval.count() < 0 ? 0 : options.sample_interval.count();
  calibrate();
  next_sample_.store(after(start_ticks_), std::memory_order_relaxed);
}

inline std::uint64_t recorder::recorded() const noexcept {
  return head_.load(std::memory_order_acquire);
}

inline std::uint64_t recorder::dropped() const noexcept {
  const std::uint64_t n = recorded();
  return n > capacity() ? n - capacity() : 0;
}

inline std::vector<memory_event> recorder::events() const {
  calibrate();
  const std::uint64_t end = recorded();
  const std::uint64_t begin = end > capacity() ? end - capacity() : 0;
  std::vector<memory_event> out(end - begin);
  std::size_t n = 0;
  for (std::uint64_t i = begin; i < end; ++i)
    if (read(i, out[n])) ++n;  // read writes every field, or fails before writing any
  while (out.size() > n)
    out.pop_back();
  return out;
}

inline std::vector<recorded_session> recorder::sessions() const {
  const std::lock_guard<std::mutex> lock(names_->mutex);
  std::vector<recorded_session> out(names_->session_count);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = names_->sessions[i];
  return out;
}

inline void recorder::name_pool(cudaMemPool_t pool, std::string name) {
  const std::lock_guard<std::mutex> lock(names_->mutex);
  for (names::pool_node* n = names_->pools; n != nullptr; n = n->next) {
    if (n->pool == pool) {
      n->name = std::move(name);
      return;
    }
  }
  *names_->pools_end = new names::pool_node{pool, std::move(name), nullptr};
  names_->pools_end = &(*names_->pools_end)->next;
  ++names_->pool_count;
}

inline std::vector<std::pair<cudaMemPool_t, std::string>> recorder::pool_names() const {
  const std::lock_guard<std::mutex> lock(names_->mutex);
  std::vector<std::pair<cudaMemPool_t, std::string>> out(names_->pool_count);
  std::size_t i = 0;
  for (const names::pool_node* n = names_->pools; n != nullptr; n = n->next) {
    out[i].first = n->pool;
    out[i].second = n->name;
    ++i;
  }
  return out;
}

inline double recorder::nanoseconds_per_tick() const noexcept {
  return ns_per_tick_.load(std::memory_order_relaxed);
}

inline void recorder::record_synchronize(int device, cudaStream_t stream,
                                         bool whole_device) noexcept {
  put(ticks(), memory_event_kind::synchronize, 0, device, nullptr, stream, nullptr, 0,
      whole_device ? 1 : 0, 0);
}

inline void recorder::record_trim(int device, cudaMemPool_t pool, std::size_t keep_bytes) noexcept {
  put(ticks(), memory_event_kind::trim, 0, device, pool, nullptr, nullptr, keep_bytes, 0, 0);
  sample(device, pool);
}

inline void recorder::record_threshold(int device, cudaMemPool_t pool, std::size_t bytes) noexcept {
  put(ticks(), memory_event_kind::set_threshold, 0, device, pool, nullptr, nullptr, bytes, 0, 0);
}

inline void recorder::record_out_of_memory(int device, cudaMemPool_t pool, cudaStream_t stream,
                                           std::size_t bytes, std::uint32_t scope) noexcept {
  put(ticks(), memory_event_kind::out_of_memory, scope, device, pool, stream, nullptr, bytes, 0, 0);
  sample(device, pool);
}

inline void recorder::record_retry(int device, cudaMemPool_t pool, cudaStream_t stream,
                                   std::size_t bytes) noexcept {
  put(ticks(), memory_event_kind::retry, 0, device, pool, stream, nullptr, bytes, 0, 0);
}

inline std::uint32_t recorder::begin_session(const std::string& name, std::uint32_t parent,
                                             int device, cudaMemPool_t pool) noexcept {
  std::uint32_t id = 0;
  try {
    const std::lock_guard<std::mutex> lock(names_->mutex);
    id = static_cast<std::uint32_t>(names_->session_count + 1);
    names_->add_session(recorded_session{id, parent, name, device, pool});
  } catch (...) {
    return 0;
  }
  put(ticks(), memory_event_kind::session_begin, id, device, pool, nullptr, nullptr, 0, 0, 0);
  sample(device, pool);
  return id;
}

inline void recorder::end_session(std::uint32_t id, std::size_t leaked_allocations,
                                  std::size_t leaked_bytes) noexcept {
  if (id == 0) return;
  int device = 0;
  cudaMemPool_t pool = nullptr;
  {
    const std::lock_guard<std::mutex> lock(names_->mutex);
    if (id > names_->session_count) return;
    device = names_->sessions[id - 1].device;
    pool = names_->sessions[id - 1].pool;
  }
  sample(device, pool);
  put(ticks(), memory_event_kind::session_end, id, device, pool, nullptr, nullptr, leaked_bytes,
      leaked_allocations, 0);
}

inline void recorder::sample(int device, cudaMemPool_t pool) noexcept {
  std::uint64_t used = 0;
  std::uint64_t reserved = 0;
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  bool failed = false;
  if (pool != nullptr) {
    failed =
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess;
  }
  {
    const detail::device_switch_nothrow on(device);
    if (!on.ok() || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) failed = true;
  }
  if (failed) {
    (void)cudaGetLastError();
    return;
  }
  put(ticks(), memory_event_kind::sample, 0, device, pool, nullptr, nullptr, used, reserved,
      free_bytes);
}

inline void recorder::on_trim(int device, cudaMemPool_t pool, std::size_t keep_bytes) noexcept {
  record_trim(device, pool, keep_bytes);
}

inline void recorder::on_threshold(int device, cudaMemPool_t pool, std::size_t bytes) noexcept {
  record_threshold(device, pool, bytes);
}

inline void recorder::on_retry(int device, cudaMemPool_t pool, cudaStream_t stream,
                               std::size_t bytes) noexcept {
  record_retry(device, pool, stream, bytes);
}

inline void recorder::on_out_of_memory(int device, cudaMemPool_t pool, cudaStream_t stream,
                                       std::size_t bytes, std::uint32_t scope) noexcept {
  record_out_of_memory(device, pool, stream, bytes, scope);
}

inline std::uint64_t recorder::steady_ticks() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

inline void recorder::calibrate() const noexcept {
  const std::uint64_t t = ticks();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start_)
                      .count();
  double rate = 1.0;
  if (t > start_ticks_ && ns > 0)
    rate = static_cast<double>(ns) / static_cast<double>(t - start_ticks_);
  // Too short an interval measures the clocks' granularity: keep the last rate until 10 us.
  if (ns < 10000) rate = ns_per_tick_.load(std::memory_order_relaxed);
  ns_per_tick_.store(rate, std::memory_order_relaxed);
  const double interval = static_cast<double>(interval_ns_) / rate;
  interval_ticks_.store(static_cast<std::uint64_t>(interval), std::memory_order_relaxed);
}

CUSCOPE_DETAIL_NOINLINE inline void recorder::sample_at(std::uint64_t now, std::uint64_t next,
                                                        int device, cudaMemPool_t pool) noexcept {
  // Taken by this thread: no other one samples until the next time is set.
  if (!next_sample_.compare_exchange_strong(next, ~std::uint64_t{0}, std::memory_order_relaxed))
    return;
  calibrate();
  next_sample_.store(after(now), std::memory_order_relaxed);
  sample(device, pool);
}

inline std::uint64_t recorder::after(std::uint64_t t) const noexcept {
  const std::uint64_t interval = interval_ticks_.load(std::memory_order_relaxed);
  return interval > ~std::uint64_t{0} - 1 - t ? ~std::uint64_t{0} - 1 : t + interval;
}

inline void recorder::put(std::uint64_t now, memory_event_kind kind, std::uint32_t scope,
                          int device, cudaMemPool_t pool, cudaStream_t stream, const void* ptr,
                          std::size_t bytes, std::size_t value, std::size_t device_free) noexcept {
  write(now, static_cast<std::uint64_t>(kind), scope, device, pool, stream, ptr, bytes, value,
        device_free);
}

inline bool recorder::read(std::uint64_t i, memory_event& e) const noexcept {
  const slot& s = slots_[i & mask_];
  const std::uint64_t before = s.seq.load(std::memory_order_acquire);
  if (before != 2 * i + 2) return false;
  std::uint64_t w[8];
  for (int k = 0; k < 8; ++k)
    w[k] = s.w[k].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.seq.load(std::memory_order_relaxed) != before) return false;
  const std::uint64_t since = w[0] >= start_ticks_ ? w[0] - start_ticks_ : 0;
  e.time_ns = static_cast<std::int64_t>(static_cast<double>(since) * nanoseconds_per_tick());
  e.kind = static_cast<memory_event_kind>(w[1] & 0xff);
  e.scope = static_cast<std::uint32_t>((w[1] >> 8) & 0xffffffffu);
  e.device = static_cast<int>(static_cast<std::uint32_t>(w[1] >> 40));
  e.pool = reinterpret_cast<cudaMemPool_t>(w[2]);
  e.stream = reinterpret_cast<cudaStream_t>(w[3]);
  e.ptr = reinterpret_cast<const void*>(w[4]);
  e.bytes = w[5];
  // Allocations and frees leave these words as an earlier event wrote them.
  const bool values = e.kind != memory_event_kind::allocate && e.kind != memory_event_kind::free;
  e.value = values ? w[6] : 0;
  e.device_free = values ? w[7] : 0;
  return true;
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE
