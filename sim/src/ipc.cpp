// SPDX-License-Identifier: Apache-2.0
// Memory across processes: exportable pools whose memory is a memory file (memfd) that another
// process maps, the export and import of pools and of their allocations, and interprocess events
// whose state lives in named shared memory. docs/simulated-device.md, "Memory across processes".
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "internal.hpp"

namespace cuscope::sim::detail {

namespace {

constexpr std::size_t page_bytes = 4096;
constexpr std::uint64_t pool_magic = 0x4c4f4f5043534355;    // "UCSCPOOL"
constexpr std::uint64_t export_magic = 0x5458454353435355;  // "USCSCEXT"
constexpr std::uint64_t event_magic = 0x5645564353435355;   // "USCSCVEV"

// What cudaMemPoolExportPointer writes: enough for the importer to find the allocation in the
// pool's file and to tell a stale or foreign export from a live one.
struct export_data {
  std::uint64_t magic;
  std::uint64_t pool_id;
  std::uint64_t serial;
  std::uint64_t offset;
  std::uint64_t size;
  std::uint32_t slot;
  std::uint32_t unused;
  std::uint64_t reserved[2];
};
static_assert(sizeof(export_data) == sizeof(cudaMemPoolPtrExportData),
              "the export data fills cudaMemPoolPtrExportData");

// What cudaIpcGetEventHandle writes: the name of the event's shared memory.
struct event_handle_data {
  std::uint64_t magic;
  char name[48];
  std::int32_t device;
  std::int32_t unused;
};
static_assert(sizeof(event_handle_data) == sizeof(cudaIpcEventHandle_t),
              "the handle fills cudaIpcEventHandle_t");

// The records of a pool's file are shared by every process that maps it.
class records_lock {
 public:
  explicit records_lock(ipc_pool_header& h) noexcept : h_(h) {
    while (h_.lock.exchange(1, std::memory_order_acquire) != 0)
      std::this_thread::yield();
  }
  records_lock(const records_lock&) = delete;
  records_lock& operator=(const records_lock&) = delete;
  ~records_lock() { h_.lock.store(0, std::memory_order_release); }

 private:
  ipc_pool_header& h_;
};

std::uint64_t fresh_id() {
  static std::uint64_t counter = 0;
  const auto now =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (static_cast<std::uint64_t>(getpid()) << 40) ^ now ^ (++counter * 0x9e3779b97f4a7c15);
}

void punch(int fd, std::size_t offset, std::size_t bytes) noexcept {
  // The pages go back to the system; a process that still maps them reads zeros.
  (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(bytes));
}

bool is_imported(const CUmemPoolHandle_st& pool) {
  return pool.share != nullptr && pool.share->imported;
}

bool exportable(const CUmemPoolHandle_st& pool) {
  return pool.share != nullptr && !pool.share->imported;
}

ipc_pool_header* map_header(int fd, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<ipc_pool_header*>(p);
}

std::size_t header_bytes() {
  return round_up(sizeof(ipc_pool_header), page_bytes);
}

void unmap_import(state& g, CUmemPoolHandle_st& pool, std::uintptr_t ptr) {
  ipc_share& share = *pool.share;
  const auto it = share.imports.find(ptr);
  if (it == share.imports.end()) return;
  const ipc_share::import imp = it->second;
  share.imports.erase(it);
  release_region_range(g, pool.device, imp.region, imp.length);
  share.imported_bytes -= imp.size;
  {
    records_lock lock(*share.header);
    ipc_export_record& r = share.header->records[imp.slot];
    if (r.serial == imp.serial && r.importers > 0) {
      --r.importers;
      if (r.freed != 0 && r.importers == 0) r = ipc_export_record{};
    }
  }
  ipc_release_imported_pool_if_done(pool);
}

// Waits until the event's record target has run in whichever process made it.
bool wait_for(const ipc_event& e, std::uint64_t target, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(20);
  while (e.block->completed.load(std::memory_order_acquire) < target) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(1000)) pause *= 2;
  }
  return true;
}

