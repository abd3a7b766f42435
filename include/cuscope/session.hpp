// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief session: a scope guard around a piece of work (an epoch, a request, a test) that at its
/// end synchronizes, checks for leaks, trims the pool back and reports what went back.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/callback.hpp"
#include "detail/config.hpp"
#include "detail/format.hpp"
#include "detail/ledger_fwd.hpp"
#if CUSCOPE_DETAIL_HOST_CODE  // for the definitions below
#  include "detail/ledger.hpp"
#  include "detail/nvml.hpp"  // admission: what this process holds as nvidia-smi counts it
#endif
#include "device.hpp"
#include "device_allocation.hpp"
#include "device_buffer.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "memory_pool.hpp"
#include "nvtx.hpp"
#include "recorder.hpp"
#include "stream.hpp"

namespace cuscope {

/// @brief What a session does when allocations it made are still live at its end.
enum class leak_policy {
  ignore,           ///< Nothing; the report still counts them.
  report,           ///< Hand the report to session_options::leak_sink (stderr by default).
  throw_exception,  ///< finish() throws session_leak_error (the destructor reports instead).
  abort,            ///< Print the report to stderr and call std::abort().
};

/// @brief An allocation counted by a session and still live at its end.
struct leaked_allocation {
  std::size_t bytes = 0;          ///< Its size.
  const void* pointer = nullptr;  ///< Its device address.
  cudaStream_t stream = nullptr;  ///< The stream it is freed on.
  std::string tag;                ///< The tag given to make_buffer or allocate; empty for none.
  std::string file;               ///< The file of the call that made it; empty when unknown.
  unsigned line = 0;              ///< Its line.
  std::string session;            ///< The session it was charged to (this one or a nested one).
};

/// @brief What a session measured, from its construction to its end.
struct session_report {
  /// @brief The version of to_json()'s layout; fields are added, never renamed, within a version.
  static constexpr int json_version = 1;

  std::string name;                            ///< session_options::name.
  int device = 0;                              ///< The pool's device.
  double seconds = 0;                          ///< Wall time.
  std::size_t reserved_at_entry_bytes = 0;     ///< Pool reserve when the session began.
  std::size_t reserved_at_finish_bytes = 0;    ///< Pool reserve when finish() began.
  std::size_t reserved_at_exit_bytes = 0;      ///< Pool reserve after the trim.
  std::size_t used_at_entry_bytes = 0;         ///< Pool memory in use when the session began.
  std::size_t used_at_exit_bytes = 0;          ///< Pool memory in use at the end.
  std::size_t peak_used_bytes = 0;             ///< Peak pool memory in use during the session.
  std::size_t peak_reserved_bytes = 0;         ///< Peak pool reserve during the session.
  std::size_t returned_bytes = 0;              ///< Reserve given back to the driver at the end.
  std::size_t driver_free_at_entry_bytes = 0;  ///< Device free memory (cudaMemGetInfo) at entry.
  std::size_t driver_free_at_exit_bytes = 0;   ///< Device free memory at the end.
  std::size_t driver_total_bytes = 0;          ///< Device memory.
  std::size_t tracked_peak_bytes = 0;          ///< Peak of live bytes made by make_buffer.
  /// @brief Whether tracked_peak_bytes is an upper bound rather than the peak: allocations were
  /// counted on several threads and no budget (here or above) counted them together, so it is
  /// the sum of each thread's own peak.
  bool tracked_peak_upper_bound = false;
  /// @brief Allocations counted by the session live at the end. Read with leaked_bytes as one
  /// state while other threads allocate and free (each operation in both figures or in neither).
  std::size_t leaked_allocations = 0;
  std::size_t leaked_bytes = 0;  ///< Their bytes.
  // Counters, from the session's start to its end, of what was allocated through it and through
  // the sessions nested in it (make_buffer, allocate, adaptors, batches).
  std::size_t allocations = 0;      ///< Allocations made.
  std::size_t frees = 0;            ///< Of them, those freed (not released, not leaked).
  std::size_t budget_refusals = 0;  ///< Requests a budget refused (out_of_memory, cudaSuccess).
  /// @brief Requests the pool refused: out_of_memory from CUDA, after any retry.
  std::size_t pool_refusals = 0;
  /// @brief Times the pool tried a request again after it failed: after a trim
  /// (alloc_policy::retry_after_trim) or for an out-of-memory handler that made room.
  std::size_t retries = 0;
  /// @brief Pool memory in use at the end beyond what was in use at entry that no allocation
  /// counted by the session (or by the sessions it is nested in, or nested in it) accounts for: a
  /// raw pool.allocate, another library allocating from the pool, or another session on it. The
  /// pool's rounding of the counted allocations still live (each taken as rounded up to a multiple
  /// of 512 bytes) is theirs, not untracked.
  std::size_t untracked_bytes = 0;
  /// @brief Whether untracked_bytes counts as a leak of this session: it is not 0,
  /// session_options::untracked_leaks is on, and no other session nested in the same parent ran
  /// beside this one (whose raw allocations it could not tell from its own).
  bool untracked_leak = false;
  /// @brief The allocations counted by the session (and those nested in it) still live at its end,
  /// largest first.
  std::vector<leaked_allocation> leaks;
  bool trimmed = false;  ///< Whether the pool was trimmed.
  /// @brief Whether the trim was left to the last of the sessions nested in the same parent that
  /// were open at this one's end (they may reuse the pool's cache).
  bool trim_deferred = false;
  /// @brief Whether other sessions nested in the same parent ran beside this one: the pool's
  /// figures (peaks, reserve, used, returned, device free) then include their memory, while
  /// tracked_peak_bytes, leaks and the budget are this session's own.
  bool concurrent = false;
  /// @brief Whether the end synchronized the whole device rather than the session's streams: asked
  /// for (session_options::synchronize_device), or memory was handed out on a stream the session
  /// was not given.
  bool synchronized_device = false;
  std::size_t graph_used_bytes = 0;      ///< Device graph memory mapped at the end.
  std::size_t graph_reserved_bytes = 0;  ///< Device graph memory reserved at the end.
  std::size_t graph_returned_bytes = 0;  ///< Graph memory given back by the end's graph trim.
  bool graph_trimmed = false;            ///< Whether the device's graph memory was trimmed.
  bool unwinding = false;  ///< Whether the session ended while an exception unwound the stack.
  /// @brief What session_options::admission asked to be available at entry; 0 when it asked
  /// nothing.
  std::size_t admission_required_bytes = 0;
  /// @brief What was available at entry, as the admission counted it (after its trim, if any);
  /// 0 when it asked nothing.
  std::size_t admission_available_bytes = 0;
  /// @brief Whether the admission trimmed the pool to make room (admission_policy::trim_and_retry).
  bool admission_trimmed = false;
  /// @brief Reserve that the admission's synchronization and trim gave back to the driver: from
  /// the session's pool, each pool of admission_options::also_trim and graph memory.
  std::size_t admission_returned_bytes = 0;
  /// @brief The device's free memory (cudaMemGetInfo) when the admission counted, after its trim
  /// if any; 0 when it asked nothing.
  std::size_t admission_free_bytes = 0;
  /// @brief The part of admission_available_bytes that is the pool's unused reserve: all of it on
  /// a first count (the pool serves from it, but CUDA does not say whether one block of it can
  /// hold a given allocation), none after the admission's trim (what a trim leaves unused lies
  /// between live allocations) or under admission_options::count_cache off.
  std::size_t admission_cached_bytes = 0;
  /// @brief Graph memory reserved on the device when the admission counted.
  std::size_t admission_graph_reserved_bytes = 0;
  /// @brief What this process holds on the device as NVML (nvidia-smi) counts it when the
  /// admission counted; empty when NVML was not asked or did not answer (admission_nvml says).
  std::optional<std::size_t> admission_process_bytes;
  /// @brief What other processes hold on the device then: the memory the driver counts as taken
  /// that NVML does not count as this process's; empty without admission_process_bytes.
  std::optional<std::size_t> admission_other_processes_bytes;
  /// @brief Whether this is the report of a session that its admission refused
  /// (admission_error::report()): it never began, and only its name, device, driver_total_bytes
  /// and admission figures are set.
  bool admission_refused = false;
  /// @brief Where admission_process_bytes came from ("libnvidia-ml.so.1"), or why there is none
  /// ("unavailable: ...", "not asked (admission_options::query_nvml)"); empty when the admission
  /// asked nothing.
  std::string admission_nvml;
  /// @brief The figures that a failed step of the end left unknown, by member name
  /// ("reserved_at_exit_bytes"); they read 0. Empty when every figure was measured.
  std::vector<std::string> unknown;
  /// @brief One message per step of the end that failed (naming the step and the CUDA call);
  /// empty when none did.
  std::vector<std::string> errors;

