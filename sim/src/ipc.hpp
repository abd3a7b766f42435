// SPDX-License-Identifier: Apache-2.0
// Memory and events shared between simulated processes (ipc.cpp): exportable pools backed by a
// memory file that another process maps, the pointers exported from them, and interprocess
// events whose state lives in shared memory. docs/simulated-device.md, "Memory across processes".
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "pool_allocator.hpp"

namespace cuscope::sim::detail {

// Exports one process may hold of a pool at a time; the table lives in the pool's file.
constexpr std::uint32_t ipc_export_slots = 2048;

// One exported allocation, in the pool's file, read and written by every process that maps it.
struct ipc_export_record {
  std::uint64_t serial = 0;  // 0: a free slot
  std::uint64_t offset = 0;  // of the allocation's memory in the file
  std::uint64_t size = 0;
  std::uint32_t importers = 0;  // processes that map it now
  std::uint32_t freed = 0;      // the exporting process has freed it
  std::int32_t last_importer = 0;
  std::uint32_t unused = 0;
};

// The start of an exportable pool's file: who made it and what it exports.
struct ipc_pool_header {
  std::uint64_t magic = 0;
  std::uint64_t pool_id = 0;
  std::int32_t exporter_pid = 0;
  std::int32_t device = 0;
  std::atomic<std::uint32_t> lock{0};  // guards the records, across processes
  std::uint32_t slots = 0;
  std::uint64_t next_serial = 1;
  ipc_export_record records[ipc_export_slots];
};

// A process's view of a pool's shared file: the exporting pool's, or an imported pool's.
struct ipc_share {
  ipc_share() = default;
  ipc_share(const ipc_share&) = delete;
  ipc_share& operator=(const ipc_share&) = delete;
  ~ipc_share();

  struct import {
    std::uint32_t slot = 0;
    std::uint64_t serial = 0;
    std::size_t size = 0;       // of the allocation
    std::uintptr_t region = 0;  // the mapping's first address (page-aligned)
    std::size_t length = 0;     // and its length
  };

  int fd = -1;
  ipc_pool_header* header = nullptr;
  std::size_t header_bytes = 0;
  bool imported = false;
  // Exporter: where each chunk of the pool lies in the file, by its device address, and the
  // next free offset (offsets are never reused; released ranges are punched out).
  std::map<std::uintptr_t, std::size_t> chunks;
  std::size_t next_offset = 0;
  // Exporter: the slot of each exported allocation, by address.
  std::map<std::uintptr_t, std::uint32_t> exported;
  // Importer: the live imported allocations, by address, and what they map.
  std::map<std::uintptr_t, import> imports;
  std::size_t imported_bytes = 0;
  std::size_t imported_high = 0;
};

// An interprocess event's state, in shared memory that every process holding it maps.
struct ipc_event_block {
  std::uint64_t magic = 0;
  std::atomic<std::uint64_t> generation{0};  // records so far, in any process
  std::atomic<std::uint64_t> completed{0};   // the latest record that has run
  std::int32_t creator_pid = 0;
  std::int32_t device = 0;
};

// A process's mapping of an interprocess event's block. The creator unlinks its name when the
// event is destroyed; operations that still wait for it keep the mapping alive.
struct ipc_event {
  ipc_event() = default;
  ipc_event(const ipc_event&) = delete;
  ipc_event& operator=(const ipc_event&) = delete;
  ~ipc_event();

  ipc_event_block* block = nullptr;
  char name[48] = {};
  bool creator = false;
};

}  // namespace cuscope::sim::detail
