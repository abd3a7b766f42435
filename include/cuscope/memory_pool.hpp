// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Memory pools on the stream-ordered allocator: memory_pool owns a cudaMemPool_t,
/// memory_pool_ref refers to one (the device's default pool among them).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "detail/config.hpp"
#include "detail/format.hpp"
#include "detail/pool_directory.hpp"
#include "detail/recorder_hook.hpp"
#include "device.hpp"
#include "error.hpp"
#include "stream.hpp"

namespace cuscope {

class recorder;

/// @brief Reserved and used bytes of a pool, now and at their peak since the last reset.
struct pool_stats {
  std::size_t reserved_bytes = 0;       ///< Backing memory the pool holds from the driver.
  std::size_t reserved_high_bytes = 0;  ///< Peak of reserved_bytes.
  std::size_t used_bytes = 0;           ///< Memory behind live allocations.
  std::size_t used_high_bytes = 0;      ///< Peak of used_bytes.
};

/// @brief When a pool may hand memory freed on one stream to an allocation on another
/// (the cudaMemPoolReuse* attributes; CUDA enables all three by default).
struct reuse_policy {
  /// @brief Reuse a free that the allocating stream is ordered after through events.
  bool follow_event_dependencies = true;
  /// @brief Reuse a free that has already completed, without any ordering.
  bool allow_opportunistic = true;
  /// @brief Let CUDA make the allocating stream wait for the free.
  bool allow_internal_dependencies = true;
};

/// @brief How another process may share a pool's memory (cudaMemPoolProps::handleTypes);
/// include/cuscope/ipc.hpp shares it, docs/multiprocess.md tells how.
enum class pool_export {
  none,                   ///< Not shareable (cudaMemHandleTypeNone).
  posix_file_descriptor,  ///< Through a file descriptor (cudaMemHandleTypePosixFileDescriptor).
  /// Through a fabric handle, across nodes of an IMEX domain (cudaMemHandleTypeFabric, CUDA 12.3
  /// headers and newer). Untested here: no machine of this project has an IMEX channel.
  fabric,
};

namespace detail {
[[noreturn]] CUSCOPE_DETAIL_COLD inline void device_list_full(std::size_t max_size) {
  throw std::length_error("cuscope::device_list: more than " + std::to_string(max_size) +
                          " devices (device_list::max_size)");
}
[[noreturn]] CUSCOPE_DETAIL_COLD inline void device_list_index(std::size_t i, std::size_t size) {
  throw std::out_of_range("cuscope::device_list: index " + std::to_string(i) + " of a list of " +
                          format_count(size, "device"));
}
}  // namespace detail

/// @brief Device ordinals in the order given (pool_options::access_from): a list of fixed
/// capacity, which keeps <vector> out of the pool headers.
class device_list {
 public:
  /// @brief The most devices a list holds, more than a node has.
  static constexpr std::size_t max_size = 64;

  /// @brief An empty list.
  constexpr device_list() noexcept = default;
  /// @brief devices, in order.
  /// @throws std::length_error for more than max_size.
  device_list(std::initializer_list<int> devices) {
    for (const int d : devices)
      push_back(d);
  }
  /// @brief The elements of a range of device ordinals (a std::vector<int>, a std::array<int, N>).
  /// @throws std::length_error for more than max_size.
  template <class Range, class = decltype(static_cast<int>(*std::declval<const Range&>().begin())),
            class = decltype(std::declval<const Range&>().end())>
  device_list(const Range& devices) {  // NOLINT(google-explicit-constructor): as a vector's
    for (const auto& d : devices)
      push_back(static_cast<int>(d));
  }

  /// @brief Adds device at the end.
  /// @throws std::length_error when the list holds max_size devices.
  void push_back(int device) {
    if (size_ == max_size) detail::device_list_full(max_size);
    devices_[size_++] = device;
  }
  /// @brief Empties the list.
  void clear() noexcept { size_ = 0; }
  /// @brief How many devices it holds.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// @brief Whether it holds none.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief Where iteration starts: the first device.
  [[nodiscard]] const int* begin() const noexcept { return devices_; }
  /// @brief Where iteration ends: past the last device.
  [[nodiscard]] const int* end() const noexcept { return devices_ + size_; }
  /// @brief The device at index i.
  /// @throws std::out_of_range for i >= size().
  [[nodiscard]] int operator[](std::size_t i) const {
    if (i >= size_) detail::device_list_index(i, size_);
    return devices_[i];
  }
  /// @brief The same devices in the same order.
  friend bool operator==(const device_list& a, const device_list& b) noexcept {
    if (a.size_ != b.size_) return false;
    for (std::size_t i = 0; i < a.size_; ++i)
      if (a.devices_[i] != b.devices_[i]) return false;
    return true;
  }
  /// @brief Not the same devices in the same order.
  friend bool operator!=(const device_list& a, const device_list& b) noexcept { return !(a == b); }

 private:
  int devices_[max_size] = {};
  std::size_t size_ = 0;
};

/// @brief How a memory_pool is made.
struct pool_options {
  /// @brief Value of release_threshold_bytes that keeps all memory until trimmed.
  static constexpr std::size_t keep_all = std::numeric_limits<std::size_t>::max();

  /// @brief Device of the pool; -1 for the calling thread's current device.
  int device = -1;
  /// @brief Reserved memory the pool keeps across synchronizations; more is released at the
  /// next stream, event or device synchronization. CUDA's default is 0, which makes memory go
  /// back to the driver at every synchronization and reallocation slow; the default here keeps
  /// everything until trim_to() or a session trims it.
  std::size_t release_threshold_bytes = keep_all;
  /// @brief Hard limit on reserved memory; 0 for none. Needs CUDA 12.2. The driver rounds it up
  /// (to a multiple of 32 MiB on current GPUs); memory_pool::max_bytes() reports the rounded
  /// limit where the driver tells it.
  std::size_t max_bytes = 0;
  /// @brief Memory reserved at construction (kept while it is within the release threshold).
  std::size_t initial_bytes = 0;
  /// @brief Cross-stream reuse.
  reuse_policy reuse{};
  /// @brief How other processes may share the pool's memory; checked against what the device
  /// supports (cudaDevAttrMemoryPoolSupportedHandleTypes). CUDA never gives the memory of a
  /// shareable pool back to the system: its release threshold and trims have no effect.
  pool_export export_handle = pool_export::none;
  /// @brief Where the values came from, for logs and reports; from_env() fills it.
  std::string origin;
  /// @brief A name for messages and reports ("pool 'requests' 0x... on device 0"), kept by the
  /// pool and found by every reference to it; from_env(name) sets it to name when it is empty.
  std::string name;