  /// @brief True when allocations made through the session outlived it, or memory of the pool
  /// it cannot account for did (untracked_leak).
  [[nodiscard]] bool leaked() const noexcept { return leaked_allocations != 0 || untracked_leak; }
  /// @brief True when every step of the end succeeded: every figure was measured.
  [[nodiscard]] bool complete() const noexcept { return errors.empty(); }
  /// @brief Whether figure (a member name, "driver_free_at_exit_bytes") was measured.
  [[nodiscard]] bool known(const std::string& figure) const {
    for (const std::string& u : unknown)
      if (u == figure) return false;
    return true;
  }

  /// @brief A few readable lines with human units; an unknown figure reads "unknown".
  [[nodiscard]] std::string to_string() const;
};

/// @brief The report as one JSON object: {"version": session_report::json_version, and every
/// field of session_report under its own name, "leaks" an array of objects with the fields of
/// leaked_allocation}. Pointers and streams are strings ("0x7f12a4000000"); docs/concepts.md lists
/// the fields.
[[nodiscard]] std::string to_json(const session_report& r);

/// @brief Thrown by session::finish() under leak_policy::throw_exception.
class session_leak_error : public std::runtime_error {
 public:
  /// @brief An error carrying the session's report.
  explicit session_leak_error(session_report report)
      : std::runtime_error("cuscope: " + report.to_string()), report_(std::move(report)) {}
  /// @brief The report of the leaking session.
  [[nodiscard]] const session_report& report() const noexcept { return report_; }

 private:
  session_report report_;
};

/// @brief Thrown when a session begins and the memory that session_options::admission asks for is
/// not available. Its message names the session, what was asked, what was available, the shortfall
/// and who holds the device's memory: the pool (in use, cached, limit), graph memory, this process
/// and other processes as NVML counts them (or NVML's absence, and the rest of the taken memory).
class admission_error : public out_of_memory {
 public:
  /// @brief An error for a session that asked for required bytes and found available.
  admission_error(std::size_t required, std::size_t available, const std::string& message)
      : out_of_memory(required, message, cudaSuccess), available_(available) {}
  /// @brief As above, with the refused session's report: its name, device and admission_* figures
  /// (the others read 0, since it never began).
  admission_error(std::size_t required, std::size_t available, const std::string& message,
                  session_report report)
      : out_of_memory(required, message, cudaSuccess),
        available_(available),
        report_(std::move(report)) {}
  /// @brief What was available at entry (after the trim, under trim_and_retry).
  [[nodiscard]] std::size_t available_bytes() const noexcept { return available_; }
  /// @brief requested_bytes() - available_bytes().
  [[nodiscard]] std::size_t shortfall_bytes() const noexcept {
    return requested_bytes() - available_;
  }
  /// @brief The refused session's admission figures (session_report's admission_* fields), for a
  /// service's log line; empty figures when the error was made without them.
  [[nodiscard]] const session_report& report() const noexcept { return report_; }

 private:
  std::size_t available_;
  session_report report_;
};

/// @brief What a session does when the memory its admission asks for is not available.
enum class admission_policy {
  refuse,          ///< Throw admission_error at once.
  trim_and_retry,  ///< Synchronize the device, trim the pools, check once more, then refuse.
};

/// @brief When an admission asks NVML, the library behind nvidia-smi, what this process holds on
/// the device, to tell its memory from other processes'. NVML is loaded and initialized once per
/// process, at the first query (milliseconds on a GPU machine); each query after that is two
/// NVML calls (docs/observability.md).
enum class nvml_query {
  never,       ///< Not at all.
  on_refusal,  ///< To explain a refusal (admission_error's message and report).
  always,      ///< At every admission, for the session's report as well.
};

/// @brief Memory that must be available to a session when it begins (session_options::admission):
/// the largest of bytes, device_fraction of the device's memory and pool_fraction of the pool's
/// limit. Available means what the pool can hand out without waiting: the device's free memory
/// (cudaMemGetInfo, as nvidia-smi counts it) and, under count_cache, the pool's unused reserve,
/// no more than its limit leaves. docs/services.md, "Admission".
struct admission_options {
  /// @brief Bytes that must be available; 0 for none.
  std::size_t bytes = 0;
  /// @brief A fraction in [0, 1] of the device's total memory that must be available; 0 for none.
  double device_fraction = 0;
  /// @brief A fraction in [0, 1] of the pool's limit (memory_pool_ref::max_bytes()) that must be
  /// available; 0 for none. Needs a pool with a limit.
  double pool_fraction = 0;
  /// @brief What to do when it is not available.
  admission_policy on_shortfall = admission_policy::refuse;
  /// @brief More pools whose unused reserve trim_and_retry gives back too (other caches of the
  /// service); they must outlive the session's constructor.
  std::vector<memory_pool_ref> also_trim;
  /// @brief Whether the pool's unused reserve counts as available before any trim. The pool serves
  /// allocations from it, but CUDA does not tell its largest free block: an allocation larger
  /// than every block (after fragmentation) needs the device's free memory instead. Off, only
  /// what the driver has free counts, and trim_and_retry first hands the cache back to the driver,
  /// where any allocation can use it. What a trim leaves unused is never counted: it lies between
  /// live allocations.
  bool count_cache = true;
  /// @brief When to ask NVML what this process holds (session_report::admission_process_bytes).
  nvml_query query_nvml = nvml_query::on_refusal;
};

/// @brief Where sessions hand their reports as they end (session_options::report_to).
/// json_line_sink (<cuscope/json_line_sink.hpp>) writes each as one JSON line to a file, a stream
/// or a callback; other sinks derive from report_sink.
class report_sink {
 public:
  virtual ~report_sink() = default;
  /// @brief Takes the report of a session that has just ended, complete or not. Called on the
  /// thread that ends the session, from several threads at once when sessions end together. What
  /// it throws goes to the cleanup handler (error.hpp), never out of the session's end.
  virtual void write(const session_report& report) = 0;

 protected:
  report_sink() = default;
  report_sink(const report_sink&) = default;
  report_sink& operator=(const report_sink&) = default;
};

/// @brief How a session behaves.
struct session_options {
  /// @brief Shown in reports and messages ("epoch 3").
  std::string name;
  /// @brief What to do when make_buffer allocations outlive the session.
  leak_policy on_leak = leak_policy::report;
  /// @brief Receives the report of a leaking session under leak_policy::report (and from the
  /// destructor under throw_exception); stderr when empty.
  detail::callback<void(const session_report&)> leak_sink;
  /// @brief Receives every session's report when it ends, before the leak policy applies (to log
  /// each epoch, for instance).
  detail::callback<void(const session_report&)> on_finish;
  /// @brief Memory that must be available when the session begins, or its constructor throws
  /// admission_error (after trimming the pools and checking once more, under
  /// admission_policy::trim_and_retry). Asks nothing by default.
  admission_options admission;
  /// @brief Receives the session's report when it ends, also when a step of the end failed
  /// (before on_finish and the leak policy); by default the parent's, so that a service names it
  /// once, on its top session. It must outlive the session and those nested in it.
  report_sink* report_to = nullptr;
  /// @brief Whether the end trims the pool.
  bool trim = true;
  /// @brief Reserve to keep when trimming; by default what the pool held at entry.
  std::optional<std::size_t> keep_bytes;
  /// @brief Release threshold for the pool during the session, restored at the end.
  std::optional<std::size_t> release_threshold_bytes;
  /// @brief Limit on the live bytes of make_buffer allocations (and of those of nested sessions);
  /// 0 for none. A request beyond it throws out_of_memory before CUDA is asked.
  std::size_t budget_bytes = 0;
  /// @brief What make_buffer does when the pool cannot serve it: by default throw at once;
  /// alloc_policy::retry_after_trim synchronizes the device, trims the pool and tries once more.
  alloc_policy on_pool_full = alloc_policy::fail_fast;
  /// @brief More streams to synchronize at the end, besides the session's own. They must outlive
  /// the session. Memory handed out (make_buffer(stream, n)) or moved (set_stream, resize) onto a
  /// stream that is neither the session's nor listed here makes the end synchronize the device
  /// instead, since such a stream may be gone by then.
  std::vector<stream_ref> streams;
  /// @brief Synchronize the whole device at the end instead of the streams.
  bool synchronize_device = false;
  /// @brief Also give the device's unused graph memory back at the end, after the
  /// synchronization (cudaDeviceGraphMemTrim): what graphs captured in the session allocated,
  /// which no pool trim touches. Graphs of other code on the device lose their cached memory too.
  bool trim_graph_memory = false;
  /// @brief Records the session (its beginning and end, synchronizations, trims and the
  /// allocations of make_buffer under its id) into this recorder; by default the parent's, or the
  /// pool's attached recorder. It must outlive the session.
  recorder* record_into = nullptr;
  /// @brief Start the pool's peak statistics afresh at entry, so the report's peaks are the
  /// session's own (a nested session passes the earlier peaks on to its parent).
  bool reset_peaks = true;
  /// @brief Count pool memory still in use at the end that was not allocated through the session
  /// (session_report::untracked_bytes) as a leak. A session cannot tell its own raw allocations
  /// from those of other code using the pool at the same time: it counts them only when no other
  /// session nested in the same parent ran beside it, and a top-level session on a pool that other
  /// code uses meanwhile should turn this off.
  bool untracked_leaks = true;
  /// @brief Where the values came from, for logs and reports; from_env() fills it.
  std::string origin;

