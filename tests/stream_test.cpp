// SPDX-License-Identifier: Apache-2.0
#include <cuscope/stream.hpp>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "test_support.hpp"

#if __has_include(<cuda/stream_ref>)
#  include <cuscope/cuda_stream_ref.hpp>
#  define CUSCOPE_TEST_HAVE_CUDA_STREAM_REF 1
#endif

using cuscope::stream;
using cuscope::stream_ref;
using cuscope::test::contains;
using cuscope::test::device_guard;

// A view is trivially copyable and never takes a literal 0 for the legacy default stream.
static_assert(std::is_trivially_copyable_v<stream_ref>);
static_assert(std::is_convertible_v<cudaStream_t, stream_ref>);
static_assert(std::is_convertible_v<stream_ref, cudaStream_t>);
static_assert(!std::is_constructible_v<stream_ref, int>);
static_assert(!std::is_constructible_v<stream_ref, std::nullptr_t>);
static_assert(std::is_nothrow_copy_constructible_v<stream_ref>);
// An owner is move-only with noexcept moves.
static_assert(!std::is_copy_constructible_v<stream>);
static_assert(!std::is_copy_assignable_v<stream>);
static_assert(std::is_nothrow_move_constructible_v<stream>);
static_assert(std::is_nothrow_move_assignable_v<stream>);
static_assert(std::is_nothrow_destructible_v<stream>);
// A reference is taken only from a stream that outlives the expression.
static_assert(std::is_convertible_v<stream&, stream_ref>);
static_assert(!std::is_convertible_v<stream, stream_ref>);

namespace {

// Another library's stream reference, shaped like cuda::stream_ref but named by no interop
// header: having get() and a constructor from cudaStream_t is not enough to convert.
class foreign_stream_ref {
 public:
  foreign_stream_ref(cudaStream_t s) : s_(s) {}  // NOLINT: implicit, like cuda::stream_ref
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_;
};

struct stream_deleter {
  void operator()(cudaStream_t s) const noexcept { (void)cudaStreamDestroy(s); }
};
using owning_stream_ptr = std::unique_ptr<CUstream_st, stream_deleter>;

// `owning_stream_ptr p = ref;` would take ownership of a borrowed stream: it must not compile.
// (Explicit construction from the raw handle stays possible, as for any cudaStream_t.)
static_assert(!std::is_convertible_v<stream_ref, owning_stream_ptr>);
static_assert(!std::is_convertible_v<const owning_stream_ptr&, stream_ref>);
static_assert(!std::is_convertible_v<stream_ref, foreign_stream_ref>);
static_assert(!std::is_convertible_v<foreign_stream_ref, stream_ref>);

}  // namespace

TEST_CASE(
    "stream: a new stream is non-blocking, on the current device, and destroyed with the "
    "object",
    "[stream]") {
  device_guard device;
  stream s;
  REQUIRE_FALSE(s.empty());
  unsigned flags = 0;
  REQUIRE(cudaStreamGetFlags(s.get(), &flags) == cudaSuccess);
  CHECK(flags == cudaStreamNonBlocking);
  CHECK(s.flags() == cudaStreamNonBlocking);
  CHECK(s.device() == 0);
  s.synchronize();
  CHECK(s.ready());
}