  /// @brief defaults, with the values that CUSCOPE_<NAME>_* environment variables set
  /// (NAME is name in upper case): DEVICE (an ordinal), MAX_BYTES, RELEASE_THRESHOLD (also
  /// keep_all) and INITIAL_BYTES, each a byte count ("1073741824", "512MiB", "1.5GiB", "2GB") or
  /// a fraction of the device's memory ("0.8", "80%"). Nothing else reads the environment.
  /// origin says which value came from where. docs/concepts.md, "Limits from the environment".
  /// @throws std::invalid_argument naming the variable for a malformed value or a bad name;
  /// cuda_error when a fraction needs the device's memory and CUDA cannot tell it.
  [[nodiscard]] static pool_options from_env(const std::string& name, pool_options defaults);
  /// @brief from_env(name, pool_options{}).
  [[nodiscard]] static pool_options from_env(const std::string& name);
  /// @brief Devices besides the pool's own that get read-write access to its memory
  /// (cudaMemPoolSetAccess), so that their kernels and copies may use it; for a
  /// pinned_memory_pool, devices besides options.device.
  device_list access_from;
};

/// @brief What a device may do with a pool's memory (cudaMemAccessFlags).
enum class access_flags : unsigned char {
  none,        ///< No access (cudaMemAccessFlagsProtNone).
  read,        ///< Read only (cudaMemAccessFlagsProtRead).
  read_write,  ///< Read and write (cudaMemAccessFlagsProtReadWrite).
};

/// @brief What an allocation does when the pool cannot serve it. Given at each call that may
/// block (pool_base::allocate, device_allocation, device_buffer, session_options), never stored
/// in a pool or a reference.
enum class alloc_policy : unsigned char {
  /// Throw out_of_memory at once; the allocation never blocks the host.
  fail_fast,
  /// Synchronize the pool's device (cudaDeviceSynchronize: the host waits for all work on the
  /// device, from every stream and library), trim the pool to 0 so that frees that were in flight
  /// become reusable and a large request can get one fresh block, try once more, then throw.
  retry_after_trim,
};

class memory_pool;
class memory_pool_ref;

/// @brief What an out-of-memory handler is told: a pool refused an allocation.
struct out_of_memory_info {
  cudaMemPool_t pool = nullptr;   ///< The pool that refused.
  int device = 0;                 ///< Its device.
  cudaStream_t stream = nullptr;  ///< The stream the allocation was for.
  std::size_t bytes = 0;          ///< The request.
  unsigned attempt = 1;           ///< 1 for the first refusal, 2 after one retry, and so on.
  void* user = nullptr;           ///< What set_out_of_memory_handler was given.
};

/// @brief Called when a pool refuses an allocation, after alloc_policy's own retry and before
/// out_of_memory is thrown, on the allocating thread. Return true to have the allocation tried
/// again (after freeing memory: dropping a cache, empty_cache() on other pools), false to let it
/// fail. It is called again after each refused retry, with attempt counting up; it must not
/// throw, and must not allocate from a pool in a way that calls it again without end.
using out_of_memory_handler = bool (*)(const out_of_memory_info& info) noexcept;

namespace detail {
struct oom_handler_slot {
  std::atomic<bool> locked{false};
  out_of_memory_handler handler = nullptr;
  void* user = nullptr;
};
inline oom_handler_slot oom_slot;  // constant-initialized; one per program

template <class F>
auto with_oom_slot(F f) noexcept {
  while (oom_slot.locked.exchange(true, std::memory_order_acquire))
    while (oom_slot.locked.load(std::memory_order_relaxed)) {
    }
  auto r = f(oom_slot);
  oom_slot.locked.store(false, std::memory_order_release);
  return r;
}
}  // namespace detail

/// @brief Sets the handler every pool calls when it refuses an allocation, for every thread;
/// nullptr for none (the default). user is handed to it in out_of_memory_info::user. Returns the
/// previous handler (its user data is not returned: keep it if you restore it).
inline out_of_memory_handler set_out_of_memory_handler(out_of_memory_handler handler,
                                                       void* user = nullptr) noexcept {
  return detail::with_oom_slot([&](detail::oom_handler_slot& slot) {
    slot.user = user;
    return std::exchange(slot.handler, handler);
  });
}

/// @brief Sets an out-of-memory handler for a scope and restores the previous one at its end.
class scoped_out_of_memory_handler {
 public:
  explicit scoped_out_of_memory_handler(out_of_memory_handler handler,
                                        void* user = nullptr) noexcept
      : previous_(detail::with_oom_slot([&](detail::oom_handler_slot& slot) {
          previous_user_ = std::exchange(slot.user, user);
          return std::exchange(slot.handler, handler);
        })) {}
  scoped_out_of_memory_handler(const scoped_out_of_memory_handler&) = delete;
  scoped_out_of_memory_handler& operator=(const scoped_out_of_memory_handler&) = delete;
  ~scoped_out_of_memory_handler() { (void)set_out_of_memory_handler(previous_, previous_user_); }

 private:
  void* previous_user_ = nullptr;
  out_of_memory_handler previous_;
};

namespace detail {

/// The half of free_async_nothrow that is not a successful free on a stream other than a default
/// one: a default stream (made current on device first), or status, a failed free, to report.
bool free_async_slow(void* ptr, cudaStream_t stream, int device, std::size_t bytes,
                     cudaError_t status) noexcept;

/// Frees ptr, bytes of memory of a pool on device, in stream order on stream; never throws. A
/// default stream handle names the default stream of device, as in pool_base::deallocate. False
/// when the free failed (reported to the cleanup handler): the memory is still allocated.
CUSCOPE_DETAIL_HOT_INLINE inline bool free_async_nothrow(void* ptr, cudaStream_t stream, int device,
                                                         std::size_t bytes = 0) noexcept {
  if (ptr == nullptr) return true;
  if (is_default_stream(stream)) return free_async_slow(ptr, stream, device, bytes, cudaSuccess);
  const cudaError_t status = cudaFreeAsync(ptr, stream);
  return status == cudaSuccess || free_async_slow(ptr, stream, device, bytes, status);
}

/// The limit on pool's reserved memory that the driver enforces (cudaMemPoolAttrMaxPoolSize, which
/// drivers of CUDA 13.2 and newer answer whatever the headers say), or asked where the driver does
/// not answer. Drivers round maxSize up: CCCL's tests see a 1 MiB limit refuse only 33 MiB.
std::size_t enforced_max_bytes(cudaMemPool_t pool, std::size_t asked) noexcept;

// The cold paths of every pool class, on a handle and a device: written once rather than as
// members of pool_base, which every translation unit would instantiate for each pool class.
// limit(self) gives the pool's limit (max_bytes()), asked only when a message needs it.
using pool_limit_fn = std::size_t (*)(const void* self) noexcept;
[[noreturn]] void throw_empty_pool();
std::string describe_pool(cudaMemPool_t handle, int device);
std::string pool_destroyed_note(cudaMemPool_t handle, cudaError_t status);
[[noreturn]] void pool_failed(cudaMemPool_t handle, int device, cudaError_t status,
                              const char* call);
[[noreturn]] void pool_free_failed(cudaMemPool_t handle, int device, cudaError_t status,
                                   const void* ptr, std::size_t bytes, stream_ref stream);
void pool_trim(cudaMemPool_t handle, int device, std::size_t bytes);
void* pool_allocate_failed(cudaMemPool_t handle, int device, pool_limit_fn limit, const void* self,
                           stream_ref stream, std::size_t bytes, cudaError_t status,
                           alloc_policy policy, record_target target);
std::string pool_oom_message(cudaMemPool_t handle, int device, pool_limit_fn limit,
                             const void* self, std::size_t bytes);
bool ask_oom_handler(out_of_memory_info& info) noexcept;

/// What memory_pool and memory_pool_ref share: every query and operation on a pool handle.
template <class Derived>
class pool_base {
 public:
  /// @brief The device the pool allocates on.
  [[nodiscard]] int device() const noexcept { return self().device_; }
  /// @brief The recorder attached to the pool (memory_pool::set_recorder); nullptr (the default)
  /// for none. Every reference to the pool and every allocation from it records there.
  template <class Recorder = recorder>
  [[nodiscard]] Recorder* attached_recorder() const noexcept {
    return static_cast<Recorder*>(detail::hook_for(self().handle_));
  }