  /// @brief defaults, with the values that CUSCOPE_<NAME>_* environment variables set (NAME is
  /// name in upper case, as for pool_options::from_env): TRIM (on or off), KEEP_BYTES,
  /// BUDGET_BYTES, ADMIT_BYTES (each a byte count or a fraction of the device's memory; a
  /// fraction in ADMIT_BYTES becomes admission.device_fraction) and ADMISSION (refuse or
  /// trim_and_retry). Nothing else reads the environment. origin says which value came from where.
  /// docs/services.md, "Trim policy, budget and admission from the environment".
  /// @param device the device whose memory a fraction of KEEP_BYTES or BUDGET_BYTES is of; -1 for
  /// the current one.
  /// @throws std::invalid_argument naming the variable for a malformed value or a bad name;
  /// cuda_error when a fraction needs the device's memory and CUDA cannot tell it.
  [[nodiscard]] static session_options from_env(const std::string& name, session_options defaults,
                                                int device = -1);
  /// @brief from_env(name, session_options{}).
  [[nodiscard]] static session_options from_env(const std::string& name);
};

/// @brief A scope guard over a pool and a stream around a piece of work.
///
/// At construction it records the pool's statistics and the device's free memory. make_buffer
/// allocates on the session's stream and pool and counts the allocation. finish() (or the
/// destructor, also when an exception unwinds through the scope) synchronizes every stream the
/// session handed memory out on (the device, when one of them was not given to it), counts what
/// was not freed, restores the release threshold it changed, trims the pool back to its reserve
/// at entry, and returns a session_report.
///
/// Sessions nest: session(parent, options) works on the parent's pool and stream, counts its
/// allocations and budget against the parent's as well, and passes its peaks on to it. A nested
/// session must end before its parent does, as scopes do: finish() on a parent with a nested
/// session open throws std::logic_error naming both; a parent destroyed first reports the misuse
/// to the cleanup handler and ends, and the nested session goes on counting against its parent's
/// budget without touching the destroyed object.
/// Not copyable or movable; use it from one thread (make_buffer may be called from several).
class session {
 public:
  /// @brief Begins a session on pool and stream.
  /// @throws cuda_error when the pool's statistics cannot be read.
  session(memory_pool_ref pool, stream_ref stream, session_options options = {})
      : session(nullptr, pool, stream, std::move(options)) {}

  /// @brief Begins a session named name, with the other options at their defaults.
  session(memory_pool_ref pool, stream_ref stream, std::string name)
      : session(nullptr, pool, stream, named(std::move(name))) {}

  /// @brief Begins a session nested in parent, on its pool and stream.
  /// @throws std::logic_error when parent has finished.
  explicit session(session& parent, session_options options = {})
      : session(&parent, parent.pool_, parent.stream_, std::move(options)) {}

  /// @brief Begins a session named name nested in parent.
  session(session& parent, std::string name)
      : session(&parent, parent.pool_, parent.stream_, named(std::move(name))) {}

  /// @brief Begins a session nested in parent, on its pool and on stream: one request of a
  /// service, for instance, made on any thread while other nested sessions run.
  session(session& parent, stream_ref stream, session_options options = {})
      : session(&parent, parent.pool_, stream, std::move(options)) {}

  /// @brief Begins a session named name nested in parent, on its pool and on stream.
  session(session& parent, stream_ref stream, std::string name)
      : session(&parent, parent.pool_, stream, named(std::move(name))) {}

  session(const session&) = delete;
  session& operator=(const session&) = delete;
  session(session&&) = delete;
  session& operator=(session&&) = delete;

  /// @brief Ends the session if finish() was not called; never throws (under throw_exception a
  /// leak is reported to the sink instead).
  ~session();

  /// @brief count uninitialized elements from the session's pool on its stream, counted by the
  /// session (and its parents). Enqueued; does not synchronize.
  /// @throws std::logic_error after finish(); out_of_memory when a budget or the pool refuses.
  /// @param tag names the buffer in the leak report: a string that outlives the buffer (a
  /// literal); nullptr for none.
  /// @param site where the call was made, for the leak report (the caller's file and line by
  /// default).
  template <class T>
  [[nodiscard]] device_buffer<T> make_buffer(std::size_t count, const char* tag = nullptr,
                                             call_site site = call_site::current()) {
    return make_buffer<T>(stream_, count, tag, site);
  }

  /// @brief As make_buffer(count), on another stream. The session's end synchronizes it when it
  /// is listed in session_options::streams, and the whole device otherwise.
  template <class T>
  [[nodiscard]] device_buffer<T> make_buffer(stream_ref stream, std::size_t count,
                                             const char* tag = nullptr,
                                             call_site site = call_site::current()) {
    if (finished_)
      throw std::logic_error("cuscope::session '" + options_.name +
                             "': make_buffer after the session finished");
    return device_buffer<T>(stream, count, pool_, ledger_, tag, site, options_.on_pool_full);
  }

  /// @brief bytes from the session's pool, usable in stream order on stream, counted by the
  /// session (its budget, its leak check) like make_buffer. Return them with deallocate().
  /// Enqueued on stream; does not synchronize. Returns nullptr for 0 bytes.
  /// @throws std::logic_error after finish(); out_of_memory when a budget or the pool refuses.
  [[nodiscard]] void* allocate(stream_ref stream, std::size_t bytes, const char* tag = nullptr,
                               call_site site = call_site::current()) {
    if (finished_)
      throw std::logic_error("cuscope::session '" + options_.name +
                             "': allocate after the session finished");
    if (bytes == 0) return nullptr;
    return allocate_counted(stream.get(), bytes, tag, site);
  }

  /// @brief Frees ptr, bytes from allocate(), in stream order on stream, and stops counting it.
  /// Enqueued on stream; does not synchronize.
  /// @throws std::logic_error, freeing nothing, when ptr is not live memory from this session's
  /// allocate() (deallocated twice, or from elsewhere); cuda_error when CUDA refuses the free
  /// (the allocation is then still counted).
  void deallocate(stream_ref stream, void* ptr, std::size_t bytes);

  /// @brief Ends the session: synchronizes, counts leaks, restores the release threshold, trims,
  /// applies the leak policy. A second call does nothing and returns the same report.
  /// @throws std::logic_error, doing nothing, while a nested session is open; cuda_error when
  /// synchronizing or trimming fails (after doing the rest); session_leak_error under
  /// leak_policy::throw_exception.
  const session_report& finish();

  /// @brief Whether the session has ended.
  [[nodiscard]] bool finished() const noexcept { return finished_; }
  /// @brief The session's pool.
  [[nodiscard]] memory_pool_ref pool() const noexcept { return pool_; }
  /// @brief The session's stream.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
  /// @brief session_options::name.
  [[nodiscard]] const std::string& name() const noexcept { return options_.name; }
  /// @brief make_buffer allocations (this session's and nested ones') still live.
  [[nodiscard]] std::size_t live_allocations() const noexcept;
  /// @brief Their bytes.
  [[nodiscard]] std::size_t live_bytes() const noexcept;
  /// @brief The report; complete once finished() is true.
  [[nodiscard]] const session_report& report() const noexcept { return report_; }

 private:
  friend struct detail::accounting_access;

  session(session* parent, memory_pool_ref pool, stream_ref stream, session_options options);

  // The accounting behind the session, for the adaptors that count for it
  // (thrust_allocator(session), pool_resource(session), batches(session, ...)).
  detail::ledger* accounting() const noexcept { return ledger_; }

  void begin(session* parent);

  // What the pool could hand out now without waiting, and who holds the device's memory.
  struct admission_reading {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    std::size_t reserved_bytes = 0;
    std::size_t used_bytes = 0;
    std::size_t limit_bytes = 0;  // 0: none
    std::size_t graph_reserved_bytes = 0;
    bool count_cache = true;  // false after a trim: its leftovers lie between live allocations

    [[nodiscard]] std::size_t cached() const noexcept {
      return count_cache && reserved_bytes > used_bytes ? reserved_bytes - used_bytes : 0;
    }
    [[nodiscard]] std::size_t available() const noexcept {
      std::size_t grow = free_bytes;
      if (limit_bytes != 0) {
        const std::size_t room = limit_bytes > reserved_bytes ? limit_bytes - reserved_bytes : 0;
        if (room < grow) grow = room;
      }
      return grow + cached();
    }
  };

