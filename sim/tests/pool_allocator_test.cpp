// SPDX-License-Identifier: Apache-2.0
// The allocator inside a simulated memory pool, on its own: built from pool_allocator.cpp alone,
// with memory from a backing that hands out address ranges and counts them.
#include "pool_allocator.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <vector>

#include "catch.hpp"

using cuscope::sim::detail::free_tag;
using cuscope::sim::detail::mapped_memory;
using cuscope::sim::detail::pending_free;
using cuscope::sim::detail::pool_allocator;
using cuscope::sim::detail::pool_backing;
using cuscope::sim::detail::reuse_fn;
using cuscope::sim::detail::reuse_rank;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t unit = 2 * MiB;

// Hands out address ranges one after another, up to a capacity, and remembers what is mapped.
class counting_backing final : public pool_backing {
 public:
  explicit counting_backing(std::size_t capacity = 1024 * MiB) : capacity_(capacity) {}
  bool map(std::size_t bytes, mapped_memory& out) override {
    if (mapped_bytes() + bytes > capacity_) return false;
    out = mapped_memory{next_, bytes, nullptr};
    mapped_.emplace(next_, bytes);
    next_ += bytes + unit;  // a gap, so that neighbouring chunks are not contiguous
    ++maps;
    return true;
  }
  bool can_map(std::size_t bytes) const noexcept override {
    return mapped_bytes() + bytes <= capacity_;
  }
  void release_part(const mapped_memory& m, std::size_t, std::size_t bytes) noexcept override {
    released_[m.va] += bytes;
  }
  void unmap(const mapped_memory& m) noexcept override {
    mapped_.erase(m.va);
    released_.erase(m.va);
    ++unmaps;
  }
  std::size_t mapped_bytes() const noexcept {
    std::size_t n = 0;
    for (const auto& [va, size] : mapped_)
      n += size;
    for (const auto& [va, size] : released_)
      n -= size;
    return n;
  }
  int maps = 0;
  int unmaps = 0;

 private:
  std::size_t capacity_;
  std::uintptr_t next_ = 0x10000000;
  std::map<std::uintptr_t, std::size_t> mapped_;
  std::map<std::uintptr_t, std::size_t> released_;
};

// Every free usable as is: the reuse rules are the runtime's, not the allocator's.
const auto any_free = [](const free_tag&, bool) { return reuse_rank::now; };

// A free is usable only once it has run; a pending one only after a wait.
const auto after_run = [](const free_tag&, bool pending) {
  return pending ? reuse_rank::after_wait : reuse_rank::now;
};

struct allocation {
  pool_allocator::result r;
  std::uintptr_t address() const { return r.placement.address(); }
};

allocation place(pool_allocator& a, std::size_t bytes, reuse_fn rank) {
  allocation out;
  REQUIRE(a.allocate(bytes, rank, out.r));
  return out;
}

}  // namespace

TEST_CASE("pool_allocator: a request grows the pool by a chunk of the granularity",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation x = place(a, 1024, any_free);
  CHECK(a.reserved() == unit);
  CHECK(a.used() == 1024);
  CHECK(backing.maps == 1);
  const allocation y = place(a, 3 * MiB, any_free);
  CHECK(a.reserved() == 3 * unit);  // 3 MiB rounded up to 4 MiB
  CHECK(a.used() == 1024 + 3 * MiB);
  CHECK(a.chunks().size() == 2);
  a.free_now(x.r.placement);
  a.free_now(y.r.placement);
  CHECK(a.used() == 0);
  CHECK(a.used_high() == 1024 + 3 * MiB);
  CHECK(a.reserved_high() == 3 * unit);
  a.reset_used_high();
  CHECK(a.used_high() == 0);
}

TEST_CASE("pool_allocator: the smallest free segment that fits wins, then the oldest chunk",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation big = place(a, unit, any_free);        // chunk 0, whole
  const allocation small = place(a, unit / 2, any_free);  // chunk 1, first half
  const allocation keep = place(a, unit / 2, any_free);   // chunk 1, second half
  a.free_now(big.r.placement);
  a.free_now(small.r.placement);
  // A quarter fits both free segments: the half in chunk 1 is the smaller one.
  const allocation q = place(a, unit / 4, any_free);
  CHECK(q.address() == small.address());
  // A whole unit fits only the free chunk 0.
  const allocation w = place(a, unit, any_free);
  CHECK(w.address() == big.address());
  CHECK(a.reserved() == 2 * unit);
  for (const allocation* x : std::initializer_list<const allocation*>{&q, &w, &keep})
    a.free_now(x->r.placement);
}

TEST_CASE("pool_allocator: neighbouring free segments merge and a free chunk can be trimmed",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  std::vector<allocation> parts;
  for (int i = 0; i < 4; ++i)
    parts.push_back(place(a, unit / 4, any_free));
  CHECK(a.chunks().size() == 1);
  a.free_now(parts[1].r.placement);
  a.free_now(parts[2].r.placement);
  // The two middle quarters merged: half a unit fits between the others.
  const allocation half = place(a, unit / 2, any_free);
  CHECK(half.address() == parts[1].address());
  a.trim(0);
  CHECK(a.reserved() == unit);  // live allocations hold the chunk
  for (const allocation* x : std::initializer_list<const allocation*>{&parts[0], &half, &parts[3]})
    a.free_now(x->r.placement);
  CHECK(a.chunks().front()->segments.size() == 1);
  a.trim(0);
  CHECK(a.reserved() == 0);
  CHECK(backing.unmaps == 1);
}