  /// @brief Current and peak reserved and used bytes.
  [[nodiscard]] pool_stats stats() const;

  /// @brief Starts the peaks of stats() again from the current values.
  void reset_peaks() const;

  /// @brief Reserved memory kept across synchronizations (cudaMemPoolAttrReleaseThreshold).
  [[nodiscard]] std::size_t release_threshold() const {
    return get_u64(cudaMemPoolAttrReleaseThreshold);
  }

  /// @brief Sets the reserved memory kept across synchronizations; pool_options::keep_all keeps
  /// everything.
  void set_release_threshold(std::size_t bytes) const;

  /// @brief The cross-stream reuse policy.
  [[nodiscard]] reuse_policy reuse() const;

  /// @brief Sets the cross-stream reuse policy.
  void set_reuse(const reuse_policy& r) const;

  /// @brief Gives device access to the pool's memory (cudaMemPoolSetAccess); access_flags::none
  /// takes it back. A device pool's own device always has read-write access; a device pool on
  /// another device needs peer access between the two (cudaDeviceCanAccessPeer).
  /// @throws std::invalid_argument for an invalid device; cuda_error when CUDA refuses.
  void set_access(int device, access_flags flags) const;

  /// @brief The access device has to the pool's memory (cudaMemPoolGetAccess).
  /// @throws std::invalid_argument for an invalid device; cuda_error.
  [[nodiscard]] access_flags access(int device) const;

  /// @brief Releases unused reserved memory to the driver, keeping at least bytes reserved.
  ///
  /// Memory whose free has not completed cannot be released: synchronize the streams that freed
  /// it first (a session does both).
  void trim_to(std::size_t bytes) const;

  /// @brief Allocates bytes from the pool, usable in stream order after this call. Enqueued on
  /// stream (a default stream handle names the default stream of the pool's device); does not
  /// synchronize, unless policy is alloc_policy::retry_after_trim and the first try fails. Returns
  /// nullptr for 0 bytes.
  /// @throws out_of_memory when the device or the pool's limit cannot hold the request.
  [[nodiscard]] void* allocate(stream_ref stream, std::size_t bytes,
                               alloc_policy policy = alloc_policy::fail_fast) const {
    return allocate_into(stream, bytes, policy, detail::record_target{});
  }

  /// @brief Frees memory from allocate() in stream order: later work on stream may reuse it.
  /// Enqueued on stream (a default stream handle names the default stream of the pool's device);
  /// does not synchronize. bytes is what was allocated (unused by CUDA).
  void deallocate(stream_ref stream, void* ptr, std::size_t bytes) const;

  /// @brief "pool 0x... on device 0" (or "the default pool of device 0"), for messages.
  [[nodiscard]] std::string describe() const;

 protected:
  pool_base() = default;

 private:
  friend struct pool_access;

  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }

  // The library's own allocation paths (through pool_access), beside the public interface.
  // As allocate(stream, bytes, policy), recorded into target: how a session records what it
  // hands out under its id.
  [[nodiscard]] CUSCOPE_DETAIL_HOT_INLINE void* allocate_into(stream_ref stream, std::size_t bytes,
                                                              alloc_policy policy,
                                                              detail::record_target target) const {
    if (bytes == 0) return nullptr;
    // A default stream is resolved against the current device: the pool's is made current, out
    // of line, so that the usual case pays no guard.
    if (detail::is_default_stream(stream.get()))
      return allocate_on_device(stream, bytes, policy, target);
    void* p = nullptr;
    const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, checked_handle(), stream.get());
    if (status == cudaSuccess) {
      // Both out of line: this path is inlined wherever memory is allocated.
      if (target.hook != nullptr)
        detail::notify_allocate(target, self().device_, self().handle_, stream.get(), p, bytes);
      else if (const detail::hook_entry* entries = detail::recorded_pools())
        detail::notify_pool_allocate(self().handle_, stream.get(), entries, p, bytes);
      return p;
    }
    return allocate_failed(stream, bytes, status, policy, target);
  }