  CUSCOPE_DETAIL_COLD inline admission_reading read_admission(const std::string& who,
                                                              bool count_cache);

  // Asks NVML what this process holds on the pool's device (session_report::admission_*).
  CUSCOPE_DETAIL_COLD inline void read_nvml(const admission_reading& r);

  // Checks session_options::admission; may trim the pools once. Throws admission_error.
  CUSCOPE_DETAIL_COLD inline void admit();

  static session_options named(std::string name);

  void observe(std::size_t used_peak, std::size_t reserved_peak) noexcept;

  void read_driver(std::size_t& free_bytes);

  void refuse_in_capture() const;

  void read_graph_memory(bool trim);

  // Whether the session's recorder is the pool's, which records the pool's operations itself.
  bool records_pool() const noexcept { return pool_.attached_recorder() == recorder_; }

  // allocate() of bytes (not 0), out of line: six arguments, all in registers.
  void* allocate_counted(cudaStream_t stream, std::size_t bytes, const char* tag, call_site site);
  // deallocate()'s cases off its path: nullptr (nothing to do) or another pointer the session
  // does not know (throws), a default stream (status cudaSuccess: not tried yet) or a failed free
  // (status).
  void deallocate_unknown(const void* ptr, std::size_t bytes) const;
  void deallocate_slow(cudaStream_t stream, void* ptr, std::size_t bytes,
                       detail::ledger_record& record, cudaError_t status);

  // Trims the pool down to keep bytes, recorded into this session's recorder where the pool
  // does not record into it already.
  void trim_recorded(std::size_t keep);

  void restore_threshold_nothrow() noexcept;

  void synchronize();

  const session_report& finish_impl(bool may_throw);

  // Pool memory in use beyond entry, less what the sessions of this tree allocated meanwhile and
  // still hold. Another session nested in the same parent may allocate raw memory too: then the
  // figure is reported but not counted as this session's leak.
  void account_untracked();

  void name_leaks();

  // An unknown figure reads 0 rather than a partial value (the peak of the readings that worked).
  void clear_figure(const std::string& f) noexcept;

  void on_leak(bool may_throw);

  memory_pool_ref pool_;
  stream_ref stream_;
  session_options options_;
  detail::ledger* ledger_ = nullptr;  // until the destructor; leaked buffers keep it longer
  std::optional<std::size_t> saved_threshold_;
  std::chrono::steady_clock::time_point start_;
  int exceptions_at_entry_ = 0;
  recorder* recorder_ = nullptr;  // session_options::record_into, the parent's or the pool's
  std::uint32_t scope_ = 0;
  std::size_t tracked_at_entry_ = 0;
  std::pair<std::size_t, std::size_t> siblings_at_entry_{1, 0};
  std::size_t open_at_entry_ = 0;  // nested sessions of the parent open, this one included
  nvtx_range nvtx_;
  bool finished_ = false;
  session_report report_;
};

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

inline std::string session_report::to_string() const {
  using detail::format_bytes;
  const auto figure = [&](const char* member, std::size_t bytes) {
    return known(member) ? format_bytes(bytes) : std::string("unknown");
  };
  std::string admission;  // what the admission asked and found
  if (admission_required_bytes != 0) {
    admission = std::string(admission_refused ? "  REFUSED: " : "  admitted: ") +
                format_bytes(admission_required_bytes) + " asked, " +
                format_bytes(admission_available_bytes) + " available at entry (" +
                format_bytes(admission_free_bytes) + " free on the device";
    if (admission_cached_bytes != 0)
      admission += " and " + format_bytes(admission_cached_bytes) + " cached in the pool";
    admission += ")";
    if (admission_trimmed)
      admission += " after a trim that returned " + format_bytes(admission_returned_bytes);
    if (admission_process_bytes)
      admission += "; this process holds " + format_bytes(*admission_process_bytes) +
                   ", other processes " +
                   format_bytes(admission_other_processes_bytes.value_or(0)) +
                   " (NVML: " + admission_nvml + ")";
    else
      admission += "; NVML " + admission_nvml;
    admission += "\n";
  }
  const std::string who = "session '" + (name.empty() ? std::string("unnamed") : name) +
                          "' on device " + std::to_string(device);
  if (admission_refused) return who + ", refused by its admission\n" + admission;
  char time[32];
  std::snprintf(time, sizeof time, "%.3f s", seconds);
  std::string s = who + ", " + time + (unwinding ? " (ended by an exception)" : "") + "\n";
  s += "  peak in use " + figure("peak_used_bytes", peak_used_bytes) + ", peak reserved " +
       figure("peak_reserved_bytes", peak_reserved_bytes) +
       (concurrent ? " (of the pool, shared)" : "") + "; its own allocations peaked at " +
       (tracked_peak_upper_bound ? "at most " : "") + format_bytes(tracked_peak_bytes) + "\n";
  s += "  " + std::to_string(allocations) + " allocation" + (allocations == 1 ? "" : "s") + ", " +
       std::to_string(frees) + " freed";
  if (budget_refusals + pool_refusals + retries != 0)
    s += "; refused: " + std::to_string(budget_refusals) + " by a budget, " +
         std::to_string(pool_refusals) + " by the pool; " + std::to_string(retries) + " retried";
  s += "\n";
  s += "  returned to the driver " + figure("returned_bytes", returned_bytes) + " (reserve " +
       figure("reserved_at_finish_bytes", reserved_at_finish_bytes) + " -> " +
       figure("reserved_at_exit_bytes", reserved_at_exit_bytes) +
       (trimmed         ? ", trimmed"
        : trim_deferred ? ", trim left to the last session open"
                        : ", not trimmed") +
       "; " + format_bytes(reserved_at_entry_bytes) + " at entry" +
       (synchronized_device ? "; synchronized the device" : "") + ")\n";
  s += "  device free " + format_bytes(driver_free_at_entry_bytes) + " at entry, " +
       figure("driver_free_at_exit_bytes", driver_free_at_exit_bytes) + " at exit";
  if (known("driver_free_at_exit_bytes")) {
    const bool gained = driver_free_at_exit_bytes >= driver_free_at_entry_bytes;
    const std::size_t delta = gained ? driver_free_at_exit_bytes - driver_free_at_entry_bytes
                                     : driver_free_at_entry_bytes - driver_free_at_exit_bytes;
    s += std::string(" (") + (gained ? "+" : "-") + format_bytes(delta) + ")";
  }
  s += " of " + format_bytes(driver_total_bytes) + "\n";
  if (!complete()) {
    s += "  INCOMPLETE: " + std::to_string(errors.size()) + " step" +
         (errors.size() == 1 ? "" : "s") + " of the end failed";
    if (!unknown.empty()) {
      s += "; unknown:";
      for (const std::string& u : unknown)
        s += " " + u;
    }
    s += "\n";
    for (const std::string& e : errors)
      s += "    " + e + "\n";
  }
  if (graph_trimmed || graph_reserved_bytes != 0 || !known("graph_reserved_bytes"))
    s += "  graph memory " + figure("graph_used_bytes", graph_used_bytes) + " in use, " +
         figure("graph_reserved_bytes", graph_reserved_bytes) + " reserved" +
         (graph_trimmed
              ? " (trimmed, " + figure("graph_returned_bytes", graph_returned_bytes) + " returned)"
              : " (not trimmed)") +
         "\n";
  if (admission_required_bytes != 0) s += admission;
  if (leaked_allocations != 0) {
    s += "  LEAKED " + std::to_string(leaked_allocations) + " allocation" +
         (leaked_allocations == 1 ? "" : "s") + ", " + format_bytes(leaked_bytes) + ":\n";
    constexpr std::size_t shown = 16;
    for (std::size_t i = 0; i < leaks.size() && i < shown; ++i) {
      const leaked_allocation& l = leaks[i];
      s += "    " + format_bytes(l.bytes) + " at " + detail::format_pointer(l.pointer) +
           " on stream " + detail::format_pointer(static_cast<const void*>(l.stream));
      if (!l.tag.empty()) s += ", '" + l.tag + "'";
      if (!l.file.empty()) s += ", made at " + l.file + ":" + std::to_string(l.line);
      if (l.session != name) s += ", in session '" + l.session + "'";
      s += "\n";
    }
    if (leaks.size() > shown) s += "    and " + std::to_string(leaks.size() - shown) + " more\n";
  }
  if (untracked_bytes != 0)
    s += std::string(untracked_leak ? "  LEAKED " : "  untracked: ") +
         format_bytes(untracked_bytes) +
         " more in use in the pool than at entry, not allocated through the session" +
         (untracked_leak ? "" : " (not counted as a leak)") + "\n";
  if (!leaked()) s += "  no leaks\n";
  return s;
}

inline std::string to_json(const session_report& r) {
  using detail::json_pointer;
  using detail::json_string;
  std::string out = "{\"version\":" + std::to_string(session_report::json_version) + ",\"name\":";
  json_string(out, r.name);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.9g", r.seconds);
  out += ",\"device\":" + std::to_string(r.device) + ",\"seconds\":" + seconds;
  // A figure that a failed step left unknown (session_report::unknown) is null.
  const auto number = [&out, &r](const char* key, std::size_t value) {
    out += ",\"";
    out += key;
    out += "\":" + (r.known(key) ? std::to_string(value) : std::string("null"));
  };
  const auto flag = [&out](const char* key, bool value) {
    out += ",\"";
    out += key;
    out += value ? "\":true" : "\":false";
  };
  number("reserved_at_entry_bytes", r.reserved_at_entry_bytes);
  number("reserved_at_finish_bytes", r.reserved_at_finish_bytes);
  number("reserved_at_exit_bytes", r.reserved_at_exit_bytes);
  number("used_at_entry_bytes", r.used_at_entry_bytes);
  number("used_at_exit_bytes", r.used_at_exit_bytes);
  number("peak_used_bytes", r.peak_used_bytes);
  number("peak_reserved_bytes", r.peak_reserved_bytes);
  number("returned_bytes", r.returned_bytes);
  number("driver_free_at_entry_bytes", r.driver_free_at_entry_bytes);
  number("driver_free_at_exit_bytes", r.driver_free_at_exit_bytes);
  number("driver_total_bytes", r.driver_total_bytes);
  number("tracked_peak_bytes", r.tracked_peak_bytes);
  flag("tracked_peak_upper_bound", r.tracked_peak_upper_bound);
  number("leaked_allocations", r.leaked_allocations);
  number("leaked_bytes", r.leaked_bytes);
  number("allocations", r.allocations);
  number("frees", r.frees);
  number("budget_refusals", r.budget_refusals);
  number("pool_refusals", r.pool_refusals);
  number("retries", r.retries);
  number("untracked_bytes", r.untracked_bytes);
  flag("untracked_leak", r.untracked_leak);
  number("graph_used_bytes", r.graph_used_bytes);
  number("graph_reserved_bytes", r.graph_reserved_bytes);
  number("graph_returned_bytes", r.graph_returned_bytes);
  flag("graph_trimmed", r.graph_trimmed);
  flag("trimmed", r.trimmed);
  flag("trim_deferred", r.trim_deferred);
  flag("concurrent", r.concurrent);
  flag("synchronized_device", r.synchronized_device);
  flag("unwinding", r.unwinding);
  number("admission_required_bytes", r.admission_required_bytes);
  number("admission_available_bytes", r.admission_available_bytes);
  flag("admission_trimmed", r.admission_trimmed);
  number("admission_returned_bytes", r.admission_returned_bytes);
  flag("admission_refused", r.admission_refused);
  number("admission_free_bytes", r.admission_free_bytes);
  number("admission_cached_bytes", r.admission_cached_bytes);
  number("admission_graph_reserved_bytes", r.admission_graph_reserved_bytes);
  const auto maybe = [&out](const char* key, const std::optional<std::size_t>& value) {
    out += ",\"";
    out += key;
    out += "\":" + (value ? std::to_string(*value) : std::string("null"));
  };
  maybe("admission_process_bytes", r.admission_process_bytes);
  maybe("admission_other_processes_bytes", r.admission_other_processes_bytes);
  out += ",\"admission_nvml\":";
  json_string(out, r.admission_nvml);
  flag("leaked", r.leaked());
  flag("complete", r.complete());
  const auto strings = [&out](const char* key, const std::vector<std::string>& list) {
    out += ",\"";
    out += key;
    out += "\":[";
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i != 0) out += ',';
      json_string(out, list[i]);
    }
    out += ']';
  };
  strings("unknown", r.unknown);
  strings("errors", r.errors);
  out += ",\"leaks\":[";
  for (std::size_t i = 0; i < r.leaks.size(); ++i) {
    const leaked_allocation& l = r.leaks[i];
    out += (i == 0 ? "{\"bytes\":" : ",{\"bytes\":") + std::to_string(l.bytes) +
           ",\"pointer\":" + json_pointer(l.pointer) +
           ",\"stream\":" + json_pointer(static_cast<const void*>(l.stream)) + ",\"tag\":";
    json_string(out, l.tag);
    out += ",\"file\":";
    json_string(out, l.file);
    out += ",\"line\":" + std::to_string(l.line) + ",\"session\":";
    json_string(out, l.session);
    out += "}";
  }
  out += "]}";
  return out;
}

