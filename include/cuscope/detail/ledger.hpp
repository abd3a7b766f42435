// SPDX-License-Identifier: Apache-2.0
// The count of a session's live allocations, shared with the buffers it made so that a buffer can
// outlive the session (a leak) without touching freed memory, and with the sessions nested in it
// so that a nested session never touches its parent session's object.
#pragma once

#include <cuda_runtime_api.h>
#include <sched.h>  // sched_yield

#if defined(__linux__)
#  include <linux/membarrier.h>
#  include <sys/syscall.h>
#  include <unistd.h>
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>  // std::getenv
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../error.hpp"
#include "format.hpp"
#include "ledger_fwd.hpp"
#include "recorder_hook.hpp"

// The C++ ABI's registration of a thread-local destructor (what the compiler emits for a
// thread_local object), for a thread that counts while its thread-local objects are destroyed.
#if defined(__linux__) && (defined(__GLIBCXX__) || defined(_LIBCPP_VERSION))
#  define CUSCOPE_DETAIL_THREAD_ATEXIT 1
extern "C" int __cxa_thread_atexit(void (*)(void*), void*, void*) noexcept;
// As the compiler declares it for the destructors of static objects (C++ linkage, hidden: each
// shared library has its own).
extern void* __dso_handle __attribute__((__visibility__("hidden")));
#else
#  define CUSCOPE_DETAIL_THREAD_ATEXIT 0
#endif

// Under ThreadSanitizer the ledger synchronizes with atomic operations only, which it models
// (it does not model the process-wide barrier the ledger otherwise uses).
#if defined(__SANITIZE_THREAD__)
#  define CUSCOPE_DETAIL_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define CUSCOPE_DETAIL_TSAN 1
#  endif
#endif
#ifndef CUSCOPE_DETAIL_TSAN
#  define CUSCOPE_DETAIL_TSAN 0
#endif

namespace cuscope::detail {

/// One live allocation charged to a session: what a leak report names.
struct allocation_record {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  cudaStream_t stream = nullptr;
  const char* tag = nullptr;   // the caller's, a string that outlives the allocation
  const char* file = nullptr;  // the call site
  unsigned line = 0;           // the call site
};

/// A live allocation with the name of the session it was charged to.
struct named_record {
  allocation_record record;
  std::string session;
};

/// The CPU's hint that a thread is spinning.
inline void spin_pause(unsigned spins) noexcept {
  if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    (void)sched_yield();
  }
}

// Which thread is which, for the ledger: a number never given to another thread, with the address
// of the counter it came from (a program whose shared libraries each hold a copy of this header's
// statics still tells their threads apart).
CUSCOPE_DETAIL_NOINLINE inline std::uint64_t next_thread_number(const void*& source) noexcept {
  static std::atomic<std::uint64_t> next{1};
  source = &next;
  return next.fetch_add(1, std::memory_order_relaxed);
}

struct thread_identity {
  std::uint64_t number = 0;
  const void* source = nullptr;
  bool exiting = false;  // its thread-local objects are being destroyed (thread_token_holder)
};

// The calling thread's, as it is: number 0 until this_thread_identity() first numbers it.
inline thread_identity& this_thread_identity_storage() noexcept {
  static thread_local thread_identity me;  // constant-initialized: no guard
  return me;
}

inline thread_identity& this_thread_identity_mutable() noexcept {
  thread_identity& me = this_thread_identity_storage();
  if (me.number == 0) me.number = next_thread_number(me.source);
  return me;
}

inline const thread_identity& this_thread_identity() noexcept {
  return this_thread_identity_mutable();
}

/// Whether the ledger may use the process-wide memory barrier (Linux's membarrier, registered
/// once), which lets a thread count its own allocations without a locked instruction: the rare
/// side (a session's end) pays for the synchronization instead. Otherwise (another system, a
/// kernel or sandbox without it, ThreadSanitizer, or CUSCOPE_NO_MEMBARRIER set to 1 in the
/// environment) both sides use sequentially consistent fences and atomics.
inline bool asymmetric_fences() noexcept {
#if CUSCOPE_DETAIL_TSAN || !defined(__linux__) || !defined(__NR_membarrier)
  return false;
#else
  static const bool ready = [] {
    const char* off = std::getenv("CUSCOPE_NO_MEMBARRIER");
    if (off != nullptr && off[0] == '1' && off[1] == '\0') return false;
    return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0;
  }();
  return ready;
#endif
}

/// The heavy side of the fence: every thread of the process passes a full memory barrier.
/// Returns false when it could not (membarrier failed after it was registered).
inline bool process_fence(bool asymmetric) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
#if !(CUSCOPE_DETAIL_TSAN || !defined(__linux__) || !defined(__NR_membarrier))
  if (asymmetric) return syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0;
#else
  (void)asymmetric;
#endif
  return true;
}

struct ledger_stripe;
struct thread_token;

/// Ledgers' stripes alive in the process (for tests: a ledger keeps as many as threads counted
/// in it at once).
inline std::atomic<std::size_t>& live_stripes() noexcept {
  static std::atomic<std::size_t> n{0};
  return n;
}

/// One allocation's record in a ledger: written by the thread that made the allocation, then by
/// whoever holds it (its free, set_stream), and read by leak reports from any thread (a sequence
/// count tells them when they read a record being written).
struct ledger_record {
  std::atomic<unsigned> seq{0};           // odd while written
  std::atomic<const void*> ptr{nullptr};  // nullptr: not live
  std::atomic<std::size_t> bytes{0};
  std::atomic<cudaStream_t> stream{nullptr};
  std::atomic<const char*> tag{nullptr};
  std::atomic<const char*> file{nullptr};
  std::atomic<unsigned> line{0};
  // The allocation holds a reference to the ledger; false: it is freed by pointer (find()), not
  // through its record.
  std::atomic<bool> holds_ref{false};
  ledger_stripe* stripe = nullptr;  // where it lives
  // The thread that made it (thread_identity). A thread's number changes before the token its
  // stripes hold dies (thread_token_holder, exit_token_done), and a stripe passes to another
  // thread only once its token is dead: a thread whose number is still the maker's owns the
  // record's stripe, and made the record under that ownership. Written while the record is in
  // its stripe's free list, by the stripe's owner (ledger_stripe::name_maker), so that taking it
  // names its maker: every record in a free list names the stripe's owner.
  std::uint64_t maker = 0;
  const void* maker_source = nullptr;
  ledger_record* next_free = nullptr;  // in a free list

  /// Whether the calling thread made it (and so owns its stripe).
  CUSCOPE_DETAIL_HOT_INLINE bool made_here() const noexcept {
    const thread_identity& me = this_thread_identity_storage();
    return maker == me.number && maker_source == me.source;
  }

  // Writes by the record's holder (one thread at a time): begin_write() returns what
  // end_write() is given.
  unsigned begin_write() noexcept {
    const unsigned odd = seq.load(std::memory_order_relaxed) + 1;
    seq.store(odd, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    return odd;
  }
  void end_write(unsigned odd) noexcept { seq.store(odd + 1, std::memory_order_release); }

  /// A consistent copy; false when it is not live (or kept being rewritten).
  bool read(allocation_record& out) const noexcept {
    for (unsigned tries = 0; tries < 1000; ++tries) {
      const unsigned before = seq.load(std::memory_order_acquire);
      if ((before & 1u) != 0) {
        spin_pause(tries);
        continue;
      }
      // The address first: its holder stores it alone, with release, after the fields.
      out.ptr = ptr.load(std::memory_order_acquire);
      out.bytes = bytes.load(std::memory_order_relaxed);
      out.stream = stream.load(std::memory_order_relaxed);
      out.tag = tag.load(std::memory_order_relaxed);
      out.file = file.load(std::memory_order_relaxed);
      out.line = line.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq.load(std::memory_order_relaxed) == before) return out.ptr != nullptr;
    }
    return false;
  }
};

/// One thread's share of a ledger: the counts of the allocations it made (and freed itself) and
/// their records. Only its thread writes it, without a locked instruction; other threads read
/// it, and an allocation freed on another thread is counted in the ledger's shared counts and its
/// record handed back through remote_free.
struct alignas(64) ledger_stripe {
  ledger_stripe(const thread_identity& me, thread_token* t) noexcept : token(t) {
    own(me, t);
    live_stripes().fetch_add(1, std::memory_order_relaxed);
  }
  ledger_stripe(const ledger_stripe&) = delete;
  ledger_stripe& operator=(const ledger_stripe&) = delete;
  ~ledger_stripe();

  // Makes it the stripe of thread me, whose token is t (nullptr: never passed on); under the
  // ledger's lock, but for a new stripe.
  void own(const thread_identity& me, thread_token* t) noexcept;

  // Records come in chunks that never move: chunk k holds first_chunk << k of them.
  static constexpr unsigned first_chunk_bits = 5;
  static constexpr unsigned max_chunks = 27;

