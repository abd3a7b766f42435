// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief memory_report: where a device's memory is, reconciling what the driver says with what
/// pools reserve and use. The answer to "why does nvidia-smi still show memory".
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/config.hpp"
#include "detail/format.hpp"
#if CUSCOPE_DETAIL_HOST_CODE
#  include "detail/nvml.hpp"
#endif
#include "device.hpp"
#include "error.hpp"
#include "graph.hpp"
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
  /// @brief Whether it is shared with other processes: exportable, or imported from another
  /// process (its cudaMemPoolAttrExportHandleTypes, which drivers of CUDA 13.2 and newer answer).
  /// Such a pool keeps its memory: a trim gives nothing back.
  bool shared = false;
  std::size_t reserved_bytes = 0;  ///< Backing memory it holds from the driver.
  std::size_t used_bytes = 0;      ///< Memory behind its live allocations.

  /// @brief Reserved memory not in use: what a trim could give back.
  [[nodiscard]] std::size_t cached_bytes() const noexcept {
    return reserved_bytes > used_bytes ? reserved_bytes - used_bytes : 0;
  }
};

/// @brief What NVML, the library behind nvidia-smi, says this process uses on a device.
struct nvml_process_usage {
  bool available = false;      ///< NVML answered for the device and knows the figure.
  bool listed = false;         ///< This process is among the device's compute processes.
  std::size_t used_bytes = 0;  ///< What nvidia-smi prints for this process.
  std::string source;          ///< Where the answer came from, or why there is none.
};

/// @brief What memory_report asks besides the pools.
struct report_options {
  /// @brief Ask NVML what this process uses (loads libnvidia-ml.so.1 for the call).
  bool query_nvml = true;
  /// @brief cudaMalloc memory the caller knows of (its own accounting), to split it from the rest
  /// of what the process holds outside the pools; CUDA cannot tell it apart.
  std::optional<std::size_t> malloc_bytes;
};

/// @brief A device's memory, accounted for.
struct device_memory_report {
  int device = 0;                           ///< The device.
  std::string device_name;                  ///< Its name.
  std::size_t total_bytes = 0;              ///< Device memory (cudaMemGetInfo).
  std::size_t free_bytes = 0;               ///< Free device memory (cudaMemGetInfo).
  std::vector<pool_usage> pools;            ///< The pools asked about, then the default pool.
  graph_memory_stats graph;                 ///< The device's graph memory (CUDA graphs).
  nvml_process_usage process;               ///< This process as nvidia-smi sees it.
  std::optional<std::size_t> malloc_bytes;  ///< report_options::malloc_bytes.

  /// @brief Memory the driver counts as taken, by this process and every other.
  [[nodiscard]] std::size_t taken_bytes() const noexcept {
    return total_bytes > free_bytes ? total_bytes - free_bytes : 0;
  }
  /// @brief Reserved by the pools listed.
  [[nodiscard]] std::size_t pool_reserved_bytes() const noexcept;
  /// @brief Taken memory no listed pool nor graph memory accounts for: the CUDA context,
  /// cudaMalloc, pools not listed, other libraries and other processes.
  [[nodiscard]] std::size_t other_bytes() const noexcept {
    const std::size_t pools_total = pool_reserved_bytes() + graph.reserved_bytes;
    return taken_bytes() > pools_total ? taken_bytes() - pools_total : 0;
  }

  /// @brief Memory behind live allocations in the pools listed.
  [[nodiscard]] std::size_t pool_used_bytes() const noexcept;
  /// @brief Reserved and unused in the pools listed: what trimming them could give back.
  [[nodiscard]] std::size_t pool_cached_bytes() const noexcept;
  /// @brief Whether NVML gave this process's footprint.
  [[nodiscard]] bool has_process_footprint() const noexcept {
    return process.available && process.listed;
  }
  /// @brief What this process holds outside the pools listed and graph memory: cudaMalloc, the
  /// CUDA context, other libraries' memory and pools not listed; 0 without
  /// has_process_footprint().
  [[nodiscard]] std::size_t process_outside_pools_bytes() const noexcept;
  /// @brief process_outside_pools_bytes() less the cudaMalloc memory given in malloc_bytes: the
  /// context, other libraries and pools not listed.
  [[nodiscard]] std::size_t process_rest_bytes() const noexcept;
  /// @brief Taken memory that is not this process's (other processes); 0 without
  /// has_process_footprint().
  [[nodiscard]] std::size_t other_processes_bytes() const noexcept {
    if (!has_process_footprint()) return 0;
    return taken_bytes() > process.used_bytes ? taken_bytes() - process.used_bytes : 0;
  }