void report_hang(state& g, const ipc_event& e, std::uint64_t target, const char* what) {
  char line[320];
  std::snprintf(line, sizeof line,
                "%s for interprocess event %s (record %" PRIu64
                ") did not end within %lld ms: the record never ran in process %d or any other; "
                "a GPU would wait forever\n",
                what, e.name, target, static_cast<long long>(g.config.ipc_timeout.count()),
                static_cast<int>(e.block->creator_pid));
  g.faults_seen += line;
  g.sticky = cudaErrorLaunchTimeout;
}

}  // namespace

ipc_share::~ipc_share() {
  if (header != nullptr) munmap(header, header_bytes);
  if (fd >= 0) close(fd);
}

ipc_event::~ipc_event() {
  if (block != nullptr) munmap(block, page_bytes);
  if (creator) shm_unlink(name);
}

bool ipc_share_pool(state& g, CUmemPoolHandle_st& pool) {
  (void)g;
  auto share = std::make_unique<ipc_share>();
  share->fd = memfd_create("cuscope-sim-pool", MFD_CLOEXEC);
  if (share->fd < 0) return false;
  share->header_bytes = header_bytes();
  if (ftruncate(share->fd, static_cast<off_t>(share->header_bytes)) != 0) return false;
  share->header = map_header(share->fd, share->header_bytes);
  if (share->header == nullptr) return false;
  ipc_pool_header* h = new (share->header) ipc_pool_header();
  h->magic = pool_magic;
  h->pool_id = fresh_id();
  h->exporter_pid = static_cast<std::int32_t>(getpid());
  h->device = pool.device;
  h->slots = ipc_export_slots;
  share->next_offset = share->header_bytes;
  pool.backing.share(share.get());
  pool.share = std::move(share);
  return true;
}

bool ipc_map(state& g, int device, ipc_share& share, std::size_t bytes, mapped_memory& out) {
  const std::size_t offset = share.next_offset;
  const std::size_t size = round_up(bytes, page_bytes);
  if (ftruncate(share.fd, static_cast<off_t>(offset + size)) != 0) return false;
  region r;
  if (!reserve_region(g.devices[static_cast<std::size_t>(device)], size, r, share.fd, offset))
    return false;
  share.chunks[r.va] = offset;
  share.next_offset = offset + r.size;
  out = mapped_memory{r.va, r.size, r.host};
  return true;
}

void ipc_release(ipc_share& share, const mapped_memory& memory, std::size_t offset,
                 std::size_t bytes) noexcept {
  const auto it = share.chunks.find(memory.va);
  if (it != share.chunks.end()) punch(share.fd, it->second + offset, bytes);
}

void ipc_unmap(ipc_share& share, const mapped_memory& memory) noexcept {
  const auto it = share.chunks.find(memory.va);
  if (it == share.chunks.end()) return;
  punch(share.fd, it->second, memory.size);
  share.chunks.erase(it);
}

std::int32_t ipc_take_export(CUmemPoolHandle_st& pool, std::uintptr_t ptr) noexcept {
  ipc_share& share = *pool.share;
  const auto it = share.exported.find(ptr);
  if (it == share.exported.end()) return -1;
  const std::uint32_t slot = it->second;  // below ipc_export_slots
  share.exported.erase(it);
  return static_cast<std::int32_t>(slot);
}

void ipc_exporter_freed(state& g, CUmemPoolHandle_st& pool, std::int32_t slot, std::uintptr_t ptr,
                        const char* api) {
  if (slot < 0) return;
  ipc_share& share = *pool.share;
  records_lock lock(*share.header);
  ipc_export_record& r = share.header->records[static_cast<std::size_t>(slot)];
  if (r.importers == 0) {
    r = ipc_export_record{};
    return;
  }
  // "The imported memory must be freed from all importing processes before being freed in the
  // exporting process" (cudaMemPoolImportPointer). A GPU says nothing; the importer keeps
  // reading memory the pool may hand out again.
  char line[320];
  std::snprintf(line, sizeof line,
                "%s of %p (%" PRIu64
                " bytes, exported from pool %p) ran while %u importing "
                "process(es) (the last: pid %d) still mapped it: every importer must free it "
                "first\n",
                api, reinterpret_cast<void*>(ptr), r.size, static_cast<const void*>(&pool),
                r.importers, static_cast<int>(r.last_importer));
  g.misuses_seen += line;
  r.freed = 1;
}

