// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Control of the simulated CUDA device (link cuscope::sim instead of libcudart).
///
/// A program linked with cuscope::sim gets the CUDA runtime functions that cuscope uses,
/// implemented on host memory with the documented semantics of the stream-ordered allocator.
/// The functions here configure that device, inject faults and report what is still allocated.
/// docs/simulated-device.md lists every simulated function and rule.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cuscope::sim {

/// @brief When enqueued work runs.
enum class execution {
  eager,     ///< Work runs when it is enqueued.
  deferred,  ///< Work runs only when the host synchronizes with it, as late as CUDA allows.
};

/// @brief The simulated devices of a fresh simulated process.
struct device_config {
  int device_count = 1;                                ///< Number of devices.
  std::size_t total_bytes = std::size_t{16} << 30;     ///< Memory of each device.
  std::size_t context_bytes = std::size_t{300} << 20;  ///< Memory the context itself holds.
  /// Pools reserve and release memory in units of this, and round maxSize up to it (32 MiB, as
  /// drivers were seen to do).
  std::size_t pool_granularity_bytes = std::size_t{32} << 20;
  execution mode = execution::deferred;  ///< When enqueued work runs.
  /// @brief Whether the devices answer NVML queries (what nvidia-smi shows); without it, cuscope
  /// reports NVML as unavailable.
  bool nvml = true;
  /// @brief NVML error code that nvmlInit_v2 returns (0: it succeeds), as where the driver is not
  /// loaded (9, NVML_ERROR_DRIVER_NOT_LOADED) or the user may not talk to it (4,
  /// NVML_ERROR_NO_PERMISSION); NVML's other queries then answer NVML_ERROR_UNINITIALIZED.
  int nvml_init_error = 0;
  /// cudaFree first runs the device's enqueued work, as CUDA drivers long did without promising
  /// it. Off: cudaFree frees at once, and work enqueued before it that touches the memory faults.
  bool free_synchronizes = false;
  /// cudaFreeHost and cudaHostUnregister first run the work of every device (observed on GPUs,
  /// not documented). Off: they free at once, and earlier work that touches the memory faults.
  bool free_host_synchronizes = false;
  /// How long reset() waits for a host function that has not returned before it abandons it.
  std::chrono::milliseconds host_function_timeout{10000};
  /// cudaMallocPitch rounds each row up to a multiple of this (a power of two).
  std::size_t pitch_alignment_bytes = 512;
  /// cudaMallocAsync and cudaMallocFromPoolAsync of 0 bytes succeed and leave *ptr as it was, as
  /// CUDA 11.2 was seen to do. Off: they write nullptr.
  bool zero_byte_async_keeps_pointer = true;
  /// How long work that waits for an interprocess event recorded in another process, or a
  /// cudaEventSynchronize of one, waits before the simulation reports a hang: a fault line and
  /// the sticky cudaErrorLaunchTimeout (a GPU would wait forever).
  std::chrono::milliseconds ipc_timeout{10000};
  /// Pools count each allocation rounded up to a multiple of this (a power of two from 256 to
  /// 64 KiB), in used bytes and in their chunks; pointers are aligned to it. GPUs were seen to
  /// count multiples of 512 bytes exactly; what they count for other sizes is not known.
  std::size_t pool_rounding_bytes = 256;
};

/// @brief Starts a fresh simulated process: runs all pending work, then forgets every device,
/// stream, event, pool and allocation.
/// @throws std::logic_error naming every allocation and handle that was still outstanding
/// (the reset has happened all the same).
/// @throws std::invalid_argument when the configuration is impossible.
void reset(const device_config& config = {});

/// @brief The configuration of the current simulated process.
[[nodiscard]] device_config config();

/// @brief Makes the n-th runtime call from now (1 = the next one) return error without doing
/// anything. A sticky error (such as cudaErrorIllegalAddress) then poisons the context, and
/// cudaErrorCudartUnloading makes every later call fail with it (the runtime is shutting down).
/// @throws std::invalid_argument when n is 0 or error is cudaSuccess.
void fail_call(std::size_t n, cudaError_t error);

/// @brief Makes the nth call (1 = the next one) of the named runtime function return error.
/// @throws std::invalid_argument when api is not a simulated function, nth is 0 or error is
/// cudaSuccess.
void fail_api(const char* api, std::size_t nth, cudaError_t error);

/// @brief Cancels every fault injected by fail_call and fail_api that has not fired yet.
void clear_faults();

/// @brief Number of runtime calls since the last reset (error queries are not counted).
[[nodiscard]] std::size_t call_count();

/// @brief Number of calls of the named runtime function, or simulated NVML function
/// ("nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByPciBusId_v2",
/// "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlErrorString"), since the last reset. NVML's
/// calls are not runtime calls: call_count() leaves them out.
/// @throws std::invalid_argument when api is not a simulated function.
[[nodiscard]] std::size_t call_count(const char* api);

/// @brief Device and pinned host allocations not yet freed (a stream-ordered free counts once
/// it is enqueued).
[[nodiscard]] std::size_t outstanding_allocations();

/// @brief Bytes of the allocations counted by outstanding_allocations().
[[nodiscard]] std::size_t outstanding_bytes();

/// @brief One line per outstanding allocation (pointer, bytes, pool, stream, call number) and
/// per stream, event or pool created and not destroyed; empty when there are none.
[[nodiscard]] std::string outstanding_report();

/// @brief Host address of simulated device memory, for host functions (cudaLaunchHostFunc)
/// that stand in for kernels. Device pointers are not host-dereferenceable, as on a GPU.
/// @throws std::out_of_range when [device_ptr, device_ptr + bytes) is not inside memory that a
/// device has reserved.
[[nodiscard]] void* host_view(const void* device_ptr, std::size_t bytes);

/// @brief Typed form of host_view for count elements.
template <class T>
[[nodiscard]] T* host_view(T* device_ptr, std::size_t count) {
  return static_cast<T*>(host_view(static_cast<const void*>(device_ptr), count * sizeof(T)));
}

/// @brief One line per fault the simulation caught since the last reset: enqueued work that ran
/// after cudaFree, cudaFreeHost or cudaHostUnregister had taken its memory away, or that touched
/// device memory no longer reserved. Each also set the sticky cudaErrorIllegalAddress.
[[nodiscard]] std::string fault_report();

/// @brief One line per misuse of the runtime that the simulation recognised since the last reset,
/// with the call numbers involved: a second free of the same pointer (cudaFree or cudaFreeAsync),
/// a free of a pointer inside an allocation, a free of memory it never allocated. Each call also
/// returned cudaErrorInvalidValue, as on a GPU. Also the free of an exported allocation that ran
/// while another process still mapped it, which returns no error (nor does a GPU).
[[nodiscard]] std::string misuse_report();

/// @brief Makes another process, a co-tenant of the GPU, hold bytes of device's memory from now
/// on, in place of what it held before (0: nothing). cudaMemGetInfo counts them as taken, NVML
/// lists that process beside this one, and this process's allocations fail when they do not fit
/// beside it. A reset forgets it.
/// @throws std::invalid_argument for a device that does not exist, or more bytes than the device
/// has free beside this process's memory.
void set_other_process_bytes(int device, std::size_t bytes);

/// @brief Operations enqueued on streams of any device and not yet run (always 0 in eager mode).
[[nodiscard]] std::size_t pending_operations();

/// @brief The value of a byte of device memory after its allocation or its free has run.
inline constexpr unsigned char poison_byte = 0xCD;

}  // namespace cuscope::sim

#include "sim_kernels.hpp"  // host stand-ins for kernels
