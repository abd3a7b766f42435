// SPDX-License-Identifier: Apache-2.0
// What the public headers' declarations need of the ledger (detail/ledger.hpp), which only their
// host-only definitions use: nvcc's device passes see this and not the ledger itself. The
// adaptors a session hands out (thrust.hpp, memory_resource.hpp) reach its ledger through
// ledger_access alone, so that their headers need neither the ledger nor <mutex>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cuscope {
class session;
class memory_pool_ref;
class stream_ref;
}  // namespace cuscope

namespace cuscope::detail {

class ledger;
struct ledger_record;

/// Enables the overloads that take a session (thrust_policy(session), batches(session, ...)),
/// declared where session.hpp need not be included.
template <class S>
using if_session = std::enable_if_t<std::is_same_v<S, session>, int>;

/// What an adaptor a session hands out (its Thrust allocators and policies, pool_resource) does
/// with the session's ledger, which implements it (defined with device_allocation.hpp's counted
/// paths): a virtual call each, on the counted paths only.
class ledger_access {
 public:
  /// bytes from pool on stream, counted by the ledger and named who in its leak report: the
  /// session's allocate by pointer, freed by adaptor_free. nullptr for 0 bytes.
  /// Throws std::logic_error after the session finished; out_of_memory.
  virtual void* adaptor_allocate(const memory_pool_ref& pool, stream_ref stream, std::size_t bytes,
                                 const char* who) = 0;
  /// Frees ptr (nullptr: nothing), bytes from adaptor_allocate, in stream order on stream; never
  /// throws. A failed free leaves it counted (a leak the session names), and is reported through
  /// the cleanup channel.
  virtual void adaptor_free(void* ptr, std::size_t bytes, stream_ref stream,
                            const memory_pool_ref& pool) noexcept = 0;
  /// A reference to the ledger, which an adaptor holds so that it may outlive the session.
  virtual void adaptor_retain() noexcept = 0;
  /// Drops a reference adaptor_retain took; the last one deletes the ledger.
  virtual void adaptor_release() noexcept = 0;
  /// The ledger itself (what accounting_of(session) returns).
  virtual ledger* adaptor_owner() noexcept = 0;

 protected:
  ledger_access() noexcept = default;
  ledger_access(const ledger_access&) = default;
  ledger_access& operator=(const ledger_access&) = default;
  ~ledger_access() = default;  // a ledger is deleted as a ledger (final) only
};

/// How cuscope's own code reaches the ledger behind a session, or behind an adaptor a session
/// handed out (pool_resource, thrust_allocator): their accounting() is private, so that no public
/// member names a detail type, and this is its friend.
struct accounting_access {
  template <class T>
  static ledger* of(const T& t) noexcept {
    return t.accounting();
  }
};

/// The ledger behind t, a session or an adaptor a session handed out (nullptr: none).
template <class T>
ledger* accounting_of(const T& t) noexcept {
  return accounting_access::of(t);
}

/// The ledger's ledger_access (defined with the ledger, host code only): what the adaptors'
/// session constructors convert accounting_of(session) with, where the ledger may be incomplete.
ledger_access* access_of(ledger* l) noexcept;

/// A counted reference to a ledger, for the adaptors a session hands out (Thrust allocators,
/// memory resources), which may be copied and outlive the session.
class ledger_ref {
 public:
  ledger_ref() noexcept = default;
  explicit ledger_ref(ledger_access* l) noexcept : ledger_(l) {
    if (ledger_ != nullptr) ledger_->adaptor_retain();
  }
  ledger_ref(const ledger_ref& other) noexcept : ledger_ref(other.ledger_) {}
  ledger_ref(ledger_ref&& other) noexcept : ledger_(other.ledger_) { other.ledger_ = nullptr; }
  ledger_ref& operator=(ledger_ref other) noexcept {
    ledger_access* const mine = ledger_;
    ledger_ = other.ledger_;
    other.ledger_ = mine;
    return *this;
  }
  ~ledger_ref() {
    if (ledger_ != nullptr) ledger_->adaptor_release();
  }
  ledger_access* get() const noexcept { return ledger_; }
  /// The ledger (nullptr for none), as accounting_of(session) names it.
  ledger* owner() const noexcept { return ledger_ != nullptr ? ledger_->adaptor_owner() : nullptr; }

 private:
  ledger_access* ledger_ = nullptr;
};

}  // namespace cuscope::detail