cudaError_t ipc_free_imported(state& g,
                              std::map<std::uintptr_t, device_allocation>::iterator allocation,
                              CUstream_st* s) {
  CUmemPoolHandle_st* pool = allocation->second.pool;
  const std::uintptr_t ptr = allocation->second.ptr;
  g.device_allocs.erase(allocation);
  if (s == nullptr) {
    unmap_import(g, *pool, ptr);
    return cudaSuccess;
  }
  enqueue(g, *s, [&g, pool, ptr] { unmap_import(g, *pool, ptr); });
  return cudaSuccess;
}

void ipc_release_imported_pool_if_done(CUmemPoolHandle_st& pool) noexcept {
  if (is_imported(pool) && pool.destroyed && pool.share->imports.empty()) pool.share.reset();
}

bool ipc_event_create(CUevent_st& e) {
  static std::uint64_t counter = 0;
  auto ev = std::make_shared<ipc_event>();
  std::snprintf(ev->name, sizeof ev->name, "/cuscope-sim-%d-%" PRIu64 "-%" PRIu64,
                static_cast<int>(getpid()), ++counter, fresh_id() & 0xffffff);
  const int fd = shm_open(ev->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  ev->creator = true;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(page_bytes)) == 0)
    p = mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return false;  // ev unlinks the name
  ev->block = new (p) ipc_event_block();
  ev->block->magic = event_magic;
  ev->block->creator_pid = static_cast<std::int32_t>(getpid());
  ev->block->device = e.device;
  e.ipc = std::move(ev);
  return true;
}

void ipc_event_recorded(state& g, CUevent_st& e, CUstream_st& s) {
  // The other process cannot run this process's streams, so the record runs now, with the work
  // before it: a GPU would run it without a synchronization too.
  const std::uint64_t generation = e.ipc->block->generation.fetch_add(1) + 1;
  const std::uint64_t seq = enqueue(g, s, [ev = e.ipc, generation] {
    std::uint64_t done = ev->block->completed.load(std::memory_order_relaxed);
    while (done < generation && !ev->block->completed.compare_exchange_weak(
                                    done, generation, std::memory_order_release)) {
    }
  });
  drive_to(g, s, seq);
}

cudaError_t ipc_stream_wait(state& g, CUstream_st& s, CUevent_st& e) {
  // The latest record when the wait is enqueued, whichever process made it.
  const std::uint64_t target = e.ipc->block->generation.load(std::memory_order_acquire);
  if (target == 0 || e.ipc->block->completed.load(std::memory_order_acquire) >= target)
    return cudaSuccess;
  enqueue(g, s, [&g, ev = e.ipc, target] {
    if (!wait_for(*ev, target, g.config.ipc_timeout))
      report_hang(g, *ev, target, "a cudaStreamWaitEvent");
  });
  return cudaSuccess;
}

cudaError_t ipc_event_query(state& g, CUevent_st& e) {
  const std::uint64_t target = e.ipc->block->generation.load(std::memory_order_acquire);
  if (e.ipc->block->completed.load(std::memory_order_acquire) >= target)
    return sticky_or_success(g);
  return cudaErrorNotReady;
}

cudaError_t ipc_event_synchronize(state& g, CUevent_st& e) {
  const std::uint64_t target = e.ipc->block->generation.load(std::memory_order_acquire);
  if (!wait_for(*e.ipc, target, g.config.ipc_timeout))
    report_hang(g, *e.ipc, target, "cudaEventSynchronize");
  return sticky_or_success(g);
}

}  // namespace cuscope::sim::detail

