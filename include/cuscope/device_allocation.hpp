// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief device_allocation: the untyped owner of one allocation from a pool, freed in stream
/// order. device_buffer<T> is its typed layer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "detail/config.hpp"
#include "detail/format.hpp"
#include "detail/ledger_fwd.hpp"
#include "error.hpp"
#include "event.hpp"
#include "memory_pool.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief Where an allocation was asked for: the file and line of the call, which
/// session::make_buffer takes by default and a leak report names. Trivially copyable.
struct call_site {
  const char* file = nullptr;  ///< __FILE__ of the caller; nullptr when unknown.
  unsigned line = 0;           ///< __LINE__ of the caller.

  /// @brief The call site of the function whose default argument this is (GCC, Clang and MSVC
  /// builtins, as std::source_location uses).
  [[nodiscard]] static constexpr call_site current(const char* file = __builtin_FILE(),
                                                   unsigned line = __builtin_LINE()) noexcept {
    return call_site{file, line};
  }
};

template <class T>
class device_buffer;

namespace detail {

template <class T, class Out, class Batch>
class batch_pipeline;

/// bytes (not 0) from pool on stream, counted by accounting (a session's ledger, not finished)
/// and freed by pointer (free_by_pointer_nothrow, session::deallocate): what a session's allocate
/// and its adaptors (Thrust allocators, memory resources) hand out. Named in the leak report by
/// name (a string that outlives the allocation) and file:line. Throws out_of_memory.
void* allocate_by_pointer(ledger& accounting, const memory_pool_ref& pool, cudaStream_t stream,
                          std::size_t bytes, const char* name, const char* file, unsigned line,
                          alloc_policy policy);

/// Frees ptr (nullptr: nothing), bytes from allocate_by_pointer(), in stream order on stream;
/// never throws. A pointer accounting does not know is freed all the same; a failed free leaves
/// the allocation counted (a leak the session names), and is reported through the cleanup channel.
void free_by_pointer_nothrow(ledger& accounting, void* ptr, std::size_t bytes, cudaStream_t stream,
                             const memory_pool_ref& pool) noexcept;

/// After ptr, bytes from allocate_by_pointer() whose record find() took, was freed on stream:
/// the free recorded and the allocation no longer counted.
void by_pointer_freed(ledger& accounting, const memory_pool_ref& pool, cudaStream_t stream,
                      void* ptr, std::size_t bytes, ledger_record& record) noexcept;

}  // namespace detail

/// @brief bytes of device memory from a pool, allocated on a stream and freed on that stream
/// when the object is destroyed: the pointer, its size, the stream, the pool and its device, and
/// optionally the session that counts it.
///
/// Move-only; a moved-from or released allocation is empty. A zero-byte allocation holds no
/// memory but remembers its stream and pool. The rules of device_buffer<T> on streams (the free
/// is ordered on stream() only) and on default stream handles (they name the default stream of
/// the pool's device) are this class's.
class device_allocation {
 public:
  /// @brief An empty allocation, with no pool.
  device_allocation() noexcept = default;

  /// @brief bytes from pool, usable in stream order on stream. Enqueued on stream; does not
  /// synchronize, unless policy is alloc_policy::retry_after_trim and the first try fails.
  /// @throws out_of_memory when the pool cannot provide it.
  device_allocation(stream_ref stream, std::size_t bytes, memory_pool_ref pool,
                    alloc_policy policy = alloc_policy::fail_fast)
      : stream_(stream.get()), pool_(pool.get()), device_(pool.device()) {
    if (bytes == 0) return;
    data_ = pool.allocate(stream, bytes, policy);
    bytes_ = bytes;
  }