CUSCOPE_DETAIL_NOINLINE inline void* session::allocate_counted(cudaStream_t stream,
                                                               std::size_t bytes, const char* tag,
                                                               call_site site) {
  return detail::allocate_by_pointer(*ledger_, pool_, stream, bytes,
                                     tag != nullptr ? tag : "cuscope::session::allocate", site.file,
                                     site.line, options_.on_pool_full);
}

inline void session::deallocate(stream_ref stream, void* ptr, std::size_t bytes) {
  // The record is taken before the free: once freed, another thread's allocation may get the
  // address. find() finds nothing for nullptr, which frees nothing.
  detail::ledger_record* const record = ledger_->find(ptr);
  if (record == nullptr) return deallocate_unknown(ptr, bytes);
  const cudaStream_t s = stream.get();
  if (detail::is_default_stream(s)) return deallocate_slow(s, ptr, bytes, *record, cudaSuccess);
  const cudaError_t status = cudaFreeAsync(ptr, s);
  if (status != cudaSuccess) return deallocate_slow(s, ptr, bytes, *record, status);
  detail::by_pointer_freed(*ledger_, pool_, s, ptr, bytes, *record);
}

CUSCOPE_DETAIL_COLD inline void session::deallocate_unknown(const void* ptr,
                                                            std::size_t bytes) const {
  if (ptr == nullptr) return;
  throw std::logic_error("cuscope::session '" + options_.name + "': deallocate of " +
                         detail::format_pointer(ptr) + " (" + detail::format_bytes(bytes) +
                         "), which is not live memory from this session's allocate() "
                         "(deallocated twice, or allocated elsewhere); nothing was freed");
}

CUSCOPE_DETAIL_NOINLINE inline void session::deallocate_slow(cudaStream_t stream, void* ptr,
                                                             std::size_t bytes,
                                                             detail::ledger_record& record,
                                                             cudaError_t status) {
  try {
    if (status == cudaSuccess) {  // a default stream: freed with the pool's device current
      const detail::stream_device_guard on(stream, pool_.device());
      status = cudaFreeAsync(ptr, stream);
    }
    if (status != cudaSuccess)
      detail::pool_free_failed(pool_.get(), pool_.device(), status, ptr, bytes, stream_ref(stream));
  } catch (...) {
    ledger_->restore(record, ptr);  // still live
    throw;
  }
  detail::by_pointer_freed(*ledger_, pool_, stream, ptr, bytes, record);
}

inline std::size_t session::live_allocations() const noexcept {
  return finished_ ? report_.leaked_allocations : ledger_->live_allocations();
}

inline std::size_t session::live_bytes() const noexcept {
  return finished_ ? report_.leaked_bytes : ledger_->live_bytes();
}

inline session::~session() {
  if (!finished_) {
    try {
      const std::string open = ledger_->close(true);
      if (!open.empty()) {
        const std::string m = "session '" + options_.name +
                              "' destroyed while its nested session(s) " + open +
                              " are open; it ends now, and they count on without it";
        detail::report_cleanup("session::~session", "cuscope::session", this, cudaSuccess,
                               m.c_str(), __FILE__, __LINE__);
      }
      (void)finish_impl(false);
    } catch (...) {  // a callback (on_finish, leak_sink) threw
      CUSCOPE_DETAIL_CLEANUP_CAUGHT("session::finish", "cuscope::session", this);
    }
  }
  // A restore that failed in finish() gets one more try.
  if (saved_threshold_) restore_threshold_nothrow();
  ledger_->end();
}

inline auto session::finish() -> const session_report& {
  if (finished_) return report_;
  const std::string open = ledger_->close(false);
  if (!open.empty())
    throw std::logic_error("cuscope::session '" + options_.name +
                           "': finish() while its nested session(s) " + open +
                           " are open; end them first");
  return finish_impl(true);
}

