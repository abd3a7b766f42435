// SPDX-License-Identifier: Apache-2.0
// What the core headers know of a recorder: an interface its events go through, and the one
// process-wide table of which pool records into which recorder. A relaxed flag says whether any
// pool records at all, so that allocating with no recorder attached costs one load; the table
// itself is a short list, read without a lock while some pool records and changed under a spin
// lock when a recorder is attached or detached.
//
// The table is an inline variable: one per process where cuscope's symbols are shared (the
// default), one per shared library built with hidden visibility, whose pools are then recorded
// only by the code of that library.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "config.hpp"

namespace cuscope::detail {

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#  define CUSCOPE_DETAIL_RECORDER_TSC 1
#else
#  define CUSCOPE_DETAIL_RECORDER_TSC 0
#endif

/// Receives what pools, allocations and sessions do; cuscope::recorder implements it. None of
/// the calls allocates or throws.
///
/// Allocations and frees, the events of the hot path, are written into the recorder's ring here,
/// without a virtual call: the ring's writing half lives in this class, its reading half and every
/// other event in cuscope::recorder.
class recorder_hook {
 public:
  recorder_hook(const recorder_hook&) = delete;
  recorder_hook& operator=(const recorder_hook&) = delete;
  virtual ~recorder_hook() = default;

  /// @brief Records an allocation; samples the pool and device when sample_interval has passed.
  CUSCOPE_DETAIL_HOT_INLINE void record_allocate(int device, cudaMemPool_t pool,
                                                 cudaStream_t stream, const void* ptr,
                                                 std::size_t bytes,
                                                 std::uint32_t scope = 0) noexcept {
    const std::uint64_t now = ticks();
    write<false>(now, allocate_event, scope, device, pool, stream, ptr, bytes, 0, 0);
    maybe_sample(now, device, pool);
  }

  /// @brief Records a stream-ordered free, when it is enqueued.
  CUSCOPE_DETAIL_HOT_INLINE void record_free(int device, cudaMemPool_t pool, cudaStream_t stream,
                                             const void* ptr, std::size_t bytes) noexcept {
    const std::uint64_t now = ticks();
    write<false>(now, free_event, 0, device, pool, stream, ptr, bytes, 0, 0);
    maybe_sample(now, device, pool);
  }

  virtual void on_trim(int device, cudaMemPool_t pool, std::size_t keep_bytes) noexcept = 0;
  virtual void on_threshold(int device, cudaMemPool_t pool, std::size_t bytes) noexcept = 0;
  virtual void on_retry(int device, cudaMemPool_t pool, cudaStream_t stream,
                        std::size_t bytes) noexcept = 0;
  virtual void on_out_of_memory(int device, cudaMemPool_t pool, cudaStream_t stream,
                                std::size_t bytes, std::uint32_t scope) noexcept = 0;

 protected:
  // The codes of memory_event_kind::allocate and ::free (recorder.hpp checks them).
  static constexpr std::uint64_t allocate_event = 0;
  static constexpr std::uint64_t free_event = 1;

  using clock_fn = std::uint64_t (*)() noexcept;

  /// clock: the ticks where the CPU has no time-stamp counter cuscope reads (the steady clock's,
  /// given by the recorder, so that this header needs no <chrono>).
  explicit recorder_hook(clock_fn clock) noexcept : clock_(clock) {}

  // One event in eight words, each written and read atomically (relaxed), guarded by seq: 0 when
  // never written, 2i+1 while event i is written, 2i+2 once it is complete.
  struct slot {
    std::atomic<std::uint64_t> seq;
    std::atomic<std::uint64_t> w[8];
  };

  std::uint64_t ticks() const noexcept {
    // The time-stamp counter costs a few instructions where the steady clock costs a call; its
    // rate is measured against the steady clock when events are read.
#if CUSCOPE_DETAIL_RECORDER_TSC
    return static_cast<std::uint64_t>(__builtin_ia32_rdtsc());
#else
    return clock_();
#endif
  }

