// SPDX-License-Identifier: Apache-2.0
// Test cases that run in two processes. The parent forks, and the child executes this test
// executable again, running only the current test case, with its end of a socket pair named in
// CUSCOPE_TEST_CHILD_SOCKET. Executing afresh is what CUDA needs (a process forked from one that
// initialized CUDA cannot use it), and on the simulated device it starts a fresh simulated process.
//
//   TEST_CASE("...") {
//     if (const int sock = cuscope::test::child_socket(); sock >= 0) return child_role(sock);
//     device_guard device;
//     cuscope::test::child_process child;
//     parent_role(child.socket());
//     CHECK(child.wait() == 0);
//   }
//
// Test case names must not contain ',', '[', ']', '*' or '\\', which Catch2 reads as a test spec.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "catch.hpp"

#if CUSCOPE_CATCH2_MAJOR >= 3
#  include <catch2/interfaces/catch_interfaces_capture.hpp>
#endif

namespace cuscope::test {

/// In a child process started by child_process: its socket; in any other process: -1.
inline int child_socket() {
  const char* v = std::getenv("CUSCOPE_TEST_CHILD_SOCKET");
  return v == nullptr ? -1 : std::atoi(v);
}

/// How long either side waits for the other's next message.
inline constexpr int message_timeout_seconds = 60;

inline void set_timeout(int sock) {
  timeval tv{};
  tv.tv_sec = message_timeout_seconds;
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/// The child process that runs the current test case's other role.
class child_process {
 public:
  child_process() {
    int fds[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
      throw std::runtime_error("child_process: socketpair failed");
    const std::string test_name = Catch::getResultCapture().getCurrentTestName();
    const std::string fd_text = std::to_string(fds[1]);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("child_process: fork failed");
    if (pid_ == 0) {
      // Only async-signal-safe calls until exec.
      fcntl(fds[1], F_SETFD, 0);
      setenv("CUSCOPE_TEST_CHILD_SOCKET", fd_text.c_str(), 1);
      execl("/proc/self/exe", "/proc/self/exe", test_name.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    sock_ = fds[0];
    set_timeout(sock_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (sock_ >= 0) close(sock_);
  }

  [[nodiscard]] int socket() const noexcept { return sock_; }

  /// Waits up to a minute for the child to end: its exit status, or -1 when it was killed or
  /// did not end.
  int wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (r < 0 || std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int sock_ = -1;
};

/// Sends one message of bytes, with a file descriptor when fd >= 0.
inline void send_message(int sock, const void* data, std::size_t bytes, int fd = -1) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  REQUIRE(sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes));
}

/// Receives one message of exactly bytes; the descriptor that came with it, or -1.
inline int receive_message(int sock, void* data, std::size_t bytes) {
  iovec iov{data, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  INFO("recvmsg: " << (n < 0 ? std::strerror(errno) : "the peer closed or sent another size"));
  REQUIRE(n == static_cast<ssize_t>(bytes));
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

template <class T>
void send_value(int sock, const T& value, int fd = -1) {
  send_message(sock, &value, sizeof value, fd);
}

template <class T>
T receive_value(int sock, int* fd = nullptr) {
  T value{};
  const int got = receive_message(sock, &value, sizeof value);
  if (fd != nullptr) {
    *fd = got;
  } else if (got >= 0) {
    close(got);
  }
  return value;
}

}  // namespace cuscope::test