  /// @brief A table with human units.
  [[nodiscard]] std::string to_string() const;
};

namespace detail {

pool_usage usage_of(std::string name, const memory_pool_ref& pool, bool is_default);
named_pool to_named(std::size_t index, const named_pool& p);
named_pool to_named(std::size_t index, const memory_pool_ref& p);

}  // namespace detail

/// @brief Accounts for device's memory: what the driver reports taken and free, what each of
/// pools reserves and uses, the default pool, and the rest.
/// @throws std::invalid_argument for an invalid device or a pool of another device.
[[nodiscard]] device_memory_report memory_report(int device, const std::vector<named_pool>& pools,
                                                 const report_options& options = {});

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

/// @brief cuscope's empty_cache: synchronizes the device of each pool (once per device), so that
/// every free has completed, then trims each pool to 0, and returns the bytes given back to the
/// driver, by the synchronization (above a pool's release threshold) and by the trim. Memory behind
/// live allocations stays. What PyTorch's torch.cuda.empty_cache() and CuPy's free_all_blocks() do,
/// for the pools named and no others.
/// @throws cuda_error when a synchronization, a trim or a statistics query fails.
[[nodiscard]] std::size_t empty_cache(const std::vector<memory_pool_ref>& pools);

/// @brief empty_cache for pools given as memory_pool or memory_pool_ref.
template <class... Pools>
[[nodiscard]] std::size_t empty_cache(const Pools&... pools) {
  return empty_cache(std::vector<memory_pool_ref>{memory_pool_ref(pools)...});
}

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)

