// SPDX-License-Identifier: Apache-2.0
// The rules every owner follows (shared/STYLE.md, "Ownership is in the name"), pinned once for all
// of them: copy deleted, noexcept moves that leave the source empty, move assignment that frees
// the target's own resource, release() that gives the handle up, adopt() that takes one, and a
// moved-from object that is destructible and assignable.
#include <cstddef>
#include <cuscope/device_allocation.hpp>
#include <cuscope/device_buffer.hpp>
#include <cuscope/event.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/stream.hpp>
#include <string>
#include <type_traits>
#include <utility>

#include "test_support.hpp"

#if CUSCOPE_CATCH2_MAJOR >= 3
#  include <catch2/catch_template_test_macros.hpp>
#endif

using cuscope::test::device_guard;

namespace {

// What the owners of the device memory need to live: a pool and a stream.
struct environment {
  cuscope::memory_pool pool;
  cuscope::stream stream;
};

constexpr std::size_t elements = 16;

template <class Owner>
struct owner_traits;

template <>
struct owner_traits<cuscope::memory_pool> {
  static cuscope::memory_pool make(environment&) { return cuscope::memory_pool(); }
  static cudaMemPool_t raw(const cuscope::memory_pool& o) { return o.get(); }
  static cuscope::memory_pool adopt(environment&, cudaMemPool_t h) {
    return cuscope::memory_pool::adopt(h, 0);
  }
};

template <>
struct owner_traits<cuscope::stream> {
  static cuscope::stream make(environment&) { return cuscope::stream(); }
  static cudaStream_t raw(const cuscope::stream& o) { return o.get(); }
  static cuscope::stream adopt(environment&, cudaStream_t h) {
    return cuscope::stream::adopt(h, 0);
  }
};

template <>
struct owner_traits<cuscope::event> {
  static cuscope::event make(environment&) { return cuscope::event(); }
  static cudaEvent_t raw(const cuscope::event& o) { return o.get(); }
  static cuscope::event adopt(environment&, cudaEvent_t h) { return cuscope::event::adopt(h, 0); }
};

template <>
struct owner_traits<cuscope::device_allocation> {
  static cuscope::device_allocation make(environment& env) {
    return cuscope::device_allocation(env.stream, elements * sizeof(int), env.pool);
  }
  static void* raw(const cuscope::device_allocation& o) { return o.get(); }
  static cuscope::device_allocation adopt(environment& env, void* h) {
    return cuscope::device_allocation::adopt(env.stream, h, elements * sizeof(int), env.pool);
  }
};

template <>
struct owner_traits<cuscope::device_buffer<int>> {
  static cuscope::device_buffer<int> make(environment& env) {
    return cuscope::device_buffer<int>(env.stream, elements, env.pool);
  }
  static const int* raw(const cuscope::device_buffer<int>& o) { return o.data(); }
  static cuscope::device_buffer<int> adopt(environment& env, int* h) {
    return cuscope::device_buffer<int>::adopt(env.stream, h, elements, env.pool);
  }
};

template <>
struct owner_traits<cuscope::pinned_buffer<int>> {
  static cuscope::pinned_buffer<int> make(environment&) {
    return cuscope::pinned_buffer<int>(elements);
  }
  static const int* raw(const cuscope::pinned_buffer<int>& o) { return o.data(); }
  static cuscope::pinned_buffer<int> adopt(environment&, int* h) {
    return cuscope::pinned_buffer<int>::adopt(h, elements);
  }
};

int cleanup_failures = 0;
void count_cleanup_failure(const cuscope::cleanup_error&) noexcept {
  ++cleanup_failures;
}

// Handles and allocations the simulated device still holds, one report line each.
std::size_t outstanding() {
#if CUSCOPE_TEST_SIMULATED
  const std::string report = cuscope::sim::outstanding_report();
  std::size_t lines = 0;
  for (const char c : report)
    lines += c == '\n' ? 1 : 0;
  return lines;
#else
  return 0;
#endif
}

}  // namespace

