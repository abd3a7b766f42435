// SPDX-License-Identifier: Apache-2.0
// Devices and errors: the device functions of the simulated runtime, its fixed device profile,
// and the last error. docs/simulated-device.md, "Devices" and "Errors".
#include <cstring>
#include <limits>

#include "internal.hpp"

namespace cuscope::sim::detail {

device_state* find_device(state& g, int device) {
  if (device < 0 || device >= static_cast<int>(g.devices.size())) return nullptr;
  return &g.devices[static_cast<std::size_t>(device)];
}

namespace {

struct error_text {
  int code;
  const char* name;
  const char* text;
};

// Names and messages as libcudart reports them; codes are numbers so that the table compiles
// against every supported toolkit.
constexpr error_text error_texts[] = {
    {0, "cudaSuccess", "no error"},
    {1, "cudaErrorInvalidValue", "invalid argument"},
    {2, "cudaErrorMemoryAllocation", "out of memory"},
    {3, "cudaErrorInitializationError", "initialization error"},
    {4, "cudaErrorCudartUnloading", "driver shutting down"},
    {9, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {16, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {17, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {35, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {46, "cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"},
    {98, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {100, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {101, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {214, "cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"},
    {217, "cudaErrorPeerAccessUnsupported",
     "peer access is not supported between these two devices"},
    {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {401, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {500, "cudaErrorSymbolNotFound", "named symbol not found"},
    {600, "cudaErrorNotReady", "device not ready"},
    {700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {701, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {709, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {710, "cudaErrorAssert", "device-side assert triggered"},
    {712, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {713, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {714, "cudaErrorHardwareStackError", "hardware stack error"},
    {715, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {716, "cudaErrorMisalignedAddress", "misaligned address"},
    {717, "cudaErrorInvalidAddressSpace", "operation not supported on global/shared address space"},
    {718, "cudaErrorInvalidPc", "invalid program counter"},
    {719, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {800, "cudaErrorNotPermitted", "operation not permitted"},
    {801, "cudaErrorNotSupported", "operation not supported"},
    {900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {909, "cudaErrorTimeout", "wait operation timed out"},
    {999, "cudaErrorUnknown", "unknown error"},
};

const error_text* find_error(cudaError_t e) {
  for (const error_text& t : error_texts)
    if (t.code == static_cast<int>(e)) return &t;
  return nullptr;
}

void fill_properties(const state& g, int device, cudaDeviceProp& p) {
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.name, "cuscope simulated device", sizeof p.name - 1);
  p.totalGlobalMem = g.config.total_bytes;
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = std::numeric_limits<int>::max();
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = std::numeric_limits<int>::max();
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.multiProcessorCount = 132;
  p.canMapHostMemory = 1;
  p.concurrentKernels = 1;
  p.pciBusID = device;
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.maxThreadsPerMultiProcessor = 2048;
  p.streamPrioritiesSupported = 1;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1;
  p.sharedMemPerBlockOptin = 227 * 1024;
  p.maxBlocksPerMultiProcessor = 32;
  p.hostRegisterSupported = 1;
  p.memoryPoolsSupported = 1;
  p.memoryPoolSupportedHandleTypes = 0;
}

bool device_attribute(cudaDeviceAttr attr, int& value) {
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      value = 1024;
      return true;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      value = 48 * 1024;
      return true;
    case cudaDevAttrWarpSize:
      value = 32;
      return true;
    case cudaDevAttrMultiProcessorCount:
      value = 132;
      return true;
    case cudaDevAttrIntegrated:
      value = 0;
      return true;
    case cudaDevAttrCanMapHostMemory:
      value = 1;
      return true;
    case cudaDevAttrGlobalMemoryBusWidth:
      value = 5120;
      return true;
    case cudaDevAttrL2CacheSize:
      value = 50 * 1024 * 1024;
      return true;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      value = 2048;
      return true;
    case cudaDevAttrAsyncEngineCount:
      value = 2;
      return true;
    case cudaDevAttrUnifiedAddressing:
      value = 1;
      return true;
    case cudaDevAttrComputeCapabilityMajor:
      value = 9;
      return true;
    case cudaDevAttrComputeCapabilityMinor:
      value = 0;
      return true;
    case cudaDevAttrStreamPrioritiesSupported:
      value = 1;
      return true;
    case cudaDevAttrManagedMemory:
      value = 1;
      return true;
    case cudaDevAttrPageableMemoryAccess:
      value = 0;
      return true;
    case cudaDevAttrConcurrentManagedAccess:
      value = 0;
      return true;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      value = 227 * 1024;
      return true;
    case cudaDevAttrHostRegisterSupported:
      value = 1;
      return true;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      value = 32;
      return true;
    case cudaDevAttrMemoryPoolsSupported:
      value = 1;
      return true;
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
      value = 0;
      return true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace cuscope::sim::detail

using namespace cuscope::sim::detail;

extern "C" {

// Errors -----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetLastError(void) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (g.sticky != cudaSuccess) return g.sticky;
  thread_state& t = this_thread();
  const cudaError_t e = t.last_error;
  t.last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (g.sticky != cudaSuccess) return g.sticky;
  return this_thread().last_error;
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  const error_text* t = find_error(error);
  return t != nullptr ? t->name : "unrecognized error code";
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  const error_text* t = find_error(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

// Devices ----------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  return call("cudaGetDeviceCount", [&](state& g) -> cudaError_t {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = static_cast<int>(g.devices.size());
    return g.devices.empty() ? cudaErrorNoDevice : cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  return call("cudaGetDevice", [&](state& g) -> cudaError_t {
    if (device == nullptr) return cudaErrorInvalidValue;
    if (g.devices.empty()) return cudaErrorNoDevice;
    *device = this_thread().device;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return call("cudaSetDevice", [&](state& g) -> cudaError_t {
    if (g.devices.empty()) return cudaErrorNoDevice;
    if (find_device(g, device) == nullptr) return cudaErrorInvalidDevice;
    this_thread().device = device;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  return call("cudaGetDeviceProperties", [&](state& g) -> cudaError_t {
    if (prop == nullptr) return cudaErrorInvalidValue;
    if (find_device(g, device) == nullptr) return cudaErrorInvalidDevice;
    fill_properties(g, device, *prop);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  return call("cudaDeviceGetAttribute", [&](state& g) -> cudaError_t {
    if (value == nullptr) return cudaErrorInvalidValue;
    if (find_device(g, device) == nullptr) return cudaErrorInvalidDevice;
    if (attr == cudaDevAttrPciBusId) {
      *value = device;
      return cudaSuccess;
    }
    return device_attribute(attr, *value) ? cudaSuccess : cudaErrorInvalidValue;
  });
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int* version) {
  return call("cudaDriverGetVersion", [&](state&) -> cudaError_t {
    if (version == nullptr) return cudaErrorInvalidValue;
    *version = CUDART_VERSION;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* version) {
  return call("cudaRuntimeGetVersion", [&](state&) -> cudaError_t {
    if (version == nullptr) return cudaErrorInvalidValue;
    *version = CUDART_VERSION;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return call("cudaDeviceGetStreamPriorityRange", [&](state& g) -> cudaError_t {
    if (g.devices.empty()) return cudaErrorNoDevice;
    if (least != nullptr) *least = least_priority;
    if (greatest != nullptr) *greatest = greatest_priority;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  return call("cudaDeviceCanAccessPeer", [&](state& g) -> cudaError_t {
    if (can == nullptr) return cudaErrorInvalidValue;
    if (find_device(g, device) == nullptr || find_device(g, peer) == nullptr)
      return cudaErrorInvalidDevice;
    *can = device != peer ? 1 : 0;
    return cudaSuccess;
  });
}

}  // extern "C"