inline session::session(session* parent, memory_pool_ref pool, stream_ref stream,
                        session_options options)
    : pool_(pool), stream_(stream), options_(std::move(options)) {
  detail::ledger* const up = parent != nullptr ? parent->ledger_ : nullptr;
  if (options_.report_to == nullptr && parent != nullptr)
    options_.report_to = parent->options_.report_to;
  std::vector<cudaStream_t> listed(options_.streams.size());
  for (std::size_t i = 0; i < listed.size(); ++i)
    listed[i] = options_.streams[i].get();
  ledger_ = new detail::ledger(up, options_.budget_bytes, options_.name, stream_.get(),
                               std::move(listed));
  // The first of the nested sessions open together reads the pool's reserve for the group, and
  // resets its peaks (after passing them to the parent), before another can begin beside it.
  auto first_of_group = [this, up] {
    const pool_stats entry = pool_.stats();
    if (options_.reset_peaks) {
      up->observe(entry.used_high_bytes, entry.reserved_high_bytes);
      pool_.reset_peaks();
    }
    return entry.reserved_bytes;
  };
  try {
    if (up != nullptr) open_at_entry_ = up->open_child(ledger_, first_of_group);
  } catch (...) {
    ledger_->end();
    throw;
  }
  if (up != nullptr && open_at_entry_ == 0) {
    ledger_->end();
    throw std::logic_error("cuscope::session '" + options_.name + "': its parent session '" +
                           parent->options_.name + "' has finished");
  }
  try {
    begin(parent);
  } catch (...) {
    if (up != nullptr) up->close_child(ledger_);
    ledger_->end();
    throw;
  }
}

inline void session::begin(session* parent) {
  detail::ledger* const up = ledger_->parent();
  exceptions_at_entry_ = std::uncaught_exceptions();
  report_.name = options_.name;
  report_.device = pool_.device();
  const admission_options& a = options_.admission;
  if (a.bytes != 0 || a.device_fraction != 0 || a.pool_fraction != 0) admit();
  const pool_stats entry = pool_.stats();
  tracked_at_entry_ = ledger_->root()->live_bytes();
  if (up != nullptr) {
    up->observe(entry.used_high_bytes, entry.reserved_high_bytes);
    siblings_at_entry_ = up->children();
  }
  report_.reserved_at_entry_bytes = entry.reserved_bytes;
  report_.used_at_entry_bytes = entry.used_bytes;
  read_driver(report_.driver_free_at_entry_bytes);
  if (options_.release_threshold_bytes) {
    saved_threshold_ = pool_.release_threshold();
    pool_.set_release_threshold(*options_.release_threshold_bytes);
  }
  try {
    // Beside other nested sessions, a reset would take their peaks from them. The first of a
    // group of nested ones reset them when it registered (open_child).
    if (options_.reset_peaks && open_at_entry_ <= 1) {
      if (up == nullptr) pool_.reset_peaks();
      observe(entry.used_bytes, entry.reserved_bytes);
    } else {
      observe(entry.used_high_bytes, entry.reserved_high_bytes);
    }
  } catch (...) {
    if (saved_threshold_) restore_threshold_nothrow();
    throw;
  }
  start_ = std::chrono::steady_clock::now();
  recorder* r = options_.record_into;
  if (r == nullptr) r = parent != nullptr ? parent->recorder_ : pool_.attached_recorder();
  if (r != nullptr) {
    scope_ = r->begin_session(options_.name, parent != nullptr ? parent->scope_ : 0, pool_.device(),
                              pool_.get());
    recorder_ = r;
    // Its buffers find the recorder and the id through the ledger they are counted by.
    ledger_->record_into(detail::record_target{r, scope_});
  }
  nvtx_ = nvtx_range(options_.name.empty() ? "cuscope session" : options_.name.c_str());
}

auto session::read_admission(const std::string& who, bool count_cache) -> admission_reading {
  admission_reading r;
  r.count_cache = count_cache;
  {
    scoped_device on(pool_.device());
    CUSCOPE_DETAIL_TRY_FOR(cudaMemGetInfo(&r.free_bytes, &r.total_bytes), who);
  }
  const pool_stats s = pool_.stats();
  r.reserved_bytes = s.reserved_bytes;
  r.used_bytes = s.used_bytes;
  r.limit_bytes = pool_.max_bytes();
  std::size_t graph_used = 0;
  detail::graph_memory_now(pool_.device(), graph_used, r.graph_reserved_bytes, who);
  return r;
}

void session::read_nvml(const admission_reading& r) {
  const int device = pool_.device();
  int domain = 0;
  int bus = 0;
  int slot = 0;
  if (cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, device) != cudaSuccess) {
    (void)cudaGetLastError();
    report_.admission_nvml = "unavailable: CUDA did not give device " + std::to_string(device) +
                             "'s PCI address, by which NVML knows it";
    return;
  }
  const unsigned pid = detail::nvml::this_process();
  const detail::nvml::answer a = detail::nvml::process_usage(
      detail::nvml::bus_id(static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                           static_cast<unsigned>(slot)),
      pid);
  report_.admission_nvml = a.source;
  if (!a.available) return;
  if (!a.listed) {
    // In a container with its own process ids NVML lists the host's id for this process.
    report_.admission_nvml = "unavailable: " + a.source + " does not list this process (id " +
                             std::to_string(pid) + ") on the device";
    return;
  }
  const std::size_t taken = r.total_bytes > r.free_bytes ? r.total_bytes - r.free_bytes : 0;
  report_.admission_process_bytes = a.used_bytes;
  report_.admission_other_processes_bytes = taken > a.used_bytes ? taken - a.used_bytes : 0;
}

void session::admit() {
  using detail::format_bytes;
  const admission_options& a = options_.admission;
  const std::string who = "cuscope::session '" + options_.name + "'";
  const auto check_fraction = [&](double f, const char* field) {
    if (!(f >= 0 && f <= 1))
      throw std::invalid_argument(who + ": admission." + field + " " + std::to_string(f) +
                                  " is not a fraction in [0, 1]");
  };
  check_fraction(a.device_fraction, "device_fraction");
  check_fraction(a.pool_fraction, "pool_fraction");
  admission_reading r = read_admission(who, a.count_cache);
  std::size_t required = a.bytes;
  const auto at_least = [&required](double f, std::size_t of) {
    const auto b = static_cast<std::size_t>(f * static_cast<double>(of));
    if (b > required) required = b;
  };
  if (a.device_fraction != 0) at_least(a.device_fraction, r.total_bytes);
  if (a.pool_fraction != 0) {
    if (r.limit_bytes == 0)
      throw std::invalid_argument(who +
                                  ": admission.pool_fraction needs a pool with a limit, "
                                  "and pool " +
                                  detail::format_pointer(pool_.get()) + " has none");
    at_least(a.pool_fraction, r.limit_bytes);
  }
  report_.admission_required_bytes = required;
  std::size_t trimmed_others = 0;
  if (r.available() < required && a.on_shortfall == admission_policy::trim_and_retry) {
    // Frees enqueued on any stream must complete before a trim can give their memory back.
    // What it returns is counted in every pool it trims, from before the synchronization, which
    // also gives back what a pool holds above its release threshold. A pool named twice in
    // also_trim, or the session's own, is trimmed and counted once.
    const std::size_t reserved_before = r.reserved_bytes;
    const std::size_t graph_before = r.graph_reserved_bytes;
    std::vector<std::pair<memory_pool_ref, std::size_t>> others;
    for (const memory_pool_ref& p : a.also_trim) {
      bool seen = p == pool_;
      for (std::size_t j = 0; j < others.size() && !seen; ++j)
        seen = others[j].first == p;
      if (!seen) others.emplace_back(p, p.stats().reserved_bytes);
    }
    {
      scoped_device on(pool_.device());
      CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), who);
    }
    pool_.trim_to(0);
    std::size_t others_returned = 0;
    for (const auto& [p, before] : others) {
      {
        scoped_device on(p.device());
        CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), who);
      }
      p.trim_to(0);
      const std::size_t after = p.stats().reserved_bytes;
      others_returned += before > after ? before - after : 0;
    }
    if (options_.trim_graph_memory) {
      scoped_device on(pool_.device());
      CUSCOPE_DETAIL_TRY_FOR(cudaDeviceGraphMemTrim(pool_.device()), who);
    }
    report_.admission_trimmed = true;
    // What the trim gave back is free memory now, which any allocation can use; what it left
    // unused lies between live allocations, where a larger allocation cannot go.
    r = read_admission(who, false);
    report_.admission_returned_bytes =
        (reserved_before > r.reserved_bytes ? reserved_before - r.reserved_bytes : 0) +
        others_returned +
        (graph_before > r.graph_reserved_bytes ? graph_before - r.graph_reserved_bytes : 0);
    trimmed_others = others.size();
  }
  const std::size_t available = r.available();
  report_.admission_available_bytes = available;
  report_.admission_free_bytes = r.free_bytes;
  report_.admission_cached_bytes = r.cached();
  report_.admission_graph_reserved_bytes = r.graph_reserved_bytes;
  const bool refused = available < required;
  if (a.query_nvml == nvml_query::always || (refused && a.query_nvml == nvml_query::on_refusal))
    read_nvml(r);
  else
    report_.admission_nvml = "not asked (admission_options::query_nvml)";
  if (!refused) return;
  const std::size_t taken = r.total_bytes > r.free_bytes ? r.total_bytes - r.free_bytes : 0;
  const std::size_t pooled = r.reserved_bytes + r.graph_reserved_bytes;
  const auto beyond = [](std::size_t all, std::size_t part) { return all > part ? all - part : 0; };
  const std::size_t unused = beyond(r.reserved_bytes, r.used_bytes);
  std::string m = who + ": admission refused: " + format_bytes(required) +
                  " must be available at entry, " + format_bytes(available) + " is (" +
                  format_bytes(required - available) + " short)";
  if (report_.admission_trimmed)
    m += " after synchronizing the device and trimming the pool" +
         (trimmed_others == 0 ? std::string()
                              : " and " + std::to_string(trimmed_others) + " of also_trim") +
         (options_.trim_graph_memory ? " and graph memory" : "") + " (" +
         format_bytes(report_.admission_returned_bytes) + " returned)";
  m += ". Device " + std::to_string(pool_.device()) + " has " + format_bytes(r.free_bytes) +
       " free of " + format_bytes(r.total_bytes) + "; pool " + detail::format_pointer(pool_.get()) +
       " reserves " + format_bytes(r.reserved_bytes) + " (" + format_bytes(r.used_bytes) +
       " in use, " + format_bytes(unused) + " cached";
  if (unused != 0)
    m += report_.admission_trimmed ? ", between live allocations, not counted"
         : a.count_cache           ? ", counted"
                                   : ", not counted (admission_options::count_cache)";
  m += ")";
  if (r.limit_bytes != 0) m += " under a limit of " + format_bytes(r.limit_bytes);
  m += "; graph memory reserves " + format_bytes(r.graph_reserved_bytes);
  if (report_.admission_process_bytes) {
    const std::size_t mine = *report_.admission_process_bytes;
    m += "; this process holds " + format_bytes(mine) + " as NVML counts it (" +
         report_.admission_nvml + "), " + format_bytes(beyond(mine, pooled)) +
         " of it outside the pool and graph memory (the CUDA context, other pools, cudaMalloc, "
         "libraries); other processes hold " +
         format_bytes(*report_.admission_other_processes_bytes);
  } else {
    m += "; the rest (the CUDA context, other pools, cudaMalloc, other processes) holds " +
         format_bytes(beyond(taken, pooled)) +
         "; NVML, which tells this process's memory from other processes': " +
         report_.admission_nvml;
  }
  session_report refusal;
  refusal.admission_refused = true;
  refusal.name = options_.name;
  refusal.device = pool_.device();
  refusal.driver_total_bytes = r.total_bytes;
  refusal.admission_required_bytes = required;
  refusal.admission_available_bytes = available;
  refusal.admission_trimmed = report_.admission_trimmed;
  refusal.admission_returned_bytes = report_.admission_returned_bytes;
  refusal.admission_free_bytes = r.free_bytes;
  refusal.admission_cached_bytes = report_.admission_cached_bytes;
  refusal.admission_graph_reserved_bytes = r.graph_reserved_bytes;
  refusal.admission_process_bytes = report_.admission_process_bytes;
  refusal.admission_other_processes_bytes = report_.admission_other_processes_bytes;
  refusal.admission_nvml = report_.admission_nvml;
  throw admission_error(required, available, m, std::move(refusal));
}