  /// @brief Takes ownership of ptr, bytes allocated from pool on stream (for instance by
  /// cudaMallocFromPoolAsync, or released by another owner). It will be freed on stream.
  [[nodiscard]] static device_allocation adopt(stream_ref stream, void* ptr, std::size_t bytes,
                                               memory_pool_ref pool) noexcept {
    device_allocation a;
    a.data_ = ptr;
    a.bytes_ = ptr == nullptr ? 0 : bytes;
    a.stream_ = stream.get();
    a.pool_ = pool.get();
    a.device_ = pool.device();
    return a;
  }

  device_allocation(const device_allocation&) = delete;
  device_allocation& operator=(const device_allocation&) = delete;

  /// @brief Takes other's memory; other is left empty.
  device_allocation(device_allocation&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        stream_(other.stream_),
        pool_(std::exchange(other.pool_, nullptr)),
        device_(other.device_),
        ledger_(std::exchange(other.ledger_, nullptr)),
        record_(other.record_) {}

  /// @brief Frees this allocation's memory and takes other's; other is left empty.
  device_allocation& operator=(device_allocation&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      stream_ = other.stream_;
      pool_ = std::exchange(other.pool_, nullptr);
      device_ = other.device_;
      ledger_ = std::exchange(other.ledger_, nullptr);
      record_ = other.record_;
    }
    return *this;
  }

  /// @brief Frees the memory on the allocation's stream; never throws. A failure goes to the
  /// cleanup handler, and the session that counts the allocation goes on counting it (a leak).
  CUSCOPE_DETAIL_HOT_INLINE ~device_allocation() {
    if (data_ != nullptr) free_memory();
  }

  /// @brief Gives up ownership: the caller frees the returned pointer (on stream(), from
  /// pool()). Leaves this empty. An allocation a session counted is no longer counted by it.
  [[nodiscard]] void* release() noexcept;

  /// @brief The device pointer; nullptr when empty.
  [[nodiscard]] void* get() const noexcept { return data_; }
  /// @brief The number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  /// @brief True when the allocation holds no memory.
  [[nodiscard]] bool empty() const noexcept { return data_ == nullptr; }
  /// @brief The stream the memory is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief The device of the pool.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// @brief Whether a pool was given (false for a default-constructed or moved-from one).
  [[nodiscard]] bool has_pool() const noexcept { return pool_ != nullptr; }
  /// @brief The pool the memory came from.
  /// @throws std::logic_error for a default-constructed or moved-from allocation.
  [[nodiscard]] memory_pool_ref pool() const {
    if (pool_ == nullptr)
      throw std::logic_error(
          "cuscope::device_allocation: the allocation has no pool (empty or moved-from)");
    return memory_pool_ref(pool_, device_);
  }

  /// @brief A new allocation of bytes from the same pool on stream, counted by the same session.
  /// Enqueued on stream; does not synchronize, unless policy is alloc_policy::retry_after_trim
  /// and the first try fails.
  /// @throws std::logic_error without a pool; out_of_memory.
  [[nodiscard]] device_allocation allocate_like(
      stream_ref stream, std::size_t bytes, alloc_policy policy = alloc_policy::fail_fast) const {
    return device_allocation(stream, bytes, pool(), ledger_, policy);
  }

  /// @brief Makes stream the one the memory is freed on. The new stream waits, in stream order,
  /// for the work enqueued so far on the old one. Enqueued; does not synchronize.
  void set_stream(stream_ref stream);

 private:
  template <class>
  friend class device_buffer;
  template <class, class, class>
  friend class detail::batch_pipeline;

  // As device_allocation(stream, bytes, pool, policy), counted by accounting (the live
  // allocations of a session and its parents) until it is freed or released; nullptr counts
  // nothing: how session::make_buffer (through device_buffer) and batches() make what a session
  // counts. Throws out_of_memory when a session's budget or the pool refuses.
  device_allocation(stream_ref stream, std::size_t bytes, memory_pool_ref pool,
                    detail::ledger* accounting, alloc_policy policy = alloc_policy::fail_fast)
      : device_allocation(stream, bytes, pool, accounting, nullptr, call_site{}, policy) {}

