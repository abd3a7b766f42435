// SPDX-License-Identifier: Apache-2.0
// The count of a session's live allocations, shared with the buffers it made so that a buffer can
// outlive the session (a leak) without touching freed memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "../error.hpp"
#include "format.hpp"

namespace cuscope::detail {

/// Live allocations and bytes charged to a session, with an optional budget that also counts
/// against every enclosing session's budget. Reference counted: the session holds one reference
/// and each buffer charged to it another.
class ledger {
 public:
  ledger(ledger* parent, std::size_t budget_bytes, std::string name)
      : parent_(parent), budget_(budget_bytes), name_(std::move(name)) {
    if (parent_ != nullptr) parent_->retain();
  }
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }

  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ledger* parent = parent_;
      delete this;
      if (parent != nullptr) parent->release();
    }
  }

  /// Counts an allocation of bytes here and in every enclosing ledger, and takes a reference
  /// for the buffer. Throws out_of_memory, changing nothing, when a budget would be exceeded.
  void charge(std::size_t bytes) {
    for (ledger* l = this; l != nullptr; l = l->parent_) {
      if (l->budget_ == 0) {
        l->bytes_.fetch_add(bytes, std::memory_order_relaxed);
        continue;
      }
      // Checked before it is added: a request that does not fit never shows in the count, where
      // a concurrent make_buffer would see it and be refused as well, and a huge one cannot wrap
      // the sum around to something that fits.
      std::size_t live = l->bytes_.load(std::memory_order_relaxed);
      do {
        if (bytes > l->budget_ || live > l->budget_ - bytes) {
          for (ledger* r = this; r != l; r = r->parent_)
            r->bytes_.fetch_sub(bytes, std::memory_order_relaxed);
          l->over_budget(bytes, live);
        }
      } while (!l->bytes_.compare_exchange_weak(live, live + bytes, std::memory_order_relaxed));
    }
    for (ledger* l = this; l != nullptr; l = l->parent_) {
      l->count_.fetch_add(1, std::memory_order_relaxed);
      l->raise_peak();
    }
    retain();
  }

  /// Reverses charge(bytes) and drops the buffer's reference.
  void discharge(std::size_t bytes) noexcept {
    for (ledger* l = this; l != nullptr; l = l->parent_) {
      l->bytes_.fetch_sub(bytes, std::memory_order_relaxed);
      l->count_.fetch_sub(1, std::memory_order_relaxed);
    }
    release();
  }

  std::size_t live_bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }
  std::size_t live_allocations() const noexcept { return count_.load(std::memory_order_relaxed); }
  std::size_t peak_bytes() const noexcept { return peak_.load(std::memory_order_relaxed); }
  std::size_t budget_bytes() const noexcept { return budget_; }
  const std::string& name() const noexcept { return name_; }

 private:
  ~ledger() = default;

  void raise_peak() noexcept {
    const std::size_t now = bytes_.load(std::memory_order_relaxed);
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  [[noreturn]] CUSCOPE_DETAIL_COLD void over_budget(std::size_t bytes, std::size_t live) const {
    throw out_of_memory(bytes,
                        "cuscope: out of memory: " + format_bytes(bytes) + " (" +
                            std::to_string(bytes) + " bytes) requested in session '" + name_ +
                            "', whose budget of " + format_bytes(budget_) + " already holds " +
                            format_bytes(live) + " in live allocations",
                        cudaSuccess);
  }

  ledger* parent_;
  std::size_t budget_;
  std::string name_;
  std::atomic<std::size_t> refs_{1};
  std::atomic<std::size_t> bytes_{0};
  std::atomic<std::size_t> count_{0};
  std::atomic<std::size_t> peak_{0};
};

}  // namespace cuscope::detail
