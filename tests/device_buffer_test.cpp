// SPDX-License-Identifier: Apache-2.0
#include <array>
#include <cstdint>
#include <cuscope/device_buffer.hpp>
#include <cuscope/device_span.hpp>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

using cuscope::device_buffer;
using cuscope::device_span;
using cuscope::memory_pool;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;

static_assert(!std::is_copy_constructible_v<device_buffer<int>>);
static_assert(!std::is_copy_assignable_v<device_buffer<int>>);
static_assert(std::is_nothrow_move_constructible_v<device_buffer<int>>);
static_assert(std::is_nothrow_move_assignable_v<device_buffer<int>>);
static_assert(std::is_nothrow_destructible_v<device_buffer<int>>);
static_assert(std::is_nothrow_default_constructible_v<device_buffer<int>>);
static_assert(std::is_trivially_copyable_v<device_span<int>>);
static_assert(std::is_trivially_copyable_v<device_span<const double>>);
static_assert(std::is_convertible_v<device_span<int>, device_span<const int>>);
static_assert(!std::is_convertible_v<device_span<const int>, device_span<int>>);
// A session's counting is not part of the public interface: only session::make_buffer and
// batches() make buffers and allocations that a ledger counts.
static_assert(std::is_constructible_v<device_buffer<int>, cuscope::stream_ref, std::size_t,
                                      cuscope::memory_pool_ref>);
static_assert(!std::is_constructible_v<device_buffer<int>, cuscope::stream_ref, std::size_t,
                                       cuscope::memory_pool_ref, cuscope::detail::ledger*,
                                       const char*, cuscope::call_site>);
static_assert(!std::is_constructible_v<cuscope::device_allocation, cuscope::stream_ref, std::size_t,
                                       cuscope::memory_pool_ref, cuscope::detail::ledger*>);
static_assert(!std::is_constructible_v<cuscope::device_allocation, cuscope::stream_ref, std::size_t,
                                       cuscope::memory_pool_ref, cuscope::detail::ledger*,
                                       const char*, cuscope::call_site>);
template <class Pool, class = void>
struct can_allocate_into : std::false_type {};
template <class Pool>
struct can_allocate_into<
    Pool, std::void_t<decltype(std::declval<const Pool&>().allocate_into(
              std::declval<cuscope::stream_ref>(), std::size_t{1}, cuscope::alloc_policy::fail_fast,
              std::declval<cuscope::detail::record_target>()))>> : std::true_type {};
static_assert(!can_allocate_into<cuscope::memory_pool>::value);
static_assert(!can_allocate_into<cuscope::memory_pool_ref>::value);
// A temporary is never the source of an asynchronous copy.
static_assert(!std::is_constructible_v<device_buffer<int>, cuscope::stream_ref, std::vector<int>&&,
                                       cuscope::memory_pool_ref>);
static_assert(std::is_constructible_v<device_buffer<int>, cuscope::stream_ref,
                                      const std::vector<int>&, cuscope::memory_pool_ref>);

namespace {

template <class T, class = void>
struct can_copy_from_rvalue : std::false_type {};
template <class T>
struct can_copy_from_rvalue<T, std::void_t<decltype(std::declval<device_buffer<T>&>().copy_from(
                                   std::declval<cuscope::stream_ref>(), std::vector<T>{}))>>
    : std::true_type {};
static_assert(!can_copy_from_rvalue<int>::value);

std::vector<int> iota(std::size_t n, int from = 1) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

}  // namespace

TEST_CASE("device_buffer: data copied in and out is unchanged", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<int> in = iota(1000);
  device_buffer<int> b(s, in.size(), pool);
  CHECK(b.size() == 1000);
  CHECK(b.size_bytes() == 4000);
  CHECK_FALSE(b.empty());
  CHECK(b.stream() == s.ref());
  CHECK(b.pool() == pool.ref());
  b.copy_from(s, in);
  CHECK(b.to_vector(s) == in);
  std::vector<int> out(1000, 0);
  b.copy_to(s, out);
  s.synchronize();
  CHECK(out == in);
}

TEST_CASE("device_buffer: a buffer made from host data holds it", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::array<double, 4> in{1.5, 2.5, 3.5, 4.5};
  device_buffer<double> b(s, in, pool);
  CHECK(b.size() == 4);
  const std::vector<double> out = b.to_vector(s);
  CHECK(out == std::vector<double>(in.begin(), in.end()));
}

