// SPDX-License-Identifier: Apache-2.0
// A producer and a consumer process as docs/multiprocess.md shows them: an exportable pool shared
// through its descriptor over a Unix socket, one allocation exported and imported, interprocess
// events ordering the two sides, sessions on both counting what they hold. The consumer is this
// program again, started with fork and exec and told its role by an environment variable.
#include <cuscope/cuscope.hpp>
#include <cuscope/ipc.hpp>

#include <cuda_runtime_api.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "test_support.hpp"

#if CUSCOPE_TEST_SIMULATED
#  include <cuscope/sim.hpp>
#endif

using cuscope::test::contains;

namespace {

constexpr std::size_t n = 64 * 1024;  // floats: 256 KiB
constexpr const char* role_variable = "CUSCOPE_DOCS_IPC_SOCKET";

struct hello {
  cudaIpcEventHandle_t filled;
  cudaIpcEventHandle_t read;
};

// The other process: this executable again, running one test case, with its end of the socket.
class consumer_process {
 public:
  explicit consumer_process(const char* test_name) {
    int fds[2] = {-1, -1};
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    const std::string fd_text = std::to_string(fds[1]);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(fds[0]);
      ::setenv(role_variable, fd_text.c_str(), 1);
      ::execl("/proc/self/exe", "/proc/self/exe", test_name, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    sock_ = fds[0];
  }
  consumer_process(const consumer_process&) = delete;
  consumer_process& operator=(const consumer_process&) = delete;
  ~consumer_process() {
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    ::close(sock_);
  }
  [[nodiscard]] int socket() const { return sock_; }
  int wait() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int sock_ = -1;
};

int consumer_socket() {
  const char* v = std::getenv(role_variable);
  return v == nullptr ? -1 : std::atoi(v);
}

std::vector<float> host_data() {
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i)
    host[i] = static_cast<float>(i % 1000) + 0.5f;
  return host;
}

// The importing process, as the docs show it.
void consume(int sock, bool hold_until_told) {
  cuscope::stream stream;
  cuscope::pool_descriptor fd;
  const hello h = cuscope::receive_message<hello>(sock, &fd);
  cuscope::imported_pool pool(fd);
  cuscope::event filled = cuscope::open_ipc_event(h.filled);
  cuscope::event read = cuscope::open_ipc_event(h.read);

  // An imported pool serves no allocations of its own.
  CHECK_THROWS_AS(pool.ref().allocate(stream, 1024), cuscope::cuda_error);
  (void)cudaGetLastError();

  const auto m = cuscope::receive_message<cuscope::allocation_export>(sock);
  std::vector<float> seen(n, 0.0f);
  {
    cuscope::session work(pool.ref(), stream, "consume");
    {
      cuscope::imported_buffer<float> batch(work, pool, m);  // counted by the session
      CHECK(batch.size() == n);
      CHECK(pool.ref().stats().used_bytes >= n * sizeof(float));  // what this process maps
      stream.wait(filled);
      REQUIRE(cudaMemcpyAsync(seen.data(), batch.span().data(), n * sizeof(float),
                              cudaMemcpyDeviceToHost, stream.get()) == cudaSuccess);
      if (hold_until_told) {
        stream.synchronize();  // the copy has run before the producer's early free
        cuscope::send_message(sock, 4);
        // The producer frees too early: it says so once its free has run.
        CHECK(cuscope::receive_message<int>(sock) == 2);
      }
    }  // freed on stream
    const cuscope::session_report& r = work.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == 1);
    CHECK(r.frees == 1);
    CHECK(pool.ref().stats().used_bytes == 0);
  }
  read.record(stream);  // after the free
  cuscope::send_message(sock, 1);
  CHECK(seen == host_data());

  // One still mapped when its session ends is a leak, and the report says so.
  {
    std::optional<cuscope::imported_buffer<float>> kept;
    cuscope::session leaky(pool.ref(), stream, "consume, leaking");
    const auto m2 = cuscope::receive_message<cuscope::allocation_export>(sock);
    kept.emplace(cuscope::imported_buffer<float>(leaky, pool, m2));
    const int line = __LINE__ - 1;
    // The imported pool's statistics count what this process has mapped: this allocation.
    CHECK(pool.ref().stats().used_bytes >= 1024 * sizeof(float));
    if (cuscope::test::simulated) CHECK(pool.ref().stats().used_bytes == 1024 * sizeof(float));
    const cuscope::session_report& r = leaky.finish();
    INFO(r.to_string());
    CHECK(r.leaked());
    CHECK(r.leaked_allocations == 1);
    CHECK(r.leaked_bytes == 1024 * sizeof(float));
    CHECK(r.untracked_bytes == 0);
    // Named like a make_buffer leak: tag, and the call site in this file.
    REQUIRE(r.leaks.size() == 1);
    CHECK(std::string(r.leaks[0].tag) == "imported");
    CHECK(r.leaks[0].pointer == kept->data());
    CHECK_THAT(r.leaks[0].file, contains("docs_multiprocess_test.cpp"));
    CHECK(r.leaks[0].line == line);
    kept.reset();
    stream.synchronize();
    read.record(stream);
    cuscope::send_message(sock, 3);
  }
  // The descriptor stays ours after the import.
  CHECK(fd.get() >= 0);
}

}  // namespace

