// SPDX-License-Identifier: Apache-2.0
// The per-thread default stream variants (_ptsz, _ptds) that the runtime header selects when a
// program is compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM (nvcc --default-stream per-thread).
// Compiled with that macro, the names below expand to the variant symbols.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda_runtime_api.h>

#include "api.hpp"

namespace api = cuscope::sim::detail::api;

extern "C" {

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return api::memcpy(dst, src, count, kind, true);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                      cudaStream_t stream) {
  return api::memcpy_async(dst, src, count, kind, stream, true);
}

cudaError_t CUDARTAPI cudaMemset(void* dst, int value, size_t count) {
  return api::memset(dst, value, count, true);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return api::memset_async(dst, value, count, stream, true);
}

cudaError_t CUDARTAPI cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, cudaMemcpyKind kind) {
  return api::memcpy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, true, true);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, cudaMemcpyKind kind,
                                        cudaStream_t stream) {
  return api::memcpy_2d(dst, dpitch, src, spitch, width, height, kind, stream, true, false);
}

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  return api::stream_get_id(stream, id, true);
}

#if CUDART_VERSION >= 13000
cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void* ptr, size_t count, cudaMemLocation location,
                                           unsigned int flags, cudaStream_t stream) {
  const int target = flags == 0 ? api::location_target(location) : cudaInvalidDeviceId;
  return api::mem_prefetch(ptr, count, target, stream, true, "cudaMemPrefetchAsync");
}
#else
cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void* ptr, size_t count, int device,
                                           cudaStream_t stream) {
  return api::mem_prefetch(ptr, count, device, stream, true, "cudaMemPrefetchAsync");
}
#endif

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  return api::stream_query(stream, true);
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  return api::stream_synchronize(stream, true);
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  return api::stream_get_flags(stream, flags, true);
}

cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  return api::stream_get_priority(stream, priority, true);
}

#if CUDART_VERSION >= 12080
cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t stream, int* device) {
  return api::stream_get_device(stream, device, true);
}
#endif

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  return api::stream_wait_event(stream, event, flags, true);
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return api::event_record(event, stream, 0, true, "cudaEventRecord");
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  return api::event_record(event, stream, flags, true, "cudaEventRecordWithFlags");
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  return api::launch_host_func(stream, fn, data, true);
}

cudaError_t CUDARTAPI cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  return api::malloc_async(ptr, bytes, stream, true);
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool,
                                              cudaStream_t stream) {
  return api::malloc_from_pool_async(ptr, bytes, pool, stream, true);
}

cudaError_t CUDARTAPI cudaFreeAsync(void* ptr, cudaStream_t stream) {
  return api::free_async(ptr, stream, true);
}

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return api::stream_begin_capture(stream, mode, true);
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return api::stream_end_capture(stream, graph, true);
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return api::stream_is_capturing(stream, status, true);
}

#if CUDART_VERSION >= 13000
cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                               unsigned long long* id, cudaGraph_t* graph,
                                               const cudaGraphNode_t** dependencies,
                                               const cudaGraphEdgeData** edge_data, size_t* count) {
  if (edge_data != nullptr) *edge_data = nullptr;
  return api::stream_get_capture_info(stream, status, id, graph, dependencies, count, true);
}
#else
cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                               unsigned long long* id, cudaGraph_t* graph,
                                               const cudaGraphNode_t** dependencies,
                                               size_t* count) {
  return api::stream_get_capture_info(stream, status, id, graph, dependencies, count, true);
}
#endif

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return api::graph_launch(exec, stream, true);
}

}  // extern "C"
