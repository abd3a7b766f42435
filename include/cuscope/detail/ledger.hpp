// SPDX-License-Identifier: Apache-2.0
// The count of a session's live allocations, shared with the buffers it made so that a buffer can
// outlive the session (a leak) without touching freed memory, and with the sessions nested in it
// so that a nested session never touches its parent session's object.
#pragma once

#include <cuda_runtime_api.h>
#include <sched.h>  // sched_yield

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../error.hpp"
#include "format.hpp"
#include "ledger_fwd.hpp"
#include "recorder_hook.hpp"

namespace cuscope::detail {

/// One live allocation charged to a session: what a leak report names.
struct allocation_record {
  const void* ptr = nullptr;  // nullptr: a free slot
  std::size_t bytes = 0;
  cudaStream_t stream = nullptr;
  const char* tag = nullptr;   // the caller's, a string that outlives the allocation
  const char* file = nullptr;  // the call site
  unsigned line = 0;           // the call site; in a free slot, the next free slot
  bool holds_ref = false;      // the allocation holds a reference to the ledger
};

/// A live allocation with the name of the session it was charged to.
struct named_record {
  allocation_record record;
  std::string session;
};

/// A lock for a few instructions' worth of work on the allocation path. A thread that finds it
/// taken spins with the CPU's pause hint, and after a while yields its time slice, so that a
/// holder descheduled on a busy machine gets to run (waiting out an allocation on another thread
/// never costs a busy core).
class spin_lock {
 public:
  void lock() noexcept {
    if (flag_.test_and_set(std::memory_order_acquire)) contended();
  }
  void unlock() noexcept { flag_.clear(std::memory_order_release); }

 private:
  CUSCOPE_DETAIL_NOINLINE void contended() noexcept {
    for (unsigned spins = 0; flag_.test_and_set(std::memory_order_acquire); ++spins) {
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        (void)sched_yield();
      }
    }
  }

  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

/// Live allocations and bytes charged to a session, with an optional budget that also counts
/// against every enclosing session's budget. Reference counted: the session holds one reference,
/// each allocation charged to it another, and each nested session's ledger one on its parent's.
///
/// One spin lock per ledger guards its counts, its references and its records, so that counting
/// an allocation takes one locked operation per enclosing session, whatever it records. Without a
/// budget anywhere above it, an allocation is counted once made (enter); with one, its bytes are
/// checked and taken before it is made (charge), so that a request over budget never reaches the
/// pool.
///
/// It also knows the streams the session synchronizes by name (its own and those listed), and
/// whether memory was handed out or moved onto any other stream, in which case the session
/// synchronizes the device: a stream it was not told about may be destroyed before the end.
class ledger {
 public:
  ledger(ledger* parent, std::size_t budget_bytes, std::string name, cudaStream_t stream,
         std::vector<cudaStream_t> listed)
      : parent_(parent),
        stream_(stream),
        budget_(budget_bytes),
        budgeted_(budget_bytes != 0 || (parent != nullptr && parent->budgeted_)),
        name_(std::move(name)),
        listed_(std::move(listed)) {
    recording_.tally = &tally_;
    if (parent_ == nullptr) return;
    parent_->add_sub(this);
    parent_->retain();
    tally_.parent = &parent_->tally_;
    recording_ = parent_->recording_;  // a ledger of batches records as its session does
    recording_.tally = &tally_;
  }
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  void retain() noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    ++refs_;
  }

  void release() noexcept {
    bool last = false;
    {
      const std::lock_guard<spin_lock> lock(lock_);
      last = --refs_ == 0;
    }
    if (last) destroy();
  }

