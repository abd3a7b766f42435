// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Exports of a recorder's timeline: Chrome trace-event JSON (opens in Perfetto and
/// chrome://tracing; scripts/memory_plot.py draws it) and a JSON snapshot of the allocations
/// still live, per session.
#pragma once

#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/format.hpp"
#include "recorder.hpp"

namespace cuscope {

/// @brief Thrown when an export cannot be written; names the path and the reason.
class trace_write_error : public std::runtime_error {
 public:
  /// @brief An error for path, with the system's reason.
  trace_write_error(const std::string& path, const std::string& reason)
      : std::runtime_error("cuscope: cannot write '" + path + "': " + reason), path_(path) {}
  /// @brief The path that could not be written.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

namespace detail {

// Microseconds with nanosecond precision, as Chrome's trace format counts time.
inline std::string json_us(std::int64_t ns) {
  char b[40];
  std::snprintf(b, sizeof b, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return b;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw trace_write_error(path, std::strerror(errno));
  const std::size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (written != text.size())
    throw trace_write_error(path, std::strerror(write_errno != 0 ? write_errno : EIO));
  if (!closed) throw trace_write_error(path, std::strerror(errno));
}

// The label of a pool in exports: its recorder name, or its handle.
class pool_labels {
 public:
  explicit pool_labels(const recorder& r) : names_(r.pool_names()) {}
  std::string operator()(cudaMemPool_t pool) const {
    for (const auto& n : names_)
      if (n.first == pool) return n.second;
    if (pool == nullptr) return "no pool";
    return "pool " + format_pointer(static_cast<const void*>(pool));
  }

 private:
  std::vector<std::pair<cudaMemPool_t, std::string>> names_;
};

// The allocations live at the end of events: allocated and not freed since, by pointer.
inline std::map<const void*, memory_event> live_allocations(const std::vector<memory_event>& ev) {
  std::map<const void*, memory_event> live;
  for (const memory_event& e : ev) {
    if (e.kind == memory_event_kind::allocate)
      live[e.ptr] = e;
    else if (e.kind == memory_event_kind::free)
      live.erase(e.ptr);
  }
  return live;
}

}  // namespace detail

/// @brief The recorder's timeline as Chrome trace-event JSON: one process per device, sessions as
/// complete slices (nested sessions inside their parents), counters per pool of bytes in use,
/// bytes reserved and bytes whose free is enqueued but not known to have run, a counter of the
/// device's free memory, and instant events for out-of-memory errors, retries, trims and leaks.
/// The metadata says how many events the ring dropped.
[[nodiscard]] inline std::string chrome_trace_json(const recorder& r) {
  using detail::json_pointer;
  using detail::json_string;
  using detail::json_us;
  const std::vector<memory_event> ev = r.events();
  const std::vector<recorded_session> sessions = r.sessions();
  const detail::pool_labels label(r);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"cuscope\"";
  out += ",\"recorded_events\":" + std::to_string(r.recorded());
  out += ",\"dropped_events\":" + std::to_string(r.dropped());
  out += ",\"capacity\":" + std::to_string(r.capacity());
  out += "},\"traceEvents\":[\n";
  bool first = true;
  const auto open = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  std::map<int, bool> devices;
  for (const memory_event& e : ev)
    devices[e.device] = true;
  for (const auto& d : devices) {
    open();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(d.first) +
           ",\"args\":{\"name\":\"device " + std::to_string(d.first) + " (cuscope)\"}}";
    open();
    out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(d.first) +
           ",\"tid\":1,\"args\":{\"name\":\"sessions\"}}";
  }
  const auto counter = [&](const memory_event& e, const std::string& name, const char* series,
                           std::size_t value) {
    open();
    out += "{\"name\":";
    json_string(out, name);
    out += ",\"ph\":\"C\",\"pid\":" + std::to_string(e.device) + ",\"ts\":" + json_us(e.time_ns) +
           ",\"args\":{\"" + series + "\":" + std::to_string(value) + "}}";
  };
  const auto instant = [&](const memory_event& e, const std::string& name, const std::string& args,
                           const char* scope) {
    open();
    out += "{\"name\":";
    json_string(out, name);
    out += ",\"ph\":\"i\",\"s\":\"" + std::string(scope) +
           "\",\"pid\":" + std::to_string(e.device) + ",\"tid\":1,\"ts\":" + json_us(e.time_ns) +
           ",\"args\":{" + args + "}}";
  };
  const auto session_name = [&](std::uint32_t id) -> std::string {
    if (id == 0 || id > sessions.size()) return "session " + std::to_string(id);
    const std::string& n = sessions[id - 1].name;
    return n.empty() ? "session " + std::to_string(id) : n;
  };

  // Used bytes per pool, known from the first sample on and moved by allocations and frees.
  std::map<cudaMemPool_t, std::size_t> used;
  // Bytes whose free is enqueued and not yet known to have run, per pool and stream.
  std::map<cudaMemPool_t, std::map<cudaStream_t, std::size_t>> freeing;
  std::map<cudaMemPool_t, int> pool_device;
  const auto freeing_total = [&](cudaMemPool_t p) {
    std::size_t sum = 0;
    for (const auto& s : freeing[p])
      sum += s.second;
    return sum;
  };
  std::map<std::uint32_t, const memory_event*> begun;
  const std::int64_t last_ns = ev.empty() ? 0 : ev.back().time_ns;
  const std::int64_t first_ns = ev.empty() ? 0 : ev.front().time_ns;
  const auto slice = [&](std::uint32_t id, int device, std::int64_t begin, std::int64_t end,
                         const std::string& extra) {
    open();
    out += "{\"name\":";
    json_string(out, session_name(id));
    out += ",\"cat\":\"session\",\"ph\":\"X\",\"pid\":" + std::to_string(device) +
           ",\"tid\":1,\"ts\":" + json_us(begin) + ",\"dur\":" + json_us(end - begin) +
           ",\"args\":{\"session\":" + std::to_string(id) + extra + "}}";
  };

  for (const memory_event& e : ev) {
    pool_device[e.pool] = e.device;
    switch (e.kind) {
      case memory_event_kind::allocate:
      case memory_event_kind::free: {
        auto u = used.find(e.pool);
        if (e.kind == memory_event_kind::free) {
          freeing[e.pool][e.stream] += e.bytes;
          counter(e, label(e.pool) + ": freeing", "bytes", freeing_total(e.pool));
        }
        if (u == used.end()) break;
        if (e.kind == memory_event_kind::allocate)
          u->second += e.bytes;
        else
          u->second = u->second > e.bytes ? u->second - e.bytes : 0;
        counter(e, label(e.pool) + ": used", "bytes", u->second);
        break;
      }
      case memory_event_kind::synchronize:
        for (auto& p : freeing) {
          if (pool_device[p.first] != e.device) continue;
          bool changed = false;
          for (auto& s : p.second) {
            if ((e.value != 0 || s.first == e.stream) && s.second != 0) {
              s.second = 0;
              changed = true;
            }
          }
          if (changed) {
            memory_event at = e;
            at.pool = p.first;
            counter(at, label(p.first) + ": freeing", "bytes", freeing_total(p.first));
          }
        }
        break;
      case memory_event_kind::sample:
        if (e.pool != nullptr) {
          used[e.pool] = e.bytes;
          counter(e, label(e.pool) + ": used", "bytes", e.bytes);
          counter(e, label(e.pool) + ": reserved", "bytes", e.value);
        }
        counter(e, "device " + std::to_string(e.device) + ": free", "bytes", e.device_free);
        break;
      case memory_event_kind::trim:
        instant(e, "trim " + label(e.pool),
                "\"keep_bytes\":" + std::to_string(e.bytes) + ",\"pool\":" + json_pointer(e.pool),
                "t");
        break;
      case memory_event_kind::set_threshold:
        instant(e, "release threshold " + label(e.pool),
                "\"bytes\":" + std::to_string(e.bytes) + ",\"pool\":" + json_pointer(e.pool), "t");
        break;
      case memory_event_kind::out_of_memory:
        instant(e, "out of memory in " + label(e.pool),
                "\"requested_bytes\":" + std::to_string(e.bytes) +
                    ",\"pool\":" + json_pointer(e.pool) + ",\"session\":" + std::to_string(e.scope),
                "g");
        break;
      case memory_event_kind::retry:
        instant(
            e, "retry after trim in " + label(e.pool),
            "\"requested_bytes\":" + std::to_string(e.bytes) + ",\"pool\":" + json_pointer(e.pool),
            "t");
        break;
      case memory_event_kind::session_begin:
        begun[e.scope] = &e;
        break;
      case memory_event_kind::session_end: {
        const auto b = begun.find(e.scope);
        const std::int64_t begin = b != begun.end() ? b->second->time_ns : first_ns;
        if (b != begun.end()) begun.erase(b);
        slice(e.scope, e.device, begin, e.time_ns,
              ",\"leaked_allocations\":" + std::to_string(e.value) +
                  ",\"leaked_bytes\":" + std::to_string(e.bytes) +
                  (b == begun.end() ? std::string(",\"begin_dropped\":true") : std::string()));
        if (e.value != 0)
          instant(e, "leak in " + session_name(e.scope),
                  "\"leaked_allocations\":" + std::to_string(e.value) + ",\"leaked_bytes\":" +
                      std::to_string(e.bytes) + ",\"session\":" + std::to_string(e.scope),
                  "p");
        break;
      }
    }
  }
  // Sessions still open when the trace was taken end with it.
  for (const auto& b : begun)
    slice(b.first, b.second->device, b.second->time_ns, last_ns, ",\"open\":true");
  out += "\n]}\n";
  return out;
}

/// @brief Writes chrome_trace_json(r) to path.
/// @throws trace_write_error naming path when it cannot be written.
inline void write_chrome_trace(const recorder& r, const std::string& path) {
  detail::write_file(path, chrome_trace_json(r));
}

/// @brief The allocations live at the end of the recorder's timeline, grouped by the session that
/// made them (scope 0: not made by a session), as compact JSON. "complete" is false when the ring
/// dropped events: allocations older than the ring are then missing.
[[nodiscard]] inline std::string snapshot_json(const recorder& r) {
  using detail::json_pointer;
  using detail::json_string;
  using detail::json_us;
  const std::vector<memory_event> ev = r.events();
  const std::vector<recorded_session> sessions = r.sessions();
  const detail::pool_labels label(r);
  const std::map<const void*, memory_event> live = detail::live_allocations(ev);
  std::map<std::uint32_t, std::vector<const memory_event*>> by_scope;
  for (const auto& a : live)
    by_scope[a.second.scope].push_back(&a.second);
  std::string out = "{\"schema\":\"cuscope-snapshot/1\",\"time_us\":";
  out += json_us(ev.empty() ? 0 : ev.back().time_ns);
  out += ",\"recorded_events\":" + std::to_string(r.recorded());
  out += ",\"dropped_events\":" + std::to_string(r.dropped());
  out += std::string(",\"complete\":") + (r.dropped() == 0 ? "true" : "false");
  out += ",\"scopes\":[";
  bool first_scope = true;
  for (const auto& s : by_scope) {
    if (!first_scope) out += ",";
    first_scope = false;
    std::size_t bytes = 0;
    for (const memory_event* e : s.second)
      bytes += e->bytes;
    out += "\n{\"session\":" + std::to_string(s.first) + ",\"name\":";
    if (s.first != 0 && s.first <= sessions.size()) {
      json_string(out, sessions[s.first - 1].name);
      out += ",\"parent\":" + std::to_string(sessions[s.first - 1].parent);
    } else {
      out += "null,\"parent\":0";
    }
    out += ",\"live_allocations\":" + std::to_string(s.second.size()) +
           ",\"live_bytes\":" + std::to_string(bytes) + ",\"allocations\":[";
    bool first = true;
    for (const memory_event* e : s.second) {
      if (!first) out += ",";
      first = false;
      out += "\n {\"ptr\":" + json_pointer(e->ptr) + ",\"bytes\":" + std::to_string(e->bytes) +
             ",\"device\":" + std::to_string(e->device) + ",\"pool\":";
      json_string(out, label(e->pool));
      out += ",\"stream\":" + json_pointer(e->stream) + ",\"time_us\":" + json_us(e->time_ns) + "}";
    }
    out += "]}";
  }
  out += "]}\n";
  return out;
}

/// @brief Writes snapshot_json(r) to path.
/// @throws trace_write_error naming path when it cannot be written.
inline void write_snapshot(const recorder& r, const std::string& path) {
  detail::write_file(path, snapshot_json(r));
}

}  // namespace cuscope