TEST_CASE("pool_allocator: a free in stream order is marked until it completes",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation x = place(a, unit, any_free);
  const pending_free f = a.free_later(x.r.placement, free_tag{3, 7});
  CHECK(a.used() == 0);
  CHECK(a.pending_frees() == 1);
  // The rank function sees the free and whether it is pending.
  free_tag seen;
  bool seen_pending = false;
  allocation y;
  REQUIRE(a.allocate(
      unit,
      [&](const free_tag& t, bool pending) {
        seen = t;
        seen_pending = pending;
        return reuse_rank::now;
      },
      y.r));
  CHECK(seen == free_tag{3, 7});
  CHECK(seen_pending);
  CHECK(y.address() == x.address());
  a.free_now(y.r.placement);
  // A chunk that a pending free still refers to is not released, even once free again.
  a.trim(0);
  CHECK(a.reserved() == unit);
  a.complete(f);
  CHECK(a.pending_frees() == 0);
  a.trim(0);
  CHECK(a.reserved() == 0);
}

TEST_CASE(
    "pool_allocator: memory behind a pending free is used after a wait only when the pool "
    "cannot grow",
    "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 2 * unit);  // room for two chunks
  const allocation x = place(a, unit, after_run);
  const pending_free f = a.free_later(x.r.placement, free_tag{5, 9});
  // The pool may still grow: a new chunk rather than a wait.
  const allocation y = place(a, unit, after_run);
  CHECK_FALSE(y.r.waits);
  CHECK(y.address() != x.address());
  // At the limit, the pending free is the last resort.
  const allocation z = place(a, unit, after_run);
  CHECK(z.r.waits);
  CHECK(z.r.wait_for == free_tag{5, 9});
  CHECK(z.address() == x.address());
  // Nothing is left: the request fails.
  pool_allocator::result none;
  CHECK_FALSE(a.allocate(unit, any_free, none));
  a.complete(f);
  a.free_now(y.r.placement);
  a.free_now(z.r.placement);
}

TEST_CASE("pool_allocator: a pool grows only as far as its maximum and its backing allow",
          "[pool_allocator]") {
  counting_backing small(3 * unit);
  pool_allocator a(small, unit, 0);
  const allocation x = place(a, 2 * unit, any_free);
  pool_allocator::result r;
  CHECK_FALSE(a.allocate(2 * unit, any_free, r));  // the backing has one unit left
  CHECK(a.reserved() == 2 * unit);
  counting_backing large;
  pool_allocator limited(large, unit, 3 * unit);
  const allocation y = place(limited, 2 * unit, any_free);
  CHECK_FALSE(limited.allocate(2 * unit, any_free, r));  // the maximum
  CHECK(limited.max_size() == 3 * unit);
  a.free_now(x.r.placement);
  limited.free_now(y.r.placement);
}

TEST_CASE("pool_allocator: trim keeps at least the bytes, whole chunks largest first",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  std::vector<allocation> xs;
  for (const std::size_t size : {unit, 2 * unit, 4 * unit})
    xs.push_back(place(a, size, any_free));
  for (const allocation& x : xs)
    a.free_now(x.r.placement);
  REQUIRE(a.reserved() == 7 * unit);
  a.trim(3 * unit);
  CHECK(a.reserved() == 3 * unit);  // the 4-unit chunk went, the others stay
  CHECK(a.chunks().size() == 2);
  a.trim(unit + unit / 2);
  // The 2-unit chunk, or a unit of it, would take the pool below the bytes: the 1-unit chunk goes.
  CHECK(a.reserved() == 2 * unit);
  CHECK(backing.mapped_bytes() == 2 * unit);
  a.trim(0);
  CHECK(a.reserved() == 0);
  CHECK(backing.mapped_bytes() == 0);
  CHECK(a.chunks().empty());
}

TEST_CASE("pool_allocator: trim gives back free units of a chunk that holds an allocation",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation big = place(a, 4 * unit, any_free);
  a.free_now(big.r.placement);
  const allocation live = place(a, 1024, any_free);  // in the first unit of the 4-unit chunk
  a.trim(0);
  CHECK(a.reserved() == unit);
  CHECK(backing.mapped_bytes() == unit);
  CHECK(a.used() == 1024);
  // The rest of the first unit still serves allocations; the units given back do not.
  const allocation near = place(a, unit / 2, any_free);
  CHECK(near.address() == live.address() + 1024);
  CHECK(a.reserved() == unit);
  const allocation more = place(a, unit, any_free);  // a new chunk
  CHECK(a.reserved() == 2 * unit);
  CHECK(more.address() != live.address() + unit);
  a.free_now(near.r.placement);
  a.free_now(more.r.placement);
  a.free_now(live.r.placement);
  a.trim(0);
  CHECK(a.reserved() == 0);
  CHECK(a.chunks().empty());
  CHECK(backing.mapped_bytes() == 0);
}