  /// Before an allocation of bytes is made: where this ledger or an enclosing one has a budget,
  /// checks the request against every budget and counts its bytes; returns whether it did (what
  /// enter() and cancel() are then given). Throws out_of_memory, changing nothing, when a budget
  /// would be exceeded.
  bool charge(std::size_t bytes) {
    if (!budgeted_) return false;
    for (ledger* l = this; l != nullptr; l = l->parent_) {
      bool over = false;
      std::size_t live = 0;
      {
        const std::lock_guard<spin_lock> lock(l->lock_);
        // Checked before it is added: a request that does not fit never shows in the count, and
        // a huge one cannot wrap the sum around to something that fits.
        over = l->budget_ != 0 && (bytes > l->budget_ || l->bytes_ > l->budget_ - bytes);
        live = l->bytes_;
        if (!over) l->add_bytes(bytes);
      }
      if (over) {
        for (ledger* r = this; r != l; r = r->parent_)
          r->take_back(bytes);
        refused(true);
        l->over_budget(bytes, live);
      }
    }
    return true;
  }

  /// Counts a refusal (here and in every enclosing ledger): by a session's budget, or by the pool
  /// (out_of_memory from CUDA).
  void refused(bool by_budget) noexcept {
    for (ledger* l = this; l != nullptr; l = l->parent_)
      (by_budget ? l->budget_refusals_ : l->pool_refusals_).fetch_add(1, std::memory_order_relaxed);
  }

  /// Reverses charge(bytes) (charged: what it returned) when the allocation was not made.
  void cancel(std::size_t bytes, bool charged) noexcept {
    if (!charged) return;
    for (ledger* l = this; l != nullptr; l = l->parent_) {
      const std::lock_guard<spin_lock> lock(l->lock_);
      l->bytes_ -= bytes;
    }
  }

  static constexpr std::uint32_t no_slot = no_ledger_slot;

  /// Counts the allocation of bytes at ptr on stream here and in every enclosing ledger (its
  /// bytes too, unless charge() took them: charged), remembers it for the leak report (tag, file,
  /// line: strings that outlive it) and, for an allocation an object owns (holds_ref), takes a
  /// reference for it; returns its slot. Memory freed by pointer (session::allocate, the
  /// adaptors) takes none: only the session and the adaptors, which hold their own references,
  /// can free it, so that memory of theirs never freed does not keep the ledger alive. The stream
  /// is noted here only: a nested session synchronizes its own streams, and passes them on to its
  /// parent when allocations outlive it (passed_on). Throws std::bad_alloc, changing nothing
  /// (rarely: the slots grow by doubling).
  std::uint32_t enter(const void* ptr, std::size_t bytes, cudaStream_t stream, const char* tag,
                      const char* file, unsigned line, bool charged, bool holds_ref = true) {
    if (stream != stream_) note_stream(stream);
    std::uint32_t slot = no_slot;
    {
      const std::lock_guard<spin_lock> lock(lock_);
      slot = free_slot_;
      if (slot == no_slot) slot = grow();
      free_slot_ = records_[slot].line;
      records_[slot] = allocation_record{ptr, bytes, stream, tag, file, line, holds_ref};
      refs_ += holds_ref;
      ++count_;
      ++allocations_;
      if (!charged) add_bytes(bytes);
    }
    for (ledger* l = parent_; l != nullptr; l = l->parent_) {
      const std::lock_guard<spin_lock> lock(l->lock_);
      ++l->count_;
      ++l->allocations_;
      if (!charged) l->add_bytes(bytes);
    }
    return slot;
  }

  /// Reverses charge() and enter() for the allocation in slot, and drops its reference if it holds
  /// one. freed:
  /// whether the memory was freed (counted in frees()), rather than released to the caller.
  void discharge(std::size_t bytes, std::uint32_t slot, bool freed = true) noexcept {
    for (ledger* l = parent_; l != nullptr; l = l->parent_) {
      const std::lock_guard<spin_lock> lock(l->lock_);
      l->bytes_ -= bytes;
      --l->count_;
      l->frees_ += freed;
    }
    bool last = false;
    {
      const std::lock_guard<spin_lock> lock(lock_);
      bool ref = false;
      if (slot != no_slot) {
        ref = records_[slot].holds_ref;
        records_[slot].ptr = nullptr;
        records_[slot].line = free_slot_;
        free_slot_ = slot;
      }
      bytes_ -= bytes;
      --count_;
      frees_ += freed;
      last = ref && --refs_ == 0;
    }
    if (last) destroy();
  }