  // Its thread's changes to the counts below, each counted at its start and at its end
  // (a seqlock): odd while one is in progress. ledger::end() waits for it to be even;
  // ledger::live_snapshot() reads the counts between two readings of it that agree.
  std::atomic<std::size_t> seq{0};
  // Counted by its thread: what it allocated, less what it freed of that itself.
  std::atomic<std::size_t> bytes{0};  // live bytes, this ledger's and nested ones'
  std::atomic<std::size_t> peak{0};   // the most of bytes at once
  // This ledger's allocations made before its end, and of them those freed here before the end
  // (freed after made, with release: a reader that reads freed first, with acquire, never sees
  // more freed than made). Their difference is the count of those live, one store per
  // allocation and one per free: owned by an object (made, freed), and freed by pointer
  // (made_by_pointer, freed_by_pointer), which hold no reference.
  std::atomic<std::size_t> made{0};
  std::atomic<std::size_t> freed{0};
  std::atomic<std::size_t> made_by_pointer{0};
  std::atomic<std::size_t> freed_by_pointer{0};
  std::atomic<std::size_t> nested_count{0};          // nested ledgers' live allocations
  std::atomic<std::size_t> nested_made{0};           // nested ledgers' allocations, ever
  ledger_record* free_list = nullptr;                // its thread's
  std::atomic<ledger_record*> remote_free{nullptr};  // records freed on other threads
  std::atomic<std::uint32_t> published{0};           // records readers may look at
  std::uint32_t size = 0;                            // records handed out, ever
  std::atomic<std::uint64_t> owner{0};               // its thread (thread_identity)
  std::atomic<const void*> owner_source{nullptr};
  thread_token* token;            // whether its thread runs; under the ledger's lock
  ledger_stripe* next = nullptr;  // in the ledger's list
  std::atomic<ledger_record*> chunks[max_chunks] = {};

