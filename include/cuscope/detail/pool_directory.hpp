// SPDX-License-Identifier: Apache-2.0
// What messages say about a pool beyond its handle: the name it was made with, and whether
// cuscope destroyed it; and which pools cuscope made of page-locked host memory, for drivers that
// do not answer cudaMemPoolAttrLocationType. One process-wide list, written when a named or host
// pool is made and when a pool is destroyed, read while a message is built and when a resource is
// made over a pool; never on a path that allocates or frees.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "config.hpp"

namespace cuscope::detail {

class pool_directory {
 public:
  struct entry {
    cudaMemPool_t pool = nullptr;
    int device = 0;
    std::string name;
    bool destroyed = false;
    bool host = false;  // page-locked host memory (pinned_memory_pool)
    entry* next = nullptr;
  };

  /// The one directory; never destroyed, so that pools with static lifetime may use it at exit.
  static pool_directory& get() noexcept;

  /// A pool was made (or adopted) on device, named name (may be empty), of page-locked host
  /// memory when host. Forgets a destroyed pool the driver gave the same handle. Throws
  /// std::bad_alloc.
  void made(cudaMemPool_t pool, int device, const std::string& name, bool host = false);

  /// pool was destroyed by cuscope: later failures on it are named as use after destruction.
  /// Keeps the last destroyed_kept of them. Never throws (a failure to note it is dropped: the
  /// message then names the CUDA error only).
  void destroyed(cudaMemPool_t pool, int device) noexcept;

  /// The name pool was made with ("" for none) and whether cuscope destroyed it. Throws
  /// std::bad_alloc.
  std::pair<std::string, bool> find(cudaMemPool_t pool) const;

  /// Whether pool is a live pool of page-locked host memory that cuscope made.
  bool host(cudaMemPool_t pool) const noexcept;

  static constexpr std::size_t destroyed_kept = 64;

 private:
  pool_directory() = default;

  class lock {
   public:
    explicit lock(std::atomic<bool>& flag) noexcept : flag_(flag) {
      while (flag_.exchange(true, std::memory_order_acquire))
        while (flag_.load(std::memory_order_relaxed)) {
        }
    }
    lock(const lock&) = delete;
    lock& operator=(const lock&) = delete;
    ~lock() { flag_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool>& flag_;
  };

  void erase(cudaMemPool_t pool) noexcept;
  void append(entry* e) noexcept;

  mutable std::atomic<bool> locked_{false};
  // Oldest first. A list of its own rather than a std::vector, whose members every translation
  // unit that includes cuscope would instantiate.
  entry* first_ = nullptr;
};

}  // namespace cuscope::detail

#if CUSCOPE_DETAIL_HOST_CODE  // definitions: host code only (detail/config.hpp)
namespace cuscope::detail {

inline pool_directory& pool_directory::get() noexcept {
  static pool_directory* const d = new pool_directory;  // NOLINT: lives as long as the process
  return *d;
}

inline void pool_directory::made(cudaMemPool_t pool, int device, const std::string& name,
                                 bool host) {
  const lock l(locked_);
  erase(pool);
  if (!name.empty() || host) append(new entry{pool, device, name, false, host, nullptr});
}

inline void pool_directory::destroyed(cudaMemPool_t pool, int device) noexcept {
  const lock l(locked_);
  std::string name;
  for (entry* e = first_; e != nullptr; e = e->next)
    if (e->pool == pool && !e->destroyed) name = std::move(e->name);
  erase(pool);
  std::size_t dead = 0;
  for (const entry* e = first_; e != nullptr; e = e->next)
    dead += e->destroyed ? 1 : 0;
  if (dead >= destroyed_kept) {
    for (entry** at = &first_; *at != nullptr; at = &(*at)->next)
      if ((*at)->destroyed) {
        entry* const gone = *at;
        *at = gone->next;
        delete gone;
        break;
      }
  }
  try {
    append(new entry{pool, device, std::move(name), true, false, nullptr});
  } catch (...) {  // std::bad_alloc: the message loses only the diagnosis
  }
}

inline std::pair<std::string, bool> pool_directory::find(cudaMemPool_t pool) const {
  const lock l(locked_);
  for (const entry* e = first_; e != nullptr; e = e->next)
    if (e->pool == pool) return {e->name, e->destroyed};
  return {std::string(), false};
}

inline bool pool_directory::host(cudaMemPool_t pool) const noexcept {
  const lock l(locked_);
  for (const entry* e = first_; e != nullptr; e = e->next)
    if (e->pool == pool) return e->host && !e->destroyed;
  return false;
}

inline void pool_directory::erase(cudaMemPool_t pool) noexcept {
  for (entry** at = &first_; *at != nullptr;) {
    entry* const e = *at;
    if (e->pool == pool) {
      *at = e->next;
      delete e;
    } else {
      at = &e->next;
    }
  }
}

inline void pool_directory::append(entry* e) noexcept {
  entry** at = &first_;
  while (*at != nullptr)
    at = &(*at)->next;
  *at = e;
}

}  // namespace cuscope::detail
#endif  // CUSCOPE_DETAIL_HOST_CODE