  /// Reverses charge() and enter() for the allocation at ptr (for adaptors, which free by
  /// pointer), and drops its reference.
  void discharge(const void* ptr, std::size_t bytes) noexcept { discharge(bytes, find(ptr)); }

  /// An allocation charged here is now freed on stream (device_allocation::set_stream).
  void moved_to(cudaStream_t stream, std::uint32_t slot) noexcept {
    for (ledger* l = this; l != nullptr; l = l->parent_)
      if (stream != l->stream_) l->note_stream(stream);
    if (slot == no_slot) return;
    const std::lock_guard<spin_lock> lock(lock_);
    records_[slot].stream = stream;
  }

  /// The slot of the live allocation at ptr; no_slot when none.
  std::uint32_t find(const void* ptr) noexcept {
    if (ptr == nullptr) return no_slot;
    const std::lock_guard<spin_lock> lock(lock_);
    for (std::size_t i = records_.size(); i-- != 0;)
      if (records_[i].ptr == ptr) return static_cast<std::uint32_t>(i);
    return no_slot;
  }

  /// The live allocations charged here and to every ledger under this one.
  void live_records(std::vector<named_record>& out) {
    const std::lock_guard<std::mutex> subs_lock(mutex_);
    {
      const std::lock_guard<spin_lock> lock(lock_);
      for (const allocation_record& r : records_)
        if (r.ptr != nullptr) out.push_back(named_record{r, name_});
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
  /// ledger's session has finished.
  std::size_t open_child(ledger* child) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return 0;
    children_.push_back(child);
    ++opened_;
    return children_.size();
  }

  /// The pool's reserve when the first of the nested sessions open together began: what the last
  /// of them trims back to.
  void set_group_reserve(std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    group_reserve_ = bytes;
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

  /// Drops the allocation's reference but leaves it counted and recorded: its free failed, the
  /// memory is still allocated, and the session reports it as a leak.
  void abandon() noexcept { release(); }

  std::size_t live_bytes() const noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    return bytes_;
  }
  std::size_t live_allocations() const noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    return count_;
  }
  std::size_t peak_bytes() const noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    return peak_;
  }
  /// Allocations counted here (and in the ledgers under this one) since it began.
  std::size_t allocations() const noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    return allocations_;
  }
  /// Of them, those freed (not released to their caller, not still live).
  std::size_t frees() const noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    return frees_;
  }
  std::size_t budget_refusals() const noexcept {
    return budget_refusals_.load(std::memory_order_relaxed);
  }
  std::size_t pool_refusals() const noexcept {
    return pool_refusals_.load(std::memory_order_relaxed);
  }
  std::size_t retries() const noexcept { return tally_.retries.load(std::memory_order_relaxed); }
  std::size_t budget_bytes() const noexcept { return budget_; }
  const std::string& name() const noexcept { return name_; }
  ledger* parent() const noexcept { return parent_; }

 private:
  // Every sub left is a retired one (an open one holds a reference to this ledger).
  ~ledger() {
    for (ledger* sub : subs_)
      delete sub;
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

  void note_stream(cudaStream_t stream) noexcept {
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

  // Under lock_.
  void add_bytes(std::size_t bytes) noexcept {
    bytes_ += bytes;
    if (bytes_ > peak_) peak_ = bytes_;
  }

  // Under lock_: a new free slot, the last; throws std::bad_alloc.
  CUSCOPE_DETAIL_NOINLINE std::uint32_t grow() {
    const auto slot = static_cast<std::uint32_t>(records_.size());
    records_.push_back(allocation_record{nullptr, 0, nullptr, nullptr, nullptr, no_slot, false});
    return slot;
  }

  // Takes the lock.
  void take_back(std::size_t bytes) noexcept {
    const std::lock_guard<spin_lock> lock(lock_);
    bytes_ -= bytes;
  }

  // The last reference is gone. A nested ledger that still counts live allocations (memory freed
  // by pointer that its session never freed, or whose free failed, here or in a ledger under it)
  // stays among its parent's subs, retired, so that the parent's leak report still names them; the
  // parent deletes it when it goes itself.
  void destroy() noexcept {
    ledger* const parent = parent_;
    if (parent == nullptr || count_ == 0) {
      if (parent != nullptr) parent->remove_sub(this);
      delete this;
    }
    if (parent != nullptr) parent->release();
  }

  [[noreturn]] CUSCOPE_DETAIL_COLD void over_budget(std::size_t bytes, std::size_t live) const {
    throw out_of_memory(bytes,
                        "cuscope: out of memory: " + format_bytes(bytes) + " (" +
                            std::to_string(bytes) + " bytes) requested in session '" + name_ +
                            "', whose budget of " + format_bytes(budget_) + " already holds " +
                            format_bytes(live) + " in live allocations",
                        cudaSuccess);
  }

  // What an allocation touches first, together.
  mutable spin_lock lock_;  // refs_, bytes_, count_, peak_, records_ and free_slot_
  std::uint32_t free_slot_ = no_slot;
  ledger* parent_;
  cudaStream_t stream_;
  std::size_t refs_ = 1;
  std::size_t bytes_ = 0;
  std::size_t count_ = 0;
  std::size_t peak_ = 0;
  std::size_t allocations_ = 0;
  std::size_t frees_ = 0;
  std::vector<allocation_record> records_;
  std::size_t budget_;
  bool budgeted_;  // a budget here or in an enclosing ledger
  std::atomic<bool> other_streams_{false};
  std::atomic<bool> closed_flag_{false};
  std::string name_;
  std::vector<cudaStream_t> listed_;
  std::atomic<std::size_t> observed_used_{0};
  std::atomic<std::size_t> observed_reserved_{0};
  record_target recording_;
  alloc_tally tally_;
  std::atomic<std::size_t> budget_refusals_{0};
  std::atomic<std::size_t> pool_refusals_{0};
  std::mutex mutex_;  // children_, subs_, opened_ and closed_
  std::vector<ledger*> children_;
  std::vector<ledger*> subs_;  // every ledger whose parent this is, open or not
  std::size_t opened_ = 0;
  std::size_t group_reserve_ = 0;
  bool closed_ = false;
};

/// A counted reference to a ledger, for the adaptors a session hands out (Thrust allocators,
/// memory resources, batch ranges), which may be copied and outlive the session.
class ledger_ref {
 public:
  ledger_ref() noexcept = default;
  explicit ledger_ref(ledger* l) noexcept : ledger_(l) {
    if (ledger_ != nullptr) ledger_->retain();
  }
  ledger_ref(const ledger_ref& other) noexcept : ledger_ref(other.ledger_) {}
  ledger_ref(ledger_ref&& other) noexcept : ledger_(std::exchange(other.ledger_, nullptr)) {}
  ledger_ref& operator=(ledger_ref other) noexcept {
    std::swap(ledger_, other.ledger_);
    return *this;
  }
  ~ledger_ref() {
    if (ledger_ != nullptr) ledger_->release();
  }
  ledger* get() const noexcept { return ledger_; }

 private:
  ledger* ledger_ = nullptr;
};

/// The reason an adaptor of a finished session refuses to allocate.
[[noreturn]] CUSCOPE_DETAIL_COLD inline void allocate_after_finish(const ledger& l,
                                                                   const char* who) {
  throw std::logic_error(std::string(who) + ": allocation through session '" + l.name() +
                         "' after the session finished");
}

}  // namespace cuscope::detail