  // As device_allocation(stream, bytes, pool, accounting, policy), named in the session's leak
  // report by tag (a string that outlives the allocation, such as a literal; nullptr for none)
  // and site.
  device_allocation(stream_ref stream, std::size_t bytes, memory_pool_ref pool,
                    detail::ledger* accounting, const char* tag, call_site site,
                    alloc_policy policy = alloc_policy::fail_fast)
      : stream_(stream.get()), pool_(pool.get()), device_(pool.device()) {
    if (bytes == 0) return;
    if (accounting == nullptr) {
      allocate_uncounted(bytes, policy);
      return;
    }
    // Set before the memory is: a constructor that throws leaves no object to destroy.
    ledger_ = accounting;
    allocate_counted(bytes, tag, site, policy);
  }

  CUSCOPE_DETAIL_HOT_INLINE void free() noexcept {
    if (data_ != nullptr) free_memory();
    data_ = nullptr;
    bytes_ = 0;
    ledger_ = nullptr;
  }

  // Frees data_ (not nullptr); leaves the members as they are. The usual case, memory no session
  // counts, inline; the counted one out of line.
  CUSCOPE_DETAIL_HOT_INLINE void free_memory() noexcept {
    if (ledger_ != nullptr) return free_counted();
    // cudaFreeAsync is ordered by the stream, whatever device is current; only a default stream
    // handle needs the pool's device to name the stream the memory was used on.
    if (!detail::free_async_nothrow(data_, stream_, device_, bytes_)) return;
    if (const detail::hook_entry* entries = detail::recorded_pools())
      detail::notify_pool_free(pool_, stream_, entries, data_, bytes_);
  }

  // The counted half of the constructor, out of line: bytes (not 0) from pool_ on stream_,
  // counted by ledger_ (not nullptr), which the constructor has set.
  void allocate_counted(std::size_t bytes, const char* tag, call_site site, alloc_policy policy);
  // The constructor's allocation that no session counts (a batch's outside a session), out of
  // line, so that make_buffer's inline part keeps no pool reference for it.
  void allocate_uncounted(std::size_t bytes, alloc_policy policy);
  void allocate_counted_slow(std::size_t bytes, const char* tag, call_site site,
                             alloc_policy policy);
  void allocate_budgeted(std::size_t bytes, const char* tag, call_site site, alloc_policy policy);
  // allocate_counted()'s failed runtime call (status), for bytes_: the retries policy asks for
  // (recorded), then the exception naming the pool.
  void* allocate_counted_failed(alloc_policy policy, cudaError_t status) const;
  // allocate_counted()'s recording of the allocation of data_: into the session's recorder, else
  // the pool's.
  void record_counted_allocate() const noexcept;

  void free_counted() noexcept;
  // free_counted()'s default stream (status cudaSuccess: not tried yet) or failed free (status).
  void free_counted_slow(cudaError_t status) noexcept;
  // The rest of free_counted() once the memory is freed.
  void counted_freed() noexcept;
  // free_counted()'s recording of the free: into the session's recorder, else the pool's.
  void record_counted_free() const noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  int device_ = 0;
  detail::ledger* ledger_ = nullptr;
  detail::ledger_record* record_ = nullptr;  // in ledger_'s records
};

}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
#  include "detail/ledger.hpp"