TEST_CASE("pool_allocator: a free still to run keeps its chunk's units from trims",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation big = place(a, 2 * unit, any_free);
  a.free_now(big.r.placement);
  const allocation x = place(a, 1024, any_free);
  const pending_free f = a.free_later(x.r.placement, free_tag{1, 1});
  a.trim(0);
  CHECK(a.reserved() == 2 * unit);
  a.complete(f);
  a.trim(0);
  CHECK(a.reserved() == 0);
}

TEST_CASE("pool_allocator: free units scattered over chunks are remapped before the pool grows",
          "[pool_allocator]") {
  // A, B and C of one unit each; A and C freed; two units asked: a driver remaps the free
  // units into one range instead of growing (gpu-evidence section 7).
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation x = place(a, unit, any_free);
  const allocation y = place(a, unit, any_free);
  const allocation z = place(a, unit, any_free);
  a.free_now(x.r.placement);
  a.free_now(z.r.placement);
  const allocation w = place(a, 2 * unit, any_free);
  CHECK(a.reserved() == 3 * unit);
  CHECK(backing.mapped_bytes() == 3 * unit);
  CHECK(a.chunks().size() == 2);  // y's chunk and the remapped one
  // With one free unit, a two-unit request remaps it and grows by one unit only.
  a.free_now(y.r.placement);
  const allocation v = place(a, 2 * unit, any_free);
  CHECK(a.reserved() == 4 * unit);
  CHECK(backing.mapped_bytes() == 4 * unit);
  a.free_now(w.r.placement);
  a.free_now(v.r.placement);
  a.trim(0);
  CHECK(backing.mapped_bytes() == 0);
}

TEST_CASE("pool_allocator: remapping lets a pool at its maximum serve what its free units hold",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 3 * unit);
  const allocation x = place(a, unit, any_free);
  const allocation y = place(a, unit, any_free);
  const allocation z = place(a, unit, any_free);
  a.free_now(x.r.placement);
  a.free_now(z.r.placement);
  const allocation w = place(a, 2 * unit, any_free);
  CHECK(a.reserved() == 3 * unit);
  pool_allocator::result r;
  CHECK_FALSE(a.allocate(unit, any_free, r));  // full: nothing free to remap
  a.free_now(y.r.placement);
  a.free_now(w.r.placement);
}

TEST_CASE("pool_allocator: only units the request may reuse as they are are remapped",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  const allocation x = place(a, unit, any_free);
  const allocation y = place(a, unit, any_free);
  const allocation z = place(a, unit, any_free);
  // Frees that have run but that this request may not reuse as they are (another stream's,
  // unobserved): no remapping, the pool grows.
  a.complete(a.free_later(x.r.placement, free_tag{7, 1}));
  a.complete(a.free_later(z.r.placement, free_tag{7, 2}));
  const auto not_stream_7 = [](const free_tag& t, bool) {
    return t.stream == 7 ? reuse_rank::after_wait : reuse_rank::now;
  };
  const allocation w = place(a, 2 * unit, not_stream_7);
  CHECK(a.reserved() == 5 * unit);
  a.free_now(y.r.placement);
  a.free_now(w.r.placement);
}

TEST_CASE("pool_allocator: without opportunistic reuse only segments of one free merge",
          "[pool_allocator]") {
  counting_backing backing;
  pool_allocator a(backing, unit, 0);
  a.set_opportunistic(false);
  CHECK_FALSE(a.opportunistic());
  const allocation x = place(a, unit / 2, any_free);
  const allocation y = place(a, unit / 2, any_free);
  const pending_free fx = a.free_later(x.r.placement, free_tag{1, 1});
  const pending_free fy = a.free_later(y.r.placement, free_tag{2, 1});
  a.complete(fx);
  a.complete(fy);
  // Two frees that have run stay apart while opportunistic reuse is off.
  CHECK(a.chunks().front()->segments.size() == 2);
  // Turned on, the next change in the chunk merges them.
  a.set_opportunistic(true);
  const allocation t = place(a, 256, any_free);
  a.free_now(t.r.placement);
  CHECK(a.chunks().front()->segments.size() == 1);
  const allocation z = place(a, unit, any_free);
  CHECK(z.address() == x.address());
  CHECK(a.reserved() == unit);
  a.free_now(z.r.placement);
}

TEST_CASE("pool_allocator: release_all gives every chunk back", "[pool_allocator]") {
  counting_backing backing;
  {
    pool_allocator a(backing, unit, 0);
    (void)place(a, unit, any_free);
    (void)place(a, unit, any_free);
    a.release_all();
    CHECK(a.reserved() == 0);
    CHECK(backing.mapped_bytes() == 0);
    (void)place(a, unit, any_free);
  }
  CHECK(backing.mapped_bytes() == 0);  // the destructor releases what is left
  CHECK(backing.unmaps == 3);
}