  // As allocate_into(stream, bytes, policy, target), for bytes > 0, writing the event into
  // target's recorder in place: a session's counted allocation, out of line itself.
  [[nodiscard]] CUSCOPE_DETAIL_HOT_INLINE void* allocate_recorded(
      stream_ref stream, std::size_t bytes, alloc_policy policy,
      const detail::record_target& target) const {
    if (detail::is_default_stream(stream.get()))
      return allocate_on_device(stream, bytes, policy, target);
    void* p = nullptr;
    const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, checked_handle(), stream.get());
    if (status == cudaSuccess) {
      detail::record_allocate(target, self().device_, self().handle_, stream.get(), p, bytes);
      return p;
    }
    return allocate_failed(stream, bytes, status, policy, target);
  }

  // What allocate(stream, bytes) does once cudaMallocFromPoolAsync on a stream that is not a
  // default one failed with status: ask the out-of-memory handler, then throw. Out of line: the
  // adaptors' own inline allocation ends there.
  [[nodiscard]] void* allocate_failed(stream_ref stream, std::size_t bytes,
                                      cudaError_t status) const {
    return allocate_failed(stream, bytes, status, alloc_policy::fail_fast, {});
  }

  cudaMemPool_t checked_handle() const;

  [[noreturn]] static void empty_pool() { throw_empty_pool(); }

  std::size_t get_u64(cudaMemPoolAttr attr) const;

  void set_u64(cudaMemPoolAttr attr, std::size_t bytes) const;

  bool get_flag(cudaMemPoolAttr attr) const;

  void set_flag(cudaMemPoolAttr attr, bool on) const;

  // Throws for a failed deallocate, naming the misuses CUDA refuses that way.
  [[noreturn]] CUSCOPE_DETAIL_COLD void free_failed(cudaError_t status, const void* ptr,
                                                    std::size_t bytes, stream_ref stream) const {
    pool_free_failed(self().handle_, self().device_, status, ptr, bytes, stream);
  }

  // Throws cuda_error for a call on the pool that failed with status, saying so when the
  // handle is one of a memory_pool that was destroyed (a reference, buffer or session outlived
  // it; or a pool made later outside cuscope got the same handle and was destroyed as well).
  [[noreturn]] CUSCOPE_DETAIL_COLD void failed(cudaError_t status, const char* call) const {
    pool_failed(self().handle_, self().device_, status, call);
  }

  static std::size_t limit_of(const void* self) noexcept {
    return static_cast<const Derived*>(self)->max_bytes();
  }

  // allocate() on a default stream, with the pool's device current.
  CUSCOPE_DETAIL_NOINLINE void* allocate_on_device(stream_ref stream, std::size_t bytes,
                                                   alloc_policy policy,
                                                   const detail::record_target& target) const;

  // The free of deallocate() on a default stream, with the pool's device current.
  CUSCOPE_DETAIL_NOINLINE void deallocate_on_device(stream_ref stream, void* ptr,
                                                    std::size_t bytes) const;

  // The cold half of allocate(): the retry policy asks for, then the exception.
  CUSCOPE_DETAIL_COLD void* allocate_failed(stream_ref stream, std::size_t bytes,
                                            cudaError_t status, alloc_policy policy,
                                            const detail::record_target& target) const {
    return pool_allocate_failed(self().handle_, self().device_, &limit_of, &self(), stream, bytes,
                                status, policy, target);
  }
};

}  // namespace detail

/// @brief A non-owning reference to a memory pool: its handle and its device. Trivially
/// copyable.
///
/// Everything else about the pool (its limit, its statistics) is asked of the driver when needed;
/// what an allocation does when the pool is full is given at the call (alloc_policy).
class memory_pool_ref : public detail::pool_base<memory_pool_ref> {
 public:
  /// @brief Refers to handle, a pool on device.
  /// @throws std::invalid_argument for a null handle.
  memory_pool_ref(cudaMemPool_t handle, int device);
  memory_pool_ref(std::nullptr_t, int) = delete;

  /// @brief The default pool of device, shared with every other library in the process. Read its
  /// statistics and allocate from it; by convention do not change its attributes.
  [[nodiscard]] static memory_pool_ref device_default(int device);

  /// @brief The pool cudaMallocAsync currently uses on device (cudaDeviceGetMemPool).
  [[nodiscard]] static memory_pool_ref device_current(int device);

  /// @brief The raw handle.
  [[nodiscard]] cudaMemPool_t get() const noexcept { return handle_; }

  /// @brief The hard limit on reserved memory as the driver reports it
  /// (cudaMemPoolAttrMaxPoolSize, answered by CUDA 13.2 drivers and newer); 0 when the pool has
  /// none or the driver does not say. A query of the driver each call; memory_pool::max_bytes()
  /// also knows the limit its options asked for.
  [[nodiscard]] std::size_t max_bytes() const noexcept {
    return detail::enforced_max_bytes(handle_, 0);
  }

  /// @brief True when both refer to the same pool on the same device.
  friend bool operator==(const memory_pool_ref& a, const memory_pool_ref& b) noexcept {
    return a.handle_ == b.handle_ && a.device_ == b.device_;
  }
  /// @brief True when they refer to different pools.
  friend bool operator!=(const memory_pool_ref& a, const memory_pool_ref& b) noexcept {
    return !(a == b);
  }

 private:
  friend class detail::pool_base<memory_pool_ref>;
  friend class memory_pool;

  cudaMemPool_t handle_;
  int device_;
};

/// @brief An owning memory pool: created with explicit settings, destroyed with the object.
///
/// Move-only; a moved-from pool is empty, destructible and assignable, and any other use of it
/// throws std::logic_error. Destroying a pool whose allocations are still live is allowed: CUDA
/// releases its memory once the last of them is freed.
class memory_pool : public detail::pool_base<memory_pool> {
 public:
  /// @brief Creates a pool with options, on options.device (the current device by default).
  /// @throws std::invalid_argument for an invalid device or inconsistent options;
  /// out_of_memory when initial_bytes cannot be reserved; cuda_error when CUDA fails.
  explicit memory_pool(const pool_options& options = {});

  /// @brief Takes ownership of handle, a pool created on device (with max_bytes as its limit,
  /// when it has one).
  [[nodiscard]] static memory_pool adopt(cudaMemPool_t handle, int device,
                                         std::size_t max_bytes = 0);

  memory_pool(const memory_pool&) = delete;
  memory_pool& operator=(const memory_pool&) = delete;

