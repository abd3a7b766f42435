// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Memory across processes: pools exported through file descriptors and imported by
/// another process, allocations shared from them, interprocess events, and a helper that passes a
/// descriptor and export data over a Unix domain socket. docs/multiprocess.md.
///
/// POSIX only, and not included by cuscope.hpp: it needs the socket headers. The protocol CUDA
/// asks for, which these types keep: an importer frees its mapping (in stream order) before the
/// exporting process frees the allocation, ordered by an interprocess event or any other means.
#pragma once

#include <cuda_runtime_api.h>

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "detail/config.hpp"
#include "detail/format.hpp"
#include "detail/ledger_fwd.hpp"
#if CUSCOPE_DETAIL_HOST_CODE  // for imported_allocation's definitions
#  include "detail/ledger.hpp"
#endif
#include "device.hpp"
#include "device_allocation.hpp"
#include "device_buffer.hpp"
#include "device_span.hpp"
#include "error.hpp"
#include "event.hpp"
#include "memory_pool.hpp"
#include "session.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief What an importing process needs to map one allocation of an exported pool: CUDA's 64
/// bytes of export data and the allocation's size. Trivially copyable: send it by any means.
struct allocation_export {
  cudaMemPoolPtrExportData data{};  ///< From cudaMemPoolExportPointer.
  std::uint64_t bytes = 0;          ///< The allocation's size.
};

/// @brief Export data for the allocation at ptr, bytes long, of a pool created with
/// pool_options::export_handle.
/// @throws cuda_error (cudaErrorInvalidValue) when ptr is not the start of a live allocation of
/// an exportable pool.
[[nodiscard]] inline allocation_export export_allocation(const void* ptr, std::size_t bytes) {
  allocation_export e;
  e.bytes = bytes;
  CUSCOPE_DETAIL_TRY_FOR(cudaMemPoolExportPointer(&e.data, const_cast<void*>(ptr)),
                         "allocation " + detail::format_pointer(ptr) + " (" +
                             detail::format_bytes(bytes) +
                             "; is its pool created with pool_options::export_handle?)");
  return e;
}

/// @brief Export data for a device_allocation of an exportable pool. See above.
[[nodiscard]] inline allocation_export export_allocation(const device_allocation& a) {
  return export_allocation(a.get(), a.size_bytes());
}

/// @brief Export data for a device_buffer of an exportable pool. See above.
template <class T>
[[nodiscard]] allocation_export export_allocation(const device_buffer<T>& b) {
  return export_allocation(b.data(), b.size_bytes());
}

/// @brief An owned file descriptor of an exported pool: made by exporting a pool, or received
/// from another process. Closed with the object.
///
/// Move-only; a moved-from descriptor is empty (-1).
class pool_descriptor {
 public:
  /// @brief No descriptor.
  pool_descriptor() noexcept = default;

