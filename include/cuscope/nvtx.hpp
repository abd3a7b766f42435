// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Opt-in NVTX ranges, so that Nsight Systems shows sessions and batches beside the
/// kernels. Define CUSCOPE_ENABLE_NVTX to 1 before including cuscope (or with the CMake option
/// CUSCOPE_NVTX) to turn them on; otherwise they compile to nothing. NVTX v3 is header-only and
/// ships with the CUDA toolkit (<nvtx3/nvToolsExt.h>): no library is linked, and without a tool
/// attached each range costs a few instructions.
#pragma once

#include <cstdint>
#include <string>

#if !defined(CUSCOPE_ENABLE_NVTX)
#  define CUSCOPE_ENABLE_NVTX 0
#endif

#if CUSCOPE_ENABLE_NVTX
#  include <nvtx3/nvToolsExt.h>
#endif

namespace cuscope {

/// @brief Whether cuscope emits NVTX ranges in this translation unit.
inline constexpr bool nvtx_enabled = CUSCOPE_ENABLE_NVTX != 0;

/// @brief A range in the "cuscope" NVTX domain, from construction to end() or destruction; empty
/// (and free) when NVTX is off. Not bound to a thread: it may end on another one. Move-only.
class nvtx_range {
 public:
  /// @brief No range.
  nvtx_range() noexcept = default;

  /// @brief Starts a range named name (copied by NVTX). Never throws.
  explicit nvtx_range(const std::string& name) noexcept { start(name.c_str()); }
  /// @brief Starts a range named name. Never throws.
  explicit nvtx_range(const char* name) noexcept { start(name); }

  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;
  /// @brief Takes other's range; other is left without one.
  nvtx_range(nvtx_range&& other) noexcept
      : domain_(other.domain_), id_(other.id_), open_(other.open_) {
    other.open_ = false;
  }
  /// @brief Ends this range and takes other's.
  nvtx_range& operator=(nvtx_range&& other) noexcept {
    if (this != &other) {
      end();
      domain_ = other.domain_;
      id_ = other.id_;
      open_ = other.open_;
      other.open_ = false;
    }
    return *this;
  }
  /// @brief Ends the range if end() was not called.
  ~nvtx_range() { end(); }

  /// @brief Ends the range; later calls do nothing.
  void end() noexcept {
#if CUSCOPE_ENABLE_NVTX
    if (open_) nvtxDomainRangeEnd(static_cast<nvtxDomainHandle_t>(domain_), id_);
#endif
    open_ = false;
  }

  /// @brief Whether a range is open (always false when NVTX is off).
  [[nodiscard]] bool open() const noexcept {
    return open_;
  }

 private:
  void start(const char* name) noexcept {
#if CUSCOPE_ENABLE_NVTX
    // The handle of a named domain is the same for every call: NVTX keeps the registry, and with
    // no tool attached both calls return at once.
    const nvtxDomainHandle_t domain = nvtxDomainCreateA("cuscope");
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    domain_ = domain;
    id_ = nvtxDomainRangeStartEx(domain, &a);
    open_ = true;
#else
    (void)name;
#endif
  }

  void* domain_ = nullptr;
  std::uint64_t id_ = 0;
  bool open_ = false;
};

}  // namespace cuscope