using namespace cuscope::sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaMemPoolExportToShareableHandle(void* handle, cudaMemPool_t pool,
                                                         cudaMemAllocationHandleType type,
                                                         unsigned int flags) {
  return call("cudaMemPoolExportToShareableHandle", [&](state& g) -> cudaError_t {
    if (handle == nullptr || flags != 0 || !valid_pool(g, pool)) return cudaErrorInvalidValue;
    // "the memory pool must have been created with the requested handle type" (Guide 4.3.3.4.1)
    if (!exportable(*pool) || type != cudaMemHandleTypePosixFileDescriptor ||
        (pool->handle_types & type) == 0)
      return cudaErrorInvalidValue;
    const int fd = fcntl(pool->share->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return cudaErrorMemoryAllocation;
    *static_cast<int*>(handle) = fd;  // the caller owns it and closes it
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolImportFromShareableHandle(cudaMemPool_t* pool, void* handle,
                                                           cudaMemAllocationHandleType type,
                                                           unsigned int flags) {
  return call("cudaMemPoolImportFromShareableHandle", [&](state& g) -> cudaError_t {
    if (pool == nullptr || flags != 0 || type != cudaMemHandleTypePosixFileDescriptor)
      return cudaErrorInvalidValue;
    // The descriptor is passed by value (Guide 4.3.3.4.1); the caller keeps it and closes it.
    const int given = static_cast<int>(reinterpret_cast<std::intptr_t>(handle));
    // The first fields of ipc_pool_header.
    struct {
      std::uint64_t magic;
      std::uint64_t pool_id;
      std::int32_t exporter_pid;
      std::int32_t device;
    } probe_header{};
    if (given < 0 ||
        pread(given, &probe_header, sizeof probe_header, 0) !=
            static_cast<ssize_t>(sizeof probe_header) ||
        probe_header.magic != pool_magic)
      return cudaErrorInvalidValue;  // not a descriptor of an exported pool
    if (find_device(g, probe_header.device) == nullptr) return cudaErrorInvalidDevice;
    auto share = std::make_unique<ipc_share>();
    share->imported = true;
    share->fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
    if (share->fd < 0) return cudaErrorMemoryAllocation;
    share->header_bytes = header_bytes();
    share->header = map_header(share->fd, share->header_bytes);
    if (share->header == nullptr) return cudaErrorMemoryAllocation;
    CUmemPoolHandle_st* imported = create_pool(g, probe_header.device, 0, false);
    imported->handle_types = cudaMemHandleTypePosixFileDescriptor;
    imported->share = std::move(share);
    *pool = imported;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolExportPointer(cudaMemPoolPtrExportData* data, void* ptr) {
  return call("cudaMemPoolExportPointer", [&](state& g) -> cudaError_t {
    if (data == nullptr) return cudaErrorInvalidValue;
    const auto it = g.device_allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    // Only the start of a live allocation of an exportable pool.
    if (it == g.device_allocs.end() || it->second.kind != alloc_kind::stream_ordered ||
        !exportable(*it->second.pool))
      return cudaErrorInvalidValue;
    const device_allocation& a = it->second;
    ipc_share& share = *a.pool->share;
    ipc_pool_header& h = *share.header;
    records_lock lock(h);
    std::uint32_t slot = 0;
    if (const auto found = share.exported.find(a.ptr); found != share.exported.end()) {
      slot = found->second;  // exported before: the same data
    } else {
      while (slot < h.slots && h.records[slot].serial != 0)
        ++slot;
      if (slot == h.slots) return cudaErrorMemoryAllocation;
      ipc_export_record& r = h.records[slot];
      r = ipc_export_record{};
      r.serial = h.next_serial++;
      r.offset = share.chunks.at(a.place.chunk->mem.va) + (a.ptr - a.place.chunk->mem.va);
      r.size = a.size;
      share.exported.emplace(a.ptr, slot);
    }
    const ipc_export_record& r = h.records[slot];
    export_data out{};
    out.magic = export_magic;
    out.pool_id = h.pool_id;
    out.serial = r.serial;
    out.offset = r.offset;
    out.size = r.size;
    out.slot = slot;
    std::memcpy(data, &out, sizeof out);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemPoolImportPointer(void** ptr, cudaMemPool_t pool,
                                               cudaMemPoolPtrExportData* data) {
  return call("cudaMemPoolImportPointer", [&](state& g) -> cudaError_t {
    if (ptr == nullptr || data == nullptr || !valid_pool(g, pool) || !is_imported(*pool))
      return cudaErrorInvalidValue;
    export_data in{};
    std::memcpy(&in, data, sizeof in);
    ipc_share& share = *pool->share;
    ipc_pool_header& h = *share.header;
    // From another pool, or not export data at all.
    if (in.magic != export_magic || in.pool_id != h.pool_id || in.slot >= h.slots)
      return cudaErrorInvalidValue;
    records_lock lock(h);
    ipc_export_record& r = h.records[in.slot];
    // Freed by the exporter since, or its slot taken by another export.
    if (r.serial != in.serial || r.freed != 0) return cudaErrorInvalidValue;
    const std::size_t first = in.offset / page_bytes * page_bytes;
    const std::size_t length = round_up(in.offset + in.size, page_bytes) - first;
    region reg;
    if (!reserve_region(g.devices[static_cast<std::size_t>(pool->device)], length, reg, share.fd,
                        first))
      return cudaErrorMemoryAllocation;
    ++r.importers;
    r.last_importer = static_cast<std::int32_t>(getpid());
    const std::uintptr_t p = reg.va + (in.offset - first);
    share.imports[p] = ipc_share::import{in.slot, in.serial, in.size, reg.va, reg.size};
    share.imported_bytes += in.size;
    share.imported_high = std::max(share.imported_high, share.imported_bytes);
    device_allocation a;
    a.ptr = p;
    a.size = in.size;
    a.footprint = 0;  // the exporting process's device memory
    a.device = pool->device;
    a.kind = alloc_kind::imported;
    a.pool = pool;
    a.call = g.calls;
    a.api = "cudaMemPoolImportPointer";
    g.device_allocs.emplace(p, a);
    *ptr = reinterpret_cast<void*>(p);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  return call("cudaIpcGetEventHandle", [&](state& g) -> cudaError_t {
    if (handle == nullptr) return cudaErrorInvalidValue;
    // Only events created with cudaEventInterprocess (and so cudaEventDisableTiming).
    if (!valid_event(g, event) || event->ipc == nullptr) return cudaErrorInvalidResourceHandle;
    event_handle_data out{};
    out.magic = event_magic;
    std::memcpy(out.name, event->ipc->name, sizeof out.name);
    out.device = event->device;
    std::memcpy(handle, &out, sizeof out);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  return call("cudaIpcOpenEventHandle", [&](state& g) -> cudaError_t {
    if (event == nullptr) return cudaErrorInvalidValue;
    event_handle_data in{};
    std::memcpy(&in, &handle, sizeof in);
    in.name[sizeof in.name - 1] = '\0';
    if (in.magic != event_magic) return cudaErrorInvalidValue;
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    // Gone when the creating process destroyed the event (or ended).
    const int fd = shm_open(in.name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return cudaErrorInvalidValue;
    void* p = mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return cudaErrorMapBufferObjectFailed;
    auto ev = std::make_shared<ipc_event>();
    ev->block = static_cast<ipc_event_block*>(p);
    std::memcpy(ev->name, in.name, sizeof ev->name);
    if (ev->block->magic != event_magic) return cudaErrorInvalidValue;
    // "behaves like a locally created event with the cudaEventDisableTiming flag specified"
    auto* e = new CUevent_st();
    e->flags = cudaEventDisableTiming | cudaEventInterprocess;
    e->device = d->index;
    e->created_by_call = g.calls;
    e->ipc = std::move(ev);
    g.event_handles.insert(e);
    *event = e;
    return cudaSuccess;
  });
}

}  // extern "C"