  /// @brief Exports pool (cudaMemPoolExportToShareableHandle) as a new descriptor.
  /// @throws cuda_error when the pool was not created with pool_export::posix_file_descriptor.
  explicit pool_descriptor(const memory_pool_ref& pool) {
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemPoolExportToShareableHandle(&fd_, pool.get(), cudaMemHandleTypePosixFileDescriptor,
                                           0),
        pool.describe() +
            " (created without pool_options::export_handle = pool_export::posix_file_descriptor?)");
  }

  /// @brief Takes ownership of fd, a descriptor of an exported pool (from another process).
  [[nodiscard]] static pool_descriptor adopt(int fd) noexcept {
    pool_descriptor d;
    d.fd_ = fd;
    return d;
  }

  pool_descriptor(const pool_descriptor&) = delete;
  pool_descriptor& operator=(const pool_descriptor&) = delete;
  /// @brief Takes other's descriptor; other is left empty.
  pool_descriptor(pool_descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  /// @brief Closes this descriptor and takes other's; other is left empty.
  pool_descriptor& operator=(pool_descriptor&& other) noexcept {
    if (this != &other) {
      close_fd();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  /// @brief Closes the descriptor.
  ~pool_descriptor() { close_fd(); }

  /// @brief The descriptor; -1 when empty.
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// @brief True when there is no descriptor.
  [[nodiscard]] bool empty() const noexcept { return fd_ < 0; }
  /// @brief Gives up ownership: the caller closes the returned descriptor.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

 private:
  void close_fd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
};

/// @brief Another process's pool imported into this one: the import ends (cudaMemPoolDestroy)
/// with the object. It serves no allocations of its own; it maps the allocations the exporting
/// process shares (import()), and its statistics count what this process imported.
///
/// Move-only; a moved-from pool is empty. Allocations imported from it may outlive it: CUDA keeps
/// them mapped until they are freed.
class imported_pool {
 public:
  /// @brief Imports the pool behind descriptor, which stays open (close it or keep it).
  /// @throws std::invalid_argument for an empty descriptor; cuda_error when it is not a
  /// descriptor of an exported pool.
  explicit imported_pool(const pool_descriptor& descriptor) {
    if (descriptor.empty())
      throw std::invalid_argument("cuscope::imported_pool: empty pool_descriptor");
    CUSCOPE_DETAIL_TRY_FOR(
        cudaMemPoolImportFromShareableHandle(
            &handle_, reinterpret_cast<void*>(static_cast<std::intptr_t>(descriptor.get())),
            cudaMemHandleTypePosixFileDescriptor, 0),
        "pool descriptor " + std::to_string(descriptor.get()));
    constexpr int location_id = 0xB;  // cudaMemPoolAttrLocationId, named from CUDA 13.2 on
    int device = 0;
    const cudaError_t status =
        cudaMemPoolGetAttribute(handle_, static_cast<cudaMemPoolAttr>(location_id), &device);
    try {  // the pool is imported: a failure from here on must not leak it
      if (status == cudaSuccess) {
        device_ = device;
      } else if (status == cudaErrorInvalidValue) {
        (void)cudaGetLastError();  // an older driver: the importing device is the current one
        device_ = current_device();
      } else {
        CUSCOPE_DETAIL_CHECK_FOR(status, "cudaMemPoolGetAttribute(handle_, location id, &device)",
                                 "imported pool " + detail::format_pointer(handle_));
      }
    } catch (...) {
      end();
      throw;
    }
  }

  imported_pool(const imported_pool&) = delete;
  imported_pool& operator=(const imported_pool&) = delete;
  /// @brief Takes other's import; other is left empty.
  imported_pool(imported_pool&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  /// @brief Ends this import and takes other's; other is left empty.
  imported_pool& operator=(imported_pool&& other) noexcept {
    if (this != &other) {
      end();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  /// @brief Ends the import; never throws (a failure goes to the cleanup handler).
  ~imported_pool() { end(); }

  /// @brief The raw handle; nullptr when empty.
  [[nodiscard]] cudaMemPool_t get() const noexcept { return handle_; }
  /// @brief True after a move.
  [[nodiscard]] bool empty() const noexcept { return handle_ == nullptr; }
  /// @brief The device of the exported pool.
  [[nodiscard]] int device() const noexcept { return device_; }

  /// @brief A reference, for statistics, sessions and memory_report. It cannot allocate: CUDA
  /// refuses allocations from imported pools.
  /// @throws std::logic_error when empty.
  [[nodiscard]] memory_pool_ref ref() const& { return memory_pool_ref(checked(), device_); }
  /// @brief Deleted: a reference to a temporary import would outlive it.
  memory_pool_ref ref() && = delete;

  /// @brief What this process imported from the pool: used and reserved bytes of its mappings.
  [[nodiscard]] pool_stats stats() const { return ref().stats(); }

  /// @brief "imported pool 0x... on device 0", for messages.
  [[nodiscard]] std::string describe() const {
    return "imported pool " + detail::format_pointer(static_cast<const void*>(handle_)) +
           " on device " + std::to_string(device_);
  }

 private:
  cudaMemPool_t checked() const {
    if (handle_ == nullptr)
      throw std::logic_error("cuscope::imported_pool: use of an empty (moved-from) pool");
    return handle_;
  }

  void end() noexcept {
    if (handle_ != nullptr)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaMemPoolDestroy(handle_), "cuscope::imported_pool", handle_);
    handle_ = nullptr;
  }

  cudaMemPool_t handle_ = nullptr;
  int device_ = 0;
};

/// @brief Memory of another process's allocation, mapped into this one from an imported pool,
/// and freed here in stream order when the object ends: the untyped owner under
/// imported_buffer<T>.
///
/// The free unmaps this process's view only. The exporting process must free the allocation
/// after this free has run: record an interprocess event on stream() after the object ends, and
/// have the exporter's stream wait for it (docs/multiprocess.md). Move-only; a moved-from
/// allocation is empty.
class imported_allocation {
 public:
  /// @brief Nothing imported.
  imported_allocation() noexcept = default;

  /// @brief Maps the allocation e names from pool, to be freed on stream. The memory may be used
  /// only after the exporter's allocation has run: order stream after it (an IPC event).
  /// @throws cuda_error when e is not an allocation of pool's exporting pool, or was freed.
  imported_allocation(stream_ref stream, const imported_pool& pool, const allocation_export& e)
      : imported_allocation(stream, pool, e, nullptr, call_site{}) {}

  /// @brief As above, on the session's stream, counted by the session (and its parents) like its
  /// make_buffer allocations: one still mapped at the session's end is a leak, named with site
  /// (by default the caller's file and line).
  /// @throws std::logic_error after the session finished; out_of_memory beyond its budget.
  imported_allocation(session& counted_by, const imported_pool& pool, const allocation_export& e,
                      call_site site = call_site::current())
      : imported_allocation(counted_by.stream(), pool, e, counting(counted_by), site) {}

  imported_allocation(const imported_allocation&) = delete;
  imported_allocation& operator=(const imported_allocation&) = delete;
  /// @brief Takes other's mapping; other is left empty.
  imported_allocation(imported_allocation&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        stream_(other.stream_),
        pool_(other.pool_),
        device_(other.device_),
        ledger_(std::exchange(other.ledger_, nullptr)),
        record_(other.record_) {}
  /// @brief Frees this mapping and takes other's; other is left empty.
  imported_allocation& operator=(imported_allocation&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      stream_ = other.stream_;
      pool_ = other.pool_;
      device_ = other.device_;
      ledger_ = std::exchange(other.ledger_, nullptr);
      record_ = other.record_;
    }
    return *this;
  }
  /// @brief Frees the mapping on stream(); never throws (a failure goes to the cleanup handler).
  ~imported_allocation() { free(); }

  /// @brief The device pointer in this process; nullptr when empty.
  [[nodiscard]] void* get() const noexcept { return data_; }
  /// @brief The number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  /// @brief True when nothing is mapped.
  [[nodiscard]] bool empty() const noexcept { return data_ == nullptr; }
  /// @brief The stream the mapping is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(stream_); }
  /// @brief The device of the exporting pool.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// @brief The imported pool's handle.
  [[nodiscard]] cudaMemPool_t pool() const noexcept { return pool_; }

  /// @brief Gives up ownership: the caller frees the returned pointer (cudaFree or cudaFreeAsync)
  /// before the exporter frees the allocation. A session no longer counts it.
  [[nodiscard]] void* release() noexcept;

  /// @brief Makes stream the one the mapping is freed on; it waits, in stream order, for the
  /// work enqueued so far on the old one. Enqueued; does not synchronize.
  void set_stream(stream_ref stream);

 private:
  imported_allocation(stream_ref stream, const imported_pool& pool, const allocation_export& e,
                      detail::ledger* accounting, call_site site);

  static detail::ledger* counting(session& s);

  void free() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  int device_ = 0;
  detail::ledger* ledger_ = nullptr;
  detail::ledger_record* record_ = nullptr;
};

// imported_allocation's definitions that use the session's ledger: host code only
// (detail/config.hpp), so that nvcc's device passes need not parse the ledger.
#if CUSCOPE_DETAIL_HOST_CODE
inline void* imported_allocation::release() noexcept {
  if (ledger_ != nullptr) std::exchange(ledger_, nullptr)->discharge(bytes_, record_, false);
  bytes_ = 0;
  return std::exchange(data_, nullptr);
}

inline void imported_allocation::set_stream(stream_ref stream) {
  if (data_ != nullptr) {
    detail::order_after(stream, stream_ref(stream_), device_);
    if (ledger_ != nullptr) ledger_->moved_to(stream.get(), record_);
  }
  stream_ = stream.get();
}

inline imported_allocation::imported_allocation(stream_ref stream, const imported_pool& pool,
                                                const allocation_export& e,
                                                detail::ledger* accounting, call_site site)
    : stream_(stream.get()), pool_(pool.get()), device_(pool.device()) {
  if (pool.empty())
    throw std::logic_error("cuscope::imported_allocation: empty (moved-from) imported_pool");
  const auto bytes = static_cast<std::size_t>(e.bytes);
  const bool charged = accounting != nullptr && accounting->charge(bytes);
  cudaMemPoolPtrExportData data = e.data;
  const cudaError_t status = cudaMemPoolImportPointer(&data_, pool_, &data);
  if (status != cudaSuccess) {
    if (accounting != nullptr) accounting->cancel(bytes, charged);
    data_ = nullptr;
    detail::throw_cuda_error(status, "cudaMemPoolImportPointer", __FILE__, __LINE__,
                             pool.describe() + ", an allocation of " + detail::format_bytes(bytes) +
                                 " (not from this pool, or freed by its exporter)");
  }
  bytes_ = bytes;
  if (accounting != nullptr) {
    try {  // named in the session's leak report
      record_ = accounting->enter(data_, bytes_, stream_, "imported", site.file, site.line);
    } catch (...) {
      free();
      accounting->cancel(bytes, charged);
      throw;
    }
    ledger_ = accounting;
  }
}

inline void imported_allocation::free() noexcept {
  if (data_ != nullptr) {
    const detail::stream_device_guard_nothrow on(stream_, device_);
    if (CUSCOPE_DETAIL_CLEANUP_BYTES(cudaFreeAsync(data_, stream_), "cuscope::imported_allocation",
                                     data_, bytes_)) {
      if (ledger_ != nullptr) ledger_->discharge(bytes_, record_);
    } else if (ledger_ != nullptr) {
      ledger_->abandon(record_);  // still mapped: the session goes on counting it, as a leak
    }
  }
  data_ = nullptr;
  bytes_ = 0;
  ledger_ = nullptr;
  record_ = nullptr;
}

inline detail::ledger* imported_allocation::counting(session& s) {
  if (s.finished())
    throw std::logic_error("cuscope::session '" + s.name() +
                           "': an import counted by the session after it finished");
  return detail::accounting_of(s);
}
#endif  // CUSCOPE_DETAIL_HOST_CODE

/// @brief count elements of T imported from another process's pool and freed here in stream
/// order: the typed layer over one imported_allocation, as device_buffer<T> is over
/// device_allocation.
template <class T>
class imported_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "imported_buffer holds trivially copyable T");

 public:
  /// @brief Nothing imported.
  imported_buffer() noexcept = default;
  /// @brief Imports e from pool, freed on stream. See imported_allocation.
  /// @throws std::invalid_argument when e's size is not a whole number of T.
  imported_buffer(stream_ref stream, const imported_pool& pool, const allocation_export& e)
      : alloc_(stream, pool, checked(e)) {}
  /// @brief Imports e from pool, counted by a session, freed on its stream; a leak report names
  /// site (by default the caller's file and line).
  imported_buffer(session& counted_by, const imported_pool& pool, const allocation_export& e,
                  call_site site = call_site::current())
      : alloc_(counted_by, pool, checked(e), site) {}

  /// @brief The untyped mapping underneath.
  [[nodiscard]] const imported_allocation& allocation() const noexcept { return alloc_; }
  /// @brief Device pointer to the first element; nullptr when empty.
  [[nodiscard]] T* data() const noexcept { return static_cast<T*>(alloc_.get()); }
  /// @brief Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return alloc_.size_bytes() / sizeof(T); }
  /// @brief Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return alloc_.size_bytes(); }
  /// @brief True when nothing is mapped.
  [[nodiscard]] bool empty() const noexcept { return alloc_.empty(); }
  /// @brief A view of the elements, to pass to kernels.
  [[nodiscard]] device_span<T> span() const noexcept { return {data(), size()}; }
  /// @brief The stream the mapping is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return alloc_.stream(); }
  /// @brief See imported_allocation::set_stream. Enqueued; does not synchronize.
  void set_stream(stream_ref stream) { alloc_.set_stream(stream); }
  /// @brief Gives up ownership; see imported_allocation::release.
  [[nodiscard]] T* release() noexcept { return static_cast<T*>(alloc_.release()); }

 private:
  static const allocation_export& checked(const allocation_export& e) {
    if (e.bytes % sizeof(T) != 0)
      throw std::invalid_argument(
          "cuscope::imported_buffer: an allocation of " + detail::format_count(e.bytes, "byte") +
          " is not a whole number of " + std::to_string(sizeof(T)) + "-byte elements");
    return e;
  }

  imported_allocation alloc_;
};

/// @brief The handle another process opens event with (cudaIpcGetEventHandle). The event must be
/// made with event_options::interprocess.
/// @throws cuda_error otherwise.
[[nodiscard]] inline cudaIpcEventHandle_t ipc_handle(event_ref event) {
  cudaIpcEventHandle_t h{};
  CUSCOPE_DETAIL_TRY_FOR(cudaIpcGetEventHandle(&h, event.get()),
                         event.describe() + " (made without event_options::interprocess?)");
  return h;
}

/// @brief Opens, in this process, an event another process made with event_options::interprocess
/// (cudaIpcOpenEventHandle), on the current device. Records, waits and queries in either process
/// see each other's. The returned event is destroyed with the object; the creating process must
/// not destroy its event before this one is done with it.
/// @throws cuda_error when the handle does not open.
[[nodiscard]] inline event open_ipc_event(const cudaIpcEventHandle_t& handle) {
  const int device = current_device();  // first: a failure after the open would leak the event
  cudaEvent_t e = nullptr;
  CUSCOPE_DETAIL_TRY_FOR(cudaIpcOpenEventHandle(&e, handle), "an interprocess event handle");
  return event::adopt(e, device);
}

namespace detail {

// "send_message on socket 5 (1 byte": the start of every send_message and receive_message
// message. The messages are built only when a call fails.
CUSCOPE_DETAIL_COLD inline std::string socket_call(const char* call, int socket,
                                                   std::size_t bytes) {
  return std::string(call) + " on socket " + std::to_string(socket) + " (" +
         format_count(bytes, "byte");
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void send_empty_descriptor(int socket, std::size_t bytes) {
  throw std::invalid_argument(socket_call("send_message", socket, bytes) +
                              "): empty pool_descriptor");
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void send_failed(int error, int socket, std::size_t bytes,
                                                         bool with_pool) {
  throw std::system_error(error, std::generic_category(),
                          "cuscope: " + socket_call("send_message", socket, bytes) +
                              (with_pool ? " and a pool descriptor)" : ")"));
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void receive_failed(int error, int socket,
                                                            std::size_t bytes) {
  throw std::system_error(
      error, std::generic_category(),
      "cuscope: " + socket_call("receive_message", socket, bytes) + " expected)");
}

// The peer closed the socket after got bytes (received is 0), or sent a message of received
// bytes (shorter than expected, or longer when received is not).
[[noreturn]] CUSCOPE_DETAIL_COLD inline void receive_cut(int socket, std::size_t bytes,
                                                         std::size_t got, std::size_t received,
                                                         bool longer) {
  throw std::runtime_error(
      "cuscope: " + socket_call("receive_message", socket, bytes) + " expected): " +
      (longer          ? std::string("the message was longer")
       : received == 0 ? "the peer closed the socket after " + format_count(got, "byte")
                       : "the message was " + format_count(received, "byte")));
}

[[noreturn]] CUSCOPE_DETAIL_COLD inline void receive_no_descriptor(int socket, std::size_t bytes) {
  throw std::runtime_error("cuscope: " + socket_call("receive_message", socket, bytes) +
                           " expected): no pool descriptor came with the message");
}

}  // namespace detail

/// @brief Sends payload (trivially copyable: export data, event handles, sizes) over socket, a
/// connected Unix domain socket, with a duplicate of pool's descriptor when pool is given
/// (SCM_RIGHTS). Blocks until it is sent.
/// @throws std::system_error naming the socket and the payload size when sending fails.
template <class T>
void send_message(int socket, const T& payload, const pool_descriptor* pool = nullptr) {
  static_assert(std::is_trivially_copyable_v<T>, "send_message sends trivially copyable data");
  const auto* bytes = reinterpret_cast<const char*>(&payload);
  std::size_t sent = 0;
  if (pool != nullptr && pool->empty()) detail::send_empty_descriptor(socket, sizeof(T));
  while (sent < sizeof(T)) {
    iovec iov{const_cast<char*>(bytes + sent), sizeof(T) - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (sent == 0 && pool != nullptr) {  // the descriptor travels with the first byte
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      const int fd = pool->get();
      std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      detail::send_failed(errno, socket, sizeof(T), pool != nullptr);
    }
    sent += static_cast<std::size_t>(n);
  }
}

/// @brief Receives a payload of type T sent by send_message over socket, and the pool
/// descriptor sent with it into pool when pool is given (a descriptor that came unasked is
/// closed). Blocks until it has arrived.
/// @throws std::system_error when receiving fails; std::runtime_error when the peer closed the
/// socket, sent a message of another size, or sent no descriptor where one is expected.
template <class T>
[[nodiscard]] T receive_message(int socket, pool_descriptor* pool = nullptr) {
  static_assert(std::is_trivially_copyable_v<T>,
                "receive_message receives trivially copyable data");
  T payload{};
  auto* bytes = reinterpret_cast<char*>(&payload);
  std::size_t got = 0;
  int fd = -1;
  // A datagram or sequenced-packet socket delivers whole messages: a shorter one is an error, not
  // the first part of the payload.
  int type = SOCK_STREAM;
  socklen_t type_size = sizeof type;
  if (::getsockopt(socket, SOL_SOCKET, SO_TYPE, &type, &type_size) != 0)
    detail::receive_failed(errno, socket, sizeof(T));
  while (got < sizeof(T)) {
    iovec iov{bytes + got, sizeof(T) - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      if (fd >= 0) ::close(fd);
      detail::receive_failed(error, socket, sizeof(T));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c), sizeof received);
      if (fd >= 0) ::close(fd);
      fd = received;
    }
    const bool short_message = type != SOCK_STREAM && static_cast<std::size_t>(n) < sizeof(T);
    if (n == 0 || (msg.msg_flags & MSG_TRUNC) != 0 || short_message) {
      if (fd >= 0) ::close(fd);
      detail::receive_cut(socket, sizeof(T), got, static_cast<std::size_t>(n),
                          n != 0 && !short_message);
    }
    got += static_cast<std::size_t>(n);
  }
  if (pool == nullptr) {
    if (fd >= 0) ::close(fd);
  } else if (fd < 0) {
    detail::receive_no_descriptor(socket, sizeof(T));
  } else {
    *pool = pool_descriptor::adopt(fd);
  }
  return payload;
}

}  // namespace cuscope
