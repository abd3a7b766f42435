// SPDX-License-Identifier: Apache-2.0
// The allocator inside one simulated memory pool: the chunks of memory the pool maps, cut into
// segments for allocations, an index of the free segments, the merging of neighbouring free
// segments, and trimming. It knows nothing of streams, devices or the rest of the runtime: the
// runtime maps and unmaps the memory (pool_backing) and says which freed memory a request may
// reuse (reuse_rank). docs/simulated-device.md, "Memory pools" and "Reuse of freed memory".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuscope::sim::detail {

/// The free that returned a segment: the id of the stream it was enqueued on and its position in
/// that stream. Stream 0 means no stream: memory never allocated, or freed at once by cudaFree.
struct free_tag {
  std::uint64_t stream = 0;
  std::uint64_t seq = 0;

  friend bool operator==(const free_tag& a, const free_tag& b) noexcept {
    return a.stream == b.stream && a.seq == b.seq;
  }
  friend bool operator!=(const free_tag& a, const free_tag& b) noexcept { return !(a == b); }
};

/// Memory mapped for a pool: the device address range and the host memory behind it.
struct mapped_memory {
  std::uintptr_t va = 0;
  std::size_t size = 0;
  std::byte* host = nullptr;
};

/// Where a pool gets its memory from. Implemented by the runtime.
class pool_backing {
 public:
  virtual ~pool_backing() = default;
  /// Maps bytes of memory into out; false when the device has too little left.
  virtual bool map(std::size_t bytes, mapped_memory& out) = 0;
  /// Whether the device has bytes of memory left to map.
  [[nodiscard]] virtual bool can_map(std::size_t bytes) const noexcept = 0;
  /// Gives back the memory behind [offset, offset + bytes) of memory from map, keeping its
  /// addresses: the pool no longer holds it, and the range is no longer accessible.
  virtual void release_part(const mapped_memory& memory, std::size_t offset,
                            std::size_t bytes) noexcept = 0;
  /// Gives memory from map back, what release_part left of it and its addresses.
  virtual void unmap(const mapped_memory& memory) noexcept = 0;
};

/// A non-owning reference to a callable, cheaper than std::function to pass and to call.
template <class Signature>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, function_ref>>>
  function_ref(F&& f) noexcept  // implicit, so that call sites pass lambdas
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

struct pool_segment {
  std::size_t size = 0;
  bool used = false;
  // For a free segment: whether the free that returned it has still to run.
  bool free_pending = false;
  free_tag freed_by;
  // Memory given back to the device, its addresses kept: neither used nor free.
  bool hole = false;
};

// A chunk's segments by offset. Its nodes stay put while they exist, so the index and live
// allocations keep iterators to their segments instead of looking them up.
using segment_map = std::map<std::size_t, pool_segment>;

struct pool_chunk {
  mapped_memory mem;
  segment_map segments;
  std::uint64_t serial = 0;  // creation order within its pool
  std::size_t used_segments = 0;
  std::size_t pending_frees = 0;  // enqueued frees of its memory that have not run
  std::size_t hole_bytes = 0;     // given back to the device by release_part
  // No two neighbouring segments could merge under this value of the pool's opportunistic reuse
  // flag (true also implies it for false), so a change needs coalescing only around itself.
  bool coalesced_opportunistic = true;
};

/// A live allocation's place in its pool.
struct pool_placement {
  pool_chunk* chunk = nullptr;
  segment_map::iterator where{};  // a used segment never leaves its place

  [[nodiscard]] std::uintptr_t address() const noexcept { return chunk->mem.va + where->first; }
  [[nodiscard]] std::byte* host() const noexcept { return chunk->mem.host + where->first; }
  [[nodiscard]] std::size_t size() const noexcept { return where->second.size; }
};

/// A free enqueued on a stream, to be completed when it runs.
struct pending_free {
  pool_chunk* chunk = nullptr;
  std::size_t offset = 0;
  std::size_t size = 0;
  free_tag tag;
};

/// How an allocation may reuse a free segment: usable as is, usable once it waits for the free
/// on another stream, or not at all.
enum class reuse_rank { now = 0, after_wait = 1, never = 2 };

/// Rank of a free segment for one request, given the free that returned it and whether that free
/// has still to run. Segments never freed or freed at once carry the tag of stream 0.
using reuse_fn = function_ref<reuse_rank(const free_tag& freed_by, bool free_pending)>;