namespace detail {

inline pool_usage usage_of(std::string name, const memory_pool_ref& pool, bool is_default) {
  const pool_stats s = pool.stats();
  pool_usage u;
  u.name = std::move(name);
  u.handle = pool.get();
  u.is_default = is_default;
  u.reserved_bytes = s.reserved_bytes;
  u.used_bytes = s.used_bytes;
  constexpr int export_handle_types = 0xA;  // cudaMemPoolAttrExportHandleTypes, from CUDA 13.2 on
  int types = 0;
  if (cudaMemPoolGetAttribute(pool.get(), static_cast<cudaMemPoolAttr>(export_handle_types),
                              &types) == cudaSuccess)
    u.shared = types != 0;
  else
    (void)cudaGetLastError();  // an older driver does not say
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

inline device_memory_report memory_report(int device, const std::vector<named_pool>& pools,
                                          const report_options& options) {
  detail::check_device(device, "cuscope::memory_report");
  device_memory_report r;
  r.device = device;
  r.malloc_bytes = options.malloc_bytes;
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
  // Sized once, with room for the default pool: push_back's growth would be instantiated in every
  // translation unit that includes cuscope.
  std::vector<pool_usage> usages(pools.size() + 1);
  std::size_t listed = 0;
  for (const named_pool& p : pools) {
    if (p.pool.device() != device)
      throw std::invalid_argument("cuscope::memory_report: " + p.pool.describe() +
                                  " is not a pool of device " + std::to_string(device));
    const bool is_default = p.pool == default_pool;
    default_listed = default_listed || is_default;
    usages[listed++] = detail::usage_of(p.name, p.pool, is_default);
  }
  if (!default_listed) usages[listed++] = detail::usage_of("default pool", default_pool, true);
  while (usages.size() > listed)
    usages.pop_back();
  r.pools.swap(usages);
  r.graph = graph_memory(device);
  if (options.query_nvml) {
    const detail::nvml::answer a =
        detail::nvml::process_usage(detail::nvml::bus_id(static_cast<unsigned>(prop.pciDomainID),
                                                         static_cast<unsigned>(prop.pciBusID),
                                                         static_cast<unsigned>(prop.pciDeviceID)),
                                    detail::nvml::this_process());
    r.process.available = a.available;
    r.process.listed = a.listed;
    r.process.used_bytes = a.used_bytes;
    r.process.source = a.source;
  } else {
    r.process.source = "not asked (report_options::query_nvml)";
  }
  return r;
}

inline std::size_t empty_cache(const std::vector<memory_pool_ref>& pools) {
  // Each pool's reserve is read before the synchronizations, which give back what a pool holds
  // above its release threshold: that is returned too. A pool named twice counts once.
  std::vector<std::pair<memory_pool_ref, std::size_t>> before;
  before.reserve(pools.size());
  for (const memory_pool_ref& p : pools) {
    bool seen = false;
    for (std::size_t j = 0; j < before.size() && !seen; ++j)
      seen = before[j].first == p;
    if (!seen) before.emplace_back(p, p.stats().reserved_bytes);
  }
  for (std::size_t i = 0; i < before.size(); ++i) {
    const memory_pool_ref& p = before[i].first;
    bool done = false;  // an earlier pool of the list is on the same device
    for (std::size_t j = 0; j < i; ++j)
      done = done || before[j].first.device() == p.device();
    if (done) continue;
    scoped_device on(p.device());
    CUSCOPE_DETAIL_TRY_FOR(cudaDeviceSynchronize(), "cuscope::empty_cache on " + p.describe());
  }
  std::size_t returned = 0;
  for (const auto& [p, reserved] : before) {
    p.trim_to(0);
    const std::size_t after = p.stats().reserved_bytes;
    returned += reserved > after ? reserved - after : 0;
  }
  return returned;
}

#endif  // CUSCOPE_DETAIL_HOST_CODE

}  // namespace cuscope

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope {

inline std::size_t device_memory_report::pool_reserved_bytes() const noexcept {
  std::size_t sum = 0;
  for (const pool_usage& p : pools)
    sum += p.reserved_bytes;
  return sum;
}

inline std::size_t device_memory_report::pool_used_bytes() const noexcept {
  std::size_t sum = 0;
  for (const pool_usage& p : pools)
    sum += p.used_bytes;
  return sum;
}

inline std::size_t device_memory_report::pool_cached_bytes() const noexcept {
  std::size_t sum = 0;
  for (const pool_usage& p : pools)
    sum += p.cached_bytes();
  return sum;
}

inline std::size_t device_memory_report::process_outside_pools_bytes() const noexcept {
  if (!has_process_footprint()) return 0;
  const std::size_t pooled = pool_reserved_bytes() + graph.reserved_bytes;
  return process.used_bytes > pooled ? process.used_bytes - pooled : 0;
}

inline std::size_t device_memory_report::process_rest_bytes() const noexcept {
  const std::size_t outside = process_outside_pools_bytes();
  const std::size_t malloc = malloc_bytes.value_or(0);
  return outside > malloc ? outside - malloc : 0;
}

inline std::string device_memory_report::to_string() const {
  using detail::format_bytes;
  std::string s = "device " + std::to_string(device) + " (" + device_name +
                  "): " + format_bytes(taken_bytes()) + " taken, " + format_bytes(free_bytes) +
                  " free of " + format_bytes(total_bytes) + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s\n", "", "reserved", "in use", "cached");
  s += line;
  for (const pool_usage& p : pools) {
    const std::string label = p.shared ? p.name + " (IPC)" : p.name;
    std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s\n", label.c_str(),
                  format_bytes(p.reserved_bytes).c_str(), format_bytes(p.used_bytes).c_str(),
                  format_bytes(p.cached_bytes()).c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s\n", "graph memory (CUDA graphs)",
                format_bytes(graph.reserved_bytes).c_str(), format_bytes(graph.used_bytes).c_str(),
                format_bytes(graph.cached_bytes()).c_str());
  s += line;
  std::snprintf(line, sizeof line, "  %-34s %12s\n", "other (context, cudaMalloc, others)",
                format_bytes(other_bytes()).c_str());
  s += line;
  if (!has_process_footprint()) {
    s += "  nvidia-smi's view (NVML): " +
         (process.available ? std::string("this process is not listed") : process.source) + "\n";
    return s;
  }
  s += "  nvidia-smi shows this process using " + format_bytes(process.used_bytes) + ":\n";
  const auto row = [&](const char* what, std::size_t bytes) {
    std::snprintf(line, sizeof line, "    %-32s %12s\n", what, format_bytes(bytes).c_str());
    s += line;
  };
  row("live allocations in the pools", pool_used_bytes());
  row("cached in the pools (trimmable)", pool_cached_bytes());
  row("graph memory (trimmable)", graph.reserved_bytes);
  if (malloc_bytes) {
    row("cudaMalloc (as given)", *malloc_bytes);
    row("the rest (context, libraries)", process_rest_bytes());
  } else {
    row("context, cudaMalloc, libraries", process_outside_pools_bytes());
  }
  row("other processes", other_processes_bytes());
  return s;
}

}  // namespace cuscope
#endif  // CUSCOPE_DETAIL_HOST_CODE