  /// @brief Takes other's pool; other is left empty.
  memory_pool(memory_pool&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        device_(other.device_),
        max_bytes_(other.max_bytes_),
        recorded_(std::exchange(other.recorded_, false)) {}

  /// @brief Destroys this pool and takes other's; other is left empty.
  memory_pool& operator=(memory_pool&& other) noexcept;

  /// @brief Destroys the pool; never throws.
  ~memory_pool() { destroy(); }

  /// @brief The raw handle; nullptr when empty.
  [[nodiscard]] cudaMemPool_t get() const noexcept { return handle_; }
  /// @brief True after a move or release().
  [[nodiscard]] bool empty() const noexcept { return handle_ == nullptr; }
  /// @brief Gives up ownership: the caller destroys the returned pool. Leaves this empty. The
  /// pool is no longer recorded.
  [[nodiscard]] cudaMemPool_t release() noexcept;

  /// @brief The hard limit on reserved memory; 0 for none. The limit the driver enforces where it
  /// says so (CUDA 13.2 drivers and newer round pool_options::max_bytes up), else the limit asked
  /// for. Read once at construction.
  [[nodiscard]] std::size_t max_bytes() const noexcept { return max_bytes_; }

  /// @brief A non-owning reference: this pool's handle and device.
  /// @throws std::logic_error when empty.
  [[nodiscard]] memory_pool_ref ref() const&;

  /// @brief Records this pool's allocations, frees, trims, threshold changes and errors into r
  /// from now on, through this object, every reference to the pool and every allocation from it,
  /// shown as name when one is given. Samples the pool. A recorder that is destroyed first stops
  /// recording by itself; no thread may be using the pool then.
  /// @throws std::logic_error when the pool is empty; std::bad_alloc.
  template <class Recorder, std::enable_if_t<std::is_same_v<Recorder, recorder>, int> = 0>
  void set_recorder(Recorder* r, const std::string& name = {});
  /// @brief Stops recording the pool.
  void set_recorder(std::nullptr_t) noexcept { stop_recording(); }
  /// @brief Deleted: a reference to a temporary pool would outlive the pool.
  memory_pool_ref ref() && = delete;
  /// @brief A non-owning reference; see ref().
  operator memory_pool_ref() const& { return ref(); }  // NOLINT: implicit
  /// @brief Deleted: a reference to a temporary pool would outlive the pool.
  operator memory_pool_ref() && = delete;

 private:
  friend class detail::pool_base<memory_pool>;

  memory_pool(cudaMemPool_t handle, int device, std::size_t max_bytes) noexcept
      : handle_(handle), device_(device), max_bytes_(max_bytes) {}

  // The handle type of export, once the device is known to support it.
  static cudaMemAllocationHandleType export_handle_type(pool_export e, int device);

  static void validate(const pool_options& o);

  // Backs bytes with memory now: allocate and free on the calling thread's default stream and
  // wait, which leaves the memory reserved within the release threshold.
  void reserve(std::size_t bytes);

  void stop_recording() noexcept;

  void destroy() noexcept;

  cudaMemPool_t handle_ = nullptr;
  int device_ = 0;
  std::size_t max_bytes_ = 0;
  bool recorded_ = false;  // set_recorder attached a recorder
};

}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope::detail {

CUSCOPE_DETAIL_NOINLINE inline bool free_async_slow(void* ptr, cudaStream_t stream, int device,
                                                    std::size_t bytes,
                                                    cudaError_t status) noexcept {
  const stream_device_guard_nothrow on(stream, device);
  if (status == cudaSuccess) {  // not tried yet: a default stream
    status = cudaFreeAsync(ptr, stream);
    if (status == cudaSuccess) return true;
  }
  // In a stream capture, a free becomes a graph node and must name memory the graph allocated.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool capturing = cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
                         capture != cudaStreamCaptureStatusNone;
  return cleanup_ok(status, "cudaFreeAsync(ptr, stream)",
                    capturing ? "device memory of a pool, freed in a stream capture that did not "
                                "allocate it (free it before the capture begins or after it ends)"
                    : status == cudaErrorInvalidValue
                        ? "device memory of a pool, which CUDA does not know as the start of a "
                          "live allocation (freed twice, or adopted by two owners; or allocated "
                          "in a stream capture and not yet allocated by a launch of its graph)"
                        : "device memory of a pool",
                    ptr, __FILE__, __LINE__, bytes);
}

inline std::size_t enforced_max_bytes(cudaMemPool_t pool, std::size_t asked) noexcept {
  constexpr int max_pool_size = 0xD;  // cudaMemPoolAttrMaxPoolSize, named from CUDA 13.2 on
  std::uint64_t limit = 0;
  if (cudaMemPoolGetAttribute(pool, static_cast<cudaMemPoolAttr>(max_pool_size), &limit) !=
      cudaSuccess) {
    (void)cudaGetLastError();  // an older driver: cudaErrorInvalidValue
    return asked;
  }
  const std::size_t enforced = limit;
  return enforced < asked ? asked : enforced;
}

/// What the library's own allocation paths (device_allocation, the sessions' counted paths, the
/// adaptors) use of a pool beyond its public interface: allocations recorded into a session's
/// target, and the failure path of an allocation made inline.
struct pool_access {
  template <class Pool>
  CUSCOPE_DETAIL_HOT_INLINE static void* allocate(const Pool& pool, stream_ref stream,
                                                  std::size_t bytes, alloc_policy policy,
                                                  const record_target& target) {
    return pool.allocate_into(stream, bytes, policy, target);
  }
  template <class Pool>
  CUSCOPE_DETAIL_HOT_INLINE static void* allocate_recorded(const Pool& pool, stream_ref stream,
                                                           std::size_t bytes, alloc_policy policy,
                                                           const record_target& target) {
    return pool.allocate_recorded(stream, bytes, policy, target);
  }
  template <class Pool>
  static void* allocate_failed(const Pool& pool, stream_ref stream, std::size_t bytes,
                               cudaError_t status) {
    return pool.allocate_failed(stream, bytes, status);
  }
  template <class Pool>
  static void* allocate_failed(const Pool& pool, stream_ref stream, std::size_t bytes,
                               cudaError_t status, alloc_policy policy,
                               const record_target& target) {
    return pool.allocate_failed(stream, bytes, status, policy, target);
  }
};

template <class Derived>
pool_stats pool_base<Derived>::stats() const {
  pool_stats s;
  s.reserved_bytes = get_u64(cudaMemPoolAttrReservedMemCurrent);
  s.reserved_high_bytes = get_u64(cudaMemPoolAttrReservedMemHigh);
  s.used_bytes = get_u64(cudaMemPoolAttrUsedMemCurrent);
  s.used_high_bytes = get_u64(cudaMemPoolAttrUsedMemHigh);
  return s;
}

template <class Derived>
void pool_base<Derived>::reset_peaks() const {
  set_u64(cudaMemPoolAttrReservedMemHigh, 0);
  set_u64(cudaMemPoolAttrUsedMemHigh, 0);
}

template <class Derived>
void pool_base<Derived>::set_release_threshold(std::size_t bytes) const {
  set_u64(cudaMemPoolAttrReleaseThreshold, bytes);
  if (detail::recorder_hook* h = detail::hook_for(self().handle_))
    h->on_threshold(self().device_, self().handle_, bytes);
}

template <class Derived>
reuse_policy pool_base<Derived>::reuse() const {
  reuse_policy r;
  r.follow_event_dependencies = get_flag(cudaMemPoolReuseFollowEventDependencies);
  r.allow_opportunistic = get_flag(cudaMemPoolReuseAllowOpportunistic);
  r.allow_internal_dependencies = get_flag(cudaMemPoolReuseAllowInternalDependencies);
  return r;
}

template <class Derived>
void pool_base<Derived>::set_reuse(const reuse_policy& r) const {
  set_flag(cudaMemPoolReuseFollowEventDependencies, r.follow_event_dependencies);
  set_flag(cudaMemPoolReuseAllowOpportunistic, r.allow_opportunistic);
  set_flag(cudaMemPoolReuseAllowInternalDependencies, r.allow_internal_dependencies);
}

template <class Derived>
void pool_base<Derived>::set_access(int device, access_flags flags) const {
  detail::check_device(device, "cuscope::memory_pool::set_access");
  cudaMemAccessDesc d{};
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = device;
  d.flags = flags == access_flags::read_write ? cudaMemAccessFlagsProtReadWrite
            : flags == access_flags::read     ? cudaMemAccessFlagsProtRead
                                              : cudaMemAccessFlagsProtNone;
  CUSCOPE_DETAIL_TRY_FOR(cudaMemPoolSetAccess(checked_handle(), &d, 1),
                         describe() + ", access from device " + std::to_string(device));
}

template <class Derived>
access_flags pool_base<Derived>::access(int device) const {
  detail::check_device(device, "cuscope::memory_pool::access");
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = device;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CUSCOPE_DETAIL_TRY_FOR(cudaMemPoolGetAccess(&flags, checked_handle(), &location),
                         describe() + ", access from device " + std::to_string(device));
  return flags == cudaMemAccessFlagsProtReadWrite ? access_flags::read_write
         : flags == cudaMemAccessFlagsProtRead    ? access_flags::read
                                                  : access_flags::none;
}

template <class Derived>
void pool_base<Derived>::trim_to(std::size_t bytes) const {
  pool_trim(self().handle_, self().device_, bytes);
}

template <class Derived>
void pool_base<Derived>::deallocate(stream_ref stream, void* ptr, std::size_t bytes) const {
  if (ptr == nullptr) return;
  if (detail::is_default_stream(stream.get())) {
    deallocate_on_device(stream, ptr, bytes);
  } else {
    const cudaError_t status = cudaFreeAsync(ptr, stream.get());
    if (status != cudaSuccess) free_failed(status, ptr, bytes, stream);
  }
  if (const detail::hook_entry* entries = detail::recorded_pools())
    detail::notify_pool_free(self().handle_, stream.get(), entries, ptr, bytes);
}

template <class Derived>
std::string pool_base<Derived>::describe() const {
  return describe_pool(self().handle_, self().device_);
}

template <class Derived>
cudaMemPool_t pool_base<Derived>::checked_handle() const {
  const cudaMemPool_t h = self().handle_;
  if (h == nullptr) empty_pool();
  return h;
}

template <class Derived>
std::size_t pool_base<Derived>::get_u64(cudaMemPoolAttr attr) const {
  std::uint64_t value = 0;
  const cudaError_t status = cudaMemPoolGetAttribute(checked_handle(), attr, &value);
  if (status != cudaSuccess) failed(status, "cudaMemPoolGetAttribute(handle, attr, &value)");
  return value;
}

template <class Derived>
void pool_base<Derived>::set_u64(cudaMemPoolAttr attr, std::size_t bytes) const {
  std::uint64_t value = bytes;
  const cudaError_t status = cudaMemPoolSetAttribute(checked_handle(), attr, &value);
  if (status != cudaSuccess) failed(status, "cudaMemPoolSetAttribute(handle, attr, &value)");
}

template <class Derived>
bool pool_base<Derived>::get_flag(cudaMemPoolAttr attr) const {
  int value = 0;
  const cudaError_t status = cudaMemPoolGetAttribute(checked_handle(), attr, &value);
  if (status != cudaSuccess) failed(status, "cudaMemPoolGetAttribute(handle, attr, &value)");
  return value != 0;
}

template <class Derived>
void pool_base<Derived>::set_flag(cudaMemPoolAttr attr, bool on) const {
  int value = on ? 1 : 0;
  const cudaError_t status = cudaMemPoolSetAttribute(checked_handle(), attr, &value);
  if (status != cudaSuccess) failed(status, "cudaMemPoolSetAttribute(handle, attr, &value)");
}

template <class Derived>
void* pool_base<Derived>::allocate_on_device(stream_ref stream, std::size_t bytes,
                                             alloc_policy policy,
                                             const detail::record_target& target) const {
  const stream_device_guard on(stream.get(), self().device_);
  void* p = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, checked_handle(), stream.get());
  if (status == cudaSuccess) {
    if (detail::may_record(target))
      detail::notify_allocate(target, self().device_, self().handle_, stream.get(), p, bytes);
    return p;
  }
  return allocate_failed(stream, bytes, status, policy, target);
}