TEST_CASE("multiprocess: a consumer process imports a batch and frees it before the producer",
          "[docs][ipc][session]") {
  if (const int sock = consumer_socket(); sock >= 0) {
    consume(sock, false);
    return;
  }
  cuscope::test::device_guard device;
  cuscope::stream stream;
  consumer_process child(
      "multiprocess: a consumer process imports a batch and frees it before the producer");
  const int sock = child.socket();

  cuscope::pool_options options;
  options.export_handle = cuscope::pool_export::posix_file_descriptor;
  cuscope::memory_pool pool(options);

  cuscope::event_options interprocess;
  interprocess.interprocess = true;
  cuscope::event filled(interprocess), read(interprocess);

  {
    cuscope::pool_descriptor fd(pool);
    CHECK(fd.get() >= 0);
    cuscope::send_message(sock, hello{cuscope::ipc_handle(filled), cuscope::ipc_handle(read)}, &fd);
  }

  const std::vector<float> host = host_data();
  {
    cuscope::session work(pool, stream, "produce");
    {
      auto batch = work.make_buffer<float>(n);
      batch.copy_from(stream, host);
      filled.record(stream);
      cuscope::send_message(sock, cuscope::export_allocation(batch));
      CHECK(cuscope::receive_message<int>(sock) == 1);
      stream.wait(read);
    }  // freed after the wait
    {
      auto second = work.make_buffer<float>(1024);
      cuscope::send_message(sock, cuscope::export_allocation(second));
      CHECK(cuscope::receive_message<int>(sock) == 3);
      stream.wait(read);
    }
    const cuscope::session_report& r = work.finish();
    INFO(r.to_string());
    CHECK_FALSE(r.leaked());
    CHECK(r.allocations == 2);
    // IPC pools keep their memory: nothing returned, the reserve kept.
    CHECK(r.returned_bytes == 0);
    CHECK(r.reserved_at_exit_bytes == r.peak_reserved_bytes);
    CHECK(pool.stats().reserved_bytes > 0);
  }
  pool.trim_to(0);  // does nothing on an IPC pool
  CHECK(pool.stats().reserved_bytes > 0);
  CHECK(child.wait() == 0);
#if CUSCOPE_TEST_SIMULATED
  CHECK(cuscope::sim::misuse_report() == std::string());
#endif
}

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("multiprocess: an exporter free that runs before the importer's is a misuse",
          "[docs][ipc]") {
  if (const int sock = consumer_socket(); sock >= 0) {
    consume(sock, true);
    return;
  }
  cuscope::test::device_guard device;
  cuscope::stream stream;
  consumer_process child(
      "multiprocess: an exporter free that runs before the importer's is a misuse");
  const int sock = child.socket();

  cuscope::pool_options options;
  options.export_handle = cuscope::pool_export::posix_file_descriptor;
  cuscope::memory_pool pool(options);
  cuscope::event_options interprocess;
  interprocess.interprocess = true;
  cuscope::event filled(interprocess), read(interprocess);
  {
    cuscope::pool_descriptor fd(pool);
    cuscope::send_message(sock, hello{cuscope::ipc_handle(filled), cuscope::ipc_handle(read)}, &fd);
  }
  const std::vector<float> host = host_data();
  void* freed = nullptr;
  {
    auto batch = cuscope::device_buffer<float>(stream, host, pool);
    filled.record(stream);
    cuscope::send_message(sock, cuscope::export_allocation(batch));
    freed = batch.data();
    CHECK(cuscope::receive_message<int>(sock) == 4);
    stream.synchronize();  // the consumer has not freed its mapping: no wait for `read`
  }
  stream.synchronize();  // the early free has run
  const std::string misuse = cuscope::sim::misuse_report();
  INFO(misuse);
  CHECK_FALSE(misuse.empty());
  char text[32];
  std::snprintf(text, sizeof text, "%p", freed);
  CHECK_THAT(misuse, contains(text));
  cuscope::send_message(sock, 2);
  CHECK(cuscope::receive_message<int>(sock) == 1);
  {
    auto second = cuscope::device_buffer<float>(stream, 1024, pool);
    cuscope::send_message(sock, cuscope::export_allocation(second));
    CHECK(cuscope::receive_message<int>(sock) == 3);
    stream.wait(read);
  }
  CHECK(child.wait() == 0);
}
#endif

TEST_CASE("multiprocess: the documented errors of pools and descriptors and messages",
          "[docs][ipc][misuse]") {
  if (consumer_socket() >= 0) return;
  cuscope::test::device_guard device;
  cuscope::stream stream;

  // A pool made without an export handle cannot give a descriptor.
  cuscope::memory_pool plain;
  CHECK_THROWS(cuscope::pool_descriptor(plain));

  // A handle type the device cannot export: std::invalid_argument naming the device and type.
  if (cuscope::test::simulated) {
    cuscope::pool_options fabric;
    fabric.export_handle = cuscope::pool_export::fabric;
    try {
      cuscope::memory_pool unsupported(fabric);
      FAIL("a pool with a handle type the device cannot export was made");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), contains("device 0"));
      CHECK_THAT(e.what(), contains("fabric"));
    }
  }

  // A sequenced-packet socket pair: a message of another size, and a peer that closed.
  int fds[2] = {-1, -1};
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0);
  cuscope::send_message(fds[0], 7);
  try {
    (void)cuscope::receive_message<double>(fds[1]);
    FAIL("a message of another size was received");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), contains(std::to_string(sizeof(double))));
  }
  ::close(fds[0]);
  CHECK_THROWS_AS(cuscope::receive_message<int>(fds[1]), std::runtime_error);
  ::close(fds[1]);
  // A message that should carry a descriptor and does not; a socket that is not one.
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  cuscope::send_message(fds[0], 5);
  try {
    cuscope::pool_descriptor none;
    (void)cuscope::receive_message<int>(fds[1], &none);
    FAIL("a message without the descriptor asked for was received");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), contains("descriptor"));
  }
  ::close(fds[0]);
  ::close(fds[1]);
  CHECK_THROWS_AS(cuscope::receive_message<int>(fds[1]), std::system_error);
}
