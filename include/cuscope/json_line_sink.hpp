// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief json_line_sink: every session's report as one line of JSON, to a file, a C stream, a
/// std::ostream or a callback, for a log shipper or a metrics exporter.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "detail/callback.hpp"
#include "error.hpp"
#include "memory_pool.hpp"  // detail::env_prefix
#include "session.hpp"

namespace cuscope {

/// @brief A report_sink that writes each report it is given as one line: to_json(report) and a
/// newline (JSON Lines). Give it to session_options::report_to of a service's top session and
/// every session nested in it writes its line as it ends.
///
/// Lines of sessions that end together on several threads never interleave: each line is built
/// first, then written and flushed whole under the sink's lock, so a reader (tail -f, a log
/// shipper) sees whole lines only. A write that fails throws std::runtime_error naming the target
/// and the session; a session's end passes it to the cleanup handler and goes on.
/// Not copyable or movable; it must outlive the sessions that write to it.
class json_line_sink final : public report_sink {
 public:
  /// @brief Writes to stream (stderr, stdout, or a FILE the caller closes after the sink is
  /// gone); each line is flushed.
  /// @throws std::invalid_argument when stream is null.
  explicit json_line_sink(std::FILE* stream)
      : file_(stream),
        target_(stream == stderr   ? "stderr"
                : stream == stdout ? "stdout"
                                   : "a FILE stream") {
    if (stream == nullptr)
      throw std::invalid_argument("cuscope::json_line_sink: the FILE stream is null");
  }

  /// @brief Writes to os, which must outlive the sink; each line is flushed.
  explicit json_line_sink(std::ostream& os) : os_(&os), target_("a std::ostream") {}

  /// @brief Hands each line, without its newline, to write_line (a copyable callable taking the
  /// line as a const std::string&: a function, a lambda, a std::function), one line at a time
  /// (under the sink's lock: write_line need not be thread-safe).
  /// @throws std::invalid_argument when write_line is empty (a null function pointer, an empty
  /// std::function).
  template <class WriteLine, std::enable_if_t<std::is_invocable_v<WriteLine&, const std::string&> &&
                                                  std::is_copy_constructible_v<WriteLine>,
                                              int> = 0>
  explicit json_line_sink(WriteLine write_line) : target_("a callback") {
    // A null function pointer; an empty std::function (or other callable with an explicit
    // operator bool). A lambda converts to bool only through a function pointer, never null.
    bool empty = false;
    if constexpr (std::is_pointer_v<WriteLine>)
      empty = write_line == nullptr;
    else if constexpr (std::is_constructible_v<bool, const WriteLine&> &&
                       !std::is_convertible_v<const WriteLine&, bool>)
      empty = !static_cast<bool>(write_line);
    if (empty) throw std::invalid_argument("cuscope::json_line_sink: the line callback is empty");
    write_line_ = std::move(write_line);
  }

  /// @brief A sink that appends to the file at path, creating it when missing, and closes it when
  /// destroyed. Each line is flushed as it is written.
  /// @throws std::runtime_error naming path and the reason when it cannot be opened.
  [[nodiscard]] static std::unique_ptr<json_line_sink> append_to(const std::string& path) {
    if (path.empty())
      throw std::invalid_argument("cuscope::json_line_sink::append_to: the path is empty");
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) {
      const int e = errno;
      throw std::runtime_error("cuscope::json_line_sink: cannot open '" + path +
                               "' to append reports: " + std::strerror(e));
    }
    try {
      return std::unique_ptr<json_line_sink>(new json_line_sink(f, "file '" + path + "'"));
    } catch (...) {
      (void)std::fclose(f);
      throw;
    }
  }

  /// @brief The sink the variable CUSCOPE_<NAME>_REPORT names (NAME: name in upper case, as for
  /// pool_options::from_env): "stderr", "stdout", or the path of a file to append to; nullptr when
  /// the variable is not set. Nothing is read unless this is called.
  /// @throws std::invalid_argument naming the variable when its value is empty, or when name is
  /// empty or holds other characters than letters, digits and '_'; std::runtime_error naming the
  /// variable and the file when the file cannot be opened.
  [[nodiscard]] static std::unique_ptr<json_line_sink> from_env(const std::string& name) {
    const char* who = "cuscope::json_line_sink::from_env";
    const std::string variable = detail::env_prefix(name, who) + "REPORT";
    const char* text = std::getenv(variable.c_str());
    if (text == nullptr) return nullptr;
    const std::string value = text;
    if (value == "stderr") return std::make_unique<json_line_sink>(stderr);
    if (value == "stdout") return std::make_unique<json_line_sink>(stdout);
    if (value.empty())
      throw std::invalid_argument(std::string(who) + ": " + variable +
                                  "=\"\" is not \"stderr\", \"stdout\" or the path of a file");
    try {
      return append_to(value);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (from " + variable + ")");
    }
  }

  json_line_sink(const json_line_sink&) = delete;
  json_line_sink& operator=(const json_line_sink&) = delete;

  /// @brief Closes the file that append_to opened; a failure to close (data not written) goes to
  /// the cleanup handler.
  ~json_line_sink() override {
    if (owned_ && std::fclose(file_) != 0)
      detail::report_cleanup("fclose", "cuscope::json_line_sink", this, cudaSuccess,
                             std::strerror(errno), __FILE__, __LINE__);
  }

  /// @brief Writes report as one line and flushes it. Thread-safe.
  /// @throws std::runtime_error naming the target and the session when the write or the flush
  /// fails; whatever the callback throws.
  void write(const session_report& report) override {
    std::string line = to_json(report);
    const std::lock_guard<std::mutex> lock(mutex_);
    if (write_line_) {
      try {
        write_line_(line);
      } catch (...) {
        failures_.fetch_add(1, std::memory_order_relaxed);
        throw;
      }
      lines_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    line += '\n';
    int error = 0;
    if (file_ != nullptr) {
      errno = 0;
      if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() ||
          std::fflush(file_) != 0) {
        error = errno != 0 ? errno : EIO;
        std::clearerr(file_);
      }
    } else {
      os_->write(line.data(), static_cast<std::streamsize>(line.size()));
      os_->flush();
      if (!*os_) {
        error = EIO;
        os_->clear();  // a later line may succeed
      }
    }
    if (error == 0) {
      lines_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    failures_.fetch_add(1, std::memory_order_relaxed);
    throw std::runtime_error("cuscope::json_line_sink (" + target_ +
                             "): writing the report of session '" + report.name +
                             "' failed: " + std::strerror(error));
  }

  /// @brief Lines written whole.
  [[nodiscard]] std::size_t lines() const noexcept {
    return lines_.load(std::memory_order_relaxed);
  }
  /// @brief Writes that failed.
  [[nodiscard]] std::size_t failures() const noexcept {
    return failures_.load(std::memory_order_relaxed);
  }
  /// @brief What the sink writes to: "stderr", "stdout", "file '/var/log/gpu.jsonl'", "a FILE
  /// stream", "a std::ostream", "a callback".
  [[nodiscard]] const std::string& target() const noexcept { return target_; }

 private:
  json_line_sink(std::FILE* owned, std::string target)
      : file_(owned), owned_(true), target_(std::move(target)) {}

  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  std::ostream* os_ = nullptr;
  detail::callback<void(const std::string&)> write_line_;
  std::string target_;
  std::atomic<std::size_t> lines_{0};
  std::atomic<std::size_t> failures_{0};
};

}  // namespace cuscope