namespace cuscope {

namespace detail {

// A record prepare() or prepare_fast() took, given back unless release()d (the allocation made).
struct prepared_record {
  ledger_record* r;
  explicit prepared_record(ledger_record* record) noexcept : r(record) {}
  prepared_record(const prepared_record&) = delete;
  prepared_record& operator=(const prepared_record&) = delete;
  ~prepared_record() {
    if (r != nullptr) ledger::unprepare(*r);
  }
  ledger_record& release() noexcept { return *std::exchange(r, nullptr); }
};

// allocate_by_pointer() where the record cannot be taken inline (the ledger has a parent or a
// budget, the thread is new to it, its free records ran out) or the stream is a default one.
CUSCOPE_DETAIL_NOINLINE inline void* allocate_by_pointer_slow(
    ledger& accounting, const memory_pool_ref& pool, cudaStream_t stream, std::size_t bytes,
    const char* name, const char* file, unsigned line, alloc_policy policy) {
  // What counting needs that may fail comes first: a failure after the pool's allocation would
  // have to free it behind the recorder's back.
  ledger_record& r = accounting.prepare(bytes, stream, name, file, line, false);
  bool charged = false;
  try {
    charged = accounting.charge(bytes);
    void* const p =
        pool_access::allocate(pool, stream_ref(stream), bytes, policy, accounting.recording());
    (void)accounting.enter_prepared(r, p, bytes, stream, false);
    return p;
  } catch (...) {
    // The pool counted its refusal in the target's tally, a budget its own in charge().
    ledger::unprepare(r);
    accounting.cancel(bytes, charged);
    throw;
  }
}

// allocate_by_pointer()'s failed runtime call (status): the retries policy asks for (recorded),
// else the exception naming the pool, and record (prepared, not live) given back.
CUSCOPE_DETAIL_COLD inline void* allocate_by_pointer_failed(
    ledger& accounting, ledger_record& record, const memory_pool_ref& pool, cudaStream_t stream,
    std::size_t bytes, cudaError_t status, alloc_policy policy) {
  prepared_record g{&record};
  void* const p = pool_access::allocate_failed(pool, stream_ref(stream), bytes, status, policy,
                                               accounting.recording());
  (void)g.release();
  return p;
}

// The usual case inline, where the caller is out of line itself (session's allocate_counted,
// ledger::adaptor_allocate): a record from the thread's free list written before the runtime's
// allocation, so that only the record, the ledger and the pool are needed after it.
CUSCOPE_DETAIL_HOT_INLINE inline void* allocate_by_pointer(ledger& accounting,
                                                           const memory_pool_ref& pool,
                                                           cudaStream_t stream, std::size_t bytes,
                                                           const char* name, const char* file,
                                                           unsigned line, alloc_policy policy) {
  // A default stream needs the pool's device current: the pool's own path.
  ledger_record* const fast = is_default_stream(stream)
                                  ? nullptr
                                  : accounting.prepare_fast(bytes, stream, name, file, line, false);
  if (fast == nullptr)
    return allocate_by_pointer_slow(accounting, pool, stream, bytes, name, file, line, policy);
  void* p = nullptr;
  // A memory_pool_ref never holds a null handle.
  const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, pool.get(), stream);
  if (status == cudaSuccess) {
    if (may_record(accounting.recording()))
      notify_allocate(accounting.recording(), pool.device(), pool.get(), stream, p, bytes);
  } else {
    p = allocate_by_pointer_failed(accounting, *fast, pool, stream, bytes, status, policy);
  }
  accounting.enter_by_pointer(*fast, p, bytes, stream);
  return p;
}

CUSCOPE_DETAIL_HOT_INLINE inline void by_pointer_freed(ledger& accounting,
                                                       const memory_pool_ref& pool,
                                                       cudaStream_t stream, void* ptr,
                                                       std::size_t bytes,
                                                       ledger_record& record) noexcept {
  if (may_record(accounting.recording()))
    notify_free(accounting.recording(), pool.device(), pool.get(), stream, ptr, bytes);
  if (!accounting.discharge_fast(bytes, record, false)) accounting.discharge_slow(bytes, &record);
}

CUSCOPE_DETAIL_HOT_INLINE inline void free_by_pointer_nothrow(
    ledger& accounting, void* ptr, std::size_t bytes, cudaStream_t stream,
    const memory_pool_ref& pool) noexcept {
  // Its record is taken before the free: once freed, another thread's allocation may get the
  // address.
  if (ptr == nullptr) return;
  ledger_record* const record = accounting.find(ptr);
  if (!free_async_nothrow(ptr, stream, pool.device(), bytes)) {
    if (record != nullptr) accounting.restore(*record, ptr);  // still live
    return;
  }
  if (record != nullptr) return by_pointer_freed(accounting, pool, stream, ptr, bytes, *record);
  if (may_record(accounting.recording()))
    notify_free(accounting.recording(), pool.device(), pool.get(), stream, ptr, bytes);
}

// The ledger's side of ledger_access: what the adaptors a session hands out reach it through.
inline void* ledger::adaptor_allocate(const memory_pool_ref& pool, stream_ref stream,
                                      std::size_t bytes, const char* who) {
  if (bytes == 0) return nullptr;
  if (closed()) allocate_after_finish(*this, who);
  return allocate_by_pointer(*this, pool, stream.get(), bytes, who, nullptr, 0,
                             alloc_policy::fail_fast);
}

inline void ledger::adaptor_free(void* ptr, std::size_t bytes, stream_ref stream,
                                 const memory_pool_ref& pool) noexcept {
  free_by_pointer_nothrow(*this, ptr, bytes, stream.get(), pool);
}

}  // namespace detail