#define CUSCOPE_OWNERS                                                               \
  cuscope::memory_pool, cuscope::stream, cuscope::event, cuscope::device_allocation, \
      cuscope::device_buffer<int>, cuscope::pinned_buffer<int>

TEMPLATE_TEST_CASE("owner: copies are deleted; moves, destruction, release and empty never throw",
                   "[owner]", CUSCOPE_OWNERS) {
  STATIC_REQUIRE_FALSE(std::is_copy_constructible_v<TestType>);
  STATIC_REQUIRE_FALSE(std::is_copy_assignable_v<TestType>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<TestType>);
  STATIC_REQUIRE(std::is_nothrow_move_assignable_v<TestType>);
  STATIC_REQUIRE(std::is_nothrow_destructible_v<TestType>);
  STATIC_REQUIRE(noexcept(std::declval<TestType&>().release()));
  STATIC_REQUIRE(noexcept(std::declval<const TestType&>().empty()));
}

TEMPLATE_TEST_CASE("owner: a move leaves the source empty and the target owning", "[owner]",
                   CUSCOPE_OWNERS) {
  device_guard device;
  const cuscope::scoped_cleanup_handler counted(&count_cleanup_failure);
  cleanup_failures = 0;
  environment env;
  using traits = owner_traits<TestType>;
  TestType source = traits::make(env);
  const auto handle = traits::raw(source);
  REQUIRE(handle != nullptr);
  CHECK_FALSE(source.empty());
  TestType target(std::move(source));
  CHECK(source.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(traits::raw(source) == nullptr);
  CHECK(traits::raw(target) == handle);
  CHECK_FALSE(target.empty());
  // The moved-from object is assignable, and owns what it is given.
  source = traits::make(env);
  CHECK_FALSE(source.empty());
  CHECK(traits::raw(source) != handle);
  CHECK(cleanup_failures == 0);
}

TEMPLATE_TEST_CASE("owner: move assignment frees the target's own resource first", "[owner]",
                   CUSCOPE_OWNERS) {
  device_guard device;
  const cuscope::scoped_cleanup_handler counted(&count_cleanup_failure);
  cleanup_failures = 0;
  environment env;
  using traits = owner_traits<TestType>;
  TestType a = traits::make(env);
  TestType b = traits::make(env);
  const auto b_handle = traits::raw(b);
  const std::size_t before = outstanding();
  a = std::move(b);
  if (cuscope::test::simulated) CHECK(outstanding() == before - 1);
  CHECK(traits::raw(a) == b_handle);
  CHECK(b.empty());  // NOLINT(bugprone-use-after-move)
  // Assigning to itself, through a reference, keeps the resource.
  TestType& same = a;
  a = std::move(same);
  CHECK(traits::raw(a) == b_handle);
  // Assigning an empty object empties the target and frees what it held.
  a = std::move(b);
  CHECK(a.empty());
  if (cuscope::test::simulated) CHECK(outstanding() == before - 2);
  CHECK(cleanup_failures == 0);
}

TEMPLATE_TEST_CASE("owner: release gives the handle up and adopt takes ownership of it", "[owner]",
                   CUSCOPE_OWNERS) {
  device_guard device;  // at its end: nothing outstanding, so the adopted owner freed the handle
  const cuscope::scoped_cleanup_handler counted(&count_cleanup_failure);
  cleanup_failures = 0;
  environment env;
  using traits = owner_traits<TestType>;
  {
    TestType owner = traits::make(env);
    const auto handle = traits::raw(owner);
    const std::size_t before = outstanding();
    auto released = owner.release();
    CHECK(released == handle);
    CHECK(owner.empty());
    CHECK(traits::raw(owner) == nullptr);
    { TestType gone(std::move(owner)); }  // destroying the emptied owner frees nothing
    if (cuscope::test::simulated) CHECK(outstanding() == before);
    TestType adopted = traits::adopt(env, released);
    CHECK(traits::raw(adopted) == handle);
    CHECK_FALSE(adopted.empty());
  }
  // Exactly one owner freed it: a second free would have reached the cleanup handler.
  CHECK(cleanup_failures == 0);
}
