// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules the simulated device follows for stream capture, graphs and graph
// memory, one test case per rule (docs/simulated-device.md, "Stream capture and graphs"). They run
// on a GPU too (gpu.sim_graphs); exact graph memory figures are the simulation's own.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "sim_test_support.hpp"

using namespace cuscope::sim_test;

namespace {

cudaStreamCaptureStatus capture_status(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  return status;
}

std::uint64_t graph_attr(cudaGraphMemAttributeType attr, int device = 0) {
  std::uint64_t v = 0;
  REQUIRE(cudaDeviceGetGraphMemAttribute(device, attr, &v) == cudaSuccess);
  return v;
}

std::vector<cudaGraphNodeType> node_types(cudaGraph_t graph) {
  std::size_t n = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  REQUIRE(cudaGraphGetNodes(graph, nodes.data(), &n) == cudaSuccess);
  std::vector<cudaGraphNodeType> types;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t = cudaGraphNodeTypeEmpty;
    REQUIRE(cudaGraphNodeGetType(node, &t) == cudaSuccess);
    types.push_back(t);
  }
  return types;
}

bool contains(const std::vector<cudaGraphNodeType>& types, cudaGraphNodeType t) {
  for (cudaGraphNodeType x : types)
    if (x == t) return true;
  return false;
}

void count_call(void* p) {
  ++*static_cast<std::atomic<int>*>(p);
}

// Ends a capture that a test invalidated on purpose: the end reports it and returns no graph.
void end_invalidated(cudaStream_t s) {
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(&graph);
  CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  (void)cudaGetLastError();
}

struct pinned_ints {
  int* p = nullptr;
  explicit pinned_ints(std::size_t n) {
    REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p), n * sizeof(int)) == cudaSuccess);
  }
  ~pinned_ints() { CHECK(cudaFreeHost(p) == cudaSuccess); }
  pinned_ints(const pinned_ints&) = delete;
  pinned_ints& operator=(const pinned_ints&) = delete;
};

}  // namespace

TEST_CASE("sim: work enqueued on a capturing stream runs only when the graph is launched",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  std::atomic<int> calls{0};
  CHECK(capture_status(s) == cudaStreamCaptureStatusNone);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(capture_status(s) == cudaStreamCaptureStatusActive);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t capturing = nullptr;
#if CUDART_VERSION >= 13000
  REQUIRE(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, nullptr, nullptr, nullptr) ==
          cudaSuccess);
#else
  REQUIRE(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, nullptr, nullptr) == cudaSuccess);