  static std::uint64_t bits(const void* p) noexcept {
    return reinterpret_cast<std::uintptr_t>(p);
  }

  // Values: whether the event's value and device_free words are written; allocations and frees
  // leave them as they were, and the reader takes them as 0 for those kinds.
  template <bool Values = true>
  CUSCOPE_DETAIL_HOT_INLINE void write(std::uint64_t now, std::uint64_t kind, std::uint32_t scope,
                                       int device, cudaMemPool_t pool, cudaStream_t stream,
                                       const void* ptr, std::size_t bytes, std::size_t value,
                                       std::size_t device_free) noexcept {
    const std::uint64_t i = head_.fetch_add(1, std::memory_order_acq_rel);
    slot& s = slots_[i & mask_];
    // Claims the slot: a writer of an older event that a full ring overtook gives up; one of a
    // newer event waits for the slot's current writer.
    std::uint64_t seq = s.seq.load(std::memory_order_relaxed);
    for (;;) {
      if (seq >= 2 * i + 1) return;  // counted by dropped(): the ring has wrapped past i
      if ((seq & 1) != 0) {
        seq = s.seq.load(std::memory_order_relaxed);
        continue;
      }
      if (s.seq.compare_exchange_weak(seq, 2 * i + 1, std::memory_order_acquire,
                                      std::memory_order_relaxed))
        break;
    }
    std::atomic_thread_fence(std::memory_order_release);
    s.w[0].store(now, std::memory_order_relaxed);
    s.w[1].store(kind | (std::uint64_t{scope} << 8) |
                     (static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 40),
                 std::memory_order_relaxed);
    s.w[2].store(bits(pool), std::memory_order_relaxed);
    s.w[3].store(bits(stream), std::memory_order_relaxed);
    s.w[4].store(bits(ptr), std::memory_order_relaxed);
    s.w[5].store(bytes, std::memory_order_relaxed);
    if constexpr (Values) {
      s.w[6].store(value, std::memory_order_relaxed);
      s.w[7].store(device_free, std::memory_order_relaxed);
    }
    s.seq.store(2 * i + 2, std::memory_order_release);
  }

  /// Samples the pool and the device at now, unless another thread took the sample due at next
  /// (called once now has reached next; out of line in the recorder).
  virtual void sample_at(std::uint64_t now, std::uint64_t next, int device,
                         cudaMemPool_t pool) noexcept = 0;

  slot* slots_ = nullptr;  // the ring, owned by the recorder
  std::size_t mask_ = 0;
  clock_fn clock_;
  alignas(64) std::atomic<std::uint64_t> head_{0};
  alignas(64) std::atomic<std::uint64_t> next_sample_{0};  // ticks; ~0 while one is taken
  mutable std::atomic<std::uint64_t> interval_ticks_{0};

 private:
  void maybe_sample(std::uint64_t now, int device, cudaMemPool_t pool) noexcept {
    const std::uint64_t next = next_sample_.load(std::memory_order_relaxed);
    if (now >= next) sample_at(now, next, device, pool);
  }
};

/// Where an allocation is recorded: into hook under the session id scope, or, with no hook, into
/// the recorder attached to the pool (if any) under no session.
struct alloc_tally;
struct record_target {
  recorder_hook* hook = nullptr;
  std::uint32_t scope = 0;
  /// The retries of the session the allocation is for (and of those it is nested in); nullptr
  /// for an allocation no session counts.
  alloc_tally* tally = nullptr;
};

/// A session's count of allocations that its pool retried (alloc_policy::retry_after_trim, an
/// out-of-memory handler) and of those it refused (out_of_memory from CUDA, after any retry),
/// linked to the count of the session it is nested in.
struct alloc_tally {
  std::atomic<std::size_t> retries{0};
  std::atomic<std::size_t> refusals{0};
  alloc_tally* parent = nullptr;

