// SPDX-License-Identifier: Apache-2.0
// Devices and errors: the device functions of the simulated runtime, its fixed device profile,
// and the last error. docs/simulated-device.md, "Devices" and "Errors".
#include <algorithm>
#include <cstring>
#include <iterator>
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

// Every code of the CUDA 12.9 to 13.5 headers, with the name and message libcudart 13.0 (13.5 for
// the codes it added) reports; codes are numbers so that the table compiles against every
// supported toolkit.
constexpr error_text error_texts[] = {
    {0, "cudaSuccess", "no error"},
    {1, "cudaErrorInvalidValue", "invalid argument"},
    {2, "cudaErrorMemoryAllocation", "out of memory"},
    {3, "cudaErrorInitializationError", "initialization error"},
    {4, "cudaErrorCudartUnloading", "driver shutting down"},
    {5, "cudaErrorProfilerDisabled", "profiler disabled while using external profiling tool"},
    {6, "cudaErrorProfilerNotInitialized",
     "profiler not initialized: call cudaProfilerInitialize()"},
    {7, "cudaErrorProfilerAlreadyStarted", "profiler already started"},
    {8, "cudaErrorProfilerAlreadyStopped", "profiler already stopped"},
    {9, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {10, "cudaErrorVersionTranslation",
     "Driver is newer than runtime and returned parameters the runtime cannot process"},
    {12, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {13, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {16, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {17, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {18, "cudaErrorInvalidTexture", "invalid texture reference"},
    {19, "cudaErrorInvalidTextureBinding", "texture is not bound to a pointer"},
    {20, "cudaErrorInvalidChannelDescriptor", "invalid channel descriptor"},
    {21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {22, "cudaErrorAddressOfConstant", "invalid address of constant"},
    {23, "cudaErrorTextureFetchFailed", "fetch from texture failed"},
    {24, "cudaErrorTextureNotBound", "cannot fetch from a texture that is not bound"},
    {25, "cudaErrorSynchronizationError", "incorrect use of __syncthreads()"},
    {26, "cudaErrorInvalidFilterSetting", "linear filtering not supported for non-float type"},
    {27, "cudaErrorInvalidNormSetting", "read as normalized float not supported for data type"},
    {28, "cudaErrorMixedDeviceExecution",
     "device emulation mode and device execution mode cannot be mixed"},
    {31, "cudaErrorNotYetImplemented", "feature not yet implemented"},
    {32, "cudaErrorMemoryValueTooLarge", "memory size or pointer value too large to fit in 32 bit"},
    {34, "cudaErrorStubLibrary", "CUDA driver is a stub library"},
    {35, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {36, "cudaErrorCallRequiresNewerDriver",
     "API call is not supported in the installed CUDA driver"},
    {37, "cudaErrorInvalidSurface", "invalid surface reference"},
    {43, "cudaErrorDuplicateVariableName", "duplicate global variable looked up by string name"},
    {44, "cudaErrorDuplicateTextureName", "duplicate texture looked up by string name"},
    {45, "cudaErrorDuplicateSurfaceName", "duplicate surface looked up by string name"},
    {46, "cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"},
    {49, "cudaErrorIncompatibleDriverContext", "incompatible driver context"},
    {52, "cudaErrorMissingConfiguration", "__global__ function call is not configured"},
    {53, "cudaErrorPriorLaunchFailure", "unspecified launch failure in prior launch"},
    {65, "cudaErrorLaunchMaxDepthExceeded", "launch would exceed maximum depth of nested launches"},
    {66, "cudaErrorLaunchFileScopedTex",
     "launch failed because kernel uses unsupported, file-scoped textures (texture objects are "
     "supported)"},
    {67, "cudaErrorLaunchFileScopedSurf",
     "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are "
     "supported)"},
    {68, "cudaErrorSyncDepthExceeded",
     "cudaDeviceSynchronize failed because caller's grid depth exceeds "
     "cudaLimitDevRuntimeSyncDepth"},
    {69, "cudaErrorLaunchPendingCountExceeded",
     "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount"},
    {98, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {100, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {101, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {102, "cudaErrorDeviceNotLicensed", "device doesn't have valid Grid license"},
    {103, "cudaErrorSoftwareValidityNotEstablished", "integrity checks failed"},
    {127, "cudaErrorStartupFailure", "startup failure in cuda runtime"},
    {200, "cudaErrorInvalidKernelImage", "device kernel image is invalid"},
    {201, "cudaErrorDeviceUninitialized", "invalid device context"},
    {205, "cudaErrorMapBufferObjectFailed", "mapping of buffer object failed"},
    {206, "cudaErrorUnmapBufferObjectFailed", "unmapping of buffer object failed"},
    {207, "cudaErrorArrayIsMapped", "array is mapped"},
    {208, "cudaErrorAlreadyMapped", "resource already mapped"},
    {209, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {210, "cudaErrorAlreadyAcquired", "resource already acquired"},
    {211, "cudaErrorNotMapped", "resource not mapped"},
    {212, "cudaErrorNotMappedAsArray", "resource not mapped as array"},
    {213, "cudaErrorNotMappedAsPointer", "resource not mapped as pointer"},
    {214, "cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"},
    {215, "cudaErrorUnsupportedLimit", "limit is not supported on this architecture"},
    {216, "cudaErrorDeviceAlreadyInUse",
     "exclusive-thread device already in use by a different thread"},
    {217, "cudaErrorPeerAccessUnsupported",
     "peer access is not supported between these two devices"},
    {218, "cudaErrorInvalidPtx", "a PTX JIT compilation failed"},
    {219, "cudaErrorInvalidGraphicsContext", "invalid OpenGL or DirectX context"},
    {220, "cudaErrorNvlinkUncorrectable",
     "uncorrectable NVLink error detected during the execution"},
    {221, "cudaErrorJitCompilerNotFound", "PTX JIT compiler library not found"},
    {222, "cudaErrorUnsupportedPtxVersion",
     "the provided PTX was compiled with an unsupported toolchain."},
    {223, "cudaErrorJitCompilationDisabled", "PTX JIT compilation was disabled"},
    {224, "cudaErrorUnsupportedExecAffinity", "the provided execution affinity is not supported"},
    {225, "cudaErrorUnsupportedDevSideSync",
     "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
    {226, "cudaErrorContained",
     "Invalid access of peer GPU memory over nvlink or a hardware error"},
    {227, "cudaErrorInsufficientLoaderVersion", "Loader version is insufficient for fatbin"},
    {300, "cudaErrorInvalidSource", "device kernel image is invalid"},
    {301, "cudaErrorFileNotFound", "file not found"},
    {302, "cudaErrorSharedObjectSymbolNotFound", "shared object symbol not found"},
    {303, "cudaErrorSharedObjectInitFailed", "shared object initialization failed"},
    {304, "cudaErrorOperatingSystem", "OS call failed or operation not supported on this OS"},
    {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {401, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {402, "cudaErrorLossyQuery", "attempted introspection would be semantically lossy"},
    {500, "cudaErrorSymbolNotFound", "named symbol not found"},
    {600, "cudaErrorNotReady", "device not ready"},
    {700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {701, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {703, "cudaErrorLaunchIncompatibleTexturing", "launch uses incompatible texturing mode"},
    {704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {708, "cudaErrorSetOnActiveProcess", "cannot set while device is active in this process"},
    {709, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {710, "cudaErrorAssert", "device-side assert triggered"},
    {711, "cudaErrorTooManyPeers", "peer mapping resources exhausted"},
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
    {720, "cudaErrorCooperativeLaunchTooLarge", "too many blocks in cooperative launch"},
    {721, "cudaErrorTensorMemoryLeak", "tensor memory not completely freed"},
    {800, "cudaErrorNotPermitted", "operation not permitted"},
    {801, "cudaErrorNotSupported", "operation not supported"},
    {802, "cudaErrorSystemNotReady", "system not yet initialized"},
    {803, "cudaErrorSystemDriverMismatch",
     "system has unsupported display driver / cuda driver combination"},
    {804, "cudaErrorCompatNotSupportedOnDevice",
     "forward compatibility was attempted on non supported HW"},
    {805, "cudaErrorMpsConnectionFailed",
     "MPS client failed to connect to the MPS control daemon or the MPS server"},
    {806, "cudaErrorMpsRpcFailure",
     "the remote procedural call between the MPS server and the MPS client failed"},
    {807, "cudaErrorMpsServerNotReady",
     "MPS server is not ready to accept new MPS client requests"},
    {808, "cudaErrorMpsMaxClientsReached",
     "the hardware resources required to create MPS client have been exhausted"},
    {809, "cudaErrorMpsMaxConnectionsReached",
     "the hardware resources required to support device connections have been exhausted"},
    {810, "cudaErrorMpsClientTerminated", "the MPS client has been terminated by the server"},
    {811, "cudaErrorCdpNotSupported",
     "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not "
     "support it"},
    {812, "cudaErrorCdpVersionMismatch",
     "unsupported interaction between different versions of CUDA Dynamic Parallelism"},
    {900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {901, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {902, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {903, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {904, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {905, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {906, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {908, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {909, "cudaErrorTimeout", "wait operation timed out"},
    {910, "cudaErrorGraphExecUpdateFailure",
     "the graph update was not performed because it included changes which violated constraints "
     "specific to instantiated graph update"},
    {911, "cudaErrorExternalDevice",
     "an async error has occured in external entity outside of CUDA"},
    {912, "cudaErrorInvalidClusterSize",
     "a kernel launch error has occurred due to cluster misconfiguration"},
    {913, "cudaErrorFunctionNotLoaded",
     "the function handle is not loaded when calling an API that requires a loaded function"},
    {914, "cudaErrorInvalidResourceType",
     "one or more resources passed in are not valid resource types for the operation"},
    {915, "cudaErrorInvalidResourceConfiguration",
     "one or more resources are insufficient or non-applicable for the operation"},
    {917, "cudaErrorStreamDetached",
     "API call not permitted since the green context associated with the stream has been "
     "destroyed"},
    {918, "cudaErrorGraphRecaptureFailure",
     "recapturing to the source graph failed and had to be terminated"},
    {919, "cudaErrorFabricNotReady",
     "GPU fabric is not ready within the probe wait budget; application may retry (see "
     "CUDA_FABRIC_INIT_TIMEOUT_MS)"},
    {999, "cudaErrorUnknown", "unknown error"},
};

const error_text* find_error(cudaError_t e) {
  for (const error_text& t : error_texts)
    if (t.code == static_cast<int>(e)) return &t;
  return nullptr;
}

struct attribute_value {
  int attr;
  int value;
};

constexpr int int_max = std::numeric_limits<int>::max();
constexpr int sm_count = 132;
constexpr int ordinal = std::numeric_limits<int>::min();  // stands for the device's ordinal

// Every attribute of the CUDA 12.9 to 13.5 headers, sorted by number, with the value of an H100
// SXM5 80 GB (the sizes of its specification sheet and deviceQuery), except where the simulation
// differs on purpose: no IPC or host-located pools. Numbers, not names, so that the table compiles
// against every supported toolkit; the reserved numbers are invalid.
constexpr attribute_value device_attributes[] = {
    {1, 1024},               // MaxThreadsPerBlock
    {2, 1024},               // MaxBlockDimX
    {3, 1024},               // MaxBlockDimY
    {4, 64},                 // MaxBlockDimZ
    {5, int_max},            // MaxGridDimX
    {6, 65535},              // MaxGridDimY
    {7, 65535},              // MaxGridDimZ
    {8, 48 * 1024},          // MaxSharedMemoryPerBlock
    {9, 65536},              // TotalConstantMemory
    {10, 32},                // WarpSize
    {11, int_max},           // MaxPitch
    {12, 65536},             // MaxRegistersPerBlock
    {13, 1980000},           // ClockRate
    {14, 512},               // TextureAlignment
    {15, 1},                 // GpuOverlap
    {16, sm_count},          // MultiProcessorCount
    {17, 0},                 // KernelExecTimeout
    {18, 0},                 // Integrated
    {19, 1},                 // CanMapHostMemory
    {20, 0},                 // ComputeMode
    {21, 131072},            // MaxTexture1DWidth
    {22, 131072},            // MaxTexture2DWidth
    {23, 65536},             // MaxTexture2DHeight
    {24, 16384},             // MaxTexture3DWidth
    {25, 16384},             // MaxTexture3DHeight
    {26, 16384},             // MaxTexture3DDepth
    {27, 32768},             // MaxTexture2DLayeredWidth
    {28, 32768},             // MaxTexture2DLayeredHeight
    {29, 2048},              // MaxTexture2DLayeredLayers
    {30, 512},               // SurfaceAlignment
    {31, 1},                 // ConcurrentKernels
    {32, 1},                 // EccEnabled
    {33, ordinal},           // PciBusId
    {34, 0},                 // PciDeviceId
    {35, 0},                 // TccDriver
    {36, 2619000},           // MemoryClockRate
    {37, 5120},              // GlobalMemoryBusWidth
    {38, 50 * 1024 * 1024},  // L2CacheSize
    {39, 2048},              // MaxThreadsPerMultiProcessor
    {40, 2},                 // AsyncEngineCount
    {41, 1},                 // UnifiedAddressing
    {42, 32768},             // MaxTexture1DLayeredWidth
    {43, 2048},              // MaxTexture1DLayeredLayers
    {45, 32768},             // MaxTexture2DGatherWidth
    {46, 32768},             // MaxTexture2DGatherHeight
    {47, 8192},              // MaxTexture3DWidthAlt
    {48, 8192},              // MaxTexture3DHeightAlt
    {49, 32768},             // MaxTexture3DDepthAlt
    {50, 0},                 // PciDomainId
    {51, 32},                // TexturePitchAlignment
    {52, 32768},             // MaxTextureCubemapWidth
    {53, 32768},             // MaxTextureCubemapLayeredWidth
    {54, 2046},              // MaxTextureCubemapLayeredLayers
    {55, 32768},             // MaxSurface1DWidth
    {56, 131072},            // MaxSurface2DWidth
    {57, 65536},             // MaxSurface2DHeight
    {58, 16384},             // MaxSurface3DWidth
    {59, 16384},             // MaxSurface3DHeight
    {60, 16384},             // MaxSurface3DDepth
    {61, 32768},             // MaxSurface1DLayeredWidth
    {62, 2048},              // MaxSurface1DLayeredLayers
    {63, 32768},             // MaxSurface2DLayeredWidth
    {64, 32768},             // MaxSurface2DLayeredHeight
    {65, 2048},              // MaxSurface2DLayeredLayers
    {66, 32768},             // MaxSurfaceCubemapWidth
    {67, 32768},             // MaxSurfaceCubemapLayeredWidth
    {68, 2046},              // MaxSurfaceCubemapLayeredLayers
    {69, 268435456},         // MaxTexture1DLinearWidth
    {70, 131072},            // MaxTexture2DLinearWidth
    {71, 65000},             // MaxTexture2DLinearHeight
    {72, 2097120},           // MaxTexture2DLinearPitch
    {73, 32768},             // MaxTexture2DMipmappedWidth
    {74, 32768},             // MaxTexture2DMipmappedHeight
    {75, 9},                 // ComputeCapabilityMajor
    {76, 0},                 // ComputeCapabilityMinor
    {77, 32768},             // MaxTexture1DMipmappedWidth
    {78, 1},                 // StreamPrioritiesSupported
    {79, 1},                 // GlobalL1CacheSupported
    {80, 1},                 // LocalL1CacheSupported
    {81, 228 * 1024},        // MaxSharedMemoryPerMultiprocessor
    {82, 65536},             // MaxRegistersPerMultiprocessor
    {83, 1},                 // ManagedMemory
    {84, 0},                 // IsMultiGpuBoard
    {85, ordinal},           // MultiGpuBoardGroupID
    {86, 0},                 // HostNativeAtomicSupported
    {87, 2},                 // SingleToDoublePrecisionPerfRatio
    {88, 0},                 // PageableMemoryAccess
    {89, 1},                 // ConcurrentManagedAccess
    {90, 1},                 // ComputePreemptionSupported
    {91, 1},                 // CanUseHostPointerForRegisteredMem
    {95, 1},                 // CooperativeLaunch
    {96, 0},                 // CooperativeMultiDeviceLaunch
    {97, 227 * 1024},        // MaxSharedMemoryPerBlockOptin
    {98, 0},                 // CanFlushRemoteWrites
    {99, 1},                 // HostRegisterSupported
    {100, 0},                // PageableMemoryAccessUsesHostPageTables
    {101, 0},                // DirectManagedMemAccessFromHost
    {106, 32},               // MaxBlocksPerMultiprocessor
    {108, 37748736},         // MaxPersistingL2CacheSize
    {109, 134213632},        // MaxAccessPolicyWindowSize
    {111, 1024},             // ReservedSharedMemoryPerBlock
    {112, 1},                // SparseCudaArraySupported
    {113, 1},                // HostRegisterReadOnlySupported
    {114, 1},           // MaxTimelineSemaphoreInteropSupported / TimelineSemaphoreInteropSupported
    {115, 1},           // MemoryPoolsSupported
    {116, 1},           // GPUDirectRDMASupported
    {117, 1},           // GPUDirectRDMAFlushWritesOptions
    {118, 0},           // GPUDirectRDMAWritesOrdering
    {119, 1},           // MemoryPoolSupportedHandleTypes: POSIX file descriptors (ipc.cpp)
    {120, 1},           // ClusterLaunch
    {121, 1},           // DeferredMappingCudaArraySupported
    {125, 1},           // IpcEventSupport
    {126, 4},           // MemSyncDomainCount
    {130, 0},           // NumaConfig
    {131, -1},          // NumaId
    {133, 0},           // MpsEnabled
    {134, 0},           // HostNumaId
    {135, 0},           // D3D12CigSupported
    {138, 0},           // VulkanCigSupported
    {139, 0x233010de},  // GpuPciDeviceId
    {140, 0x16c110de},  // GpuPciSubsystemId
    {142, 1},           // HostNumaMemoryPoolsSupported
    {143, 0},           // HostNumaMultinodeIpcSupported
    {144, 1},           // HostMemoryPoolsSupported
    {147, 0},           // OnlyPartialHostNativeAtomicSupported
    {148, 0},           // AtomicReductionSupported
    {149, 1},           // LocalityDomainCount
    {150, 0},           // OversizedSharedMemoryPerBlock
    {151, 0},           // CigStreamsSupported
    {157, sm_count},    // LocalityDomainMultiprocessorCount
    {160, int_max},     // TensorMapLargeTensorMinSize
};

bool device_attribute(int attr, int device, int& value) {
  const auto* end = std::end(device_attributes);
  const auto* it = std::lower_bound(std::begin(device_attributes), end, attr,
                                    [](const attribute_value& a, int n) { return a.attr < n; });
  if (it == end || it->attr != attr) return false;
  value = it->value == ordinal ? device : it->value;
  return true;
}

void fill_properties(const state& g, int device, cudaDeviceProp& p) {
  // The properties repeat the attributes: the same profile through either function.
  const auto at = [device](int attr) {
    int v = 0;
    device_attribute(attr, device, v);
    return v;
  };
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.name, "cuscope simulated device", sizeof p.name - 1);
  p.totalGlobalMem = g.config.total_bytes;
  p.sharedMemPerBlock = static_cast<std::size_t>(at(8));
  p.regsPerBlock = at(12);
  p.warpSize = at(10);
  p.memPitch = static_cast<std::size_t>(at(11));
  p.maxThreadsPerBlock = at(1);
  p.maxThreadsDim[0] = at(2);
  p.maxThreadsDim[1] = at(3);
  p.maxThreadsDim[2] = at(4);
  p.maxGridSize[0] = at(5);
  p.maxGridSize[1] = at(6);
  p.maxGridSize[2] = at(7);
  p.totalConstMem = static_cast<std::size_t>(at(9));
  p.major = at(75);
  p.minor = at(76);
  p.textureAlignment = static_cast<std::size_t>(at(14));
  p.texturePitchAlignment = static_cast<std::size_t>(at(51));
  p.surfaceAlignment = static_cast<std::size_t>(at(30));
  p.multiProcessorCount = at(16);
  p.integrated = at(18);
  p.canMapHostMemory = at(19);
  p.concurrentKernels = at(31);
  p.ECCEnabled = at(32);
  p.pciBusID = at(33);
  p.pciDeviceID = at(34);
  p.pciDomainID = at(50);
  p.asyncEngineCount = at(40);
  p.unifiedAddressing = at(41);
  p.memoryBusWidth = at(37);
  p.l2CacheSize = at(38);
  p.persistingL2CacheMaxSize = at(108);
  p.maxThreadsPerMultiProcessor = at(39);
  p.streamPrioritiesSupported = at(78);
  p.globalL1CacheSupported = at(79);
  p.localL1CacheSupported = at(80);
  p.sharedMemPerMultiprocessor = static_cast<std::size_t>(at(81));
  p.regsPerMultiprocessor = at(82);
  p.managedMemory = at(83);
  p.isMultiGpuBoard = at(84);
  p.multiGpuBoardGroupID = at(85);
  p.pageableMemoryAccess = at(88);
  p.concurrentManagedAccess = at(89);
  p.computePreemptionSupported = at(90);
  p.canUseHostPointerForRegisteredMem = at(91);
  p.cooperativeLaunch = at(95);
  p.sharedMemPerBlockOptin = static_cast<std::size_t>(at(97));
  p.maxBlocksPerMultiProcessor = at(106);
  p.accessPolicyMaxWindowSize = at(109);
  p.reservedSharedMemPerBlock = static_cast<std::size_t>(at(111));
  p.hostRegisterSupported = at(99);
  p.sparseCudaArraySupported = at(112);
  p.hostRegisterReadOnlySupported = at(113);
  p.timelineSemaphoreInteropSupported = at(114);
  p.memoryPoolsSupported = at(115);
  p.gpuDirectRDMASupported = at(116);
  p.memoryPoolSupportedHandleTypes = static_cast<unsigned>(at(119));
  p.clusterLaunch = at(120);
  p.deferredMappingCudaArraySupported = at(121);
  p.ipcEventSupported = at(125);
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
    return device_attribute(static_cast<int>(attr), device, *value) ? cudaSuccess
                                                                    : cudaErrorInvalidValue;
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

cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  return call("cudaDeviceEnablePeerAccess", [&](state& g) -> cudaError_t {
    if (flags != 0) return cudaErrorInvalidValue;
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    if (find_device(g, peer) == nullptr || peer == d->index) return cudaErrorInvalidDevice;
    if (!d->peers.insert(peer).second) return cudaErrorPeerAccessAlreadyEnabled;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peer) {
  return call("cudaDeviceDisablePeerAccess", [&](state& g) -> cudaError_t {
    device_state* d = current_device(g);
    if (d == nullptr) return cudaErrorNoDevice;
    if (find_device(g, peer) == nullptr) return cudaErrorInvalidDevice;
    if (d->peers.erase(peer) == 0) return cudaErrorPeerAccessNotEnabled;
    return cudaSuccess;
  });
}

#if CUDART_VERSION >= 13000
namespace {
// The device whose pool of pinned device memory location names, or nullptr.
cudaError_t pool_location(state& g, const cudaMemLocation* location, cudaMemAllocationType type,
                          device_state*& out) {
  if (location == nullptr) return cudaErrorInvalidValue;
  if (type != cudaMemAllocationTypePinned || location->type != cudaMemLocationTypeDevice)
    return cudaErrorNotSupported;  // host and managed pools are not simulated
  out = find_device(g, location->id);
  return out != nullptr ? cudaSuccess : cudaErrorInvalidDevice;
}
}  // namespace

cudaError_t CUDARTAPI cudaMemGetDefaultMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                               cudaMemAllocationType type) {
  return call("cudaMemGetDefaultMemPool", [&](state& g) -> cudaError_t {
    if (pool == nullptr) return cudaErrorInvalidValue;
    device_state* d = nullptr;
    if (const cudaError_t e = pool_location(g, location, type, d); e != cudaSuccess) return e;
    *pool = d->default_pool;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemGetMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                        cudaMemAllocationType type) {
  return call("cudaMemGetMemPool", [&](state& g) -> cudaError_t {
    if (pool == nullptr) return cudaErrorInvalidValue;
    device_state* d = nullptr;
    if (const cudaError_t e = pool_location(g, location, type, d); e != cudaSuccess) return e;
    *pool = d->current_pool;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemSetMemPool(cudaMemLocation* location, cudaMemAllocationType type,
                                        cudaMemPool_t pool) {
  return call("cudaMemSetMemPool", [&](state& g) -> cudaError_t {
    device_state* d = nullptr;
    if (const cudaError_t e = pool_location(g, location, type, d); e != cudaSuccess) return e;
    if (!valid_pool(g, pool) || pool->device != d->index) return cudaErrorInvalidValue;
    d->current_pool = pool;
    return cudaSuccess;
  });
}
#endif

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
