// SPDX-License-Identifier: Apache-2.0
// A producer process fills batches in an exported pool and a consumer process reads them, each in
// sessions of its own; interprocess events order the two (docs/multiprocess.md).
//
//   multiprocess              runs the producer, which starts the consumer
//
// The producer starts the consumer by executing this program again with the consumer's end of a
// socket pair: a process forked from one that uses CUDA cannot use CUDA itself. On the simulated
// device the two processes share the pool's memory for real (a memory file both map).
#include <cuscope/cuscope.hpp>
#include <cuscope/ipc.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr int batches = 8;
constexpr std::size_t batch_floats = 1 << 18;  // 1 MiB

// Sent once, with the pool's descriptor: the events both sides order their work with.
struct hello {
  cudaIpcEventHandle_t filled;  // the producer records it when a batch is written
  cudaIpcEventHandle_t read;    // the consumer records it when it has freed its mapping
};

// Sent for each batch.
struct batch_message {
  cuscope::allocation_export batch;
  std::int32_t index;
};

float expected_sum(int index) {
  return static_cast<float>(index) * static_cast<float>(batch_floats);
}

int consumer(int sock) {
  cuscope::pool_descriptor descriptor;
  const hello h = cuscope::receive_message<hello>(sock, &descriptor);
  const cuscope::imported_pool pool(descriptor);
  const cuscope::event filled = cuscope::open_ipc_event(h.filled);
  const cuscope::event read = cuscope::open_ipc_event(h.read);
  const cuscope::stream stream;
  std::vector<float> host(batch_floats);
  int good = 0;
  for (int i = 0; i < batches; ++i) {
    const batch_message m = cuscope::receive_message<batch_message>(sock);
    {
      // Counts the imported batch: one still mapped at the end of the scope is a leak.
      cuscope::session work(pool.ref(), stream, "consume batch " + std::to_string(m.index));
      const cuscope::imported_buffer<float> batch(work, pool, m.batch);
      stream.wait(filled);  // the producer's writes come first
      CUSCOPE_CUDA_TRY(cudaMemcpyAsync(host.data(), batch.data(), batch.size_bytes(),
                                       cudaMemcpyDeviceToHost, stream.get()));
      stream.synchronize();
      const float sum = std::accumulate(host.begin(), host.end(), 0.0f);
      if (sum == expected_sum(m.index)) ++good;
    }                     // the mapping is freed on the stream before the session ends
    read.record(stream);  // after the free: the producer may free the batch once this has run
    cuscope::send_message(sock, m.index);
  }
  std::printf("consumer: %d of %d batches read correctly, %zu bytes still imported\n", good,
              batches, pool.stats().used_bytes);
  return good == batches && pool.stats().used_bytes == 0 ? 0 : 1;
}

int producer() {
  int fds[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    fcntl(fds[1], F_SETFD, 0);
    const std::string fd = std::to_string(fds[1]);
    execl("/proc/self/exe", "multiprocess", "--consumer", fd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  const int sock = fds[0];

  cuscope::pool_options options;
  options.export_handle = cuscope::pool_export::posix_file_descriptor;
  const cuscope::memory_pool pool(options);
  const cuscope::stream stream;
  cuscope::event_options interprocess;
  interprocess.interprocess = true;
  const cuscope::event filled(interprocess);
  const cuscope::event read(interprocess);
  {
    const cuscope::pool_descriptor descriptor(pool);
    cuscope::send_message(sock, hello{cuscope::ipc_handle(filled), cuscope::ipc_handle(read)},
                          &descriptor);
  }
  std::vector<float> host(batch_floats);
  for (int i = 0; i < batches; ++i) {
    cuscope::session work(pool, stream, "produce batch " + std::to_string(i));
    cuscope::device_buffer<float> batch = work.make_buffer<float>(batch_floats);
    std::fill(host.begin(), host.end(), static_cast<float>(i));
    batch.copy_from(stream, host);
    filled.record(stream);
    cuscope::send_message(sock, batch_message{cuscope::export_allocation(batch), i});
    if (cuscope::receive_message<std::int32_t>(sock) != i) return 1;
    // The consumer freed its mapping before it recorded read: the batch's free waits for it.
    stream.wait(read);
  }  // each batch is freed in stream order, then its session checks that nothing leaked
  int status = 0;
  waitpid(child, &status, 0);
  close(sock);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("producer: %d batches through an exported pool, %s\n", batches,
              ok ? "the consumer read them all and left nothing mapped" : "the consumer failed");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "--consumer") == 0) return consumer(std::atoi(argv[2]));
#if !CUSCOPE_EXAMPLE_SIMULATED
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("skipped: no CUDA device\n");
      return 77;
    }
#endif
    return producer();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multiprocess: %s\n", e.what());
    return 1;
  }
}