/// The allocator of one pool. Not thread-safe: the runtime's lock guards it.
class pool_allocator {
 public:
  /// granularity: a new chunk is the request rounded up to it. max_size: the most the pool may
  /// hold, 0 for no limit of its own.
  pool_allocator(pool_backing& backing, std::size_t granularity, std::size_t max_size) noexcept;
  pool_allocator(const pool_allocator&) = delete;
  pool_allocator& operator=(const pool_allocator&) = delete;
  ~pool_allocator();

  struct result {
    pool_placement placement;
    bool waits = false;  // the allocation must wait for the free in wait_for
    free_tag wait_for;
  };

  /// Places bytes (a multiple of the allocation alignment) in the pool: the best free segment
  /// that rank allows as is, else a new chunk made first of free units of the pool that rank
  /// allows as is (remapped, as a driver defragments a pool) and then of new memory, else the
  /// best segment it allows after a wait. False when none of them is possible.
  bool allocate(std::size_t bytes, reuse_fn rank, result& out);

  /// Frees an allocation at once (cudaFree): its memory is free as soon as this returns.
  void free_now(const pool_placement& p);
  /// Frees an allocation in stream order: the segment is free but marked with tag until
  /// complete() is called for the returned free.
  pending_free free_later(const pool_placement& p, free_tag tag);
  /// The free has run: its segments lose their mark and may merge with their neighbours.
  void complete(const pending_free& f);

  /// Gives memory back until the pool holds no more than bytes, keeping at least bytes: first
  /// whole chunks with no allocation and no free still to run, largest first, then free units
  /// (the granularity) of chunks with no free still to run.
  void trim(std::size_t bytes);
  /// Releases every chunk, whatever it holds (the simulated process ends).
  void release_all() noexcept;

  /// Whether allocations may treat neighbouring segments whose frees have run as one.
  void set_opportunistic(bool allowed);
  [[nodiscard]] bool opportunistic() const noexcept { return allow_opportunistic_; }

  [[nodiscard]] std::size_t reserved() const noexcept { return reserved_; }
  [[nodiscard]] std::size_t reserved_high() const noexcept { return reserved_high_; }
  [[nodiscard]] std::size_t used() const noexcept { return used_; }
  [[nodiscard]] std::size_t used_high() const noexcept { return used_high_; }
  [[nodiscard]] std::size_t pending_frees() const noexcept { return pending_frees_; }
  [[nodiscard]] std::size_t max_size() const noexcept { return max_size_; }
  void reset_reserved_high() noexcept { reserved_high_ = reserved_; }
  void reset_used_high() noexcept { used_high_ = used_; }

  /// Chunks, oldest first.
  [[nodiscard]] const std::vector<std::unique_ptr<pool_chunk>>& chunks() const noexcept {
    return chunks_;
  }

 private:
  // A free segment, ordered as allocations prefer it among those of equal rank: smallest first,
  // then the oldest chunk, then the lowest offset.
  struct free_entry {
    std::size_t size = 0;
    std::uint64_t chunk_serial = 0;
    std::size_t offset = 0;
    pool_chunk* chunk = nullptr;
    segment_map::iterator where{};  // not part of the order

    bool operator<(const free_entry& o) const noexcept {
      if (size != o.size) return size < o.size;
      if (chunk_serial != o.chunk_serial) return chunk_serial < o.chunk_serial;
      return offset < o.offset;
    }
  };

  pool_chunk* grow(std::size_t need);
  [[nodiscard]] bool unit_free(const pool_chunk& c, std::size_t offset, reuse_fn* rank) const;
  void release_unit(std::size_t index, std::size_t offset);
  void remap_units(std::size_t units, reuse_fn rank);
  void index_insert(pool_chunk& c, segment_map::iterator seg);
  static free_entry index_key(const pool_chunk& c, segment_map::const_iterator seg);
  [[nodiscard]] bool mergeable(const pool_segment& a, const pool_segment& b) const noexcept;
  void coalesce_from(pool_chunk& c, segment_map::iterator it, std::size_t last);
  void coalesce(pool_chunk& c, segment_map::iterator first, std::size_t last);
  void release_chunk(std::size_t index) noexcept;

  pool_backing& backing_;
  std::size_t granularity_;
  std::size_t max_size_;
  bool allow_opportunistic_ = true;
  std::size_t reserved_ = 0;
  std::size_t reserved_high_ = 0;
  std::size_t used_ = 0;
  std::size_t used_high_ = 0;
  std::size_t pending_frees_ = 0;
  std::uint64_t next_chunk_serial_ = 0;
  std::vector<std::unique_ptr<pool_chunk>> chunks_;  // oldest first
  // Every free segment of every chunk, so that an allocation finds its best fit without a scan.
  std::set<free_entry> free_segments_;
};

}  // namespace cuscope::sim::detail
