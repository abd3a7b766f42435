// SPDX-License-Identifier: Apache-2.0
// What the core headers know of a recorder: an interface its events go through, and the one
// process-wide table of which pool records into which recorder. One pointer, null while no pool
// records, is where a lookup starts, so that allocating with no recorder attached costs one load;
// the table itself is a short list, read without a lock while some pool records and changed under
// a spin lock when a recorder is attached or detached.
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

  /// @brief The device as an event's kind word holds it.
  static constexpr std::uint64_t device_bits(int device) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 40;
  }

  /// @brief As record_allocate(device, pool, stream, ptr, bytes), for memory no session counts;
  /// device given as device_bits(device).
  CUSCOPE_DETAIL_HOT_INLINE void record_pool_allocate(std::uint64_t device, cudaMemPool_t pool,
                                                      cudaStream_t stream, const void* ptr,
                                                      std::size_t bytes) noexcept {
    const std::uint64_t now = ticks();
    write_word(now, allocate_event | device, pool, stream, ptr, bytes);
    maybe_sample(now, device, pool);
  }

  /// @brief As record_free(device, pool, stream, ptr, bytes); device given as device_bits(device).
  CUSCOPE_DETAIL_HOT_INLINE void record_pool_free(std::uint64_t device, cudaMemPool_t pool,
                                                  cudaStream_t stream, const void* ptr,
                                                  std::size_t bytes) noexcept {
    const std::uint64_t now = ticks();
    write_word(now, free_event | device, pool, stream, ptr, bytes);
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
    // The word is put together here, once the slot is claimed, rather than passed in as
    // write_word() takes it: g++ then keeps fewer values across the claim.
    s.w[1].store(kind | (std::uint64_t{scope} << 8) | device_bits(device),
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

  // An allocation or a free, as write<false>(), with the kind and device already in the word that
  // holds them (the pool's paths, where hook_entry keeps the device so).
  CUSCOPE_DETAIL_HOT_INLINE void write_word(std::uint64_t now, std::uint64_t word,
                                            cudaMemPool_t pool, cudaStream_t stream,
                                            const void* ptr, std::size_t bytes) noexcept {
    const std::uint64_t i = head_.fetch_add(1, std::memory_order_acq_rel);
    slot& s = slots_[i & mask_];
    const std::uint64_t claimed = 2 * i + 1;  // as write()'s claim
    std::uint64_t seq = s.seq.load(std::memory_order_relaxed);
    for (;;) {
      if (seq >= claimed) return;
      if ((seq & 1) != 0) {
        seq = s.seq.load(std::memory_order_relaxed);
        continue;
      }
      if (s.seq.compare_exchange_weak(seq, claimed, std::memory_order_acquire,
                                      std::memory_order_relaxed))
        break;
    }
    std::atomic_thread_fence(std::memory_order_release);
    s.w[0].store(now, std::memory_order_relaxed);
    s.w[1].store(word, std::memory_order_relaxed);
    s.w[2].store(bits(pool), std::memory_order_relaxed);
    s.w[3].store(bits(stream), std::memory_order_relaxed);
    s.w[4].store(bits(ptr), std::memory_order_relaxed);
    s.w[5].store(bytes, std::memory_order_relaxed);
    s.seq.store(claimed + 1, std::memory_order_release);
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
  // device: device_bits(device).
  void maybe_sample(std::uint64_t now, std::uint64_t device, cudaMemPool_t pool) noexcept {
    const std::uint64_t next = next_sample_.load(std::memory_order_relaxed);
    if (now >= next) sample_at(now, next, static_cast<int>(device >> 40), pool);
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
  // The pool's device, as an event's kind word holds it (recorder_hook::device_bits), so that
  // the pool's own paths need not pass it.
  std::atomic<std::uint64_t> device_bits{0};
  hook_entry* next = nullptr;
};

struct hook_table {
  // head while some entry is in use, else nullptr: the test of the hot paths and where their
  // lookup starts, in one load.
  std::atomic<const hook_entry*> active{nullptr};
  // Whether active is not nullptr, as a byte: any_pool_recorded(), for the paths that only test
  // (g++ keeps a session's counted paths a little tighter with it). Read relaxed.
  std::atomic<bool> any{false};
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

/// The table's entries, nullptr while no pool records: one load (acquire, a plain load on
/// x86). A pool attached on another thread may be seen a little late; its own thread sees it at
/// once.
inline const hook_entry* recorded_pools() noexcept {
  return recorder_table.active.load(std::memory_order_acquire);
}

/// Whether any pool records: one relaxed load, seen as recorded_pools() is.
inline bool any_pool_recorded() noexcept {
  return recorder_table.any.load(std::memory_order_relaxed);
}

// Without a lock, from entries (not nullptr, from recorded_pools()): an entry is filled hook
// and device first, then pool (release), and emptied pool first.
inline recorder_hook* find_hook(const hook_entry* entries, cudaMemPool_t pool) noexcept {
  const hook_entry* e = entries;
  while (e->pool.load(std::memory_order_acquire) != pool)
    if ((e = e->next) == nullptr) return nullptr;
  return e->hook.load(std::memory_order_relaxed);
}

inline recorder_hook* find_hook(cudaMemPool_t pool) noexcept {
  const hook_entry* entries = recorded_pools();
  return entries != nullptr ? find_hook(entries, pool) : nullptr;
}

/// Whether an operation recorded into target (or, with no hook, into its pool's recorder) may
/// have somewhere to go. The hot paths test this and call the notify_ functions only when true.
inline bool may_record(record_target target = {}) noexcept {
  return target.hook != nullptr || any_pool_recorded();
}

/// The recorder attached to pool; nullptr for none. One load while no pool records.
inline recorder_hook* hook_for(cudaMemPool_t pool) noexcept {
  return find_hook(pool);
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
/// pool, if any, looked up in entries (not nullptr: what the caller's test of recorded_pools()
/// returned, so that the lookup loads nothing twice).
/// The event names the pool's device, as the entry keeps it. (entries comes third, in the register
/// that reading the time-stamp counter overwrites: the lookup is done with it by then.)
CUSCOPE_DETAIL_NOINLINE inline void notify_pool_allocate(cudaMemPool_t pool, cudaStream_t stream,
                                                         const hook_entry* entries, const void* ptr,
                                                         std::size_t bytes) noexcept {
  const hook_entry* e = entries;
  if (e->pool.load(std::memory_order_acquire) != pool) {
    do {
      if ((e = e->next) == nullptr) return;
    } while (e->pool.load(std::memory_order_acquire) != pool);
  }
  if (recorder_hook* h = e->hook.load(std::memory_order_relaxed))
    h->record_pool_allocate(e->device_bits.load(std::memory_order_relaxed), pool, stream, ptr,
                            bytes);
}
CUSCOPE_DETAIL_NOINLINE inline void notify_pool_free(cudaMemPool_t pool, cudaStream_t stream,
                                                     const hook_entry* entries, const void* ptr,
                                                     std::size_t bytes) noexcept {
  const hook_entry* e = entries;
  if (e->pool.load(std::memory_order_acquire) != pool) {
    do {
      if ((e = e->next) == nullptr) return;
    } while (e->pool.load(std::memory_order_acquire) != pool);
  }
  if (recorder_hook* h = e->hook.load(std::memory_order_relaxed))
    h->record_pool_free(e->device_bits.load(std::memory_order_relaxed), pool, stream, ptr, bytes);
}

/// Records an allocation into target: into its session's recorder in place, else into the one
/// attached to pool, looked up out of line. What the hot paths call.
CUSCOPE_DETAIL_HOT_INLINE inline void record_allocate(record_target target, int device,
                                                      cudaMemPool_t pool, cudaStream_t stream,
                                                      const void* ptr, std::size_t bytes) noexcept {
  if (target.hook != nullptr)
    target.hook->record_allocate(device, pool, stream, ptr, bytes, target.scope);
  else if (const hook_entry* entries = recorded_pools())
    notify_pool_allocate(pool, stream, entries, ptr, bytes);
}

/// Records a free into target, as record_allocate(target, ...) does.
CUSCOPE_DETAIL_HOT_INLINE inline void record_free(record_target target, int device,
                                                  cudaMemPool_t pool, cudaStream_t stream,
                                                  const void* ptr, std::size_t bytes) noexcept {
  if (target.hook != nullptr)
    target.hook->record_free(device, pool, stream, ptr, bytes);
  else if (const hook_entry* entries = recorded_pools())
    notify_pool_free(pool, stream, entries, ptr, bytes);
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
  recorder_table.active.store(
      recorder_table.in_use != 0 ? recorder_table.head.load(std::memory_order_relaxed) : nullptr,
      std::memory_order_release);
  recorder_table.any.store(recorder_table.in_use != 0, std::memory_order_relaxed);
}

/// Records pool's operations into hook from now on (pool != nullptr, hook != nullptr); device is
/// the pool's. Throws std::bad_alloc.
inline void attach_hook(cudaMemPool_t pool, int device, recorder_hook* hook) {
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
    e->device_bits.store(recorder_hook::device_bits(device), std::memory_order_relaxed);
    e->pool.store(pool, std::memory_order_release);
    ++recorder_table.in_use;
    recorder_table.active.store(recorder_table.head.load(std::memory_order_relaxed),
                                std::memory_order_release);
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