#endif
  CHECK(status == cudaStreamCaptureStatusActive);
  CHECK(id != 0);
  CHECK(capturing != nullptr);
  REQUIRE(cudaLaunchHostFunc(s, count_call, &calls) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  CHECK(capture_status(s) == cudaStreamCaptureStatusNone);
  CHECK(calls.load() == 0);
  CHECK(node_types(graph) == std::vector<cudaGraphNodeType>{cudaGraphNodeTypeHost});
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int i = 0; i < 3; ++i)
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(calls.load() == 3);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: cudaMallocAsync and cudaFreeAsync in a capture become graph memory nodes",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
  const std::uint64_t pool_used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
  pinned_ints host(4);
  std::memset(host.p, 0, 4 * sizeof(int));
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 4 * sizeof(int), s) == cudaSuccess);
  REQUIRE(p != nullptr);
  REQUIRE(cudaMemsetAsync(p, 0x11, 4 * sizeof(int), s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(host.p, p, 4 * sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  // The allocation belongs to the graph, not to the pool.
  CHECK(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == pool_used);
  const std::vector<cudaGraphNodeType> types = node_types(graph);
  CHECK(contains(types, cudaGraphNodeTypeMemAlloc));
  CHECK(contains(types, cudaGraphNodeTypeMemFree));
  CHECK(host.p[0] == 0);  // nothing ran
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  // "there can be at most one executable graph in existence for that graph at a time"
  cudaGraphExec_t second = nullptr;
  CHECK(cudaGraphInstantiate(&second, graph, 0) != cudaSuccess);
  (void)cudaGetLastError();
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(host.p[0] == 0x11111111);
  CHECK(host.p[3] == 0x11111111);
  // Graph memory stays mapped after the graph freed it, until a trim (cuda.core's GPU tests).
  CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) > 0);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) > 0);
  CHECK(graph_attr(cudaGraphMemAttrUsedMemHigh) > 0);
  if (cuscope::test::simulated) {
    CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) == 256);
    CHECK(free_bytes() == (std::size_t{4} << 30) - (std::size_t{256} << 20) - 256);
  }
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  if (cuscope::test::simulated) {
    CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) == 0);
    CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);
  }
  CHECK(graph_attr(cudaGraphMemAttrUsedMemHigh) > 0);  // highs stay until reset
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a graph replayed 100 times reuses its graph memory", "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  pinned_ints host(2);
  host.p[0] = 7;
  host.p[1] = 0;
  std::atomic<int> calls{0};
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, sizeof(int), s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(p, &host.p[0], sizeof(int), cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(&host.p[1], p, sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(s, count_call, &calls) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const std::uint64_t reserved = graph_attr(cudaGraphMemAttrReservedMemCurrent);
  for (int i = 1; i < 100; ++i)
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(calls.load() == 100);
  CHECK(host.p[1] == 7);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == reserved);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a graph allocation left unfreed blocks the next launch until it is freed",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 1024, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 0, 1024, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  // "If any allocations created by graphExec remain unfreed ... the launch will fail with
  // cudaErrorInvalidValue."
  CHECK(cudaGraphLaunch(exec, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);  // outside the graph, in stream order
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  // With cudaGraphInstantiateFlagAutoFreeOnLaunch each launch frees what the previous one left.
  REQUIRE(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch) ==
          cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: synchronizing or querying a capturing stream invalidates the capture",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  for (const bool query : {false, true}) {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    const cudaError_t e = query ? cudaStreamQuery(s) : cudaStreamSynchronize(s);
    CHECK(e == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    CHECK(capture_status(s) == cudaStreamCaptureStatusInvalidated);
    // Further use of the stream fails until the capture ends.
    std::atomic<int> calls{0};
    CHECK(cudaLaunchHostFunc(s, count_call, &calls) == cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    end_invalidated(s);
    CHECK(capture_status(s) == cudaStreamCaptureStatusNone);
  }
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: cudaDeviceSynchronize during a capture invalidates it", "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  CHECK(capture_status(s) == cudaStreamCaptureStatusInvalidated);
  end_invalidated(s);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: the legacy stream cannot be used while a blocking stream captures",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream(cudaStreamDefault);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // "if this is called on cudaStreamLegacy ... it will return cudaErrorStreamCaptureImplicit"
  CHECK(cudaStreamIsCapturing(cudaStreamLegacy, &status) == cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  CHECK(capture_status(s) == cudaStreamCaptureStatusActive);  // a query does not invalidate
  CHECK(cudaStreamSynchronize(cudaStreamLegacy) == cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  CHECK(capture_status(s) == cudaStreamCaptureStatusInvalidated);
  end_invalidated(s);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);

  // A non-blocking stream's capture does not involve the legacy stream.
  cudaStream_t n = make_stream(cudaStreamNonBlocking);
  REQUIRE(cudaStreamBeginCapture(n, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(n, &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(n) == cudaSuccess);
  // "Capture may not be initiated if stream is cudaStreamLegacy."
  CHECK(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal) != cudaSuccess);
  (void)cudaGetLastError();
}

TEST_CASE("sim: cudaMalloc is refused in a global or thread-local capture, not a relaxed one",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  for (const cudaStreamCaptureMode mode :
       {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    REQUIRE(cudaStreamBeginCapture(s, mode) == cudaSuccess);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    end_invalidated(s);
  }
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 256) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  // A thread that makes its own mode relaxed may call it during a global capture.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);
  CHECK(cudaMalloc(&p, 256) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: events recorded in a capture fork and join other streams into it",
          "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaStream_t side = make_stream();
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  std::atomic<int> calls{0};
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, s) == cudaSuccess);
  // An event last recorded in a capture cannot be queried.
  CHECK(cudaEventQuery(fork) == cudaErrorCapturedEvent);
  (void)cudaGetLastError();
  end_invalidated(s);

  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  CHECK(capture_status(side) == cudaStreamCaptureStatusActive);
  REQUIRE(cudaLaunchHostFunc(side, count_call, &calls) == cudaSuccess);
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(capture_status(side) == cudaStreamCaptureStatusNone);
  CHECK(calls.load() == 0);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(calls.load() == 1);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaEventDestroy(fork) == cudaSuccess);
  REQUIRE(cudaEventDestroy(join) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(side) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: waiting on an event recorded outside the capture invalidates it", "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  cudaStream_t other = make_stream();
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, other) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(s, e, 0) == cudaErrorStreamCaptureIsolation);
  (void)cudaGetLastError();
  end_invalidated(s);
  REQUIRE(cudaStreamSynchronize(other) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(other) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: a global capture ends only on the thread that began it", "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaError_t from_other = cudaSuccess;
  std::thread([&] {
    cudaGraph_t graph = nullptr;
    from_other = cudaStreamEndCapture(s, &graph);
    (void)cudaGetLastError();
  }).join();
  CHECK(from_other == cudaErrorStreamCaptureWrongThread);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: in a capture, cudaFreeAsync takes only graph allocations", "[sim][graphs]") {
  device_guard device;
  cudaStream_t s = make_stream();
  void* before = nullptr;
  REQUIRE(cudaMallocAsync(&before, 256, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  // "must therefore be passed the address of a graph allocation"
  const cudaError_t e = cudaFreeAsync(before, s);
  CHECK(e != cudaSuccess);
  if (cuscope::test::simulated) CHECK(e == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  (void)cudaGetLastError();
  if (end == cudaSuccess) REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaFreeAsync(before, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("sim: graph memory high watermarks reset only to zero", "[sim][graphs]") {
  device_guard device;
  std::uint64_t value = 1;
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &value) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
  value = 0;
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &value) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &value) == cudaSuccess);
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &value) == cudaSuccess);
  CHECK(cudaDeviceGetGraphMemAttribute(cuscope::test::device_count(), cudaGraphMemAttrUsedMemHigh,
                                       &value) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}
