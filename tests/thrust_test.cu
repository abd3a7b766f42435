// SPDX-License-Identifier: Apache-2.0
// thrust.hpp with nvcc and Thrust's CUDA system, on a GPU: vectors built, filled, resized, sorted
// and reduced on a stream, with the pool's statistics showing where the memory came from.
// (thrust_cpp_test.cpp checks the allocator plumbing on the simulated device.)
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <cstddef>
#include <cuscope/memory_pool.hpp>
#include <cuscope/stream.hpp>
#include <cuscope/thrust.hpp>
#include <vector>

#include "test_support.hpp"

using cuscope::memory_pool;
using cuscope::stream;
using cuscope::thrust_allocator;
using cuscope::test::device_guard;

// static rather than an unnamed namespace: nvcc names unnamed namespaces in the code it hands to
// the host compiler, which then asks for declarations (-Wmissing-declarations).
static constexpr std::size_t MiB = std::size_t{1} << 20;
static constexpr std::size_t n = MiB;  // 4 MiB of int

template <class T>
using vector = thrust::device_vector<T, thrust_allocator<T>>;

static std::size_t used(const memory_pool& pool) {
  return pool.stats().used_bytes;
}

TEST_CASE("thrust_allocator: a device_vector is built, filled and resized in the pool",
          "[thrust][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  {
    vector<int> v(n, 7, thrust_allocator<int>(s, pool));
    CHECK(used(pool) == n * sizeof(int));
    CHECK(v[0] == 7);  // the fill ran on s before the constructor returned
    CHECK(v[n - 1] == 7);
    CHECK(thrust::reduce(cuscope::thrust_policy(s, pool), v.begin(), v.end(), 0L) ==
          7L * static_cast<long>(n));
    v.resize(2 * n, 1);
    CHECK(used(pool) == 2 * n * sizeof(int));
    s.synchronize();
    CHECK(v[n - 1] == 7);
    CHECK(v[n] == 1);
    const vector<int> copy(v);  // same pool and stream
    CHECK(copy.get_allocator() == v.get_allocator());
    CHECK(used(pool) == 4 * n * sizeof(int));
    const thrust::host_vector<int> host(copy);
    CHECK(host[2 * n - 1] == 1);
  }
  CHECK(used(pool) == 0);
  s.synchronize();
  pool.trim_to(0);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("thrust_policy: sort, reduce and scan take their temporary storage from the pool",
          "[thrust][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  vector<int> v(n, thrust_allocator<int>(s, pool));
  const std::size_t vector_bytes = n * sizeof(int);
  thrust::sequence(cuscope::thrust_policy(s, pool), v.rbegin(), v.rend());  // n-1 ... 0

  pool.reset_peaks();
  thrust::sort(cuscope::thrust_policy(s, pool), v.begin(), v.end());
  s.synchronize();
  CHECK(pool.stats().used_high_bytes > vector_bytes);  // the sort's temporary storage
  CHECK(used(pool) == vector_bytes);                   // all of it returned
  CHECK(thrust::is_sorted(cuscope::thrust_policy_sync(s, pool), v.begin(), v.end()));
  CHECK(v[0] == 0);
  CHECK(v[n - 1] == static_cast<int>(n - 1));

  pool.reset_peaks();
  const long sum = thrust::reduce(cuscope::thrust_policy(s, pool), v.begin(), v.end(), 0L);
  CHECK(sum == static_cast<long>(n) * static_cast<long>(n - 1) / 2);
  CHECK(pool.stats().used_high_bytes > vector_bytes);
  CHECK(used(pool) == vector_bytes);

  pool.reset_peaks();
  vector<long> prefix(n, thrust_allocator<long>(s, pool));
  thrust::inclusive_scan(cuscope::thrust_policy(s, pool), v.begin(), v.end(), prefix.begin(),
                         thrust::plus<long>());
  s.synchronize();
  CHECK(prefix[n - 1] == sum);
  CHECK(pool.stats().used_high_bytes > vector_bytes + n * sizeof(long));
  CHECK(used(pool) == vector_bytes + n * sizeof(long));
}

TEST_CASE("thrust_policy: runs on its stream without synchronizing", "[thrust][gpu]") {
  device_guard device;
  memory_pool pool;
  stream s;
  auto policy = cuscope::thrust_policy(s, pool);
  CHECK(thrust::cuda_cub::stream(policy) == s.get());
  CHECK_FALSE(thrust::cuda_cub::must_perform_optional_synchronization(policy));
  auto sync_policy = cuscope::thrust_policy_sync(s, pool);
  CHECK(thrust::cuda_cub::stream(sync_policy) == s.get());
  CHECK(thrust::cuda_cub::must_perform_optional_synchronization(sync_policy));
  thrust_allocator<int> a(s, pool);
  CHECK(thrust::cuda_cub::stream(a.system()) == s.get());
}