TEST_CASE("stream: options choose the flags and the priority", "[stream]") {
  device_guard device;
  int least = 0;
  int greatest = 0;
  REQUIRE(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
  cuscope::stream_options o;
  o.flags = cudaStreamDefault;
  o.priority = greatest;
  stream s(o);
  unsigned flags = 1;
  REQUIRE(cudaStreamGetFlags(s.get(), &flags) == cudaSuccess);
  CHECK(flags == cudaStreamDefault);
  CHECK(s.priority() == greatest);
}

TEST_CASE("stream: a moved-from stream is empty and refuses to be used", "[stream]") {
  device_guard device;
  stream a;
  const cudaStream_t handle = a.get();
  stream b(std::move(a));
  CHECK(b.get() == handle);
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(a.get() == nullptr);
  CHECK_THROWS_WITH(a.ref(), contains("moved-from"));
  CHECK_THROWS_AS(a.synchronize(), std::logic_error);
  a = std::move(b);
  CHECK(a.get() == handle);
  CHECK(b.empty());
}

TEST_CASE("stream: release gives the handle back and adopt takes one", "[stream]") {
  device_guard device;
  stream a;
  cudaStream_t raw = a.release();
  CHECK(a.empty());
  stream b = stream::adopt(raw, 0);
  CHECK(b.get() == raw);
  b.synchronize();
  CHECK_THROWS_WITH(stream::adopt(cudaStreamLegacy, 0), contains("default stream"));
}

TEST_CASE("stream: a stream on a device that does not exist is refused", "[stream]") {
  device_guard device;
  cuscope::stream_options o;
  o.device = 3;
  CHECK_THROWS_WITH(stream(o), contains("device 3 is not valid"));
  o.device = -3;  // only -1 means the current device
  CHECK_THROWS_WITH(stream(o), contains("device -3 is not valid"));
  CHECK_THROWS_AS(stream(o), std::invalid_argument);
}

TEST_CASE("stream: a stream made for another device leaves the current device alone", "[stream]") {
  device_guard device({2});
  CUSCOPE_TEST_NEEDS_DEVICES(2);
  cuscope::stream_options o;
  o.device = 1;
  stream s(o);
  CHECK(s.device() == 1);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
#if CUSCOPE_HAS_STREAM_GET_DEVICE
  CHECK(s.ref().device() == 1);
#endif
}

TEST_CASE("stream_ref: it names default streams and converts to and from cudaStream_t",
          "[stream]") {
  device_guard device;
  CHECK(stream_ref::legacy().get() == cudaStreamLegacy);
  CHECK(stream_ref::per_thread().get() == cudaStreamPerThread);
  CHECK(stream_ref::legacy().describe() == "the legacy default stream");
  stream s;
  const stream_ref r = s;
  CHECK(r.get() == s.get());
  CHECK(r == stream_ref(s.get()));
  const cudaStream_t raw = r;
  CHECK(raw == s.get());
  const foreign_stream_ref foreign(r.get());  // explicitly, through the raw handle
  CHECK(foreign.get() == s.get());
  r.synchronize();
  CHECK(r.ready());
  CHECK_THAT(r.describe(), contains("stream 0x"));
}

#if defined(CUSCOPE_TEST_HAVE_CUDA_STREAM_REF)
static_assert(std::is_convertible_v<stream_ref, cuda::stream_ref>);
static_assert(std::is_convertible_v<cuda::stream_ref, stream_ref>);

TEST_CASE("stream_ref: with <cuscope/cuda_stream_ref.hpp> it converts to and from cuda::stream_ref",
          "[stream]") {
  device_guard device;
  stream s;
  const cuda::stream_ref theirs = s.ref();
  CHECK(theirs.get() == s.get());
  const stream_ref ours = theirs;
  CHECK(ours == s.ref());
  ours.synchronize();
}
#endif

#if CUSCOPE_TEST_SIMULATED
TEST_CASE("stream_ref: a failed synchronization is a cuda_error naming the stream",
          "[stream][sim]") {
  device_guard device;
  stream s;
  cuscope::sim::fail_api("cudaStreamSynchronize", 1, cudaErrorUnknown);
  try {
    s.synchronize();
    FAIL("no exception");
  } catch (const cuscope::cuda_error& e) {
    CHECK(e.status() == cudaErrorUnknown);
    CHECK_THAT(std::string(e.what()), contains("stream 0x"));
  }
  cuscope::sim::fail_api("cudaStreamQuery", 1, cudaErrorUnknown);
  CHECK_THROWS_AS(s.ready(), cuscope::cuda_error);
}

TEST_CASE("stream: a failing runtime call in construction or use leaves nothing behind",
          "[stream][sim]") {
  const std::size_t runs = cuscope::test::fault_sweep(
      [](cuscope::test::fault_point& fault) {
        std::optional<stream> s;
        cuscope::stream_options o;
        o.device = 1;
        (void)fault.run([&] {
          s.emplace(o);
          s->synchronize();
          (void)s->ready();
        });
        CHECK(cuscope::current_device() == 0);
      },
      {2});
  CHECK(runs > 4);
}
#endif