TEST_CASE("device_buffer: copies at an offset land in the right place and are bounds-checked",
          "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  device_buffer<int> b(s, 6, pool);
  const std::vector<int> zeros(6, 0);
  b.copy_from(s, zeros);
  const std::vector<int> two{7, 8};
  b.copy_from(s, two, 3);
  CHECK(b.to_vector(s) == std::vector<int>{0, 0, 0, 7, 8, 0});
  std::vector<int> part(2);
  b.copy_to(s, part.data(), 2, 3);
  s.synchronize();
  CHECK(part == two);
  CHECK_THROWS_WITH(b.copy_from(s, two, 5), contains("2 elements at offset 5 do not fit"));
  CHECK_THROWS_WITH(b.copy_from(s, two.data(), 1, 6),
                    contains("1 element at offset 6 does not fit in a buffer of 6"));
  CHECK_THROWS_AS(b.copy_to(s, part.data(), 7), std::out_of_range);
  std::vector<int> small(3);
  CHECK_THROWS_WITH(b.copy_to(s, small), contains("cannot hold 6"));
}

TEST_CASE("device_buffer: a zero-length buffer holds no allocation", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  device_buffer<int> b(s, 0, pool);
  CHECK(b.data() == nullptr);
  CHECK(b.empty());
  CHECK(pool.stats().used_bytes == 0);
  CHECK(b.to_vector(s).empty());
  CHECK(b.pool() == pool.ref());
}

