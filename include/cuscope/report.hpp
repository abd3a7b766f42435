// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief memory_report: where a device's memory is, reconciling what the driver says with what
/// pools reserve and use. The answer to "why does nvidia-smi still show memory".
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/format.hpp"
#include "device.hpp"
#include "error.hpp"
#include "memory_pool.hpp"

namespace cuscope {

/// @brief bytes in human units: "512 B", "1.50 KiB", "3.25 GiB".
[[nodiscard]] inline std::string format_bytes(std::size_t bytes) {
  return detail::format_bytes(bytes);
}

/// @brief A pool to show in a memory_report under a name of the caller's choosing.
struct named_pool {
  std::string name;      ///< Label in the report ("activations").
  memory_pool_ref pool;  ///< The pool.
};

/// @brief One pool's line in a memory_report.
struct pool_usage {
  std::string name;                ///< The caller's label, or "default pool".
  cudaMemPool_t handle = nullptr;  ///< The pool.
  bool is_default = false;         ///< Whether it is the device's default pool.
  std::size_t reserved_bytes = 0;  ///< Backing memory it holds from the driver.
  std::size_t used_bytes = 0;      ///< Memory behind its live allocations.

  /// @brief Reserved memory not in use: what a trim could give back.
  [[nodiscard]] std::size_t cached_bytes() const noexcept {
    return reserved_bytes > used_bytes ? reserved_bytes - used_bytes : 0;
  }
};

/// @brief A device's memory, accounted for.
struct device_memory_report {
  int device = 0;                 ///< The device.
  std::string device_name;        ///< Its name.
  std::size_t total_bytes = 0;    ///< Device memory (cudaMemGetInfo).
  std::size_t free_bytes = 0;     ///< Free device memory (cudaMemGetInfo).
  std::vector<pool_usage> pools;  ///< The pools asked about, then the default pool.

  /// @brief Memory the driver counts as taken, by this process and every other.
  [[nodiscard]] std::size_t taken_bytes() const noexcept {
    return total_bytes > free_bytes ? total_bytes - free_bytes : 0;
  }
  /// @brief Reserved by the pools listed.
  [[nodiscard]] std::size_t pool_reserved_bytes() const noexcept {
    std::size_t sum = 0;
    for (const pool_usage& p : pools)
      sum += p.reserved_bytes;
    return sum;
  }
  /// @brief Taken memory no listed pool accounts for: the CUDA context, cudaMalloc, pools not
  /// listed, other libraries and other processes.
  [[nodiscard]] std::size_t other_bytes() const noexcept {
    const std::size_t pools_total = pool_reserved_bytes();
    return taken_bytes() > pools_total ? taken_bytes() - pools_total : 0;
  }

  /// @brief A table with human units.
  [[nodiscard]] std::string to_string() const {
    using detail::format_bytes;
    std::string s = "device " + std::to_string(device) + " (" + device_name +
                    "): " + format_bytes(taken_bytes()) + " taken, " + format_bytes(free_bytes) +
                    " free of " + format_bytes(total_bytes) + "\n";
    char line[256];
    std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s\n", "", "reserved", "in use",
                  "cached");
    s += line;
    for (const pool_usage& p : pools) {
      std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s\n", p.name.c_str(),
                    format_bytes(p.reserved_bytes).c_str(), format_bytes(p.used_bytes).c_str(),
                    format_bytes(p.cached_bytes()).c_str());
      s += line;
    }
    std::snprintf(line, sizeof line, "  %-34s %12s\n", "other (context, cudaMalloc, others)",
                  format_bytes(other_bytes()).c_str());
    s += line;
    return s;
  }
};

namespace detail {

inline pool_usage usage_of(std::string name, const memory_pool_ref& pool, bool is_default) {
  const pool_stats s = pool.stats();
  pool_usage u;
  u.name = std::move(name);
  u.handle = pool.get();
  u.is_default = is_default;
  u.reserved_bytes = s.reserved_bytes;
  u.used_bytes = s.used_bytes;
  return u;
}

inline named_pool to_named(std::size_t index, const named_pool& p) {
  (void)index;
  return p;
}
inline named_pool to_named(std::size_t index, const memory_pool_ref& p) {
  return named_pool{"pool " + std::to_string(index + 1), p};
}

}  // namespace detail

/// @brief Accounts for device's memory: what the driver reports taken and free, what each of
/// pools reserves and uses, the default pool, and the rest.
/// @throws std::invalid_argument for an invalid device or a pool of another device.
[[nodiscard]] inline device_memory_report memory_report(int device,
                                                        const std::vector<named_pool>& pools) {
  detail::check_device(device, "cuscope::memory_report");
  device_memory_report r;
  r.device = device;
  cudaDeviceProp prop{};
  CUSCOPE_DETAIL_TRY_FOR(cudaGetDeviceProperties(&prop, device),
                         "device " + std::to_string(device));
  r.device_name = prop.name;
  {
    scoped_device on(device);
    CUSCOPE_DETAIL_TRY_FOR(cudaMemGetInfo(&r.free_bytes, &r.total_bytes),
                           "device " + std::to_string(device));
  }
  const memory_pool_ref default_pool = memory_pool_ref::device_default(device);
  bool default_listed = false;
  for (const named_pool& p : pools) {
    if (p.pool.device() != device)
      throw std::invalid_argument("cuscope::memory_report: " + p.pool.describe() +
                                  " is not a pool of device " + std::to_string(device));
    const bool is_default = p.pool == default_pool;
    default_listed = default_listed || is_default;
    r.pools.push_back(detail::usage_of(p.name, p.pool, is_default));
  }
  if (!default_listed) r.pools.push_back(detail::usage_of("default pool", default_pool, true));
  return r;
}

/// @brief memory_report for pools given as memory_pool, memory_pool_ref or named_pool (unnamed
/// ones are shown as "pool 1", "pool 2"...).
template <class... Pools>
[[nodiscard]] device_memory_report memory_report(int device, const Pools&... pools) {
  std::vector<named_pool> list;
  std::size_t index = 0;
  (list.push_back(detail::to_named(index++, pools)), ...);
  (void)index;
  return memory_report(device, list);
}

}  // namespace cuscope