inline void* device_allocation::release() noexcept {
  if (ledger_ != nullptr) std::exchange(ledger_, nullptr)->discharge(bytes_, record_, false);
  bytes_ = 0;
  return std::exchange(data_, nullptr);
}

inline void device_allocation::set_stream(stream_ref stream) {
  if (data_ != nullptr) detail::order_after(stream, stream_ref(stream_), device_);
  stream_ = stream.get();
  if (ledger_ != nullptr) ledger_->moved_to(stream_, record_);
}

// What the usual case needs from the ledger is taken inline (prepare_fast), so that nothing but
// the runtime's allocation is called on the way; the rest goes to allocate_counted_slow. Only
// this object and the record are needed once the runtime call returns: the rest is read again.
CUSCOPE_DETAIL_NOINLINE inline void device_allocation::allocate_counted(std::size_t bytes,
                                                                        const char* tag,
                                                                        call_site site,
                                                                        alloc_policy policy) {
  // A default stream needs the pool's device current: the pool's own path, out of line.
  if (detail::is_default_stream(stream_)) return allocate_counted_slow(bytes, tag, site, policy);
  detail::ledger_record* const r = ledger_->prepare_fast(bytes, stream_, tag, site.file, site.line);
  if (r == nullptr) return allocate_counted_slow(bytes, tag, site, policy);
  detail::prepared_record g{r};
  bytes_ = bytes;
  // Straight into data_ (no object is left to destroy if this throws). pool_ is not nullptr: a
  // memory_pool_ref never holds a null handle.
  const cudaError_t status = cudaMallocFromPoolAsync(&data_, bytes, pool_, stream_);
  if (status == cudaSuccess) {
    if (ledger_->hook() != nullptr || detail::any_pool_recorded()) record_counted_allocate();
  } else {
    data_ = allocate_counted_failed(policy, status);
  }
  record_ = ledger_->enter_prepared(g.release(), data_, bytes_, stream_, true, true);
}

CUSCOPE_DETAIL_NOINLINE inline void device_allocation::record_counted_allocate() const noexcept {
  if (detail::recorder_hook* h = ledger_->hook())
    h->record_allocate(device_, pool_, stream_, data_, bytes_, ledger_->recording().scope);
  else if (const detail::hook_entry* entries = detail::recorded_pools())
    detail::notify_pool_allocate(pool_, stream_, entries, data_, bytes_);
}

CUSCOPE_DETAIL_COLD inline void* device_allocation::allocate_counted_failed(
    alloc_policy policy, cudaError_t status) const {
  return detail::pool_access::allocate_failed(memory_pool_ref(pool_, device_), stream_ref(stream_),
                                              bytes_, status, policy, ledger_->recording());
}