  // Its thread's: brackets a change to the counts (begin_write() returns what end_write() is
  // given). Only its thread writes seq, so a load and a store do where an atomic read-modify-write
  // would take a locked instruction. The release fence orders the odd value before the counts'
  // stores for a reader: one that reads any of them (then an acquire fence) reads this odd value,
  // or a later one, when it reads seq again. end_write() stores the even value with release: a
  // reader that reads it (with acquire) reads every count stored before it.
  CUSCOPE_DETAIL_HOT_INLINE std::size_t begin_write() noexcept {
    const std::size_t odd = seq.load(std::memory_order_relaxed) + 1;
    seq.store(odd, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    return odd;
  }
  CUSCOPE_DETAIL_HOT_INLINE void end_write(std::size_t odd) noexcept {
    seq.store(odd + 1, std::memory_order_release);
  }

  bool owned_by(const thread_identity& me) const noexcept {
    return owner.load(std::memory_order_relaxed) == me.number &&
           owner_source.load(std::memory_order_relaxed) == me.source;
  }

  static std::uint32_t chunk_of(std::uint32_t index) noexcept {
    const std::uint64_t t = (std::uint64_t{index} >> first_chunk_bits) + 1;
    return static_cast<std::uint32_t>(63 - __builtin_clzll(t));
  }
  static std::uint32_t chunk_start(std::uint32_t k) noexcept {
    return static_cast<std::uint32_t>(((std::uint64_t{1} << k) - 1) << first_chunk_bits);
  }

  ledger_record& record(std::uint32_t index) const noexcept {
    const std::uint32_t k = chunk_of(index);
    return chunks[k].load(std::memory_order_acquire)[index - chunk_start(k)];
  }

  // Its thread's: makes sure a free record is there for take(); throws std::bad_alloc.
  void reserve() {
    if (free_list != nullptr) return;
    if (remote_free.load(std::memory_order_relaxed) != nullptr) {
      free_list = remote_free.exchange(nullptr, std::memory_order_acquire);
      name_maker(free_list);
    } else {
      ledger_record& r = grow();
      r.next_free = nullptr;
      name_maker(&r);
      put(r);
    }
  }

  // Its thread's (or, in own(), the ledger lock holder's): the records of the free list from
  // first on name the stripe's owner as their maker (see ledger_record::maker).
  void name_maker(ledger_record* first) const noexcept {
    const std::uint64_t number = owner.load(std::memory_order_relaxed);
    const void* const source = owner_source.load(std::memory_order_relaxed);
    for (ledger_record* r = first; r != nullptr; r = r->next_free) {
      r->maker = number;
      r->maker_source = source;
    }
  }

  // Its thread's, after reserve().
  ledger_record& take() noexcept {
    ledger_record& r = *free_list;
    free_list = r.next_free;
    return r;
  }

  // Its thread's.
  void put(ledger_record& r) noexcept {
    r.next_free = free_list;
    free_list = &r;
  }

  // Another thread's.
  void put_remote(ledger_record& r) noexcept {
    ledger_record* head = remote_free.load(std::memory_order_relaxed);
    do {
      r.next_free = head;
    } while (!remote_free.compare_exchange_weak(head, &r, std::memory_order_release,
                                                std::memory_order_relaxed));
  }

  CUSCOPE_DETAIL_NOINLINE ledger_record& grow() {
    const std::uint32_t index = size;
    const std::uint32_t k = chunk_of(index);
    if (k >= max_chunks) throw std::bad_alloc();
    if (chunks[k].load(std::memory_order_relaxed) == nullptr) {
      const std::size_t n = std::size_t{1} << (first_chunk_bits + k);
      ledger_record* const c = new ledger_record[n];
      for (std::size_t i = 0; i < n; ++i)
        c[i].stripe = this;
      chunks[k].store(c, std::memory_order_release);
    }
    size = index + 1;
    published.store(size, std::memory_order_release);
    return record(index);
  }

  // Its thread's: changes a count only it writes.
  CUSCOPE_DETAIL_HOT_INLINE static void add(std::atomic<std::size_t>& n,
                                            std::size_t by = 1) noexcept {
    n.store(n.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  CUSCOPE_DETAIL_HOT_INLINE static void sub(std::atomic<std::size_t>& n,
                                            std::size_t by = 1) noexcept {
    n.store(n.load(std::memory_order_relaxed) - by, std::memory_order_relaxed);
  }
  // A free of one of this ledger's allocations, before the end (see freed).
  // owned: freed (an allocation an object owns), else freed_by_pointer.
  CUSCOPE_DETAIL_HOT_INLINE void add_freed(bool owned) noexcept {
    std::atomic<std::size_t>& n = owned ? freed : freed_by_pointer;
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // An allocation of this ledger (owned: by an object, else freed by pointer).
  CUSCOPE_DETAIL_HOT_INLINE void add_made(bool owned) noexcept {
    add(owned ? made : made_by_pointer);
  }
  // This ledger's live allocations counted here that an object owns, read from another thread.
  std::size_t live_owned() const noexcept {
    const std::size_t f = freed.load(std::memory_order_acquire);
    return made.load(std::memory_order_relaxed) - f;
  }
  // All of this ledger's live allocations counted here.
  std::size_t live() const noexcept {
    const std::size_t f = freed_by_pointer.load(std::memory_order_acquire);
    return live_owned() + (made_by_pointer.load(std::memory_order_relaxed) - f);
  }
};

/// A thread's last stripes, by ledger (ledger ids are never reused, so a stale entry never
/// matches).
struct stripe_cache_entry {
  std::uint64_t ledger = 0;
  const void* source = nullptr;  // of the ledger's id (next_ledger_id)
  ledger_stripe* stripe = nullptr;
};
inline constexpr unsigned stripe_cache_size = 8;

inline stripe_cache_entry* this_thread_stripes() noexcept {
  static thread_local stripe_cache_entry cache[stripe_cache_size];  // constant-initialized
  return cache;
}

/// Whether a thread still runs, for the stripes it owns: once it has exited, a thread new to a
/// ledger takes over one of its stripes there (so that a ledger holds as many stripes as threads
/// ran at once, not as threads ever counted there). Held by the thread and by its stripes.
struct thread_token {
  std::atomic<bool> alive{true};
  std::atomic<std::size_t> refs{1};

  void retain() noexcept { refs.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

/// The thread's hold on its token, let go when the thread exits.
struct thread_token_holder {
  thread_token* token = nullptr;
  thread_token_holder() noexcept = default;
  thread_token_holder(const thread_token_holder&) = delete;
  thread_token_holder& operator=(const thread_token_holder&) = delete;
  ~thread_token_holder() {
    if (token == nullptr) {  // its making failed: the thread has no stripes
      this_thread_identity_mutable().exiting = true;
      return;
    }
    // Whatever the thread counts from here on (thread-local objects destroyed after this one)
    // goes under another identity, through stripes of its own: the ones it owned may pass to
    // another thread as soon as the token says it is gone.
    for (unsigned i = 0; i < stripe_cache_size; ++i)
      this_thread_stripes()[i] = stripe_cache_entry{};
    thread_identity& me = this_thread_identity_mutable();
    me.number = next_thread_number(me.source);
    me.exiting = true;
    token->alive.store(false, std::memory_order_release);
    std::exchange(token, nullptr)->release();
  }
};

// While its thread-local objects are destroyed, the thread counts under tokens that each die
// when the destructor that asked for one returns (__cxa_thread_atexit runs what is registered
// during those destructors right after the current one): a stripe it takes over then passes on
// again, rather than staying its for good.
inline thread_token*& this_thread_exit_token() noexcept {
  static thread_local thread_token* t = nullptr;  // constant-initialized, trivially destroyed
  return t;
}

inline void exit_token_done(void* p) noexcept {
  for (unsigned i = 0; i < stripe_cache_size; ++i)
    this_thread_stripes()[i] = stripe_cache_entry{};
  thread_identity& me = this_thread_identity_mutable();
  me.number = next_thread_number(me.source);
  this_thread_exit_token() = nullptr;
  auto* token = static_cast<thread_token*>(p);
  token->alive.store(false, std::memory_order_release);
  token->release();
}

/// The calling thread's token; nullptr while it exits and none can be had. Throws std::bad_alloc.
inline thread_token* this_thread_token() {
  if (this_thread_identity().exiting) {
#if CUSCOPE_DETAIL_THREAD_ATEXIT
    thread_token*& t = this_thread_exit_token();
    if (t != nullptr) return t;
    auto* fresh = new thread_token;
    if (__cxa_thread_atexit(&exit_token_done, fresh, &__dso_handle) != 0) {
      delete fresh;
      return nullptr;
    }
    return t = fresh;
#else
    return nullptr;  // a stripe it takes stays its own until the ledger goes
#endif
  }
  static thread_local thread_token_holder holder;
  if (holder.token == nullptr) holder.token = new thread_token;
  return holder.token;
}

inline ledger_stripe::~ledger_stripe() {
  live_stripes().fetch_sub(1, std::memory_order_relaxed);
  for (std::atomic<ledger_record*>& c : chunks)
    delete[] c.load(std::memory_order_relaxed);
  if (token != nullptr) token->release();
}

inline void ledger_stripe::own(const thread_identity& me, thread_token* t) noexcept {
  if (t != nullptr) t->retain();
  // Frees of what the last thread made are not this thread's own: their records name another
  // maker.
  if (token != nullptr && token != t) token->release();
  token = t;
  owner.store(me.number, std::memory_order_relaxed);
  owner_source.store(me.source, std::memory_order_relaxed);
  name_maker(free_list);
}

/// The live allocations of a ledger that are freed by pointer (session::allocate, the adaptors),
/// by address, so that a free finds its record in constant time however many are live: shards of
/// open-addressing tables (linear probing), each under a spin lock of its own, chosen by the
/// address. Only by-pointer allocations and their frees pay for it. A free leaves a tombstone
/// (one store, nothing moved), which the next insert on its way takes; a table whose entries and
/// tombstones fill half of it is rebuilt, at a quarter or less. Should a table fail to grow
/// (std::bad_alloc), its shard is marked incomplete and lookups there also scan the records.
class pointer_index {
 public:
  pointer_index() noexcept = default;
  pointer_index(const pointer_index&) = delete;
  pointer_index& operator=(const pointer_index&) = delete;
  ~pointer_index() {
    for (shard& s : shards_)
      if (s.mask != 0) delete[] s.slots;
  }

  /// Indexes r, live at ptr (its ptr already stored; not nullptr). Does not throw.
  CUSCOPE_DETAIL_HOT_INLINE void insert(const void* ptr, ledger_record* r) noexcept {
    const std::uint64_t h = hash(ptr);
    shard& s = shards_[h >> (64 - shard_bits)];
    s.lock();
    s.insert(ptr, r, h);
    s.unlock();
  }

  /// Takes the record indexed at ptr: its entry removed and its ptr set to nullptr, so that no
  /// other free by pointer takes it; nullptr when there is none. scan: how to look through every
  /// record when the shard is incomplete (a function called with the lock held, returning the
  /// record it took or nullptr).
  template <class Scan>
  CUSCOPE_DETAIL_HOT_INLINE ledger_record* take(const void* ptr, Scan&& scan) noexcept {
    // Neither nullptr nor the tombstone's address is ever indexed.
    if (reinterpret_cast<std::uintptr_t>(ptr) <= tombstone_bits) return nullptr;
    const std::uint64_t h = hash(ptr);
    shard& s = shards_[h >> (64 - shard_bits)];
    s.lock();
    ledger_record* r = s.take(ptr, h);
    if (r == nullptr && s.incomplete) r = scan();
    s.unlock();
    return r;
  }

 private:
  struct slot {
    const void* ptr;  // nullptr: empty; tombstone(): freed
    ledger_record* record;
  };

  static constexpr std::uintptr_t tombstone_bits = 1;
  static const void* tombstone() noexcept { return reinterpret_cast<const void*>(tombstone_bits); }

  static constexpr unsigned shard_bits = 3;

  // The table of a shard before its first entry (mask 0): one empty slot, never written (an
  // insert grows the table first), so that a lookup needs no test for a missing table. Each
  // shared library may have its own: only the mask tells it apart.
  static slot* empty_table() noexcept {
    static slot none[1] = {};  // constant-initialized
    return none;
  }

  struct alignas(64) shard {
    std::atomic<bool> locked{false};
    bool incomplete = false;
    slot* slots = empty_table();
    std::size_t mask = 0;              // capacity - 1 (a power of two); 0 for empty_table()
    unsigned shift = 64 - shard_bits;  // 64 - shard_bits - log2(capacity)
    std::size_t used = 0;              // slots not empty: entries and tombstones
    std::size_t limit = 0;  // the most used before the table is rebuilt: half the capacity

    // The wait out of line: the paths that take the lock keep their registers for the table.
    CUSCOPE_DETAIL_HOT_INLINE void lock() noexcept {
      if (locked.exchange(true, std::memory_order_acquire)) lock_contended();
    }
    CUSCOPE_DETAIL_NOINLINE void lock_contended() noexcept {
      for (unsigned spins = 0;;) {
        while (locked.load(std::memory_order_relaxed))
          spin_pause(spins++);
        if (!locked.exchange(true, std::memory_order_acquire)) return;
      }
    }
    void unlock() noexcept { locked.store(false, std::memory_order_release); }

    // The hash's bits below those that chose the shard.
    std::size_t home(std::uint64_t h) const noexcept { return (h >> shift) & mask; }

    // The first tombstone or empty slot on the way (an address is live once at a time: no entry
    // further on can hold it).
    // A tombstone taken leaves the fill as it is: only an empty slot taken may need a rebuild.
    CUSCOPE_DETAIL_HOT_INLINE void insert(const void* ptr, ledger_record* r,
                                          std::uint64_t h) noexcept {
      std::size_t i = probe(h);
      if (slots[i].ptr == nullptr) {
        if (used >= limit) {
          if (!rebuild()) {
            incomplete = true;
            return;
          }
          i = probe(h);
        }
        ++used;
      }
      slots[i].record = r;
      slots[i].ptr = ptr;
    }

    // The first tombstone or empty slot from the home of h on.
    std::size_t probe(std::uint64_t h) const noexcept {
      std::size_t i = home(h);
      while (reinterpret_cast<std::uintptr_t>(slots[i].ptr) > tombstone_bits)
        i = (i + 1) & mask;
      return i;
    }

    CUSCOPE_DETAIL_HOT_INLINE ledger_record* take(const void* ptr, std::uint64_t h) noexcept {
      for (std::size_t i = home(h);; i = (i + 1) & mask) {
        const void* const p = slots[i].ptr;
        if (p == ptr) {
          slots[i].ptr = tombstone();
          ledger_record* const r = slots[i].record;
          // Its ptr changes only under this lock once indexed: a scan (an incomplete shard) no
          // longer finds it either. An entry whose record no longer holds ptr is dropped.
          if (r->ptr.load(std::memory_order_relaxed) == ptr) {
            r->ptr.store(nullptr, std::memory_order_release);
            return r;
          }
        } else if (p == nullptr) {
          return nullptr;
        }
      }
    }

    // A table of at least four slots per entry (16 at least), the entries moved in and the
    // tombstones dropped: at least a quarter of it fills before the next rebuild.
    CUSCOPE_DETAIL_NOINLINE bool rebuild() noexcept {
      const std::size_t old_capacity = mask == 0 ? 0 : mask + 1;
      std::size_t live = 0;
      for (std::size_t i = 0; i < old_capacity; ++i)
        live += reinterpret_cast<std::uintptr_t>(slots[i].ptr) > tombstone_bits ? 1 : 0;
      std::size_t capacity = 16;
      unsigned bits = 4;
      while (capacity < 4 * (live + 1)) {
        capacity *= 2;
        ++bits;
      }
      slot* const fresh = new (std::nothrow) slot[capacity]();
      if (fresh == nullptr) return false;
      slot* const old = slots;
      slots = fresh;
      mask = capacity - 1;
      shift = 64 - shard_bits - bits;
      limit = capacity / 2;
      used = live;
      for (std::size_t i = 0; i < old_capacity; ++i) {
        if (reinterpret_cast<std::uintptr_t>(old[i].ptr) <= tombstone_bits) continue;
        std::size_t j = home(hash(old[i].ptr));
        while (slots[j].ptr != nullptr)
          j = (j + 1) & mask;
        slots[j] = old[i];
      }
      if (old_capacity != 0) delete[] old;
      return true;
    }
  };

  // Fibonacci hashing: the high bits of the product depend on every bit of the address (which
  // is aligned, to 256 bytes or more from a pool); the top ones choose the shard, the next ones
  // the slot.
  static std::uint64_t hash(const void* ptr) noexcept {
    const std::uint64_t address = reinterpret_cast<std::uintptr_t>(ptr);
    return address * 0x9E3779B97F4A7C15ull;
  }

  shard shards_[1u << shard_bits];
};

/// Ledgers alive in the process: each is deleted once, when its last holder lets it go (tests
/// check that it comes back to where it was).
inline std::atomic<std::size_t>& live_ledgers() noexcept {
  static std::atomic<std::size_t> n{0};
  return n;
}

// As next_thread_number: shared libraries that each hold a copy of this header's statics number
// their ledgers from 1 each, while a thread's stripe cache may be shared by all of them.
CUSCOPE_DETAIL_NOINLINE inline std::uint64_t next_ledger_id(const void*& source) noexcept {
  static std::atomic<std::uint64_t> next{1};
  source = &next;
  return next.fetch_add(1, std::memory_order_relaxed);
}

/// ledger::live_snapshot()'s default: nothing between its steps.
struct no_pause {
  void operator()() const noexcept {}
};

/// Live allocations and bytes charged to a session, with an optional budget that also counts
/// against every enclosing session's budget. Reference counted: the session holds one reference
/// (end() drops it), each nested session's ledger one on its parent's, each adaptor one, and,
/// once the session has ended, each allocation an object owns that outlives it.
///
/// Each thread that makes allocations through the ledger counts them in a stripe of its own
/// (ledger_stripe), which only it writes, with plain stores: an allocation and its free on the
/// same thread take no locked instruction, and threads sharing a session do not wait for each
/// other. The totals are sums over the stripes and the counts shared by frees made on another
/// thread than the allocation (which take atomic operations). While the session lives, the
/// allocations need not hold references: the session holds the ledger. At its end, end() makes
/// every thread's counting visible (a process-wide barrier, or sequentially consistent fences
/// where that is not available), waits for those in progress, and turns the allocations still
/// live into references; from then on each one holds its own. Each thread's counting is in a
/// sequence count of its stripe (a seqlock), and that of frees on other threads in one shared
/// word, so that a report reads the totals as one state (live_snapshot()).
///
/// Without a budget anywhere above it, an allocation is counted once made (enter); with one, its
/// bytes are checked and taken first (charge), in a count the threads share, so that a request
/// over budget never reaches the pool.
///
/// It also knows the streams the session synchronizes by name (its own and those listed), and
/// whether memory was handed out or moved onto any other stream, in which case the session
/// synchronizes the device: a stream it was not told about may be destroyed before the end.
class ledger final : public ledger_access {
 public:
  ledger(ledger* parent, std::size_t budget_bytes, std::string name, cudaStream_t stream,
         std::vector<cudaStream_t> listed)
      : parent_(parent),
        stream_(stream),
        budget_(budget_bytes),
        budgeted_(budget_bytes != 0 || (parent != nullptr && parent->budgeted_)),
        flat_(parent == nullptr && !budgeted_),
        asymmetric_(asymmetric_fences()),
        id_(next_ledger_id(id_source_)),
        gate_(asymmetric_ ? 0 : gate_fence),
        name_(std::move(name)),
        listed_(std::move(listed)) {
    recording_.tally = &tally_;
    if (parent_ != nullptr) {
      parent_->add_sub(this);  // may throw std::bad_alloc
      parent_->retain();
      tally_.parent = &parent_->tally_;
      recording_ = parent_->recording_;  // a ledger of batches records as its session does
      recording_.tally = &tally_;
    }
    live_ledgers().fetch_add(1, std::memory_order_relaxed);
  }
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }

  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy();
  }

  // ledger_access, for the adaptors a session hands out. adaptor_allocate and adaptor_free are
  // defined with the counted paths (device_allocation.hpp, which includes this header).
  void* adaptor_allocate(const memory_pool_ref& pool, stream_ref stream, std::size_t bytes,
                         const char* who) override;
  void adaptor_free(void* ptr, std::size_t bytes, stream_ref stream,
                    const memory_pool_ref& pool) noexcept override;
  void adaptor_retain() noexcept override { retain(); }
  void adaptor_release() noexcept override { release(); }
  ledger* adaptor_owner() noexcept override { return this; }

  /// Drops the reference of the session (or batch range) the ledger counts for. From here on,
  /// the allocations still live hold the ledger, one reference each.
  void end() noexcept {
    // Until the allocations' references are in, frees that see the end must not bring the count
    // to 0.
    refs_.fetch_add(end_bias, std::memory_order_relaxed);
    // Counting begun on another thread before it saw the end finishes first; none begins after
    // without seeing it. The barrier is needed only when another thread counts here (a thread's
    // first stripe is added under the lock, after which it sees the end).
    bool others = false;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      gate_.fetch_or(gate_ended, std::memory_order_seq_cst);
      others = (remote_ops_.load(std::memory_order_seq_cst) & remote_in_progress) != 0;
      const thread_identity& me = this_thread_identity();
      for (ledger_stripe* s = stripes_.load(std::memory_order_acquire); s != nullptr; s = s->next)
        others = others || !s->owned_by(me);
    }
    if (others && !process_fence(asymmetric_))
      report_cleanup("cuscope: the process-wide memory barrier failed", "cuscope::session", this,
                     cudaSuccess, "a session's end may miss a count made at the same time",
                     __FILE__, __LINE__);
    // The allocations an object owns (made less freed) still live, less those
    // whose free failed (they hold none).
    std::size_t outstanding = 0;
    for (ledger_stripe* s = stripes_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      for (unsigned spins = 0; (s->seq.load(std::memory_order_seq_cst) & 1u) != 0; ++spins)
        spin_pause(spins);
      outstanding += s->live_owned();
    }
    for (unsigned spins = 0;
         (remote_ops_.load(std::memory_order_seq_cst) & remote_in_progress) != 0; ++spins)
      spin_pause(spins);
    outstanding -= remote_count_.load(std::memory_order_acquire) -
                   remote_unowned_.load(std::memory_order_acquire) +
                   dropped_.load(std::memory_order_acquire);
    // The allocations' references in, the bias out, and then the session's reference.
    refs_.fetch_sub(end_bias - outstanding, std::memory_order_acq_rel);
    release();
  }

  /// Before an allocation of bytes is made: where this ledger or an enclosing one has a budget,
  /// checks the request against every budget and counts its bytes; returns whether it did (what
  /// cancel() is then given). Throws out_of_memory, changing nothing, when a budget would be
  /// exceeded.
  bool charge(std::size_t bytes) {
    if (!budgeted_) return false;
    for (ledger* l = this; l != nullptr && l->budgeted_; l = l->parent_) {
      std::size_t live = l->charged_.load(std::memory_order_relaxed);
      if (l->budget_ == 0) {
        live = l->charged_.fetch_add(bytes, std::memory_order_relaxed);
      } else {
        // Checked before it is added: a request that does not fit never shows in the count, and
        // a huge one cannot wrap the sum around to something that fits.
        do {
          if (bytes > l->budget_ || live > l->budget_ - bytes) {
            for (ledger* r = this; r != l; r = r->parent_)
              r->charged_.fetch_sub(bytes, std::memory_order_relaxed);
            for (ledger* r = this; r != nullptr; r = r->parent_)
              r->budget_refusals_.fetch_add(1, std::memory_order_relaxed);
            l->over_budget(bytes, live);
          }
        } while (!l->charged_.compare_exchange_weak(live, live + bytes, std::memory_order_relaxed));
      }
    }
    return true;
  }

  /// Whether a budget here or in an enclosing ledger counts allocations (charge() does work).
  bool budgeted() const noexcept { return budgeted_; }

  /// Reverses charge(bytes) (charged: what it returned) when the allocation was not made.
  void cancel(std::size_t bytes, bool charged) noexcept {
    if (charged) uncharge(bytes);
  }

  /// Counts the allocation of bytes at ptr on stream here and in every enclosing ledger, after
  /// charge() (whose bytes the budgets keep until discharge()), remembers it for the leak report
  /// (tag, file, line: strings that outlive it) and, for an allocation an object owns
  /// (holds_ref), holds the ledger for it; returns its record. Memory freed by pointer
  /// (session::allocate, the adaptors) holds none: only the session and the adaptors, which hold
  /// their own references, can free it, so that memory of theirs never freed does not keep the
  /// ledger alive. The stream is noted here only: a nested session synchronizes its own streams,
  /// and passes them on to its parent when allocations outlive it (passed_on). Throws
  /// std::bad_alloc, changing nothing (rarely: a thread's first allocation here, or its records
  /// growing).
  ledger_record* enter(const void* ptr, std::size_t bytes, cudaStream_t stream, const char* tag,
                       const char* file, unsigned line, bool holds_ref = true) {
    return enter_prepared(prepare(bytes, stream, tag, file, line, holds_ref), ptr, bytes, stream,
                          holds_ref);
  }

  /// What enter() needs that may fail, taken before the allocation is made: the calling thread's
  /// stripes here and in every enclosing ledger, and a record out of its free list (so that an
  /// allocation in between, an out-of-memory handler's, cannot take it), written with what the
  /// leak report names (as enter()'s arguments) but not live until enter_prepared() gives it its
  /// address. Returns the record that enter_prepared() is then given, with the same bytes,
  /// stream and holds_ref, or unprepare() when the allocation is not made. Throws
  /// std::bad_alloc, changing nothing.
  CUSCOPE_DETAIL_HOT_INLINE ledger_record& prepare(std::size_t bytes, cudaStream_t stream,
                                                   const char* tag, const char* file, unsigned line,
                                                   bool holds_ref = true) {
    ledger_stripe& s = my_stripe();
    for (ledger* l = parent_; l != nullptr; l = l->parent_)
      (void)l->my_stripe();
    s.reserve();
    ledger_record& r = s.take();  // out of the free list: an allocation until enter_prepared()
                                  // cannot take it
    describe(r, bytes, stream, tag, file, line, holds_ref);
    return r;
  }

  /// prepare(bytes, stream, tag, file, line, holds_ref) for the usual case, without a call: a
  /// ledger with neither a parent nor a budget, the thread's stripe found in its cache and a free
  /// record in its free list. nullptr when it is not that case (then prepare()).
  /// enter_prepared() is then given flat = true.
  CUSCOPE_DETAIL_HOT_INLINE ledger_record* prepare_fast(std::size_t bytes, cudaStream_t stream,
                                                        const char* tag, const char* file,
                                                        unsigned line,
                                                        bool holds_ref = true) noexcept {
    if (!flat_) return nullptr;
    const stripe_cache_entry& e = this_thread_stripes()[id_ % stripe_cache_size];
    if (e.ledger != id_ || e.source != id_source_) return nullptr;
    ledger_stripe& s = *e.stripe;
    if (s.free_list == nullptr) return nullptr;
    ledger_record& r = s.take();
    describe(r, bytes, stream, tag, file, line, holds_ref);
    return &r;
  }

  /// Gives back what prepare() took, when the allocation was not made (same thread).
  static void unprepare(ledger_record& r) noexcept { r.stripe->put(r); }

  /// enter_prepared(r, ptr, bytes, stream, false, true) for r from prepare_fast(..., false): r
  /// live at ptr, indexed by ptr for find(), and counted. Does not throw.
  CUSCOPE_DETAIL_HOT_INLINE void enter_by_pointer(ledger_record& r, const void* ptr,
                                                  std::size_t bytes, cudaStream_t stream) noexcept {
    if (stream != stream_) note_stream(stream);
    // As in enter_prepared(): the address alone, with release.
    r.ptr.store(ptr, std::memory_order_release);
    index_.insert(ptr, &r);
    ledger_stripe& s = *r.stripe;
    std::size_t odd;
    if (__builtin_expect(!begin_op(s, odd), 1)) {
      s.add_made(false);
      add_bytes(s, bytes);
      end_op(s, odd);
    } else {
      add_bytes(s, bytes);
      late_made_.fetch_add(1, std::memory_order_relaxed);
      count_late(1);
      end_op(s, odd);
    }
  }

  /// enter() after prepare(bytes, stream, ..., holds_ref) returned r, on the same thread; does
  /// not throw.
  /// flat: r came from prepare_fast() (the ledger has no parent).
  CUSCOPE_DETAIL_HOT_INLINE ledger_record* enter_prepared(ledger_record& r, const void* ptr,
                                                          std::size_t bytes, cudaStream_t stream,
                                                          bool holds_ref = true,
                                                          bool flat = false) noexcept {
    if (stream != stream_) note_stream(stream);
    ledger_stripe& s = *r.stripe;
    // Its other fields were written by describe(), under the sequence count; the address alone,
    // with release, needs none: a reader that loads it (with acquire) sees them whole, or a
    // later describe() that changes the count (ledger_record::read).
    r.ptr.store(ptr, std::memory_order_release);
    if (!holds_ref) index_.insert(ptr, &r);
    std::size_t odd;
    if (__builtin_expect(!begin_op(s, odd), 1)) {
      s.add_made(holds_ref);
      add_bytes(s, bytes);
      end_op(s, odd);
    } else {
      add_bytes(s, bytes);
      late_made_.fetch_add(1, std::memory_order_relaxed);
      count_late(1);
      end_op(s, odd);
      // After the session's end (allocate_like on one of its buffers), the allocation holds its
      // own reference; the ledger is alive, held by the buffer this one is like.
      if (holds_ref) retain();
    }
    if (flat) return &r;
    if (budgeted_) hold(bytes);
    for (ledger* l = parent_; l != nullptr; l = l->parent_) {
      ledger_stripe& p = *l->cached_stripe();  // made by prepare()
      const std::size_t nested = p.begin_write();
      ledger_stripe::add(p.nested_made);
      ledger_stripe::add(p.nested_count);
      add_bytes(p, bytes);
      p.end_write(nested);
    }
    return &r;
  }

  /// Reverses charge() and enter() for the allocation of r (nullptr: nothing, an allocation that
  /// was never counted), and drops its reference if it holds one. freed: whether the memory was
  /// freed (counted in frees()), rather than released to the caller.
  CUSCOPE_DETAIL_HOT_INLINE void discharge(std::size_t bytes, ledger_record* r,
                                           bool freed = true) noexcept {
    if (r == nullptr) return;
    const bool ref = r->holds_ref.load(std::memory_order_relaxed);
    // Its other fields stay as they were: a report reading it meanwhile names it, whole.
    r->ptr.store(nullptr, std::memory_order_release);
    ledger_stripe& s = *r->stripe;
    // This thread's own, and made by it (not by a thread whose stripe it took over, whose counts
    // in the enclosing ledgers are in other stripes).
    const bool local = r->made_here();
    for (ledger* l = parent_; l != nullptr; l = l->parent_) {
      ledger_stripe* const p = local ? l->cached_stripe() : nullptr;
      if (p != nullptr) {
        const std::size_t nested = p->begin_write();
        ledger_stripe::sub(p->bytes, bytes);
        ledger_stripe::sub(p->nested_count);
        p->end_write(nested);
      } else {
        // Under l's remote count, which needs no order of its own here: the release of the
        // counts below orders it for a reader (see live_snapshot()).
        l->remote_ops_.fetch_add(remote_begun, std::memory_order_relaxed);
        l->remote_bytes_.fetch_add(bytes, std::memory_order_release);
        l->remote_nested_count_.fetch_add(1, std::memory_order_release);
        l->end_remote();
      }
      if (!freed) l->released_.fetch_add(1, std::memory_order_relaxed);
    }
    if (budgeted_) unhold(bytes);
    if (!freed) released_.fetch_add(1, std::memory_order_relaxed);
    bool ended = false;
    if (local) {
      std::size_t odd;
      ended = begin_op(s, odd);
      ledger_stripe::sub(s.bytes, bytes);
      if (!ended)
        s.add_freed(ref);
      else
        count_late(~std::size_t{0});
      s.put(*r);
      end_op(s, odd);
    } else {
      ended = begin_remote();
      remote_bytes_.fetch_add(bytes, std::memory_order_release);
      if (!ended) {
        remote_count_.fetch_add(1, std::memory_order_release);
        if (!ref) remote_unowned_.fetch_add(1, std::memory_order_release);
      } else {
        count_late(~std::size_t{0});
      }
      s.put_remote(*r);
      end_remote();
    }
    if (ended && ref) release();  // last: it may delete this
  }

  /// discharge(bytes, r), out of line: beside discharge_fast(), which is inlined.
  CUSCOPE_DETAIL_NOINLINE void discharge_slow(std::size_t bytes, ledger_record* r) noexcept {
    discharge(bytes, r);
  }

  /// discharge(bytes, &r) for the usual free, without a call: a ledger with neither a parent nor
  /// a budget, r made by the calling thread (which owns its stripe). holds_ref: r's (true
  /// for an allocation an object owns, false for one freed by pointer, which find() took). false,
  /// changing nothing, when it is not that case (then discharge()).
  CUSCOPE_DETAIL_HOT_INLINE bool discharge_fast(std::size_t bytes, ledger_record& r,
                                                bool holds_ref) noexcept {
    if (!flat_ || !r.made_here()) return false;
    ledger_stripe& s = *r.stripe;
    // One freed by pointer is not live since find() took it.
    if (holds_ref) r.ptr.store(nullptr, std::memory_order_release);
    std::size_t odd;
    if (__builtin_expect(!begin_op(s, odd), 1)) {
      ledger_stripe::sub(s.bytes, bytes);
      s.add_freed(holds_ref);
      s.put(r);
      end_op(s, odd);
    } else {
      ledger_stripe::sub(s.bytes, bytes);
      count_late(~std::size_t{0});
      s.put(r);
      end_op(s, odd);
      if (holds_ref) release();  // last: it may delete this
    }
    return true;
  }

  /// An allocation charged here is now freed on stream (device_allocation::set_stream).
  void moved_to(cudaStream_t stream, ledger_record* r) noexcept {
    for (ledger* l = this; l != nullptr; l = l->parent_)
      if (stream != l->stream_) l->note_stream(stream);
    if (r == nullptr) return;
    const unsigned odd = r->begin_write();
    r->stream.store(stream, std::memory_order_relaxed);
    r->end_write(odd);
  }

  /// The record of the live allocation at ptr that is freed by pointer, taken: its ptr set to
  /// nullptr, so that no other free by pointer takes it. Call it before the memory goes back to
  /// the pool (after that, another thread's allocation may get the address), and restore() the
  /// record when the free fails; nullptr when there is none (and for nullptr). Constant time
  /// (pointer_index).
  CUSCOPE_DETAIL_HOT_INLINE ledger_record* find(const void* ptr) noexcept {
    return index_.take(ptr, [this, ptr] { return scan(ptr); });
  }

  /// A record find() took, whose free failed: live at ptr again, and found again.
  void restore(ledger_record& r, const void* ptr) noexcept {
    r.ptr.store(ptr, std::memory_order_release);
    index_.insert(ptr, &r);
  }

  /// find() by looking at every record (when the index could not take an entry).
  CUSCOPE_DETAIL_NOINLINE ledger_record* scan(const void* ptr) noexcept {
    for (ledger_stripe* s = stripes_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      const std::uint32_t n = s->published.load(std::memory_order_acquire);
      for (std::uint32_t i = 0; i < n; ++i) {
        ledger_record& r = s->record(i);
        // An allocation freed through its record may still show ptr after its memory went back
        // to the pool: only records freed by pointer are looked at.
        const void* expected = ptr;
        if (!r.holds_ref.load(std::memory_order_relaxed) &&
            r.ptr.load(std::memory_order_relaxed) == ptr &&
            r.ptr.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel))
          return &r;
      }
    }
    return nullptr;
  }

  /// The live allocations charged here and to every ledger under this one.
  void live_records(std::vector<named_record>& out) {
    const std::lock_guard<std::mutex> subs_lock(mutex_);
    for (ledger_stripe* s = stripes_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      const std::uint32_t n = s->published.load(std::memory_order_acquire);
      for (std::uint32_t i = 0; i < n; ++i) {
        allocation_record a;
        if (s->record(i).read(a)) out.push_back(named_record{a, name_});
      }
    }
    for (ledger* sub : subs_)
      sub->live_records(out);
  }

  /// Where the session's allocations are recorded; set by the session before it hands any out.
  void record_into(record_target target) noexcept {
    recording_ = target;
    recording_.tally = &tally_;
  }
  const record_target& recording() const noexcept { return recording_; }
  /// The recorder the session's allocations go to in place; nullptr for none.
  recorder_hook* hook() const noexcept { return recording_.hook; }

  /// Whether memory was handed out or moved onto a stream neither the session's own nor listed.
  bool other_streams() const noexcept { return other_streams_.load(std::memory_order_relaxed); }

  /// This ledger's session ended with allocations still live, which will be freed on its streams:
  /// the parent must synchronize them too.
  void passed_on() noexcept {
    if (parent_ == nullptr) return;
    if (other_streams()) parent_->other_streams_.store(true, std::memory_order_relaxed);
    if (stream_ != parent_->stream_) parent_->note_stream(stream_);
  }

  /// The session this ledger counts for has ended: allocations through it are refused.
  bool closed() const noexcept { return closed_flag_.load(std::memory_order_acquire); }

  /// The outermost ledger, which counts the allocations of every session nested in it.
  ledger* root() noexcept {
    ledger* l = this;
    while (l->parent_ != nullptr)
      l = l->parent_;
    return l;
  }

  // Nesting. The parent's ledger knows its open nested sessions, so that the session cannot
  // finish while one is open and can name it.

  /// Registers child as open in this ledger: the number of open ones with it, 0 when this
  /// ledger's session has finished. When it is the first of a group (none open), first() is
  /// called under the lock, before any other nested session can begin and allocate: it returns
  /// the pool's reserve, which the last of the group trims back to. When first() throws,
  /// nothing is registered.
  template <class F>
  std::size_t open_child(ledger* child, F&& first) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return 0;
    if (children_.empty()) group_reserve_ = first();
    children_.push_back(child);
    ++opened_;
    return children_.size();
  }

  /// The nested session of child has ended. When it was the last one open, calls last with the
  /// group's reserve, under the lock, so that no other nested session begins meanwhile; returns
  /// whether it was the last.
  template <class F>
  bool close_child(ledger* child, F&& last) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = find_in(children_, child);
    if (it != children_.end()) children_.erase(it);
    if (!children_.empty()) return false;
    last(group_reserve_);
    return true;
  }