  static void retried(const record_target& target) noexcept {
    for (alloc_tally* t = target.tally; t != nullptr; t = t->parent)
      t->retries.fetch_add(1, std::memory_order_relaxed);
  }
  static void refused(const record_target& target) noexcept {
    for (alloc_tally* t = target.tally; t != nullptr; t = t->parent)
      t->refusals.fetch_add(1, std::memory_order_relaxed);
  }
};

// An entry of the table. Entries are never freed: a detached one is left empty and reused by a
// later attachment, so that lookups walk the list without a lock (the list only grows, at its
// head). There are as many as pools were ever recorded at once.
struct hook_entry {
  std::atomic<cudaMemPool_t> pool{nullptr};
  std::atomic<recorder_hook*> hook{nullptr};
  hook_entry* next = nullptr;
};

struct hook_table {
  std::atomic<bool> any{false};     // whether some entry is in use; read relaxed
  std::atomic<bool> locked{false};  // serializes attachments and detachments
  std::atomic<hook_entry*> head{nullptr};
  std::size_t in_use = 0;  // under the lock
};

inline hook_table recorder_table;  // constant-initialized

class hook_table_lock {
 public:
  hook_table_lock() noexcept {
    while (recorder_table.locked.exchange(true, std::memory_order_acquire))
      while (recorder_table.locked.load(std::memory_order_relaxed)) {
      }
  }
  hook_table_lock(const hook_table_lock&) = delete;
  hook_table_lock& operator=(const hook_table_lock&) = delete;
  ~hook_table_lock() { recorder_table.locked.store(false, std::memory_order_release); }
};

// Without a lock: an entry is filled hook first, then pool (release), and emptied pool first.
inline recorder_hook* find_hook(cudaMemPool_t pool) noexcept {
  for (const hook_entry* e = recorder_table.head.load(std::memory_order_acquire); e != nullptr;
       e = e->next)
    if (e->pool.load(std::memory_order_acquire) == pool)
      return e->hook.load(std::memory_order_relaxed);
  return nullptr;
}

/// Whether any pool records: one relaxed load. A pool attached on another thread may be seen a
/// little late, as with any relaxed flag; its own thread sees it at once.
inline bool any_pool_recorded() noexcept {
  return recorder_table.any.load(std::memory_order_relaxed);
}

/// Whether an operation recorded into target (or, with no hook, into its pool's recorder) may
/// have somewhere to go. The hot paths test this and call the notify_ functions only when true.
inline bool may_record(record_target target = {}) noexcept {
  return target.hook != nullptr || any_pool_recorded();
}

/// The recorder attached to pool; nullptr for none. One relaxed load while no pool records.
inline recorder_hook* hook_for(cudaMemPool_t pool) noexcept {
  return any_pool_recorded() ? find_hook(pool) : nullptr;
}

/// The hook of target, else the one attached to pool.
inline recorder_hook* hook_for(cudaMemPool_t pool, record_target target) noexcept {
  return target.hook != nullptr ? target.hook : hook_for(pool);
}

// Out of line, so that the hot paths keep only the tests of record_allocate and record_free.

CUSCOPE_DETAIL_NOINLINE inline void notify_allocate(record_target target, int device,
                                                    cudaMemPool_t pool, cudaStream_t stream,
                                                    const void* ptr, std::size_t bytes) noexcept {
  if (recorder_hook* h = hook_for(pool, target))
    h->record_allocate(device, pool, stream, ptr, bytes, target.scope);
}

CUSCOPE_DETAIL_NOINLINE inline void notify_free(record_target target, int device,
                                                cudaMemPool_t pool, cudaStream_t stream,
                                                const void* ptr, std::size_t bytes) noexcept {
  if (recorder_hook* h = hook_for(pool, target)) h->record_free(device, pool, stream, ptr, bytes);
}

/// Records an allocation or a free of memory no session counts into the recorder attached to
/// pool, if any (the caller has seen any_pool_recorded()).
CUSCOPE_DETAIL_NOINLINE inline void notify_pool_allocate(int device, cudaMemPool_t pool,
                                                         cudaStream_t stream, const void* ptr,
                                                         std::size_t bytes) noexcept {
  if (recorder_hook* h = find_hook(pool)) h->record_allocate(device, pool, stream, ptr, bytes);
}
CUSCOPE_DETAIL_NOINLINE inline void notify_pool_free(int device, cudaMemPool_t pool,
                                                     cudaStream_t stream, const void* ptr,
                                                     std::size_t bytes) noexcept {
  if (recorder_hook* h = find_hook(pool)) h->record_free(device, pool, stream, ptr, bytes);
}

/// Records an allocation into target: into its session's recorder in place, else into the one
/// attached to pool, looked up out of line. What the hot paths call.
CUSCOPE_DETAIL_HOT_INLINE inline void record_allocate(record_target target, int device,
                                                      cudaMemPool_t pool, cudaStream_t stream,
                                                      const void* ptr, std::size_t bytes) noexcept {
  if (target.hook != nullptr)
    target.hook->record_allocate(device, pool, stream, ptr, bytes, target.scope);
  else if (any_pool_recorded())
    notify_pool_allocate(device, pool, stream, ptr, bytes);
}

/// Records a free into target, as record_allocate(target, ...) does.
CUSCOPE_DETAIL_HOT_INLINE inline void record_free(record_target target, int device,
                                                  cudaMemPool_t pool, cudaStream_t stream,
                                                  const void* ptr, std::size_t bytes) noexcept {
  if (target.hook != nullptr)
    target.hook->record_free(device, pool, stream, ptr, bytes);
  else if (any_pool_recorded())
    notify_pool_free(device, pool, stream, ptr, bytes);
}

// Empties the entries that match; called with the lock held.
template <class Match>
void empty_hooks(Match match) noexcept {
  for (hook_entry* e = recorder_table.head.load(std::memory_order_relaxed); e != nullptr;
       e = e->next) {
    const cudaMemPool_t pool = e->pool.load(std::memory_order_relaxed);
    if (pool == nullptr || !match(pool, e->hook.load(std::memory_order_relaxed))) continue;
    e->pool.store(nullptr, std::memory_order_relaxed);
    e->hook.store(nullptr, std::memory_order_relaxed);
    --recorder_table.in_use;
  }
  recorder_table.any.store(recorder_table.in_use != 0, std::memory_order_relaxed);
}

/// Records pool's operations into hook from now on (pool != nullptr, hook != nullptr).
/// Throws std::bad_alloc.
inline void attach_hook(cudaMemPool_t pool, recorder_hook* hook) {
  hook_entry* fresh = new hook_entry;  // before the lock; deleted when an empty entry is reused
  {
    const hook_table_lock lock;
    empty_hooks([pool](cudaMemPool_t p, const recorder_hook*) { return p == pool; });
    hook_entry* e = recorder_table.head.load(std::memory_order_relaxed);
    while (e != nullptr && e->pool.load(std::memory_order_relaxed) != nullptr)
      e = e->next;
    if (e == nullptr) {
      e = std::exchange(fresh, nullptr);
      e->next = recorder_table.head.load(std::memory_order_relaxed);
      recorder_table.head.store(e, std::memory_order_release);
    }
    e->hook.store(hook, std::memory_order_relaxed);
    e->pool.store(pool, std::memory_order_release);
    ++recorder_table.in_use;
    recorder_table.any.store(true, std::memory_order_relaxed);
  }
  delete fresh;
}

/// Stops recording pool.
inline void detach_pool(cudaMemPool_t pool) noexcept {
  const hook_table_lock lock;
  empty_hooks([pool](cudaMemPool_t p, const recorder_hook*) { return p == pool; });
}

/// Stops recording into hook, whatever the pool (a recorder being destroyed).
inline void detach_hook(const recorder_hook* hook) noexcept {
  const hook_table_lock lock;
  empty_hooks([hook](cudaMemPool_t, const recorder_hook* h) { return h == hook; });
}

}  // namespace cuscope::detail