TEST_CASE("device_buffer: the destructor frees on the buffer's stream", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  {
    device_buffer<float> b(s, 1 << 20, pool);
    CHECK(pool.stats().used_bytes == (std::size_t{4} << 20));
  }
  CHECK(pool.stats().used_bytes == 0);
  s.synchronize();
  pool.trim_to(0);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("device_buffer: a byte count that overflows is refused before anything is allocated",
          "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::size_t too_many = std::numeric_limits<std::size_t>::max() / 2;
  CHECK_THROWS_WITH(device_buffer<std::uint64_t>(s, too_many, pool),
                    contains("bytes overflow the byte count"));
  CHECK_THROWS_AS(device_buffer<std::uint64_t>(s, too_many, pool), std::length_error);
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("device_buffer: a buffer beyond the device throws out_of_memory", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  CHECK_THROWS_AS(device_buffer<char>(s, total * 2, pool), cuscope::out_of_memory);
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("device_buffer: a deep copy takes a stream and owns its own memory", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  memory_pool other_pool;
  stream s;
  stream t;
  const std::vector<int> in = iota(100);
  device_buffer<int> a(s, in, pool);
  device_buffer<int> b(t, a);
  CHECK(b.data() != a.data());
  CHECK(b.pool() == pool.ref());
  CHECK(b.stream() == t.ref());
  device_buffer<int> c(t, a, other_pool);
  CHECK(c.pool() == other_pool.ref());
  a.copy_from(t, std::vector<int>(100, 0).data(), 100);  // after the copies, on t
  CHECK(b.to_vector(t) == in);
  CHECK(c.to_vector(t) == in);
}

TEST_CASE("device_buffer: resize keeps the leading elements", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<int> in = iota(10);
  device_buffer<int> b(s, in, pool);
  b.resize(s, 20);
  CHECK(b.size() == 20);
  std::vector<int> grown = b.to_vector(s);
  CHECK(std::vector<int>(grown.begin(), grown.begin() + 10) == in);
  b.resize(s, 4);
  CHECK(b.to_vector(s) == std::vector<int>{1, 2, 3, 4});
  b.resize(s, 0);
  CHECK(b.empty());
  CHECK(pool.stats().used_bytes == 0);
  b.resize(s, 3);
  CHECK(b.size() == 3);
  device_buffer<int> none;
  CHECK_THROWS_WITH(none.resize(s, 1), contains("has no pool"));
}

TEST_CASE("device_buffer: resize and set_stream move the buffer to another stream in order",
          "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  stream t;
  const std::vector<int> in = iota(64);
  device_buffer<int> b(s, in, pool);
  b.set_stream(t);
  CHECK(b.stream() == t.ref());
  // t waits for the copy on s before it reads the buffer.
  CHECK(b.to_vector(t) == in);
  b.resize(s, 128);
  CHECK(b.stream() == s.ref());
  const std::vector<int> out = b.to_vector(s);
  CHECK(std::vector<int>(out.begin(), out.begin() + 64) == in);
}

TEST_CASE("device_buffer: a moved-from buffer is empty and can be assigned again",
          "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  device_buffer<int> a(s, 4096, pool);
  int* const p = a.data();
  device_buffer<int> b(std::move(a));
  CHECK(b.data() == p);
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(a.size() == 0);
  CHECK_THROWS_WITH(a.pool(), contains("has no pool"));
  CHECK(a.to_vector(s).empty());
  const std::vector<int> four{1, 2, 3, 4};
  CHECK_THROWS_AS(a.copy_from(s, four), std::logic_error);
  CHECK_THROWS_WITH(
      a.copy_from(s, four),
      contains("4 elements with an empty (moved-from or default-constructed) buffer"));
  std::vector<int> out(4);
  CHECK_THROWS_AS(a.copy_to(s, out.data(), 4), std::logic_error);
  a = std::move(b);
  CHECK(a.data() == p);
  device_buffer<int> c(s, 2048, pool);
  a = std::move(c);  // frees what a held
  CHECK(pool.stats().used_bytes == 2048 * sizeof(int));
  swap(a, b);
  CHECK(a.empty());
  CHECK(b.size() == 2048);
}

TEST_CASE("device_buffer: release gives the pointer back and adopt takes it", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<int> five = iota(5);
  device_buffer<int> a(s, five, pool);
  int* raw = a.release();
  CHECK(a.empty());
  CHECK(pool.stats().used_bytes > 0);
  device_buffer<int> b = device_buffer<int>::adopt(s, raw, 5, pool);
  CHECK(b.to_vector(s) == iota(5));
  void* more = pool.allocate(s, 3 * sizeof(int));
  device_buffer<int> c = device_buffer<int>::adopt(s, static_cast<int*>(more), 3, pool);
  CHECK(c.size() == 3);
}

TEST_CASE("device_buffer: a buffer may outlive its pool object", "[device_buffer]") {
  device_guard device;
  stream s;
  std::optional<memory_pool> pool;
  pool.emplace();
  const std::vector<int> eight = iota(8);
  device_buffer<int> b(s, eight, *pool);
  pool.reset();  // CUDA releases the pool's memory when its last allocation is freed
  CHECK(b.to_vector(s) == iota(8));
}

TEST_CASE("device_span: views, sub-views and const views of a buffer", "[device_buffer]") {
  device_guard device;
  memory_pool pool;
  stream s;
  device_buffer<int> b(s, 10, pool);
  const device_span<int> all = b.span();
  CHECK(all.data() == b.data());
  CHECK(all.size() == 10);
  CHECK(all.size_bytes() == 40);
  const device_span<const int> view = all;
  CHECK(view.data() == b.data());
  CHECK(all.first(3).size() == 3);
  CHECK(all.last(4).data() == b.data() + 6);
  CHECK(all.subspan(2, 5).data() == b.data() + 2);
  CHECK(all.end() - all.begin() == 10);
  const device_buffer<int>& cb = b;
  static_assert(std::is_same_v<decltype(cb.span()), device_span<const int>>);
  CHECK(device_span<int>().empty());
}

#if CUSCOPE_TEST_SIMULATED

TEST_CASE(
    "device_buffer: new memory holds garbage and the buffer never reads the host's copy of "
    "it",
    "[device_buffer][sim]") {
  device_guard device;
  memory_pool pool;
  stream s;
  device_buffer<std::uint8_t> b(s, 16, pool);
  const std::vector<std::uint8_t> out = b.to_vector(s);
  CHECK(out == std::vector<std::uint8_t>(16, cuscope::sim::poison_byte));
}

TEST_CASE("device_buffer: set_stream orders the free after the work on the old stream",
          "[device_buffer][sim]") {
  device_guard device;
  memory_pool pool;
  stream s;
  stream t;
  const std::vector<int> four = iota(4);
  {
    device_buffer<int> b(s, four, pool);  // the copy waits on s
    b.set_stream(t);
  }  // freed on t
  t.synchronize();
  pool.trim_to(0);
  CHECK(pool.stats().reserved_bytes == 0);
  // Had the free not waited for s, the copy would now write to memory the pool gave back.
  CHECK_NOTHROW(s.synchronize());
}

TEST_CASE(
    "device_buffer: a failing runtime call in any operation leaves no leak and a usable "
    "buffer",
    "[device_buffer][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep([](cuscope::test::fault_point& fault) {
    memory_pool pool;
    stream s;
    stream t;
    const std::vector<int> sixteen = iota(16);
    device_buffer<int> b(s, sixteen, pool);
    s.synchronize();
    std::optional<device_buffer<int>> copy;
    const std::vector<int> head = iota(8);
    (void)fault.run([&] {
      copy.emplace(t, b);
      b.resize(t, 32);
      b.set_stream(s);
      b.copy_from(s, head.data(), head.size());
      (void)b.to_vector(s);
    });
    // Whatever failed, the buffer still starts with the 16 elements it had.
    const std::vector<int> now = b.to_vector(b.stream());
    REQUIRE(now.size() >= 16);
    CHECK(std::vector<int>(now.begin(), now.begin() + 16) == iota(16));
    if (copy) CHECK(copy->to_vector(t) == iota(16));
  });
  CHECK(runs > 10);
}

#endif

#if CUSCOPE_TEST_SIMULATED

TEST_CASE("device_buffer: the source of a deep copy on another stream is freed after the copy",
          "[device_buffer][sim]") {
  device_guard device;
  memory_pool pool;
  stream s;
  stream t;
  const std::vector<int> in = iota(64);
  std::optional<device_buffer<int>> a;
  a.emplace(s, in, pool);
  const device_buffer<int> b(t, *a);  // reads a on t
  a.reset();                          // frees a on s
  // The simulated device runs nothing until asked: had the free on s not waited for the copy on
  // t, it would run here and the copy would then read freed (poisoned) memory.
  s.synchronize();
  CHECK(b.to_vector(t) == in);
}

#endif
