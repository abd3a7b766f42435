// SPDX-License-Identifier: Apache-2.0
// The runtime functions whose meaning depends on the default-stream mode. memory.cpp, pools.cpp
// and streams.cpp define the legacy symbols and runtime_ptds.cpp the per-thread (_ptsz, _ptds)
// ones, both through these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cuscope::sim::detail::api {

cudaError_t memcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, bool ptds);
cudaError_t memcpy_async(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                         cudaStream_t stream, bool ptds);
cudaError_t memset(void* dst, int value, std::size_t count, bool ptds);
cudaError_t memset_async(void* dst, int value, std::size_t count, cudaStream_t stream, bool ptds);
cudaError_t stream_query(cudaStream_t stream, bool ptds);
cudaError_t stream_synchronize(cudaStream_t stream, bool ptds);
cudaError_t stream_get_flags(cudaStream_t stream, unsigned* flags, bool ptds);
cudaError_t stream_get_priority(cudaStream_t stream, int* priority, bool ptds);
cudaError_t stream_get_device(cudaStream_t stream, int* device, bool ptds);
cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptds);
cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool ptds,
                         const char* api);
cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* data, bool ptds);
cudaError_t malloc_async(void** ptr, std::size_t bytes, cudaStream_t stream, bool ptds);
cudaError_t malloc_from_pool_async(void** ptr, std::size_t bytes, cudaMemPool_t pool,
                                   cudaStream_t stream, bool ptds);
cudaError_t free_async(void* ptr, cudaStream_t stream, bool ptds);
cudaError_t memcpy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                      std::size_t width, std::size_t height, cudaMemcpyKind kind,
                      cudaStream_t stream, bool ptds, bool synchronous_call);
cudaError_t stream_begin_capture(cudaStream_t stream, int mode, bool ptds);
cudaError_t stream_end_capture(cudaStream_t stream, cudaGraph_t* graph, bool ptds);
cudaError_t stream_is_capturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool ptds);
cudaError_t stream_get_capture_info(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                    unsigned long long* id, cudaGraph_t* graph,
                                    const cudaGraphNode_t** dependencies, std::size_t* count,
                                    bool ptds);
cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream, bool ptds);
cudaError_t stream_get_id(cudaStream_t stream, unsigned long long* id, bool ptds);
cudaError_t memcpy_peer(void* dst, int dst_device, const void* src, int src_device,
                        std::size_t count, cudaStream_t stream, const char* api);
#if CUDART_VERSION >= 13000
// The device a prefetch or advice location names: an ordinal, cudaCpuDeviceId for the host, or
// cudaInvalidDeviceId.
int location_target(const cudaMemLocation& location);
#endif
// A prefetch of managed memory to a device (>= 0) or the host (cudaCpuDeviceId); device is
// cudaInvalidDeviceId for a location or flags that are not valid.
cudaError_t mem_prefetch(const void* ptr, std::size_t count, int device, cudaStream_t stream,
                         bool ptds, const char* api);

}  // namespace cuscope::sim::detail::api
