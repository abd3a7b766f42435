// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for memory across processes: exportable
// pools, exported and imported allocations, interprocess events (docs/simulated-device.md,
// "Memory across processes"). Two-process cases fork and execute this test again as the other
// process (tests/support/process_support.hpp). Rules that hold on any CUDA device also run
// against the real runtime; what the simulation reports of misuse is tested in the simulated
// build only.
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "process_support.hpp"
#include "sim_test_support.hpp"

using namespace cuscope::sim_test;
using cuscope::test::child_process;
using cuscope::test::child_socket;
using cuscope::test::receive_value;
using cuscope::test::send_value;

namespace {

cudaMemPool_t make_ipc_pool() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  return pool;
}

cudaEvent_t make_ipc_event() {
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming) ==
          cudaSuccess);
  return e;
}

int export_pool(cudaMemPool_t pool) {
  int fd = -1;
  REQUIRE(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) ==
          cudaSuccess);
  REQUIRE(fd >= 0);
  return fd;
}

cudaMemPool_t import_pool(int fd) {
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolImportFromShareableHandle(
              &pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
              cudaMemHandleTypePosixFileDescriptor, 0) == cudaSuccess);
  close(fd);  // the import does not take the descriptor
  return pool;
}

// What the exporting process sends with the pool's descriptor.
struct shared_batch {
  cudaMemPoolPtrExportData data;
  cudaIpcEventHandle_t ready;  // recorded by the exporter once the batch is written
  cudaIpcEventHandle_t done;   // recorded by the importer once it has freed its mapping
  std::uint64_t bytes;
};

constexpr std::size_t batch_bytes = 1 << 20;
constexpr unsigned char exporter_byte = 0x5a;
constexpr unsigned char importer_byte = 0xa5;

}  // namespace

TEST_CASE("sim: devices export pools through POSIX file descriptors and support IPC events",
          "[sim][ipc]") {
  device_guard device;
  int types = 0;
  REQUIRE(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0) ==
          cudaSuccess);
  CHECK((types & cudaMemHandleTypePosixFileDescriptor) != 0);
  int events = 0;
  REQUIRE(cudaDeviceGetAttribute(&events, cudaDevAttrIpcEventSupport, 0) == cudaSuccess);
  CHECK(events == 1);
}

TEST_CASE("sim: exporting a pool created without a handle type is cudaErrorInvalidValue",
          "[sim][ipc]") {
  device_guard device;
  cudaMemPool_t pool = make_pool();
  int fd = -1;
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) ==
        cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4096, pool, s) == cudaSuccess);
  cudaMemPoolPtrExportData data{};
  CHECK(cudaMemPoolExportPointer(&data, p) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: a pool exports only the handle type it was created with", "[sim][ipc]") {
  device_guard device;
  cudaMemPool_t pool = make_ipc_pool();
  int fd = -1;
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeFabric, 0) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 1) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
  fd = export_pool(pool);
  close(fd);
  cudaMemAllocationHandleType types{};
#if CUDART_VERSION >= 13020
  REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrExportHandleTypes, &types) == cudaSuccess);
  CHECK(types == cudaMemHandleTypePosixFileDescriptor);
#else
  (void)types;
#endif
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: a pool with a handle type the device does not support is not created",
          "[sim][ipc]") {
  device_guard device;
  int types = 0;
  REQUIRE(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0) ==
          cudaSuccess);
  if ((types & cudaMemHandleTypeFabric) != 0) return;  // a fabric-capable device: no such type
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.handleTypes = cudaMemHandleTypeFabric;
  cudaMemPool_t pool = nullptr;
  const cudaError_t e = cudaMemPoolCreate(&pool, &props);
  CHECK(e != cudaSuccess);
  if (cuscope::test::simulated) CHECK(e == cudaErrorNotSupported);
  (void)cudaGetLastError();
}