  /// How many nested sessions are open, and how many were ever opened (to tell whether another
  /// one ran beside a given one).
  std::pair<std::size_t, std::size_t> children() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return {children_.size(), opened_};
  }

  /// The nested session of child has ended.
  void close_child(ledger* child) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = find_in(children_, child);
    if (it != children_.end()) children_.erase(it);
  }

  /// Marks this ledger's session finished, unless a nested session is open (or force): returns
  /// the names of the open ones ("'a', 'b'"), empty when it is closed.
  std::string close(bool force) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::string open;
    for (const ledger* c : children_)
      open += (open.empty() ? "'" : ", '") + c->name_ + "'";
    if (open.empty() || force) {
      closed_ = true;
      closed_flag_.store(true, std::memory_order_release);
    }
    return open;
  }

  /// Passes on peaks of the pool seen by a nested session (thread-safe).
  void observe(std::size_t used_peak, std::size_t reserved_peak) noexcept {
    raise(observed_used_, used_peak);
    raise(observed_reserved_, reserved_peak);
  }
  std::size_t observed_used_peak() const noexcept {
    return observed_used_.load(std::memory_order_relaxed);
  }
  std::size_t observed_reserved_peak() const noexcept {
    return observed_reserved_.load(std::memory_order_relaxed);
  }

  /// Drops the reference of the allocation of r but leaves it counted and recorded: its free
  /// failed, the memory is still allocated, and the session reports it as a leak.
  void abandon(ledger_record* r) noexcept {
    if (r == nullptr || !r->holds_ref.exchange(false, std::memory_order_relaxed)) return;
    const bool ended = begin_remote();
    if (!ended) dropped_.fetch_add(1, std::memory_order_release);
    end_remote();
    if (ended) release();
  }

  // The totals. The shared counts are read first: a free counted there was made, and counted in
  // a stripe, before it.
  std::size_t live_bytes() const noexcept {
    const std::size_t remote = remote_bytes_.load(std::memory_order_acquire);
    return sum(&ledger_stripe::bytes) - remote;
  }
  /// How often live_snapshot() tries before it takes its last reading.
  static constexpr unsigned snapshot_tries = 10000;

  /// live_allocations() and live_bytes() as one state, for a report, while other threads count
  /// here: of every operation (an allocation or a free, and its count in the enclosing ledgers)
  /// either all of its counts or none, and with each operation those that happened before it.
  /// After snapshot_tries tries (threads that never stop counting) the last reading, which may
  /// mix states. pause: called three times in each try, between its steps (tests count there).
  ///
  /// Each try reads every sequence (the stripes' seq and remote_ops_), then the totals, then the
  /// sequences again, and keeps the totals when the first were even (no operation in progress)
  /// and the second the same. A count it read was stored by some operation after that
  /// operation's first sequence store (in order for this reader: see begin_op() and
  /// begin_remote()), so the second reading of that sequence reads that store or a later one:
  /// unchanged, the operation had ended before the first reading, whose acquire made all of its
  /// counts visible. An operation that happened before an included one had also ended by then
  /// (its end happens before the second reading). Each sequence only grows: their sum is
  /// unchanged only when each is. Stripes are only ever added, at the head of the list: an
  /// unchanged head means the totals read no stripe the sequences missed.
  template <class Pause = no_pause>
  std::pair<std::size_t, std::size_t> live_snapshot(Pause&& pause = Pause{}) const noexcept {
    std::size_t count = 0;
    std::size_t bytes = 0;
    for (unsigned tries = 0; tries < snapshot_tries; ++tries) {
      const ledger_stripe* const head = stripes_.load(std::memory_order_acquire);
      bool busy = false;
      std::size_t seqs = 0;
      for (const ledger_stripe* s = head; s != nullptr; s = s->next) {
        const std::size_t q = s->seq.load(std::memory_order_acquire);
        busy = busy || (q & 1u) != 0;
        seqs += q;
      }
      const std::uint64_t remote = remote_ops_.load(std::memory_order_acquire);
      busy = busy || (remote & remote_in_progress) != 0;
      pause();
      count = live_allocations();
      pause();
      bytes = live_bytes();
      pause();
      if (!busy) {
        std::atomic_thread_fence(std::memory_order_acquire);
        std::size_t seqs_again = 0;
        for (const ledger_stripe* s = head; s != nullptr; s = s->next)
          seqs_again += s->seq.load(std::memory_order_relaxed);
        if (seqs_again == seqs && remote_ops_.load(std::memory_order_relaxed) == remote &&
            stripes_.load(std::memory_order_relaxed) == head)
          break;
      }
      spin_pause(tries);
    }
    return {count, bytes};
  }
  std::size_t live_allocations() const noexcept {
    const std::size_t remote = remote_count_.load(std::memory_order_acquire) +
                               remote_nested_count_.load(std::memory_order_acquire);
    const std::size_t late = late_count_.load(std::memory_order_acquire);
    std::size_t here = 0;
    for (const ledger_stripe* s = stripes_.load(std::memory_order_acquire); s != nullptr;
         s = s->next)
      here += s->live();
    return here + sum(&ledger_stripe::nested_count) - remote + late;
  }
  /// The most bytes live at once. With a budget here or above, exact (counted in the budgets'
  /// shared counts, once each allocation is made: a request refused after its bytes were checked
  /// against the budget never counts); otherwise exact when one thread made and freed every
  /// allocation, and the sum of each thread's own most (an upper bound) when several did:
  /// peak_exact() tells which.
  std::size_t peak_bytes() const noexcept {
    if (budgeted_) return charged_peak_.load(std::memory_order_relaxed);
    return sum(&ledger_stripe::peak);
  }
  bool peak_exact() const noexcept {
    if (budgeted_) return true;
    if (remote_bytes_.load(std::memory_order_acquire) != 0) return false;
    const ledger_stripe* s = stripes_.load(std::memory_order_acquire);
    return s == nullptr || s->next == nullptr;
  }
  /// Allocations counted here (and in the ledgers under this one) since it began.
  std::size_t allocations() const noexcept {
    return sum(&ledger_stripe::made) + sum(&ledger_stripe::made_by_pointer) +
           sum(&ledger_stripe::nested_made) + late_made_.load(std::memory_order_relaxed);
  }
  /// Of them, those freed (not released to their caller, not still live).
  std::size_t frees() const noexcept { return frees(live_allocations()); }
  /// The same, given live_allocations() as read before, so that frees, live and allocations add
  /// up in one report while other threads free.
  std::size_t frees(std::size_t live) const noexcept {
    const std::size_t released = released_.load(std::memory_order_acquire);
    return allocations() - live - released;
  }
  std::size_t budget_refusals() const noexcept {
    return budget_refusals_.load(std::memory_order_relaxed);
  }
  /// Refusals by the pool (out_of_memory from CUDA, after any retry), which the pool counts in
  /// the allocations' record_target (recording()).
  std::size_t pool_refusals() const noexcept {
    return tally_.refusals.load(std::memory_order_relaxed);
  }
  std::size_t retries() const noexcept { return tally_.retries.load(std::memory_order_relaxed); }
  std::size_t budget_bytes() const noexcept { return budget_; }
  const std::string& name() const noexcept { return name_; }
  ledger* parent() const noexcept { return parent_; }

 private:
  // Every sub left is a retired one (an open one holds a reference to this ledger).
  ~ledger() {
    live_ledgers().fetch_sub(1, std::memory_order_relaxed);
    for (ledger* sub : subs_)
      delete sub;
    for (ledger_stripe* s = stripes_.load(std::memory_order_relaxed); s != nullptr;) {
      ledger_stripe* const next = s->next;
      delete s;
      s = next;
    }
  }

  static constexpr unsigned char gate_ended = 1;
  static constexpr unsigned char gate_fence = 2;
  static constexpr std::uint64_t remote_in_progress = 0xffffffffu;
  static constexpr std::uint64_t remote_begun = (std::uint64_t{1} << 32) | 1u;

  // Added to the references while end() counts the allocations' (more than could ever be).
  static constexpr std::size_t end_bias = std::size_t{1} << 62;

  // The calling thread's stripe, made on its first allocation here; throws std::bad_alloc.
  ledger_stripe& my_stripe() {
    const stripe_cache_entry& e = this_thread_stripes()[id_ % stripe_cache_size];
    if (e.ledger == id_ && e.source == id_source_) return *e.stripe;
    return *find_stripe(true);
  }

  // The calling thread's stripe if it has one; nullptr otherwise.
  ledger_stripe* cached_stripe() noexcept {
    const stripe_cache_entry& e = this_thread_stripes()[id_ % stripe_cache_size];
    if (e.ledger == id_ && e.source == id_source_) return e.stripe;
    return find_stripe(false);
  }

  // The calling thread's stripe, into its cache; when it has none, made (make: throws
  // std::bad_alloc) or nullptr.
  CUSCOPE_DETAIL_NOINLINE ledger_stripe* find_stripe(bool make) {
    const thread_identity& me = this_thread_identity();
    ledger_stripe* s = stripes_.load(std::memory_order_acquire);
    while (s != nullptr && !s->owned_by(me))
      s = s->next;
    if (s == nullptr) {
      if (!make) return nullptr;
      thread_token* const token = this_thread_token();
      const std::lock_guard<std::mutex> lock(mutex_);
      // A stripe whose thread has exited passes to this one: its counts and records stay (they
      // are the ledger's), and only this thread writes them from now on.
      for (s = stripes_.load(std::memory_order_relaxed); s != nullptr; s = s->next)
        if (s->token != nullptr && !s->token->alive.load(std::memory_order_acquire)) break;
      if (s != nullptr) {
        s->own(me, token);
      } else {
        s = new ledger_stripe(me, token);
        s->next = stripes_.load(std::memory_order_relaxed);
        stripes_.store(s, std::memory_order_release);
      }
    }
    this_thread_stripes()[id_ % stripe_cache_size] = stripe_cache_entry{id_, id_source_, s};
    return s;
  }

  // The calling thread begins counting in its stripe s (odd: what end_op() is then given);
  // returns whether the session has ended (see end()). Once it has, its allocations are counted
  // in late_count_ instead (count_late(), before end_op()), and hold references of their own.
  //
  // Two orders matter. For live_snapshot(), s.begin_write() orders the odd sequence value before
  // the counts, and end_op() stores the even one with release (ledger_stripe::begin_write). For
  // end(), the odd value and the load of gate_ are a store and then a load, against end()'s store
  // of gate_ and then load of seq: one of the two loads must read the other side's store (either
  // end() waits for this operation, or this operation sees the end). With the process-wide
  // barrier (asymmetric_), the signal fence keeps the compiler from moving the load above the
  // store, and end()'s membarrier gives this thread a full barrier wherever it is. Without it,
  // gate_ has gate_fence set, so every operation goes on to begin_gated(), whose sequentially
  // consistent fence sits between the store and a second load of gate_. Were both loads to read
  // the old values, C++20's order S ([atomics.order]) would hold a cycle: end()'s load of seq
  // precedes that fence (the load reads a value older than the store sequenced before the
  // fence), the fence precedes end()'s store of gate_ (the load sequenced after the fence reads
  // a value older than that store), and that store precedes end()'s load of seq (both
  // sequentially consistent, one sequenced before the other).
  //
  // One load of gate_ tests both the end and the mode: the usual case (the barrier, no end) costs
  // the sequence's load, increment and store, and one test.
  CUSCOPE_DETAIL_HOT_INLINE bool begin_op(ledger_stripe& s, std::size_t& odd) noexcept {
    odd = s.begin_write();
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (__builtin_expect(gate_.load(std::memory_order_seq_cst) == 0, 1)) return false;
    return begin_gated();
  }
  bool begin_gated() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return (gate_.load(std::memory_order_seq_cst) & gate_ended) != 0;
  }
  CUSCOPE_DETAIL_HOT_INLINE static void end_op(ledger_stripe& s, std::size_t odd) noexcept {
    s.end_write(odd);
  }

  // An allocation (change 1) or its free (change -1) after the session's end, counted inside the
  // operation's sequence (before end_op() or end_remote()) so that live_snapshot() reads it with
  // the bytes. The allocation's reference, if it holds one, is taken or dropped after that.
  void count_late(std::size_t change) noexcept {
    late_count_.fetch_add(change, std::memory_order_release);
  }

  // The same for a free on another thread than its allocation's: remote_ops_ counts it as begun
  // and in progress (the first store of a sequence: a reader that reads any count the free
  // stores, with release, then reads this or a later value), end_remote() as no longer in
  // progress (with release, as the sequence's even value).
  bool begin_remote() noexcept {
    remote_ops_.fetch_add(remote_begun, std::memory_order_seq_cst);
    return (gate_.load(std::memory_order_seq_cst) & gate_ended) != 0;
  }
  void end_remote() noexcept { remote_ops_.fetch_sub(1, std::memory_order_release); }

  // prepare()'s writing of r, taken from the calling thread's stripe, with what the leak report
  // names, in one write of its own: a reader that meets it before enter_prepared() stores its
  // address passes it by (its ptr is nullptr), and the record is never left being written across
  // the pool's allocation.
  CUSCOPE_DETAIL_HOT_INLINE static void describe(ledger_record& r, std::size_t bytes,
                                                 cudaStream_t stream, const char* tag,
                                                 const char* file, unsigned line,
                                                 bool holds_ref) noexcept {
    const unsigned odd = r.begin_write();
    r.bytes.store(bytes, std::memory_order_relaxed);
    r.stream.store(stream, std::memory_order_relaxed);
    r.tag.store(tag, std::memory_order_relaxed);
    r.file.store(file, std::memory_order_relaxed);
    r.line.store(line, std::memory_order_relaxed);
    r.holds_ref.store(holds_ref, std::memory_order_relaxed);
    r.end_write(odd);  // r.maker names the calling thread, the owner of r's stripe
  }

  CUSCOPE_DETAIL_HOT_INLINE static void add_bytes(ledger_stripe& s, std::size_t bytes) noexcept {
    const std::size_t live = s.bytes.load(std::memory_order_relaxed) + bytes;
    s.bytes.store(live, std::memory_order_relaxed);
    if (live > s.peak.load(std::memory_order_relaxed))
      s.peak.store(live, std::memory_order_relaxed);
  }

  // Gives bytes charge() took back to every budget that took them.
  void uncharge(std::size_t bytes) noexcept {
    for (ledger* l = this; l != nullptr && l->budgeted_; l = l->parent_)
      l->charged_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  // An allocation of bytes charged to the budgets is made: held, in each of them, until freed.
  // The peak of a ledger with a budget counts only what was made, never a request refused after
  // charge() (by the pool, or by an enclosing budget).
  CUSCOPE_DETAIL_NOINLINE void hold(std::size_t bytes) noexcept {
    for (ledger* l = this; l != nullptr && l->budgeted_; l = l->parent_)
      raise(l->charged_peak_, l->held_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  }

  // The allocation is freed (or released): out of the budgets and of what they hold.
  CUSCOPE_DETAIL_NOINLINE void unhold(std::size_t bytes) noexcept {
    for (ledger* l = this; l != nullptr && l->budgeted_; l = l->parent_) {
      l->held_.fetch_sub(bytes, std::memory_order_relaxed);
      l->charged_.fetch_sub(bytes, std::memory_order_relaxed);
    }
  }

  std::size_t sum(const std::atomic<std::size_t> ledger_stripe::*field) const noexcept {
    std::size_t total = 0;
    for (const ledger_stripe* s = stripes_.load(std::memory_order_acquire); s != nullptr;
         s = s->next)
      total += (s->*field).load(std::memory_order_relaxed);
    return total;
  }

  void add_sub(ledger* sub) {
    const std::lock_guard<std::mutex> lock(mutex_);
    subs_.push_back(sub);
  }

  void remove_sub(ledger* sub) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = find_in(subs_, sub);
    if (it != subs_.end()) subs_.erase(it);
  }

  CUSCOPE_DETAIL_HOT_INLINE void note_stream(cudaStream_t stream) noexcept {
    if (other_streams_.load(std::memory_order_relaxed)) return;
    if (find_in(listed_, stream) != listed_.end()) return;
    other_streams_.store(true, std::memory_order_relaxed);
  }

  // std::find without <algorithm>, which this header, included by every buffer, leaves out.
  template <class V, class T>
  static auto find_in(V& v, const T& x) noexcept -> decltype(v.begin()) {
    auto it = v.begin();
    while (it != v.end() && *it != x)
      ++it;
    return it;
  }

  static void raise(std::atomic<std::size_t>& peak, std::size_t now) noexcept {
    std::size_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }

  // The last reference is gone. A nested ledger that still counts live allocations (memory freed
  // by pointer that its session never freed, or whose free failed, here or in a ledger under it)
  // stays among its parent's subs, retired, so that the parent's leak report still names them; the
  // parent deletes it when it goes itself.
  void destroy() noexcept {
    ledger* const parent = parent_;
    if (parent == nullptr || live_allocations() == 0) {
      if (parent != nullptr) parent->remove_sub(this);
      delete this;
    }
    if (parent != nullptr) parent->release();
  }

  [[noreturn]] CUSCOPE_DETAIL_COLD void over_budget(std::size_t bytes, std::size_t live) const {
    throw out_of_memory(bytes,
                        "cuscope: out of memory: " + format_bytes(bytes) + " (" +
                            format_count(bytes, "byte") + ") requested in session '" + name_ +
                            "', whose budget of " + format_bytes(budget_) + " already holds " +
                            format_bytes(live) + " in live allocations",
                        cudaSuccess);
  }

  // Read by every allocation, written only at construction (and record_into, before any).
  ledger* parent_;
  cudaStream_t stream_;
  std::size_t budget_;
  bool budgeted_;                    // a budget here or in an enclosing ledger
  bool flat_;                        // no budget, no parent: prepare_fast() may serve
  bool asymmetric_;                  // asymmetric_fences()
  const void* id_source_ = nullptr;  // set with id_
  std::uint64_t id_;
  record_target recording_;
  std::atomic<ledger_stripe*> stripes_{nullptr};
  // gate_ended: end() was called; gate_fence: no process-wide barrier, every operation fences
  // (see begin_op()).
  std::atomic<unsigned char> gate_;
  std::atomic<bool> other_streams_{false};
  std::atomic<bool> closed_flag_{false};
  std::string name_;
  std::vector<cudaStream_t> listed_;
  // Written by frees on another thread than their allocation's, by allocations with a budget,
  // and by references.
  alignas(64) std::atomic<std::size_t> refs_{1};
  // Frees on another thread than their allocation's, and nested ledgers' counts they change
  // here: how many are in progress (remote_in_progress, the low half) and how many began (the
  // high half, which wraps), so that one begun and ended between two readings changes it.
  std::atomic<std::uint64_t> remote_ops_{0};
  std::atomic<std::size_t> remote_bytes_{0};         // freed on another thread (any level)
  std::atomic<std::size_t> remote_count_{0};         // this ledger's allocations, so freed
  std::atomic<std::size_t> remote_nested_count_{0};  // nested ledgers' allocations, so freed
  std::atomic<std::size_t> remote_unowned_{0};       // of remote_count_, those freed by pointer
  std::atomic<std::size_t> released_{0};      // allocations released to their caller, not freed
  std::atomic<std::size_t> dropped_{0};       // live allocations whose free failed, before the end
  std::atomic<std::size_t> late_count_{0};    // allocations made less those freed after the end
  std::atomic<std::size_t> late_made_{0};     // allocations made after the end
  std::atomic<std::size_t> charged_{0};       // with a budget here or above: bytes charged
  std::atomic<std::size_t> held_{0};          // of charged_, the bytes of allocations made
  std::atomic<std::size_t> charged_peak_{0};  // the most of held_ at once
  std::atomic<std::size_t> observed_used_{0};
  std::atomic<std::size_t> observed_reserved_{0};
  alloc_tally tally_;
  std::atomic<std::size_t> budget_refusals_{0};
  std::mutex mutex_;  // children_, subs_, opened_, closed_ and adding stripes
  std::vector<ledger*> children_;
  std::vector<ledger*> subs_;  // every ledger whose parent this is, open or not
  std::size_t opened_ = 0;
  std::size_t group_reserve_ = 0;
  bool closed_ = false;
  pointer_index index_;  // the live allocations freed by pointer
};

inline ledger_access* access_of(ledger* l) noexcept {
  return l;
}

/// The reason an adaptor of a finished session refuses to allocate.
[[noreturn]] CUSCOPE_DETAIL_COLD inline void allocate_after_finish(const ledger& l,
                                                                   const char* who) {
  throw std::logic_error(std::string(who) + ": allocation through session '" + l.name() +
                         "' after the session finished");
}

}  // namespace cuscope::detail