CUSCOPE_DETAIL_NOINLINE inline void device_allocation::allocate_uncounted(std::size_t bytes,
                                                                          alloc_policy policy) {
  data_ = memory_pool_ref(pool_, device_).allocate(stream_ref(stream_), bytes, policy);
  bytes_ = bytes;
}

CUSCOPE_DETAIL_NOINLINE inline void device_allocation::allocate_counted_slow(std::size_t bytes,
                                                                             const char* tag,
                                                                             call_site site,
                                                                             alloc_policy policy) {
  detail::ledger* const accounting = ledger_;
  if (accounting->budgeted()) return allocate_budgeted(bytes, tag, site, policy);
  // What counting needs that may fail comes first, so that nothing here needs undoing: the pool
  // counts its refusal in the target's tally.
  detail::prepared_record g{&accounting->prepare(bytes, stream_, tag, site.file, site.line)};
  void* const p = detail::pool_access::allocate_recorded(
      memory_pool_ref(pool_, device_), stream_ref(stream_), bytes, policy, accounting->recording());
  record_ = accounting->enter_prepared(g.release(), p, bytes, stream_);
  data_ = p;
  bytes_ = bytes;
}

CUSCOPE_DETAIL_NOINLINE inline void device_allocation::allocate_budgeted(std::size_t bytes,
                                                                         const char* tag,
                                                                         call_site site,
                                                                         alloc_policy policy) {
  detail::ledger* const accounting = ledger_;
  detail::ledger_record& s = accounting->prepare(bytes, stream_, tag, site.file, site.line);
  bool charged = false;
  try {
    charged = accounting->charge(bytes);  // counts its own refusal
    void* const p =
        detail::pool_access::allocate_recorded(memory_pool_ref(pool_, device_), stream_ref(stream_),
                                               bytes, policy, accounting->recording());
    record_ = accounting->enter_prepared(s, p, bytes, stream_);
    data_ = p;
    bytes_ = bytes;
  } catch (...) {  // from the pool, which counted its refusal: nothing was allocated
    detail::ledger::unprepare(s);
    accounting->cancel(bytes, charged);
    throw;
  }
}

CUSCOPE_DETAIL_NOINLINE inline void device_allocation::record_counted_free() const noexcept {
  if (detail::recorder_hook* h = ledger_->hook())
    h->record_free(device_, pool_, stream_, data_, bytes_);
  else if (const detail::hook_entry* entries = detail::recorded_pools())
    detail::notify_pool_free(pool_, stream_, entries, data_, bytes_);
}

CUSCOPE_DETAIL_HOT_INLINE inline void device_allocation::counted_freed() noexcept {
  if (ledger_->hook() != nullptr || detail::any_pool_recorded()) record_counted_free();
  // record_ is not nullptr: allocate_counted and adopt_counted made one, owned.
  if (!ledger_->discharge_fast(bytes_, *record_, true)) ledger_->discharge_slow(bytes_, record_);
}

// As free_async_nothrow(data_, stream_, device_, bytes_), with its rare cases (a default stream,
// a failed free) out of line, so that only this object is needed once the runtime call returns:
// the rest is read from it again.
CUSCOPE_DETAIL_NOINLINE inline void device_allocation::free_counted() noexcept {
  if (detail::is_default_stream(stream_)) return free_counted_slow(cudaSuccess);
  const cudaError_t status = cudaFreeAsync(data_, stream_);
  if (status != cudaSuccess) return free_counted_slow(status);
  counted_freed();
}

CUSCOPE_DETAIL_NOINLINE inline void device_allocation::free_counted_slow(
    cudaError_t status) noexcept {
  if (detail::free_async_slow(data_, stream_, device_, bytes_, status)) return counted_freed();
  // Still allocated: the session goes on counting it, and names it as a leak.
  ledger_->abandon(record_);
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE
