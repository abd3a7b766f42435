// SPDX-License-Identifier: Apache-2.0
// Memory across processes (include/cuscope/ipc.hpp). The two-process cases fork and execute this
// test again as the other process (tests/support/process_support.hpp).
#include <cuscope/cuscope.hpp>
#include <cuscope/ipc.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "process_support.hpp"
#include "test_support.hpp"

using cuscope::allocation_export;
using cuscope::device_buffer;
using cuscope::event;
using cuscope::event_options;
using cuscope::imported_allocation;
using cuscope::imported_buffer;
using cuscope::imported_pool;
using cuscope::memory_pool;
using cuscope::pool_descriptor;
using cuscope::pool_export;
using cuscope::pool_options;
using cuscope::session;
using cuscope::session_options;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::child_process;
using cuscope::test::child_socket;
using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(!std::is_copy_constructible_v<pool_descriptor>);
static_assert(std::is_nothrow_move_constructible_v<pool_descriptor>);
static_assert(std::is_nothrow_move_assignable_v<pool_descriptor>);
static_assert(!std::is_copy_constructible_v<imported_pool>);
static_assert(std::is_nothrow_move_constructible_v<imported_pool>);
static_assert(std::is_nothrow_move_assignable_v<imported_pool>);
static_assert(!std::is_copy_constructible_v<imported_allocation>);
static_assert(std::is_nothrow_move_constructible_v<imported_allocation>);
static_assert(std::is_nothrow_move_assignable_v<imported_allocation>);
static_assert(std::is_nothrow_destructible_v<imported_allocation>);
static_assert(!std::is_copy_constructible_v<imported_buffer<int>>);
static_assert(std::is_nothrow_move_constructible_v<imported_buffer<int>>);
static_assert(std::is_trivially_copyable_v<allocation_export>);

namespace {

constexpr std::size_t batch_elements = 64 * 1024;
constexpr int rounds = 8;

pool_options exportable() {
  pool_options o;
  o.export_handle = pool_export::posix_file_descriptor;
  return o;
}

event ipc_event() {
  event_options o;
  o.interprocess = true;
  return event(o);
}

// Sent once, with the pool's descriptor.
struct hello {
  cudaIpcEventHandle_t ready;  // the producer records it once a batch is written
  cudaIpcEventHandle_t done;   // the consumer records it once it has freed its mapping
};

// Sent for every batch.
struct batch_message {
  allocation_export batch;
  std::int32_t round;
};

session_options quiet(const std::string& name, std::vector<session_report>* reports) {
  session_options o;
  o.name = name;
  o.on_finish = [reports](const session_report& r) { reports->push_back(r); };
  return o;
}

// The consumer: imports each batch into a session of its own, checks it, frees its mapping, and
// records done.
void consume(int sock) {
  device_guard device;
  pool_descriptor descriptor;
  const hello h = cuscope::receive_message<hello>(sock, &descriptor);
  imported_pool pool(descriptor);
  const event ready = cuscope::open_ipc_event(h.ready);
  const event done = cuscope::open_ipc_event(h.done);
  stream s;
  std::vector<session_report> reports;
  for (int round = 0; round < rounds; ++round) {
    const batch_message m = cuscope::receive_message<batch_message>(sock);
    REQUIRE(m.round == round);
    {
      session work(pool.ref(), s, quiet("consume " + std::to_string(round), &reports));
      imported_buffer<int> batch(work, pool, m.batch);
      CHECK(work.live_allocations() == 1);
      CHECK(work.live_bytes() == batch_elements * sizeof(int));
      if (round == 0) {
        cuscope::report_options no_nvml;
        no_nvml.query_nvml = false;
        const cuscope::device_memory_report r = cuscope::memory_report(
            pool.device(), {cuscope::named_pool{"imported batches", pool.ref()}}, no_nvml);
        CHECK(r.pools.at(0).used_bytes == batch_elements * sizeof(int));
        if (cuscope::test::simulated) {
          CHECK(r.pools.at(0).shared);
          CHECK_THAT(r.to_string(), contains("imported batches (IPC)"));
        }
      }
      s.wait(ready);
      std::vector<int> seen(batch.size());
      CUSCOPE_CUDA_TRY(cudaMemcpyAsync(seen.data(), batch.data(), batch.size_bytes(),
                                       cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();
      bool all = seen.size() == batch_elements;
      for (std::size_t i = 0; i < seen.size() && all; ++i)
        all = seen[i] == round * 1000 + static_cast<int>(i % 1000);
      CHECK(all);
      // The answer goes into the batch itself, for the producer to read.
      CUSCOPE_CUDA_TRY(cudaMemsetAsync(batch.data(), 0, sizeof(int), s.get()));
    }  // the mapping is freed on s, then the session ends
    done.record(s);
    cuscope::send_message(sock, round);
  }
  REQUIRE(reports.size() == static_cast<std::size_t>(rounds));
  for (const session_report& r : reports) {
    CHECK_FALSE(r.leaked());
    CHECK(r.used_at_exit_bytes == 0);  // nothing of the exporter's pool is mapped any more
  }
  CHECK(pool.stats().used_bytes == 0);
  cuscope::send_message(sock, -1);
}

}  // namespace

TEST_CASE("ipc: a producer fills batches in an exported pool and a consumer reads them", "[ipc]") {
  if (const int sock = child_socket(); sock >= 0) return consume(sock);
  device_guard device;
  child_process child;
  memory_pool pool(exportable());
  stream s;
  const event ready = ipc_event();
  const event done = ipc_event();
  hello h{};
  h.ready = cuscope::ipc_handle(ready);
  h.done = cuscope::ipc_handle(done);
  {
    const pool_descriptor descriptor(pool);
    cuscope::send_message(child.socket(), h, &descriptor);
  }  // the consumer has its own descriptor now
  std::vector<session_report> reports;
  for (int round = 0; round < rounds; ++round) {
    session work(pool, s, quiet("produce " + std::to_string(round), &reports));
    device_buffer<int> batch = work.make_buffer<int>(batch_elements);
    std::vector<int> values(batch_elements);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = round * 1000 + static_cast<int>(i % 1000);
    batch.copy_from(s, values);
    ready.record(s);
    batch_message m{};
    m.batch = cuscope::export_allocation(batch);
    m.round = round;
    cuscope::send_message(child.socket(), m);
    REQUIRE(cuscope::receive_message<int>(child.socket()) == round);
    // The consumer freed its mapping before it recorded done: the free below waits for it.
    s.wait(done);
    std::vector<int> back(1);
    batch.copy_to(s, back.data(), 1);
    s.synchronize();
    CHECK(back[0] == 0);
  }  // each batch is freed on s after the wait, then its session ends
  REQUIRE(cuscope::receive_message<int>(child.socket()) == -1);
  CHECK(child.wait() == 0);
  REQUIRE(reports.size() == static_cast<std::size_t>(rounds));
  for (const session_report& r : reports)
    CHECK_FALSE(r.leaked());
#if CUSCOPE_TEST_SIMULATED
  CHECK(cuscope::sim::misuse_report().empty());
  CHECK(cuscope::sim::fault_report().empty());
#endif
}

namespace {

// Keeps an imported buffer past the end of the session that counts it.
void leak_import(int sock) {
  device_guard device;
  pool_descriptor descriptor;
  const allocation_export e = cuscope::receive_message<allocation_export>(sock, &descriptor);
  imported_pool pool(descriptor);
  stream s;
  std::vector<session_report> leaks;
  session_options o;
  o.name = "consumer";
  o.leak_sink = [&leaks](const session_report& r) { leaks.push_back(r); };
  imported_buffer<char> kept;
  {
    session work(pool.ref(), s, o);
    kept = imported_buffer<char>(work, pool, e);
  }
  REQUIRE(leaks.size() == 1);
  CHECK(leaks[0].leaked_allocations == 1);
  CHECK(leaks[0].leaked_bytes == e.bytes);
  REQUIRE(leaks[0].leaks.size() == 1);
  CHECK(leaks[0].leaks[0].tag == "imported");
  CHECK(leaks[0].leaks[0].bytes == e.bytes);
  kept = imported_buffer<char>();  // freed here, on s
  s.synchronize();
  cuscope::send_message(sock, 1);
}

}  // namespace

TEST_CASE("imported_buffer: a mapping still alive when its session ends is a leak", "[ipc]") {
  if (const int sock = child_socket(); sock >= 0) return leak_import(sock);
  device_guard device;
  child_process child;
  memory_pool pool(exportable());
  stream s;
  device_buffer<char> shared(s, 4096, pool);
  s.synchronize();
  {
    const pool_descriptor descriptor(pool);
    cuscope::send_message(child.socket(), cuscope::export_allocation(shared), &descriptor);
  }
  REQUIRE(cuscope::receive_message<int>(child.socket()) == 1);
  CHECK(child.wait() == 0);
}

namespace {

void import_wrong(int sock) {
  device_guard device;
  pool_descriptor first;
  pool_descriptor second;
  const allocation_export e = cuscope::receive_message<allocation_export>(sock, &first);
  (void)cuscope::receive_message<int>(sock, &second);
  imported_pool a(first);
  imported_pool b(second);
  stream s;
  try {
    imported_buffer<char> wrong(s, a, e);
    FAIL("an allocation of another pool imported");
  } catch (const cuscope::cuda_error& error) {
    CHECK(error.status() == cudaErrorInvalidValue);
    CHECK_THAT(error.what(), contains(a.describe()));
    CHECK_THAT(error.what(), contains("not from this pool"));
  }
  {
    const imported_buffer<char> right(s, b, e);
    CHECK(right.size() == e.bytes);
    CHECK(b.stats().used_bytes == e.bytes);
  }
  CHECK_THROWS_AS(imported_buffer<std::uint64_t>(s, b, allocation_export{e.data, 12}),
                  std::invalid_argument);
  s.synchronize();
  cuscope::send_message(sock, 1);
}

}  // namespace

TEST_CASE("imported_buffer: an allocation of another pool does not import and says so", "[ipc]") {
  if (const int sock = child_socket(); sock >= 0) return import_wrong(sock);
  device_guard device;
  child_process child;
  memory_pool a(exportable());
  memory_pool b(exportable());
  stream s;
  device_buffer<char> from_b(s, 4096, b);
  s.synchronize();
  {
    const pool_descriptor da(a);
    const pool_descriptor db(b);
    cuscope::send_message(child.socket(), cuscope::export_allocation(from_b), &da);
    cuscope::send_message(child.socket(), 0, &db);
  }
  REQUIRE(cuscope::receive_message<int>(child.socket()) == 1);
  CHECK(child.wait() == 0);
}

TEST_CASE("pool_descriptor: a pool made without an export handle cannot be exported", "[ipc]") {
  device_guard device;
  memory_pool pool;
  try {
    const pool_descriptor d(pool);
    FAIL("exported");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorInvalidValue);
    CHECK_THAT(e.what(), contains(pool.describe()));
    CHECK_THAT(e.what(), contains("export_handle"));
  }
  stream s;
  device_buffer<int> b(s, 16, pool);
  CHECK_THROWS_WITH(cuscope::export_allocation(b), contains("pool_options::export_handle"));
  (void)cudaGetLastError();
}

TEST_CASE("memory_pool: an export handle the device does not support is refused", "[ipc]") {
  device_guard device;
  int types = 0;
  REQUIRE(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0) ==
          cudaSuccess);
  pool_options o;
  o.export_handle = pool_export::fabric;
  if ((types & 0x8) != 0) return;  // a fabric-capable system (IMEX): nothing to refuse
  CHECK_THROWS_WITH(memory_pool(o), contains("device 0") && contains("fabric"));
}