template <class Derived>
void pool_base<Derived>::deallocate_on_device(stream_ref stream, void* ptr,
                                              std::size_t bytes) const {
  const stream_device_guard on(stream.get(), self().device_);
  const cudaError_t status = cudaFreeAsync(ptr, stream.get());
  if (status != cudaSuccess) free_failed(status, ptr, bytes, stream);
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void throw_empty_pool() {
  throw std::logic_error("cuscope::memory_pool: use of an empty (moved-from or released) pool");
}

inline std::string describe_pool(cudaMemPool_t handle, int device) {
  if (handle == nullptr) return "empty memory_pool";
  cudaMemPool_t default_pool = nullptr;
  // Clears only the error it made: a caller's pending one stays for cudaGetLastError.
  if (cudaDeviceGetDefaultMemPool(&default_pool, device) != cudaSuccess)
    (void)cudaGetLastError();
  else if (default_pool == handle)
    return "the default pool of device " + std::to_string(device);
  std::string name;
  try {
    name = pool_directory::get().find(handle).first;
  } catch (const std::bad_alloc&) {  // the message goes without the name
  }
  return (name.empty() ? "pool " : "pool '" + name + "' ") +
         format_pointer(static_cast<const void*>(handle)) + " on device " + std::to_string(device);
}

CUSCOPE_DETAIL_COLD inline std::string pool_destroyed_note(cudaMemPool_t handle,
                                                           cudaError_t status) {
  if (status != cudaErrorInvalidValue && status != cudaErrorInvalidResourceHandle) return {};
  try {
    if (pool_directory::get().find(handle).second)
      return " (a memory_pool with this handle was destroyed: a memory_pool_ref, buffer or "
             "session was used after its pool)";
  } catch (const std::bad_alloc&) {  // the message goes without the diagnosis
  }
  return {};
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void pool_failed(cudaMemPool_t handle, int device,
                                                         cudaError_t status, const char* call) {
  throw_cuda_error(status, call, __FILE__, __LINE__,
                   describe_pool(handle, device) + pool_destroyed_note(handle, status));
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void pool_free_failed(cudaMemPool_t handle, int device,
                                                              cudaError_t status, const void* ptr,
                                                              std::size_t bytes,
                                                              stream_ref stream) {
  std::string object = describe_pool(handle, device) + ", " + format_pointer(ptr) + " (" +
                       format_bytes(bytes) + ") on " + stream.describe();
  if (status == cudaErrorInvalidValue)
    object +=
        ": CUDA does not know it as the start of a live allocation (freed twice, owned "
        "by two objects, or not the address an allocation returned)";
  throw_cuda_error(status, "cudaFreeAsync(ptr, stream)", __FILE__, __LINE__, object);
}

inline void pool_trim(cudaMemPool_t handle, int device, std::size_t bytes) {
  if (handle == nullptr) throw_empty_pool();
  const cudaError_t status = cudaMemPoolTrimTo(handle, bytes);
  if (status != cudaSuccess)
    pool_failed(handle, device, status, "cudaMemPoolTrimTo(handle, bytes)");
  if (detail::recorder_hook* h = detail::hook_for(handle)) h->on_trim(device, handle, bytes);
}

CUSCOPE_DETAIL_COLD inline void* pool_allocate_failed(cudaMemPool_t handle, int device,
                                                      pool_limit_fn limit, const void* self,
                                                      stream_ref stream, std::size_t bytes,
                                                      cudaError_t status, alloc_policy policy,
                                                      record_target target) {
  (void)cudaGetLastError();
  detail::recorder_hook* const rec = detail::hook_for(handle, target);
  // A synchronization during a stream capture would invalidate it: no retry there.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool capturing = cudaStreamIsCapturing(stream.get(), &capture) != cudaSuccess ||
                         capture != cudaStreamCaptureStatusNone;
  (void)cudaGetLastError();
  if (status == cudaErrorMemoryAllocation && policy == alloc_policy::retry_after_trim &&
      !capturing) {
    if (rec != nullptr) rec->on_retry(device, handle, stream.get(), bytes);
    detail::alloc_tally::retried(target);
    // Frees still in flight on any stream become reusable once they complete, and trimming
    // returns what is unused so that a large request can be backed by one fresh block.
    {
      scoped_device on(device);
      CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), describe_pool(handle, device));
    }
    pool_trim(handle, device, 0);
    void* p = nullptr;
    status = cudaMallocFromPoolAsync(&p, bytes, handle, stream.get());
    if (status == cudaSuccess) {
      if (rec != nullptr)
        rec->record_allocate(device, handle, stream.get(), p, bytes, target.scope);
      return p;
    }
    (void)cudaGetLastError();
  }
  if (rec != nullptr && status == cudaErrorMemoryAllocation)
    rec->on_out_of_memory(device, handle, stream.get(), bytes, target.scope);
  if (status == cudaErrorMemoryAllocation) {
    out_of_memory_info info{handle, device, stream.get(), bytes, 1, nullptr};
    while (status == cudaErrorMemoryAllocation && ask_oom_handler(info)) {
      detail::alloc_tally::retried(target);
      void* p = nullptr;
      status = cudaMallocFromPoolAsync(&p, bytes, handle, stream.get());
      if (status == cudaSuccess) {
        if (rec != nullptr)
          rec->record_allocate(device, handle, stream.get(), p, bytes, target.scope);
        return p;
      }
      (void)cudaGetLastError();
      ++info.attempt;
    }
  }
  if (status == cudaErrorMemoryAllocation) {
    detail::alloc_tally::refused(target);
    throw out_of_memory(bytes, pool_oom_message(handle, device, limit, self, bytes) +
                                   " (cudaMallocFromPoolAsync failed with "
                                   "cudaErrorMemoryAllocation)");
  }
  throw_cuda_error(status, "cudaMallocFromPoolAsync", __FILE__, __LINE__,
                   describe_pool(handle, device) + ", " + format_bytes(bytes) + " on " +
                       stream.describe() + pool_destroyed_note(handle, status));
}

inline bool ask_oom_handler(out_of_memory_info& info) noexcept {
  const out_of_memory_handler handler = detail::with_oom_slot([&](detail::oom_handler_slot& slot) {
    info.user = slot.user;
    return slot.handler;
  });
  return handler != nullptr && handler(info);
}

CUSCOPE_DETAIL_COLD inline std::string pool_oom_message(cudaMemPool_t handle, int device,
                                                        pool_limit_fn limit, const void* self,
                                                        std::size_t bytes) {
  std::string m = "cuscope: out of memory: " + format_bytes(bytes) + " (" + std::to_string(bytes) +
                  " bytes) requested from " + describe_pool(handle, device);
  std::uint64_t reserved = 0;
  std::uint64_t used = 0;
  if (cudaMemPoolGetAttribute(handle, cudaMemPoolAttrReservedMemCurrent, &reserved) ==
          cudaSuccess &&
      cudaMemPoolGetAttribute(handle, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess) {
    m +=
        ", which holds " + format_bytes(reserved) + " reserved (" + format_bytes(used) + " in use)";
  }
  (void)cudaGetLastError();
  if (const std::size_t max = limit(self); max != 0) {
    m += " under a limit of " + format_bytes(max);
    if (bytes > max)
      m += ", less than the request";
    else if (used <= max - bytes)
      // Within the limit by its bytes: refused by the pool's blocks, which the limit bounds.
      m += "; the request fits the limit by its bytes, but a pool reserves memory in blocks "
           "(of 32 MiB on current GPUs) and an allocation must fit in one: the reserve not in "
           "use is in pieces too small for it, and a new block would pass the limit";
  }
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  {
    const device_switch_nothrow on(device);
    if (on.ok() && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
      m += "; the device has " + format_bytes(free_bytes) + " free of " + format_bytes(total);
  }
  (void)cudaGetLastError();
  return m;
}

}  // namespace cuscope::detail
#endif  // CUSCOPE_DETAIL_HOST_CODE

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope {

inline memory_pool::memory_pool(const pool_options& options) : max_bytes_(options.max_bytes) {
  device_ = options.device == -1 ? current_device() : options.device;
  detail::check_device(device_, "cuscope::memory_pool");
  validate(options);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_;
#  if CUSCOPE_HAS_POOL_MAX_SIZE
  props.maxSize = options.max_bytes;
#  endif
  props.handleTypes = export_handle_type(options.export_handle, device_);
  CUSCOPE_DETAIL_TRY_FOR(cudaMemPoolCreate(&handle_, &props),
                         "new memory_pool on device " + std::to_string(device_));
  if (max_bytes_ != 0) max_bytes_ = detail::enforced_max_bytes(handle_, max_bytes_);
  try {
    detail::pool_directory::get().made(handle_, device_, options.name);
    set_release_threshold(options.release_threshold_bytes);
    set_reuse(options.reuse);
    for (const int peer : options.access_from)
      if (peer != device_) set_access(peer, access_flags::read_write);
    if (options.initial_bytes != 0) reserve(options.initial_bytes);
  } catch (...) {
    destroy();
    throw;
  }
}

inline memory_pool memory_pool::adopt(cudaMemPool_t handle, int device, std::size_t max_bytes) {
  if (handle == nullptr) throw std::invalid_argument("cuscope::memory_pool::adopt: null handle");
  detail::pool_directory::get().made(handle, device, {});
  memory_pool p(handle, device, max_bytes);
  return p;
}

inline memory_pool& memory_pool::operator=(memory_pool&& other) noexcept {
  if (this != &other) {
    destroy();
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
    max_bytes_ = other.max_bytes_;
    recorded_ = std::exchange(other.recorded_, false);
  }
  return *this;
}

inline cudaMemPool_t memory_pool::release() noexcept {
  stop_recording();
  return std::exchange(handle_, nullptr);
}

inline memory_pool_ref memory_pool::ref() const& {
  if (handle_ == nullptr)
    throw std::logic_error("cuscope::memory_pool: use of an empty (moved-from or released) pool");
  return memory_pool_ref(handle_, device_);
}

template <class Recorder, std::enable_if_t<std::is_same_v<Recorder, recorder>, int>>
void memory_pool::set_recorder(Recorder* r, const std::string& name) {
  if (r == nullptr) {
    set_recorder(nullptr);
    return;
  }
  if (handle_ == nullptr)
    throw std::logic_error("cuscope::memory_pool: use of an empty (moved-from or released) pool");
  if (!name.empty()) r->name_pool(handle_, name);
  detail::attach_hook(handle_, device_, static_cast<detail::recorder_hook*>(r));
  recorded_ = true;
  r->sample(device_, handle_);
}

inline cudaMemAllocationHandleType memory_pool::export_handle_type(pool_export e, int device) {
  cudaMemAllocationHandleType type = cudaMemHandleTypeNone;
  const char* name = "";
  switch (e) {
    case pool_export::none:
      return cudaMemHandleTypeNone;
    case pool_export::posix_file_descriptor:
      type = cudaMemHandleTypePosixFileDescriptor;
      name = "POSIX file descriptors";
      break;
    case pool_export::fabric:
#  if CUDART_VERSION >= 12030
      type = cudaMemHandleTypeFabric;
      name = "fabric handles";
      break;
#  else
      throw std::invalid_argument(
          "cuscope::memory_pool: pool_export::fabric needs CUDA 12.3 headers or newer");
#  endif
  }
  int supported = 0;
  CUSCOPE_DETAIL_TRY_FOR(
      cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, device),
      "device " + std::to_string(device));
  if ((static_cast<unsigned>(supported) & static_cast<unsigned>(type)) == 0)
    throw std::invalid_argument(
        "cuscope::memory_pool: device " + std::to_string(device) + " cannot export pools through " +
        name + " (cudaDevAttrMemoryPoolSupportedHandleTypes = " + std::to_string(supported) + ")");
  return type;
}

inline void memory_pool::validate(const pool_options& o) {
#  if !CUSCOPE_HAS_POOL_MAX_SIZE
  if (o.max_bytes != 0)
    throw std::invalid_argument("cuscope::memory_pool: max_bytes needs CUDA 12.2 or newer");
#  endif
  if (o.max_bytes != 0 && o.initial_bytes > o.max_bytes)
    throw std::invalid_argument("cuscope::memory_pool: initial_bytes (" +
                                std::to_string(o.initial_bytes) + ") exceeds max_bytes (" +
                                std::to_string(o.max_bytes) + ")");
  if (o.initial_bytes > o.release_threshold_bytes)
    throw std::invalid_argument(
        "cuscope::memory_pool: initial_bytes (" + std::to_string(o.initial_bytes) +
        ") exceeds release_threshold_bytes (" + std::to_string(o.release_threshold_bytes) +
        "): the reserve would be released at the first synchronization");
}

inline void memory_pool::reserve(std::size_t bytes) {
  const stream_ref s = stream_ref::per_thread();
  scoped_device on(device_);
  void* p = allocate(s, bytes);
  // Not deallocate(): with the device current already, nothing may fail between the two.
  const cudaError_t status = cudaFreeAsync(p, s.get());
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    // Never freed, the reserve would keep the pool, destroyed as the constructor unwinds, alive
    // for good. cudaFree frees stream-ordered memory at once, once its allocation has run; a
    // failure of that too goes to the cleanup handler with the bytes held.
    const char* what = "cuscope::memory_pool: its initial reserve";
    if (CUSCOPE_DETAIL_CLEANUP_BYTES(cudaStreamSynchronize(s.get()), what, p, bytes))
      (void)CUSCOPE_DETAIL_CLEANUP_BYTES(cudaFree(p), what, p, bytes);
    CUSCOPE_DETAIL_CHECK_FOR(status, "cudaFreeAsync(p, s.get())", describe());
  }
  s.synchronize();
  // The reserve was never in use by anyone: the peaks start from what the pool holds now.
  reset_peaks();
}

inline void memory_pool::stop_recording() noexcept {
  if (recorded_ && handle_ != nullptr) detail::detach_pool(handle_);
  recorded_ = false;
}

inline void memory_pool::destroy() noexcept {
  // Before the handle can be reused by a new pool.
  stop_recording();
  if (handle_ != nullptr &&
      CUSCOPE_DETAIL_CLEANUP(cudaMemPoolDestroy(handle_), "cuscope::memory_pool", handle_))
    detail::pool_directory::get().destroyed(handle_, device_);
  handle_ = nullptr;
}

inline memory_pool_ref::memory_pool_ref(cudaMemPool_t handle, int device)
    : handle_(handle), device_(device) {
  if (handle == nullptr)
    throw std::invalid_argument("cuscope::memory_pool_ref: null cudaMemPool_t");
}

inline memory_pool_ref memory_pool_ref::device_default(int device) {
  detail::check_device(device, "cuscope::memory_pool_ref::device_default");
  cudaMemPool_t handle = nullptr;
  CUSCOPE_DETAIL_TRY_FOR(cudaDeviceGetDefaultMemPool(&handle, device),
                         "device " + std::to_string(device));
  return memory_pool_ref(handle, device);
}

inline memory_pool_ref memory_pool_ref::device_current(int device) {
  detail::check_device(device, "cuscope::memory_pool_ref::device_current");
  cudaMemPool_t handle = nullptr;
  CUSCOPE_DETAIL_TRY_FOR(cudaDeviceGetMemPool(&handle, device), "device " + std::to_string(device));
  return memory_pool_ref(handle, device);
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE

#include "detail/pool_env.hpp"  // pool_options::from_env