inline auto session::named(std::string name) -> session_options {
  session_options o;
  o.name = std::move(name);
  return o;
}

inline void session::observe(std::size_t used_peak, std::size_t reserved_peak) noexcept {
  if (used_peak > report_.peak_used_bytes) report_.peak_used_bytes = used_peak;
  if (reserved_peak > report_.peak_reserved_bytes) report_.peak_reserved_bytes = reserved_peak;
}

inline void session::read_driver(std::size_t& free_bytes) {
  scoped_device on(pool_.device());
  std::size_t total = 0;
  CUSCOPE_DETAIL_TRY_FOR(cudaMemGetInfo(&free_bytes, &total), "session '" + options_.name + "'");
  report_.driver_total_bytes = total;
}

inline void session::refuse_in_capture() const {
  const std::string who = "cuscope::session '" + options_.name + "'";
  detail::refuse_in_capture(stream_, pool_.device(), who, "finish");
  for (const stream_ref s : options_.streams)
    detail::refuse_in_capture(s, pool_.device(), who, "finish");
}

inline void session::read_graph_memory(bool trim) {
  const int device = pool_.device();
  const std::string who = "session '" + options_.name + "'";
  detail::graph_memory_now(device, report_.graph_used_bytes, report_.graph_reserved_bytes, who);
  if (!trim) return;
  const std::size_t before = report_.graph_reserved_bytes;
  CUSCOPE_DETAIL_TRY_FOR(cudaDeviceGraphMemTrim(device), who);
  report_.graph_trimmed = true;
  detail::graph_memory_now(device, report_.graph_used_bytes, report_.graph_reserved_bytes, who);
  report_.graph_returned_bytes =
      before > report_.graph_reserved_bytes ? before - report_.graph_reserved_bytes : 0;
}

inline void session::trim_recorded(std::size_t keep) {
  pool_.trim_to(keep);
  if (recorder_ != nullptr && !records_pool())
    recorder_->record_trim(pool_.device(), pool_.get(), keep);
  report_.trimmed = true;
}

inline void session::restore_threshold_nothrow() noexcept {
  std::uint64_t value = *saved_threshold_;
  if (CUSCOPE_DETAIL_CLEANUP(
          cudaMemPoolSetAttribute(pool_.get(), cudaMemPoolAttrReleaseThreshold, &value),
          "cuscope::session", this))
    saved_threshold_.reset();
}

inline void session::synchronize() {
  if (options_.synchronize_device || ledger_->other_streams()) {
    report_.synchronized_device = true;
    scoped_device on(pool_.device());
    CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), "session '" + options_.name + "'");
    if (recorder* r = recorder_) {
      r->record_synchronize(pool_.device(), nullptr, true);
      r->sample(pool_.device(), pool_.get());  // the reserve the trim will give back
    }
    return;
  }
  // Default stream handles name those of the pool's device, as for the session's buffers.
  {
    const detail::stream_device_guard on(stream_.get(), pool_.device());
    stream_.synchronize();
  }
  for (const stream_ref s : options_.streams) {
    const detail::stream_device_guard on(s.get(), pool_.device());
    s.synchronize();
  }
  if (recorder* r = recorder_) {
    r->record_synchronize(pool_.device(), stream_.get());
    for (const stream_ref s : options_.streams)
      r->record_synchronize(pool_.device(), s.get());
    r->sample(pool_.device(), pool_.get());  // the reserve the trim will give back
  }
}