TEST_CASE("event: an interprocess event cannot measure time", "[ipc]") {
  device_guard device;
  event_options o;
  o.interprocess = true;
  o.timing = true;
  CHECK_THROWS_AS(event(o), std::invalid_argument);
  const event plain;
  CHECK_THROWS_WITH(cuscope::ipc_handle(plain), contains("interprocess"));
  (void)cudaGetLastError();
}

TEST_CASE("receive_message: a closed peer, a short message or a missing descriptor is named",
          "[ipc]") {
  int fds[2] = {-1, -1};
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
  cuscope::send_message(fds[0], std::int32_t{7});
  CHECK_THROWS_WITH(cuscope::receive_message<std::int64_t>(fds[1]),
                    contains("socket " + std::to_string(fds[1])) && contains("8 bytes expected"));
  cuscope::send_message(fds[0], std::int64_t{7});
  pool_descriptor none;
  CHECK_THROWS_WITH(cuscope::receive_message<std::int64_t>(fds[1], &none),
                    contains("no pool descriptor"));
  CHECK_THROWS_AS(cuscope::send_message(fds[0], 1, &none), std::invalid_argument);
  close(fds[0]);
  CHECK_THROWS_WITH(cuscope::receive_message<int>(fds[1]), contains("the peer closed"));
  CHECK_THROWS_AS(cuscope::send_message(fds[1], 1), std::system_error);
  close(fds[1]);
}

TEST_CASE("send_message: a one-byte payload is \"1 byte\" in the messages of both ends", "[ipc]") {
  struct two {
    char a, b;
  };
  int packets[2] = {-1, -1};
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, packets) == 0);
  cuscope::send_message(packets[0], char{1});
  CHECK_THROWS_WITH(cuscope::receive_message<two>(packets[1]),
                    contains("(2 bytes expected): the message was 1 byte") && !contains("1 bytes"));
  pool_descriptor none;
  CHECK_THROWS_WITH(cuscope::send_message(packets[0], char{1}, &none),
                    contains("send_message on socket " + std::to_string(packets[0]) +
                             " (1 byte): empty pool_descriptor"));
  close(packets[0]);
  close(packets[1]);

  int stream_pair[2] = {-1, -1};
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, stream_pair) == 0);
  cuscope::send_message(stream_pair[0], char{1});
  close(stream_pair[0]);
  CHECK_THROWS_WITH(cuscope::receive_message<two>(stream_pair[1]),
                    contains("the peer closed the socket after 1 byte") && !contains("1 bytes"));
  CHECK_THROWS_WITH(
      cuscope::send_message(stream_pair[1], char{1}),
      contains("send_message on socket " + std::to_string(stream_pair[1]) + " (1 byte)") &&
          !contains("1 bytes"));
  close(stream_pair[1]);
  CHECK_THROWS_WITH(cuscope::receive_message<char>(-1),
                    contains("receive_message on socket -1 (1 byte expected)"));
}
