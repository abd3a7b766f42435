// SPDX-License-Identifier: Apache-2.0
// The allocator inside one simulated memory pool (pool_allocator.hpp).
#include "pool_allocator.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

namespace cuscope::sim::detail {

namespace {

std::size_t round_up_to(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

// A free whose completion has not run still points into its chunk: releasing the chunk then
// would leave that completion writing to memory that is gone, even when the segment it freed has
// since been reused and freed again on another stream.
bool releasable(const pool_chunk& c) {
  return c.used_segments == 0 && c.pending_frees == 0;
}

}  // namespace

pool_allocator::pool_allocator(pool_backing& backing, std::size_t granularity,
                               std::size_t max_size) noexcept
    : backing_(backing), granularity_(granularity), max_size_(max_size) {}

pool_allocator::~pool_allocator() {
  release_all();
}

void pool_allocator::index_insert(pool_chunk& c, segment_map::iterator seg) {
  free_segments_.insert(free_entry{seg->second.size, c.serial, seg->first, &c, seg});
}

pool_allocator::free_entry pool_allocator::index_key(const pool_chunk& c,
                                                     segment_map::const_iterator seg) {
  return free_entry{seg->second.size, c.serial, seg->first, nullptr, {}};
}

// Whether allocations may treat two neighbouring free segments as one. Under a fixed value of the
// opportunistic flag this is an equivalence between free segments, which is what lets a change be
// coalesced around itself only.
bool pool_allocator::mergeable(const pool_segment& a, const pool_segment& b) const noexcept {
  const bool same_free = a.freed_by == b.freed_by;
  const bool both_done = !a.free_pending && !b.free_pending;
  return !a.used && !b.used && !a.hole && !b.hole &&
         ((both_done && (allow_opportunistic_ || same_free)) ||
          (a.free_pending && b.free_pending && same_free));
}

// Merges neighbouring free segments that allocations may treat as one, from `it` onwards, until
// the segment at offset `last` has been passed: the left segment absorbs the right one and keeps
// its own free.
void pool_allocator::coalesce_from(pool_chunk& c, segment_map::iterator it, std::size_t last) {
  while (it != c.segments.end() && it->first <= last) {
    auto next = std::next(it);
    if (next != c.segments.end() && mergeable(it->second, next->second)) {
      pool_segment& a = it->second;
      // The index entry moves to the merged size; its node is reused rather than reallocated.
      auto entry = free_segments_.extract(index_key(c, it));
      do {
        free_segments_.erase(index_key(c, next));
        a.size += next->second.size;
        next = c.segments.erase(next);
      } while (next != c.segments.end() && mergeable(a, next->second));
      entry.value().size = a.size;
      free_segments_.insert(std::move(entry));
    }
    it = next;
  }
}

// Coalesces a chunk after the segments from first to offset last changed (first is end() when
// none did), with the result of a pass over the whole chunk. Where no neighbours could merge
// before the change, only the changed segments and their neighbours can merge now; a chunk
// coalesced while opportunistic reuse was off may hold done neighbours that can merge once it is
// on, and gets the whole pass.
void pool_allocator::coalesce(pool_chunk& c, segment_map::iterator first, std::size_t last) {
  if (!c.coalesced_opportunistic && allow_opportunistic_) {
    coalesce_from(c, c.segments.begin(), std::numeric_limits<std::size_t>::max());
  } else if (first != c.segments.end()) {
    if (first != c.segments.begin()) --first;
    coalesce_from(c, first, last);
  }
  c.coalesced_opportunistic = allow_opportunistic_;
}

void pool_allocator::set_opportunistic(bool allowed) {
  allow_opportunistic_ = allowed;
}

// A new chunk of the granularity that holds need bytes, as one free segment that is not in the
// index; null when the pool may not grow or the device has too little memory left.
pool_chunk* pool_allocator::grow(std::size_t need) {
  if (need > std::numeric_limits<std::size_t>::max() - granularity_) return nullptr;
  const std::size_t chunk_bytes = round_up_to(need, granularity_);
  if (max_size_ != 0 && reserved_ + chunk_bytes > max_size_) return nullptr;
  auto c = std::make_unique<pool_chunk>();
  if (!backing_.map(chunk_bytes, c->mem)) return nullptr;
  c->segments.emplace(0, pool_segment{chunk_bytes, false, false, free_tag{}});
  c->serial = next_chunk_serial_++;
  pool_chunk* raw = c.get();
  chunks_.push_back(std::move(c));
  reserved_ += chunk_bytes;
  reserved_high_ = std::max(reserved_high_, reserved_);
  return raw;
}

// Whether the unit at offset of chunk c is wholly free, in segments whose frees have run and,
// given rank, that an allocation may reuse as they are. The caller checks that no free of the
// chunk is still to run: such a free still writes to its memory when it runs.
bool pool_allocator::unit_free(const pool_chunk& c, std::size_t offset, reuse_fn* rank) const {
  auto it = std::prev(c.segments.upper_bound(offset));
  for (; it != c.segments.end() && it->first < offset + granularity_; ++it) {
    const pool_segment& seg = it->second;
    if (seg.used || seg.hole || seg.free_pending) return false;
    if (rank != nullptr && (*rank)(seg.freed_by, false) != reuse_rank::now) return false;
  }
  return true;
}

// Gives back the memory of the free unit at offset of chunks_[index]: the unit becomes a hole
// in the chunk, the free segments around it are cut at its edges, and a chunk left with nothing
// but holes is released whole.
void pool_allocator::release_unit(std::size_t index, std::size_t offset) {
  pool_chunk& c = *chunks_[index];
  const std::size_t end = offset + granularity_;
  auto first = std::prev(c.segments.upper_bound(offset));
  auto last = first;
  while (last != c.segments.end() && last->first < end) {
    free_segments_.erase(index_key(c, last));
    ++last;
  }
  const std::size_t left_offset = first->first;
  const pool_segment left = first->second;
  const auto before_last = std::prev(last);
  const std::size_t right_end = before_last->first + before_last->second.size;
  const pool_segment right = before_last->second;
  c.segments.erase(first, last);
  if (left_offset < offset) {
    pool_segment piece = left;
    piece.size = offset - left_offset;
    index_insert(c, c.segments.emplace(left_offset, piece).first);
  }
  if (right_end > end) {
    pool_segment piece = right;
    piece.size = right_end - end;
    index_insert(c, c.segments.emplace(end, piece).first);
  }
  auto hole =
      c.segments.emplace(offset, pool_segment{granularity_, false, false, free_tag{}, true}).first;
  // Neighbouring holes become one.
  if (auto next = std::next(hole); next != c.segments.end() && next->second.hole) {
    hole->second.size += next->second.size;
    c.segments.erase(next);
  }
  if (hole != c.segments.begin()) {
    if (auto prev = std::prev(hole); prev->second.hole) {
      prev->second.size += hole->second.size;
      c.segments.erase(hole);
    }
  }
  c.hole_bytes += granularity_;
  reserved_ -= granularity_;
  backing_.release_part(c.mem, offset, granularity_);
  if (c.hole_bytes == c.mem.size) release_chunk(index);
}

// Gives back up to units free units that rank lets an allocation reuse as they are, the oldest
// chunks and lowest offsets first.
void pool_allocator::remap_units(std::size_t units, reuse_fn rank) {
  std::vector<std::pair<const pool_chunk*, std::size_t>> found;
  for (const auto& c : chunks_) {
    if (c->pending_frees != 0) continue;
    for (std::size_t off = 0; off < c->mem.size && found.size() < units; off += granularity_)
      if (unit_free(*c, off, &rank)) found.emplace_back(c.get(), off);
  }
  for (const auto& [chunk, offset] : found) {
    const auto at = std::find_if(chunks_.begin(), chunks_.end(),
                                 [chunk = chunk](const auto& c) { return c.get() == chunk; });
    release_unit(static_cast<std::size_t>(at - chunks_.begin()), offset);
  }
}

bool pool_allocator::allocate(std::size_t need, reuse_fn rank, result& out) {
  // Best fit: the lowest reuse rank, then the smallest segment, then the oldest chunk and the
  // lowest offset. The index is in the order of the last three, so the first segment usable now
  // wins, and without one the first usable after a wait.
  auto best = free_segments_.end();
  reuse_rank best_rank = reuse_rank::never;
  for (auto it = free_segments_.lower_bound(free_entry{need, 0, 0, nullptr, {}});
       it != free_segments_.end(); ++it) {
    const pool_segment& seg = it->where->second;
    const reuse_rank r = rank(seg.freed_by, seg.free_pending);
    if (r == reuse_rank::now) {
      best = it;
      best_rank = r;
      break;
    }
    if (r == reuse_rank::after_wait && best_rank == reuse_rank::never) {
      best = it;
      best_rank = r;
    }
  }
  pool_chunk* best_chunk = nullptr;
  segment_map::iterator where;
  // Memory that is free now comes first, then a new chunk: as much of it as free units of the
  // pool allow is their memory remapped, the rest new memory from the device; memory whose reuse
  // makes the allocation wait for a free on another stream is the last resort.
  if (best_rank != reuse_rank::now &&
      need <= std::numeric_limits<std::size_t>::max() - granularity_) {
    const std::size_t chunk_bytes = round_up_to(need, granularity_);
    const std::size_t units = chunk_bytes / granularity_;
    // Count first: free units are only remapped when the new chunk can then be made.
    std::size_t free_units = 0;
    for (const auto& c : chunks_) {
      if (c->pending_frees != 0) continue;
      for (std::size_t off = 0; off < c->mem.size && free_units < units; off += granularity_)
        if (unit_free(*c, off, &rank)) ++free_units;
    }
    const std::size_t remapped = free_units * granularity_;
    const bool fits_limit = max_size_ == 0 || reserved_ - remapped + chunk_bytes <= max_size_;
    if (free_units > 0 && fits_limit && backing_.can_map(chunk_bytes - remapped))
      remap_units(free_units, rank);
    best_chunk = grow(need);
    if (best_chunk != nullptr) {
      where = best_chunk->segments.begin();
      best_rank = reuse_rank::now;
    } else if (best == free_segments_.end()) {
      return false;
    }
  }
  // The chosen segment leaves the index; its node serves what is cut off it, if anything.
  decltype(free_segments_)::node_type entry;
  if (best_chunk == nullptr) {
    best_chunk = best->chunk;
    where = best->where;
    entry = free_segments_.extract(best);
  }
  const std::size_t best_offset = where->first;
  pool_segment& seg = where->second;
  out.waits = best_rank == reuse_rank::after_wait;
  out.wait_for = seg.freed_by;
  if (seg.size > need) {
    pool_segment rest = seg;
    rest.size = seg.size - need;
    const auto cut = best_chunk->segments.emplace_hint(std::next(where), best_offset + need, rest);
    if (entry.empty()) {
      index_insert(*best_chunk, cut);
    } else {
      entry.value() = free_entry{rest.size, best_chunk->serial, cut->first, best_chunk, cut};
      free_segments_.insert(std::move(entry));
    }
  }
  ++best_chunk->used_segments;
  seg.size = need;
  seg.used = true;
  seg.free_pending = false;
  seg.freed_by = free_tag{};
  used_ += need;
  used_high_ = std::max(used_high_, used_);
  out.placement = pool_placement{best_chunk, where};
  return true;
}

void pool_allocator::free_now(const pool_placement& p) {
  pool_chunk& c = *p.chunk;
  pool_segment& seg = p.where->second;
  seg.used = false;
  seg.free_pending = false;
  seg.freed_by = free_tag{};
  --c.used_segments;
  used_ -= seg.size;
  index_insert(c, p.where);
  coalesce(c, p.where, p.where->first);
}

pending_free pool_allocator::free_later(const pool_placement& p, free_tag tag) {
  pool_chunk& c = *p.chunk;
  pool_segment& seg = p.where->second;
  seg.used = false;
  seg.free_pending = true;
  seg.freed_by = tag;
  --c.used_segments;
  used_ -= seg.size;
  ++pending_frees_;
  ++c.pending_frees;
  index_insert(c, p.where);
  // No other segment waits for this free, so the segment can merge with none: only a chunk left
  // to coalesce whole needs a pass.
  coalesce(c, c.segments.end(), 0);
  return pending_free{&c, p.where->first, seg.size, tag};
}

void pool_allocator::complete(const pending_free& f) {
  pool_chunk& c = *f.chunk;
  // Segments of the freed block that were not reused since, as one or cut by reuses.
  auto first = c.segments.end();
  std::size_t last = 0;
  for (auto it = c.segments.lower_bound(f.offset);
       it != c.segments.end() && it->first < f.offset + f.size; ++it) {
    pool_segment& seg = it->second;
    if (!seg.used && seg.free_pending && seg.freed_by == f.tag) {
      seg.free_pending = false;
      if (first == c.segments.end()) first = it;
      last = it->first;
    }
  }
  --pending_frees_;
  --c.pending_frees;
  coalesce(c, first, last);
}

void pool_allocator::release_chunk(std::size_t index) noexcept {
  pool_chunk& c = *chunks_[index];
  for (auto it = c.segments.begin(); it != c.segments.end(); ++it)
    if (!it->second.used && !it->second.hole) free_segments_.erase(index_key(c, it));
  reserved_ -= c.mem.size - c.hole_bytes;
  backing_.unmap(c.mem);
  chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(index));
}

void pool_allocator::trim(std::size_t bytes) {
  if (reserved_ <= bytes) return;
  for (auto& c : chunks_)
    coalesce(*c, c->segments.end(), 0);
  const auto held = [](const pool_chunk& c) { return c.mem.size - c.hole_bytes; };
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < chunks_.size(); ++i)
    if (releasable(*chunks_[i])) order.push_back(i);
  // Largest first: the fewest releases that get there.
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return held(*chunks_[a]) > held(*chunks_[b]); });
  std::vector<std::size_t> release;
  std::size_t reserved = reserved_;
  for (std::size_t i : order) {
    const std::size_t size = held(*chunks_[i]);
    if (reserved - size < bytes) continue;
    reserved -= size;
    release.push_back(i);
  }
  std::sort(release.rbegin(), release.rend());
  for (std::size_t i : release)
    release_chunk(i);
  // Then free units of the chunks that stay, newest chunk and highest address first, while the
  // pool keeps at least bytes.
  for (std::size_t i = chunks_.size(); i-- > 0;) {
    if (chunks_[i]->pending_frees != 0) continue;
    const std::size_t size = chunks_[i]->mem.size;
    for (std::size_t off = size; off > 0;) {
      off -= granularity_;
      if (reserved_ < bytes + granularity_) return;
      if (!unit_free(*chunks_[i], off, nullptr)) continue;
      const bool last = chunks_[i]->hole_bytes + granularity_ == size;
      release_unit(i, off);
      if (last) break;  // the chunk is gone
    }
  }
}

void pool_allocator::release_all() noexcept {
  while (!chunks_.empty())
    release_chunk(chunks_.size() - 1);
}

}  // namespace cuscope::sim::detail