inline auto session::finish_impl(bool may_throw) -> const session_report& {
  if (finished_) return report_;
  finished_ = true;
  report_.unwinding = std::uncaught_exceptions() > exceptions_at_entry_;
  // Every step runs even when an earlier one failed: the pool must be trimmed and its settings
  // restored whatever happened. The first error is rethrown at the end.
  // A failed step marks the figures it would have measured as unknown, never as 0.
  std::exception_ptr error;
  // What a failed step records, written once rather than in each instantiation of step.
  const auto failed = [&](const char* what, std::initializer_list<const char*> figures) {
    if (!error) error = std::current_exception();
    report_.errors.push_back(std::string(what) + ": " + detail::exception_message());
    for (const char* figure : figures)
      if (report_.known(figure)) report_.unknown.push_back(std::string(figure));
  };
  const auto step = [&](const char* what, std::initializer_list<const char*> figures, auto&& f) {
    try {
      f();
    } catch (...) {
      failed(what, figures);
    }
  };
  step("reading the pool's reserve", {"reserved_at_finish_bytes", "returned_bytes"},
       [&] { report_.reserved_at_finish_bytes = pool_.stats().reserved_bytes; });
  // A capture on the session's streams cannot survive a synchronization: refuse the
  // synchronization and the trims that need it, and leave the capture intact.
  bool capturing = false;
  step("checking for a stream capture", {}, [&] {
    try {
      refuse_in_capture();
    } catch (const std::logic_error&) {
      capturing = true;
      throw;
    }
  });
  if (!capturing) step("synchronizing", {}, [&] { synchronize(); });
  step("reading the pool's statistics after the synchronization",
       {"used_at_exit_bytes", "peak_used_bytes", "peak_reserved_bytes", "reserved_at_finish_bytes",
        "returned_bytes", "untracked_bytes"},
       [&] {
         const pool_stats s = pool_.stats();
         observe(s.used_high_bytes, s.reserved_high_bytes);
         report_.used_at_exit_bytes = s.used_bytes;
         account_untracked();
         // Memory released at the synchronization by a low release threshold went back too.
         if (s.reserved_bytes > report_.reserved_at_finish_bytes)
           report_.reserved_at_finish_bytes = s.reserved_bytes;
       });
  observe(ledger_->observed_used_peak(), ledger_->observed_reserved_peak());
  const auto [count, bytes] = ledger_->live_snapshot();
  report_.leaked_allocations = count;
  report_.leaked_bytes = bytes;
  report_.tracked_peak_bytes = ledger_->peak_bytes();
  report_.tracked_peak_upper_bound = !ledger_->peak_exact();
  report_.allocations = ledger_->allocations();
  report_.frees = ledger_->frees(report_.leaked_allocations);
  report_.budget_refusals = ledger_->budget_refusals();
  report_.pool_refusals = ledger_->pool_refusals();
  report_.retries = ledger_->retries();
  if (report_.leaked_allocations != 0)
    step("naming the leaked allocations", {}, [&] { name_leaks(); });
  if (saved_threshold_) {
    step("restoring the release threshold", {}, [&] {
      pool_.set_release_threshold(*saved_threshold_);
      if (recorder_ != nullptr && !records_pool())
        recorder_->record_threshold(pool_.device(), pool_.get(), *saved_threshold_);
      saved_threshold_.reset();
    });
  }
  if (detail::ledger* const up = ledger_->parent()) {
    // The last of the nested sessions open together trims, back to the reserve when the first
    // of them began; the others leave the cache to those still running.
    step("trimming the pool", {}, [&] {
      const bool last = up->close_child(ledger_, [&](std::size_t group_reserve) {
        if (!options_.trim || capturing) return;
        trim_recorded(options_.keep_bytes.value_or(group_reserve));
      });
      report_.trim_deferred = options_.trim && !capturing && !last;
    });
  } else if (options_.trim && !capturing) {
    step("trimming the pool", {},
         [&] { trim_recorded(options_.keep_bytes.value_or(report_.reserved_at_entry_bytes)); });
  }
  step("reading the pool's reserve after the trim", {"reserved_at_exit_bytes", "returned_bytes"},
       [&] {
         report_.reserved_at_exit_bytes = pool_.stats().reserved_bytes;
         report_.returned_bytes =
             report_.reserved_at_finish_bytes > report_.reserved_at_exit_bytes
                 ? report_.reserved_at_finish_bytes - report_.reserved_at_exit_bytes
                 : 0;
       });
  step("reading the device's graph memory",
       {"graph_used_bytes", "graph_reserved_bytes", "graph_returned_bytes"},
       [&] { read_graph_memory(options_.trim_graph_memory && !capturing); });
  step("reading the device's free memory", {"driver_free_at_exit_bytes"},
       [&] { read_driver(report_.driver_free_at_exit_bytes); });
  for (const std::string& figure : report_.unknown)
    clear_figure(figure);
  report_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (detail::ledger* const up = ledger_->parent()) {
    up->observe(report_.peak_used_bytes, report_.peak_reserved_bytes);
    if (report_.leaked_allocations != 0) ledger_->passed_on();
    up->close_child(ledger_);  // done above unless that step failed
  }
  if (recorder_ != nullptr)
    recorder_->end_session(scope_, report_.leaked_allocations, report_.leaked_bytes);
  nvtx_.end();
  if (options_.report_to != nullptr) {
    try {
      options_.report_to->write(report_);
    } catch (...) {
      CUSCOPE_DETAIL_CLEANUP_CAUGHT("report_sink::write", "cuscope::session", this);
    }
  }
  if (error) {
    if (may_throw) std::rethrow_exception(error);
    // From the destructor: the steps' failure is reported, and the report is still handed on.
    try {
      std::rethrow_exception(error);
    } catch (...) {
      CUSCOPE_DETAIL_CLEANUP_CAUGHT("session::finish", "cuscope::session", this);
    }
  }
  if (options_.on_finish) options_.on_finish(report_);
  if (report_.leaked()) on_leak(may_throw);
  return report_;
}

inline void session::account_untracked() {
  const auto tracked_now = static_cast<long long>(ledger_->root()->live_bytes());
  long long grown = static_cast<long long>(report_.used_at_exit_bytes) -
                    static_cast<long long>(report_.used_at_entry_bytes) -
                    (tracked_now - static_cast<long long>(tracked_at_entry_));
  if (grown > 0 && ledger_->live_allocations() != 0) {
    // The pool counts each allocation rounded up, the ledger the bytes asked: what the rounding
    // adds to the counted allocations still live is theirs. GPUs count multiples of 512 bytes
    // exactly and round other sizes by an amount not documented (at least to the 256-byte
    // alignment): taking the rounding as up to 512 never calls it untracked, at the price of up
    // to 256 untracked bytes per such allocation left unreported.
    constexpr std::size_t rounding = 512;
    std::vector<detail::named_record> live;
    ledger_->live_records(live);
    for (const detail::named_record& r : live)
      grown -= static_cast<long long>(((r.record.bytes + rounding - 1) & ~(rounding - 1)) -
                                      r.record.bytes);
  }
  report_.untracked_bytes = grown > 0 ? static_cast<std::size_t>(grown) : 0;
  bool alone = true;
  if (detail::ledger* const up = ledger_->parent()) {
    const auto now = up->children();
    alone =
        siblings_at_entry_.first == 1 && now.first == 1 && now.second == siblings_at_entry_.second;
  }
  report_.concurrent = !alone;
  report_.untracked_leak = options_.untracked_leaks && alone && report_.untracked_bytes != 0;
}

inline void session::name_leaks() {
  std::vector<detail::named_record> live;
  ledger_->live_records(live);
  // Sized once and filled in place: the vector's constructor is needed for the sort below anyway,
  // where push_back would instantiate its growth in every translation unit.
  std::vector<leaked_allocation> v(live.size());
  for (std::size_t i = 0; i < live.size(); ++i) {
    const detail::named_record& r = live[i];
    leaked_allocation& l = v[i];
    l.bytes = r.record.bytes;
    l.pointer = r.record.ptr;
    l.stream = r.record.stream;
    if (r.record.tag != nullptr) l.tag = r.record.tag;
    if (r.record.file != nullptr) l.file = r.record.file;
    l.line = r.record.line;
    l.session = r.session;
  }
  // Largest first, in recorded order among equal sizes: a bottom-up merge sort (stable), as
  // std::stable_sort would, without <algorithm> in this header.
  const std::size_t n = v.size();
  std::vector<leaked_allocation> merged(n);
  for (std::size_t width = 1; width < n; width *= 2) {
    for (std::size_t lo = 0; lo < n; lo += 2 * width) {
      const std::size_t mid = lo + width < n ? lo + width : n;
      const std::size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      std::size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi)
        merged[k++] = std::move(v[j].bytes > v[i].bytes ? v[j++] : v[i++]);
      while (i < mid)
        merged[k++] = std::move(v[i++]);
      while (j < hi)
        merged[k++] = std::move(v[j++]);
    }
    v.swap(merged);
  }
  report_.leaks.swap(v);
}

inline void session::clear_figure(const std::string& f) noexcept {
  session_report& r = report_;
  std::size_t* value = f == "reserved_at_finish_bytes"    ? &r.reserved_at_finish_bytes
                       : f == "reserved_at_exit_bytes"    ? &r.reserved_at_exit_bytes
                       : f == "used_at_exit_bytes"        ? &r.used_at_exit_bytes
                       : f == "peak_used_bytes"           ? &r.peak_used_bytes
                       : f == "peak_reserved_bytes"       ? &r.peak_reserved_bytes
                       : f == "returned_bytes"            ? &r.returned_bytes
                       : f == "driver_free_at_exit_bytes" ? &r.driver_free_at_exit_bytes
                       : f == "untracked_bytes"           ? &r.untracked_bytes
                       : f == "graph_used_bytes"          ? &r.graph_used_bytes
                       : f == "graph_reserved_bytes"      ? &r.graph_reserved_bytes
                       : f == "graph_returned_bytes"      ? &r.graph_returned_bytes
                                                          : nullptr;
  if (value != nullptr) *value = 0;
}

inline void session::on_leak(bool may_throw) {
  switch (options_.on_leak) {
    case leak_policy::ignore:
      return;
    case leak_policy::throw_exception:
      if (may_throw && !report_.unwinding) throw session_leak_error(report_);
      [[fallthrough]];
    case leak_policy::report:
      if (options_.leak_sink) {
        options_.leak_sink(report_);
      } else {
        std::fprintf(stderr, "cuscope: %s", report_.to_string().c_str());
      }
      return;
    case leak_policy::abort:
      std::fprintf(stderr, "cuscope: %s", report_.to_string().c_str());
      std::abort();
  }
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

}  // namespace cuscope

#include "detail/session_env.hpp"  // session_options::from_env