TEST_CASE("sim: IPC pools keep their memory through trims and synchronizations", "[sim][ipc]") {
  device_guard device;
  cudaMemPool_t pool = make_ipc_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 8 * MiB, pool, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const std::uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(reserved >= 8 * MiB);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) == reserved);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: an event created without cudaEventInterprocess has no IPC handle", "[sim][ipc]") {
  device_guard device;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  cudaIpcEventHandle_t handle{};
  const cudaError_t status = cudaIpcGetEventHandle(&handle, e);
  CHECK(status != cudaSuccess);
  if (cuscope::test::simulated) CHECK(status == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  cudaEvent_t bad = nullptr;
  CHECK(cudaEventCreateWithFlags(&bad, cudaEventInterprocess) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
}

namespace {

// The importing side of a shared batch: reads the exporter's bytes after its ready event, writes
// its own into the second half, frees its mapping and records done.
void import_and_answer(int sock) {
  device_guard device;
  int fd = -1;
  const shared_batch batch = receive_value<shared_batch>(sock, &fd);
  REQUIRE(fd >= 0);
  cudaMemPool_t pool = import_pool(fd);
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  REQUIRE(cudaIpcOpenEventHandle(&ready, batch.ready) == cudaSuccess);
  REQUIRE(cudaIpcOpenEventHandle(&done, batch.done) == cudaSuccess);
  cudaMemPoolPtrExportData data = batch.data;
  void* p = nullptr;
  REQUIRE(cudaMemPoolImportPointer(&p, pool, &data) == cudaSuccess);
  // An imported pool serves no allocations and cannot become current (Guide 4.3.3.4.5).
  cudaStream_t s = make_stream();
  void* q = nullptr;
  CHECK(cudaMallocFromPoolAsync(&q, 256, pool, s) == cudaErrorInvalidValue);
  CHECK(cudaDeviceSetMemPool(0, pool) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == batch.bytes);

  std::vector<unsigned char> seen(batch.bytes);
  REQUIRE(cudaStreamWaitEvent(s, ready, 0) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(seen.data(), p, batch.bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(seen == std::vector<unsigned char>(batch.bytes, exporter_byte));
  REQUIRE(cudaMemsetAsync(static_cast<char*>(p) + batch.bytes / 2, importer_byte, batch.bytes / 2,
                          s) == cudaSuccess);
  // The last use, the free, then the event the exporter's free waits for (Guide 4.3.3.4.3).
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  CHECK(cudaFreeAsync(p, s) == cudaErrorInvalidValue);  // freed once already
  (void)cudaGetLastError();
  REQUIRE(cudaEventRecord(done, s) == cudaSuccess);
  send_value(sock, 1);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(cudaEventDestroy(ready) == cudaSuccess);
  REQUIRE(cudaEventDestroy(done) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  // Before the exporter goes on: it checks that nothing here is still mapped.
  REQUIRE(receive_value<int>(sock) == 2);
}

}  // namespace

TEST_CASE("sim: two processes share a pool allocation in an order set by IPC events",
          "[sim][ipc]") {
  if (const int sock = child_socket(); sock >= 0) return import_and_answer(sock);
  device_guard device;
  child_process child;
  cudaMemPool_t pool = make_ipc_pool();
  cudaStream_t s = make_stream();
  cudaEvent_t ready = make_ipc_event();
  cudaEvent_t done = make_ipc_event();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, batch_bytes, pool, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, exporter_byte, batch_bytes, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(ready, s) == cudaSuccess);
  shared_batch batch{};
  batch.bytes = batch_bytes;
  REQUIRE(cudaMemPoolExportPointer(&batch.data, p) == cudaSuccess);
  REQUIRE(cudaIpcGetEventHandle(&batch.ready, ready) == cudaSuccess);
  REQUIRE(cudaIpcGetEventHandle(&batch.done, done) == cudaSuccess);
  const int fd = export_pool(pool);
  send_value(child.socket(), batch, fd);
  close(fd);

  REQUIRE(receive_value<int>(child.socket()) == 1);
  REQUIRE(cudaStreamWaitEvent(s, done, 0) == cudaSuccess);
  std::vector<unsigned char> seen(batch_bytes);
  REQUIRE(cudaMemcpyAsync(seen.data(), p, batch_bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  std::vector<unsigned char> expected(batch_bytes, exporter_byte);
  std::memset(expected.data() + batch_bytes / 2, importer_byte, batch_bytes / 2);
  CHECK(seen == expected);
  send_value(child.socket(), 2);
  CHECK(child.wait() == 0);
#if CUSCOPE_TEST_SIMULATED
  CHECK(cuscope::sim::fault_report().empty());
  CHECK(cuscope::sim::misuse_report().empty());
#endif
  REQUIRE(cudaEventDestroy(ready) == cudaSuccess);
  REQUIRE(cudaEventDestroy(done) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

namespace {

struct two_pools {
  cudaMemPoolPtrExportData from_b;
};

// Imports pool A and pool B; the pointer from B does not import into A.
void import_from_wrong_pool(int sock) {
  device_guard device;
  int fd_a = -1;
  int fd_b = -1;
  const two_pools msg = receive_value<two_pools>(sock, &fd_a);
  (void)receive_value<int>(sock, &fd_b);
  cudaMemPool_t a = import_pool(fd_a);
  cudaMemPool_t b = import_pool(fd_b);
  cudaMemPoolPtrExportData data = msg.from_b;
  void* p = nullptr;
  CHECK(cudaMemPoolImportPointer(&p, a, &data) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaMemPoolImportPointer(&p, b, &data) == cudaSuccess);
#if CUSCOPE_TEST_SIMULATED
  // An imported pool destroyed before its allocations: they stay mapped, and are outstanding.
  REQUIRE(cudaMemPoolDestroy(b) == cudaSuccess);
  CHECK_THAT(cuscope::sim::outstanding_report(), cuscope::test::contains("imported allocation"));
  REQUIRE(cudaFree(p) == cudaSuccess);
#else
  REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(b) == cudaSuccess);
#endif
  CHECK(cudaFree(p) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaMemPoolDestroy(a) == cudaSuccess);
  send_value(sock, 1);
}

}  // namespace

TEST_CASE("sim: a pointer imports only into the pool it was exported from", "[sim][ipc]") {
  if (const int sock = child_socket(); sock >= 0) return import_from_wrong_pool(sock);
  device_guard device;
  child_process child;
  cudaMemPool_t a = make_ipc_pool();
  cudaMemPool_t b = make_ipc_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4096, b, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  two_pools msg{};
  REQUIRE(cudaMemPoolExportPointer(&msg.from_b, p) == cudaSuccess);
  const int fd_a = export_pool(a);
  const int fd_b = export_pool(b);
  send_value(child.socket(), msg, fd_a);
  send_value(child.socket(), 0, fd_b);
  close(fd_a);
  close(fd_b);
  REQUIRE(receive_value<int>(child.socket()) == 1);
  CHECK(child.wait() == 0);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
#if CUSCOPE_TEST_SIMULATED
  CHECK(cuscope::sim::fault_report().empty());
#endif
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(a) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(b) == cudaSuccess);
}

#if CUSCOPE_TEST_SIMULATED

namespace {

// Imports the allocation, then holds it until the exporter has freed it.
void hold_mapping(int sock) {
  device_guard device;
  int fd = -1;
  cudaMemPoolPtrExportData data = receive_value<cudaMemPoolPtrExportData>(sock, &fd);
  cudaMemPool_t pool = import_pool(fd);
  void* p = nullptr;
  REQUIRE(cudaMemPoolImportPointer(&p, pool, &data) == cudaSuccess);
  send_value(sock, 1);
  REQUIRE(receive_value<int>(sock) == 2);  // the exporter has freed it
  // The exporter's free does not reach into this process: the mapping is still here.
  CHECK_THAT(cuscope::sim::outstanding_report(), cuscope::test::contains("imported allocation"));
  REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  send_value(sock, 3);
}

}  // namespace

TEST_CASE("sim: the exporter freeing an allocation that another process still maps is reported",
          "[sim][ipc]") {
  if (const int sock = child_socket(); sock >= 0) return hold_mapping(sock);
  device_guard device;
  child_process child;
  cudaMemPool_t pool = make_ipc_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4096, pool, s) == cudaSuccess);
  cudaMemPoolPtrExportData data{};
  REQUIRE(cudaMemPoolExportPointer(&data, p) == cudaSuccess);
  const int fd = export_pool(pool);
  send_value(child.socket(), data, fd);
  close(fd);
  REQUIRE(receive_value<int>(child.socket()) == 1);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const std::string misuses = cuscope::sim::misuse_report();
  CHECK_THAT(misuses, cuscope::test::contains("cudaFreeAsync of"));
  CHECK_THAT(misuses,
             cuscope::test::contains("still mapped it: every importer must free it first"));
  CHECK(cuscope::sim::fault_report().empty());
  CHECK(cudaGetLastError() == cudaSuccess);  // reported, not an error: a GPU says nothing
  send_value(child.socket(), 2);
  REQUIRE(receive_value<int>(child.socket()) == 3);
  CHECK(child.wait() == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

namespace {

void import_stale(int sock) {
  device_guard device;
  int fd = -1;
  cudaMemPoolPtrExportData data = receive_value<cudaMemPoolPtrExportData>(sock, &fd);
  cudaMemPool_t pool = import_pool(fd);
  void* p = nullptr;
  // The exporter freed the allocation before it was imported.
  CHECK(cudaMemPoolImportPointer(&p, pool, &data) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaMemPoolPtrExportData garbage{};
  CHECK(cudaMemPoolImportPointer(&p, pool, &garbage) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  send_value(sock, 1);
}

}  // namespace

TEST_CASE("sim: export data of a freed allocation does not import", "[sim][ipc]") {
  if (const int sock = child_socket(); sock >= 0) return import_stale(sock);
  device_guard device;
  child_process child;
  cudaMemPool_t pool = make_ipc_pool();
  cudaStream_t s = make_stream();
  void* p = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&p, 4096, pool, s) == cudaSuccess);
  cudaMemPoolPtrExportData data{};
  REQUIRE(cudaMemPoolExportPointer(&data, p) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const int fd = export_pool(pool);
  send_value(child.socket(), data, fd);
  close(fd);
  REQUIRE(receive_value<int>(child.socket()) == 1);
  CHECK(child.wait() == 0);
  CHECK(cuscope::sim::fault_report().empty());
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

namespace {

// Imports the second allocation, checks what it maps, and holds it while the exporter's free of
// the first allocation at the same address runs.
void import_reused_address(int sock) {
  device_guard device;
  int fd = -1;
  cudaMemPoolPtrExportData data = receive_value<cudaMemPoolPtrExportData>(sock, &fd);
  cudaMemPool_t pool = import_pool(fd);
  void* p = nullptr;
  REQUIRE(cudaMemPoolImportPointer(&p, pool, &data) == cudaSuccess);
  std::uint64_t used = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess);
  CHECK(used == 4096);  // the 4 KiB allocation, not the 1 MiB one freed before at its address
  send_value(sock, 1);
  REQUIRE(receive_value<int>(sock) == 2);  // the first allocation's free has run
  REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  send_value(sock, 3);
}

}  // namespace

TEST_CASE("sim: an allocation at the address of one whose free has not run exports as itself",
          "[sim][ipc]") {
  if (const int sock = child_socket(); sock >= 0) return import_reused_address(sock);
  device_guard device;
  child_process child;
  cudaMemPool_t pool = make_ipc_pool();
  cudaStream_t s = make_stream();
  void* first = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&first, batch_bytes, pool, s) == cudaSuccess);
  cudaMemPoolPtrExportData data{};
  REQUIRE(cudaMemPoolExportPointer(&data, first) == cudaSuccess);
  REQUIRE(cudaFreeAsync(first, s) == cudaSuccess);
  // Stream order lets the next allocation on s take the same address before the free has run.
  void* second = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&second, 4096, pool, s) == cudaSuccess);
  REQUIRE(second == first);
  REQUIRE(cudaMemPoolExportPointer(&data, second) == cudaSuccess);
  const int fd = export_pool(pool);
  send_value(child.socket(), data, fd);
  close(fd);
  REQUIRE(receive_value<int>(child.socket()) == 1);
  // The first allocation's free runs while the child maps the second: no misuse.
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cuscope::sim::misuse_report() == std::string());
  send_value(child.socket(), 2);
  REQUIRE(receive_value<int>(child.socket()) == 3);
  CHECK(child.wait() == 0);
  REQUIRE(cudaFreeAsync(second, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cuscope::sim::misuse_report() == std::string());
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("sim: a descriptor that is not an exported pool does not import", "[sim][ipc]") {
  device_guard device;
  int pipe_fds[2] = {-1, -1};
  REQUIRE(pipe(pipe_fds) == 0);
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolImportFromShareableHandle(
            &pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(pipe_fds[0])),
            cudaMemHandleTypePosixFileDescriptor, 0) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST_CASE("sim: an IPC event opened in the process that made it sees its records at once",
          "[sim][ipc]") {
  device_guard device;
  cudaEvent_t e = make_ipc_event();
  cudaIpcEventHandle_t handle{};
  REQUIRE(cudaIpcGetEventHandle(&handle, e) == cudaSuccess);
  cudaEvent_t opened = nullptr;
  REQUIRE(cudaIpcOpenEventHandle(&opened, handle) == cudaSuccess);
  cudaStream_t s = make_stream();
  CHECK(cudaEventQuery(opened) == cudaSuccess);  // never recorded
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  CHECK(cudaEventQuery(opened) == cudaSuccess);  // the record ran at once
  REQUIRE(cudaEventSynchronize(opened) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaEventDestroy(opened) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
}

#endif  // CUSCOPE_TEST_SIMULATED
