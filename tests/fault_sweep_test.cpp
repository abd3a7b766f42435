// SPDX-License-Identifier: Apache-2.0
// Faults lose nothing: a failure of any CUDA call in any public operation ends in an exception
// naming the call, or in a cleanup failure reported to the cleanup handler, never in lost
// results, a crash, a report that reads as zeros, a device left current, or a silent leak.
//
// The first test cases pin one defect each; the sweep below runs every public operation with
// each of its runtime calls failing in turn. Both need fault injection: the simulated device.
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP  // storage only, as thrust_cpp_test

#include <cuda_runtime_api.h>
#include <thrust/device_vector.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <cuscope/ipc.hpp>
#include <cuscope/memory_resource.hpp>
#include <cuscope/thrust.hpp>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "test_support.hpp"

#if CUSCOPE_TEST_SIMULATED

using cuscope::device_buffer;
using cuscope::memory_pool;
using cuscope::pinned_buffer;
using cuscope::session;
using cuscope::session_report;
using cuscope::stream;
using cuscope::test::contains;
using cuscope::test::device_guard;

namespace {

// What the cleanup handler received; the strings are copied, as the handler's pointers die with
// the call.
struct cleanup_record {
  std::string operation;
  std::string object;
  const void* handle = nullptr;
  std::size_t bytes = 0;
  cudaError_t status = cudaSuccess;
  std::string message;
};
std::vector<cleanup_record> cleanups;

void record_cleanup(const cuscope::cleanup_error& e) noexcept {
  try {
    cleanups.push_back({e.operation, e.object, e.handle, e.bytes, e.status, e.message});
  } catch (...) {
    std::fprintf(stderr, "fault_sweep_test: could not record a cleanup failure\n");
  }
}

// Records cleanup failures for a scope, starting empty.
struct recording_cleanups {
  recording_cleanups() { cleanups.clear(); }
  cuscope::scoped_cleanup_handler handler{&record_cleanup};
};

using value_t = std::int32_t;
using result_t = std::int64_t;

value_t value_at(std::size_t i) {
  return static_cast<value_t>((i * 2654435761u) % 2001u) - 1000;
}

std::vector<value_t> make_source(std::size_t n) {
  std::vector<value_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = value_at(i);
  return v;
}

result_t sum_of(const value_t* p, std::size_t n) {
  result_t s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += p[i];
  return s;
}

// The stand-in for a kernel: sums a batch on the device into its one result element.
struct sum_job {
  const value_t* in = nullptr;
  std::size_t size = 0;
  result_t* host_out = nullptr;  // a host result instead of out, for ranges without an output
  result_t* out = nullptr;
  std::size_t out_size = 0;
  std::size_t sample_elements = 1;
};

void run_sum(void* data) noexcept {
  const sum_job& j = *static_cast<const sum_job*>(data);
  try {
    const value_t* x = cuscope::sim::host_view(j.in, j.size);
    if (j.host_out != nullptr) {
      *j.host_out = sum_of(x, j.size);
      return;
    }
    result_t* out = cuscope::sim::host_view(j.out, j.out_size);
    if (j.out_size == 1) {
      out[0] = sum_of(x, j.size);
    } else {
      for (std::size_t s = 0; s < j.out_size; ++s)
        out[s] = sum_of(x + s * j.sample_elements, j.sample_elements);
    }
  } catch (const std::out_of_range&) {
    // Run by a reset after a sticky error: the memory was never allocated. Nothing to compute.
  }
}

// The work's arguments, and the host results it writes, live until the next reset of the
// simulated device: work that a failure left enqueued runs at the latest there.
struct work_arena {
  std::deque<sum_job> jobs;
  std::deque<result_t> results;
};
work_arena& arena() {
  static work_arena a;
  return a;
}
std::deque<sum_job>& new_jobs(std::size_t n) {
  std::deque<sum_job>& jobs = arena().jobs;
  jobs.clear();  // only after a reset, or once the work that used them has run
  jobs.resize(n);
  return jobs;
}

template <class Batch>
void enqueue_sum(const Batch& b, sum_job& j, std::size_t sample_elements = 1) {
  j.in = b.span().data();
  j.size = b.size();
  j.out = b.output().data();
  j.out_size = b.output().size();
  j.sample_elements = sample_elements;
  CUSCOPE_CUDA_TRY(cudaLaunchHostFunc(b.stream().get(), &run_sum, &j));
}

bool reported(const char* operation_part) {
  for (const cleanup_record& c : cleanups)
    if (c.operation.find(operation_part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("batches: a failed cudaPointerGetAttributes is an error, never pageable memory",
          "[fault_sweep][batch]") {
  device_guard device;
  memory_pool pool;
  stream s;
  const std::vector<value_t> host = make_source(64);
  device_buffer<value_t> source(s, host, pool);
  for (const cudaError_t error : {cudaErrorUnknown, cudaErrorInvalidValue}) {
    cuscope::sim::fail_api("cudaPointerGetAttributes", 1, error);
    // Taken for pageable memory, the device source would be memcpy'd by the host: a crash.
    CHECK_THROWS_WITH(cuscope::batches(s, source.data(), source.size(), 16, pool),
                      contains("cudaPointerGetAttributes") && contains(cudaGetErrorName(error)));
  }
  s.synchronize();
}

TEST_CASE(
    "batch_range: after a break, a call of the range's end that fails loses no result: they are "
    "copied synchronously and the failure is reported",
    "[fault_sweep][batch]") {
  for (const char* api :
       {"cudaStreamWaitEvent", "cudaEventRecord", "cudaEventSynchronize", "cudaMemcpyAsync"}) {
    INFO(api);
    device_guard device;
    const recording_cleanups recording;
    memory_pool pool;
    stream s;
    const std::vector<value_t> data = make_source(40);
    std::vector<result_t> results(4, -1);
    std::deque<sum_job>& jobs = new_jobs(4);
    {
      for (const auto& b :
           cuscope::batches(s, data, 10, pool, cuscope::output_per_batch(results, 1))) {
        enqueue_sum(b, jobs[b.index()]);
        if (b.index() == 2) {
          cuscope::sim::fail_api(api, 1, cudaErrorUnknown);  // in the range's end
          break;
        }
      }
    }
    cuscope::sim::clear_faults();
    for (std::size_t k = 0; k < 3; ++k)
      CHECK(results[k] == sum_of(data.data() + 10 * k, 10));
    CHECK(results[3] == -1);  // never handed out
    REQUIRE(cleanups.size() == 1);
    CHECK_THAT(cleanups[0].operation, contains("every result delivered by synchronous copies"));
    CHECK_THAT(cleanups[0].message, contains(api));
  }
}

TEST_CASE("batch_range: when no result can be delivered after a break, the report says so",
          "[fault_sweep][batch]") {
  device_guard device;
  const recording_cleanups recording;
  {
    memory_pool pool;
    stream s;
    const std::vector<value_t> data = make_source(40);
    std::vector<result_t> results(4, -1);
    std::deque<sum_job>& jobs = new_jobs(4);
    for (const auto& b :
         cuscope::batches(s, data, 10, pool, cuscope::output_per_batch(results, 1))) {
      enqueue_sum(b, jobs[b.index()]);
      cuscope::sim::fail_api("cudaEventRecord", 1, cudaErrorIllegalAddress);  // sticky
      break;
    }
    CHECK(results[0] == -1);
  }
  CHECK(reported("results of batches handed out are missing from the output"));
  // Sticky: every release failed too, or was not tried on memory the device might still use, and
  // each was reported with its handle.
  const std::string outstanding = cuscope::sim::outstanding_report();
  CHECK(!outstanding.empty());
  for (const cleanup_record& c : cleanups)
    CHECK((c.status == cudaErrorIllegalAddress ||
           c.operation.find("is not freed") != std::string::npos));
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);
}

TEST_CASE(
    "session: a step of the end that fails marks its figures unknown, in the report and its text",
    "[fault_sweep][session]") {
  device_guard device;
  const recording_cleanups recording;
  memory_pool pool;
  stream s;
  session_report seen;
  {
    cuscope::session_options o;
    o.name = "epoch";
    o.on_finish = [&](const session_report& r) { seen = r; };
    session epoch(pool, s, o);
    { auto b = epoch.make_buffer<value_t>(1000); }
    // The session's end reads the pool's reserve twice, then the device's free memory.
    cuscope::sim::fail_api("cudaMemGetInfo", 1, cudaErrorUnknown);
  }
  CHECK_FALSE(seen.complete());
  CHECK(seen.unknown == std::vector<std::string>{"driver_free_at_exit_bytes"});
  CHECK(seen.driver_free_at_exit_bytes == 0);
  REQUIRE(seen.errors.size() == 1);
  CHECK_THAT(seen.errors[0], contains("reading the device's free memory") &&
                                 contains("cudaMemGetInfo") && contains("cudaErrorUnknown"));
  const std::string text = seen.to_string();
  CHECK_THAT(text, contains("device free") && contains("unknown at exit"));
  CHECK_THAT(text, contains("INCOMPLETE") && contains("driver_free_at_exit_bytes"));
  const std::string json = cuscope::to_json(seen);
  CHECK_THAT(json, contains("\"driver_free_at_exit_bytes\":null") &&
                       contains("\"complete\":false") &&
                       contains("\"unknown\":[\"driver_free_at_exit_bytes\"]") &&
                       contains("reading the device's free memory"));
  // What was measured is true.
  CHECK(seen.known("reserved_at_exit_bytes"));
  CHECK(seen.reserved_at_exit_bytes == pool.stats().reserved_bytes);
  REQUIRE(cleanups.size() == 1);  // the destructor could not throw
  CHECK(cleanups[0].operation == "session::finish");
}

TEST_CASE("session: a failed trim and a failed reading leave the reserve unknown, never 0",
          "[fault_sweep][session]") {
  device_guard device;
  const recording_cleanups recording;
  memory_pool pool;
  stream s;
  session epoch(pool, s, "epoch");
  { auto b = epoch.make_buffer<value_t>(1 << 20); }
  cuscope::sim::fail_api("cudaMemPoolTrimTo", 1, cudaErrorUnknown);
  // Two readings of 4 attributes each come before the trim.
  cuscope::sim::fail_api("cudaMemPoolGetAttribute", 9, cudaErrorUnknown);
  CHECK_THROWS_WITH(epoch.finish(), contains("cudaMemPoolTrimTo"));
  const session_report& r = epoch.report();
  CHECK_FALSE(r.complete());
  CHECK_FALSE(r.trimmed);
  CHECK_FALSE(r.known("reserved_at_exit_bytes"));
  CHECK_FALSE(r.known("returned_bytes"));
  CHECK_THAT(r.to_string(), contains("-> unknown, not trimmed"));
  // A second finish() hands back the same report, still saying what is unknown.
  CHECK_FALSE(epoch.finish().complete());
  CHECK(pool.stats().reserved_bytes != 0);  // not trimmed: the report must not say 0
}

TEST_CASE("session: a buffer whose free failed stays counted as a leak, reported with its bytes",
          "[fault_sweep][session]") {
  device_guard device;
  const recording_cleanups recording;
  memory_pool pool;
  stream s;
  void* leaked = nullptr;
  {
    cuscope::session_options o;
    o.on_leak = cuscope::leak_policy::ignore;
    session epoch(pool, s, o);
    {
      auto b = epoch.make_buffer<value_t>(1000);
      leaked = b.data();
      cuscope::sim::fail_api("cudaFreeAsync", 1, cudaErrorInvalidValue);
    }
    const session_report& r = epoch.finish();
    CHECK(r.leaked_allocations == 1);
    CHECK(r.leaked_bytes == 4000);
    CHECK_THAT(r.to_string(), contains("LEAKED 1 allocation"));
  }
  REQUIRE(cleanups.size() == 1);
  CHECK(cleanups[0].handle == leaked);
  CHECK(cleanups[0].bytes == 4000);
  CHECK_THAT(cleanups[0].operation, contains("cudaFreeAsync"));
  CHECK(cuscope::sim::outstanding_allocations() == 1);
  CHECK_THROWS_AS(cuscope::sim::reset(), std::logic_error);
}

TEST_CASE("memory_pool: a failed free of the initial reserve neither leaks it nor keeps the pool",
          "[fault_sweep][memory_pool]") {
  device_guard device;
  const recording_cleanups recording;
  cuscope::pool_options o;
  o.initial_bytes = std::size_t{1} << 20;
  cuscope::sim::fail_api("cudaFreeAsync", 1, cudaErrorUnknown);
  CHECK_THROWS_WITH(memory_pool(o), contains("cudaFreeAsync") && contains("cudaErrorUnknown"));
  CHECK(cleanups.empty());  // freed another way
  CHECK(cuscope::sim::outstanding_report().empty());
}

TEST_CASE("scoped_device: a restore that fails once is tried again", "[fault_sweep][device]") {
  device_guard device({2});
  const recording_cleanups recording;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  {
    const cuscope::scoped_device on(1);
    cuscope::sim::fail_api("cudaSetDevice", 1, cudaErrorUnknown);
  }
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
  CHECK(cleanups.empty());
  {
    const cuscope::scoped_device on(1);
    cuscope::sim::fail_api("cudaSetDevice", 1, cudaErrorUnknown);
    cuscope::sim::fail_api("cudaSetDevice", 2, cudaErrorUnknown);
  }
  REQUIRE(cleanups.size() == 1);  // twice: reported loudly
  CHECK(cleanups[0].object == "cuscope::scoped_device");
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("stream: a priority that cannot be read fails the constructor, which leaves nothing",
          "[fault_sweep][stream]") {
  device_guard device;
  cuscope::sim::fail_api("cudaStreamGetPriority", 1, cudaErrorUnknown);
  CHECK_THROWS_WITH(stream(), contains("cudaStreamGetPriority"));
  CHECK(cuscope::sim::outstanding_report().empty());
  cudaStream_t raw = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) == cudaSuccess);
  cuscope::sim::fail_api("cudaStreamGetPriority", 1, cudaErrorUnknown);
  CHECK_THROWS_WITH(stream::adopt(raw, 0), contains("cudaStreamGetPriority"));
  REQUIRE(cudaStreamDestroy(raw) == cudaSuccess);  // still the caller's
}

TEST_CASE("error: a failed call is named in the message, never as the variable holding its status",
          "[fault_sweep][error]") {
  device_guard device;
  stream s;
  cuscope::event e;
  const auto fails = [](const char* api, auto&& action) {
    INFO(api);
    cuscope::sim::fail_api(api, 1, cudaErrorUnknown);
    try {
      action();
      FAIL("no exception");
    } catch (const cuscope::cuda_error& x) {
      CHECK_THAT(std::string(x.what()), contains(std::string(api) + "(") &&
                                            !contains("status failed") &&
                                            !contains("current failed"));
    }
  };
  fails("cudaStreamQuery", [&] { (void)s.ready(); });
  fails("cudaEventQuery", [&] { (void)e.ready(); });
  fails("cudaHostAlloc", [&] { pinned_buffer<int> p(10); });
  fails("cudaGetDeviceCount", [&] { (void)cuscope::device_count(); });
  fails("cudaGetDevice", [&] { const cuscope::scoped_device on(0); });
  cuscope::sim::fail_api("cudaHostAlloc", 1, cudaErrorMemoryAllocation);
  CHECK_THROWS_WITH(pinned_buffer<int>(10), contains("cudaHostAlloc"));
  memory_pool pool;
  cuscope::sim::fail_api("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  CHECK_THROWS_WITH(device_buffer<int>(s, 10, pool), contains("cudaMallocFromPoolAsync"));
}

// ---------------------------------------------------------------------------------------------
// The sweep.

namespace {

// Every function the simulated device counts, so that each call a scenario makes can be failed.
const char* const sweep_apis[] = {"cudaGetDeviceCount",
                                  "cudaGetDevice",
                                  "cudaSetDevice",
                                  "cudaGetDeviceProperties",
                                  "cudaDeviceGetAttribute",
                                  "cudaDeviceSynchronize",
                                  "cudaDriverGetVersion",
                                  "cudaRuntimeGetVersion",
                                  "cudaDeviceGetStreamPriorityRange",
                                  "cudaDeviceCanAccessPeer",
                                  "cudaDeviceEnablePeerAccess",
                                  "cudaDeviceDisablePeerAccess",
                                  "cudaMalloc",
                                  "cudaFree",
                                  "cudaMallocHost",
                                  "cudaHostAlloc",
                                  "cudaFreeHost",
                                  "cudaHostRegister",
                                  "cudaHostUnregister",
                                  "cudaMemGetInfo",
                                  "cudaMemcpy",
                                  "cudaMemcpyAsync",
                                  "cudaMemset",
                                  "cudaMemsetAsync",
                                  "cudaPointerGetAttributes",
                                  "cudaMallocAsync",
                                  "cudaMallocFromPoolAsync",
                                  "cudaFreeAsync",
                                  "cudaMallocManaged",
                                  "cudaMemPrefetchAsync",
                                  "cudaMemAdvise",
                                  "cudaMallocPitch",
                                  "cudaMemcpy2D",
                                  "cudaMemcpy2DAsync",
                                  "cudaMemcpyPeer",
                                  "cudaMemcpyPeerAsync",
                                  "cudaMemGetDefaultMemPool",
                                  "cudaMemGetMemPool",
                                  "cudaMemSetMemPool",
                                  "cudaStreamGetId",
                                  "cudaMemPoolCreate",
                                  "cudaMemPoolDestroy",
                                  "cudaMemPoolSetAttribute",
                                  "cudaMemPoolGetAttribute",
                                  "cudaMemPoolTrimTo",
                                  "cudaMemPoolSetAccess",
                                  "cudaMemPoolGetAccess",
                                  "cudaDeviceGetDefaultMemPool",
                                  "cudaDeviceGetMemPool",
                                  "cudaDeviceSetMemPool",
                                  "cudaStreamCreate",
                                  "cudaStreamCreateWithFlags",
                                  "cudaStreamCreateWithPriority",
                                  "cudaStreamDestroy",
                                  "cudaStreamSynchronize",
                                  "cudaStreamQuery",
                                  "cudaStreamWaitEvent",
                                  "cudaStreamGetFlags",
                                  "cudaStreamGetPriority",
                                  "cudaStreamGetDevice",
                                  "cudaLaunchHostFunc",
                                  "cudaEventCreate",
                                  "cudaEventCreateWithFlags",
                                  "cudaEventRecord",
                                  "cudaEventRecordWithFlags",
                                  "cudaEventSynchronize",
                                  "cudaEventQuery",
                                  "cudaEventElapsedTime",
                                  "cudaEventDestroy",
                                  "cudaMemPoolExportToShareableHandle",
                                  "cudaMemPoolImportFromShareableHandle",
                                  "cudaMemPoolExportPointer",
                                  "cudaMemPoolImportPointer",
                                  "cudaIpcGetEventHandle",
                                  "cudaIpcOpenEventHandle",
                                  "cudaStreamBeginCapture",
                                  "cudaStreamEndCapture",
                                  "cudaStreamIsCapturing",
                                  "cudaStreamGetCaptureInfo",
                                  "cudaThreadExchangeStreamCaptureMode",
                                  "cudaGraphGetNodes",
                                  "cudaGraphNodeGetType",
                                  "cudaGraphInstantiate",
                                  "cudaGraphLaunch",
                                  "cudaGraphExecDestroy",
                                  "cudaGraphDestroy",
                                  "cudaDeviceGetGraphMemAttribute",
                                  "cudaDeviceSetGraphMemAttribute",
                                  "cudaDeviceGraphMemTrim"};

// The calls that allocate or create, which also fail for lack of memory.
bool allocates(const std::string& api) {
  return api.find("Malloc") != std::string::npos || api == "cudaHostAlloc" ||
         api == "cudaMemPoolCreate" || api.rfind("cudaStreamCreate", 0) == 0 ||
         api.rfind("cudaEventCreate", 0) == 0 || api == "cudaMemPoolExportToShareableHandle" ||
         api == "cudaMemPoolImportFromShareableHandle" || api == "cudaMemPoolExportPointer" ||
         api == "cudaMemPoolImportPointer" || api == "cudaIpcGetEventHandle";
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// The errors a call returns by itself, without an earlier asynchronous failure: those its page of
// the CUDA Runtime API reference lists (CUDA 13.0), cudaErrorMemoryAllocation for the calls that
// allocate or create, and cudaErrorUnknown where the page lists no error of the call's own.
// Every call can also return a sticky error left by earlier work, and cudaErrorCudartUnloading
// at process exit: sweep() adds those.
std::vector<cudaError_t> errors_of(const std::string& api) {
  std::vector<cudaError_t> e;
  const auto add = [&e](std::initializer_list<cudaError_t> list) {
    e.insert(e.end(), list.begin(), list.end());
  };
  const bool stream_member = starts_with(api, "cudaStreamGet") || api == "cudaStreamDestroy" ||
                             api == "cudaStreamWaitEvent" || api == "cudaLaunchHostFunc" ||
                             starts_with(api, "cudaEventRecord") || api == "cudaEventSynchronize";
  if (api == "cudaGetDeviceCount") {
    add({cudaErrorNoDevice, cudaErrorInsufficientDriver});
  } else if (api == "cudaSetDevice") {
    add({cudaErrorInvalidDevice, cudaErrorDevicesUnavailable});
  } else if (api == "cudaGetDevice") {
    add({cudaErrorInvalidValue, cudaErrorDevicesUnavailable});
  } else if (api == "cudaDeviceGetAttribute" || api == "cudaPointerGetAttributes" ||
             api == "cudaDeviceGetGraphMemAttribute" || api == "cudaDeviceSetGraphMemAttribute" ||
             api == "cudaDeviceGraphMemTrim" || api == "cudaDeviceGetDefaultMemPool" ||
             api == "cudaDeviceGetMemPool" || api == "cudaMemGetDefaultMemPool") {
    add({cudaErrorInvalidDevice, cudaErrorInvalidValue});
  } else if (api == "cudaGetDeviceProperties" || api == "cudaDeviceCanAccessPeer") {
    add({cudaErrorInvalidDevice});
  } else if (api == "cudaDeviceSynchronize") {
    add({cudaErrorUnknown});
  } else if (api == "cudaStreamQuery") {
    add({cudaErrorNotReady, cudaErrorInvalidResourceHandle});
  } else if (api == "cudaEventQuery" || api == "cudaEventElapsedTime") {
    add({cudaErrorNotReady, cudaErrorInvalidValue, cudaErrorInvalidResourceHandle});
  } else if (api == "cudaStreamSynchronize") {
    add({cudaErrorInvalidResourceHandle});
  } else if (stream_member) {
    add({cudaErrorInvalidValue, cudaErrorInvalidResourceHandle});
    if (api == "cudaLaunchHostFunc") add({cudaErrorNotSupported});
  } else if (api == "cudaMemcpy" || api == "cudaMemcpyAsync" || starts_with(api, "cudaMemcpy2D") ||
             starts_with(api, "cudaMemcpyPeer")) {
    add({cudaErrorInvalidValue, cudaErrorInvalidMemcpyDirection});
  } else if (api == "cudaMallocAsync" || api == "cudaMallocFromPoolAsync" ||
             api == "cudaFreeAsync" || api == "cudaMemPoolCreate" ||
             api == "cudaMemPoolImportFromShareableHandle" || api == "cudaMallocManaged") {
    add({cudaErrorInvalidValue, cudaErrorNotSupported});
  } else if (api == "cudaHostRegister") {
    add({cudaErrorInvalidValue, cudaErrorHostMemoryAlreadyRegistered, cudaErrorNotSupported});
  } else if (api == "cudaHostUnregister") {
    add({cudaErrorInvalidValue, cudaErrorHostMemoryNotRegistered});
  } else if (api == "cudaIpcGetEventHandle") {
    add({cudaErrorInvalidResourceHandle, cudaErrorMapBufferObjectFailed, cudaErrorNotSupported,
         cudaErrorInvalidValue});
  } else if (api == "cudaIpcOpenEventHandle") {
    add({cudaErrorMapBufferObjectFailed, cudaErrorNotSupported, cudaErrorInvalidValue,
         cudaErrorDeviceUninitialized});
  } else if (api == "cudaStreamIsCapturing" || api == "cudaStreamGetCaptureInfo") {
    // Not cudaErrorStreamCaptureImplicit: only the legacy stream answers it, and the library
    // takes it for "capturing" (graph_test.cpp pins that).
    add({cudaErrorInvalidValue});
  } else if (api == "cudaStreamEndCapture") {
    add({cudaErrorInvalidValue, cudaErrorStreamCaptureWrongThread});
  } else {
    add({cudaErrorInvalidValue});
  }
  if (allocates(api)) add({cudaErrorMemoryAllocation});
  return e;
}

// The sticky errors (after each, every later call fails the same way) that the sweep injects, and
// the error of a runtime unloading at process exit, which the simulated device makes permanent too.
constexpr cudaError_t sticky_errors[] = {cudaErrorIllegalAddress, cudaErrorLaunchFailure,
                                         cudaErrorCudartUnloading};

bool permanent(cudaError_t e) {
  return std::find(std::begin(sticky_errors), std::end(sticky_errors), e) !=
         std::end(sticky_errors);
}

// What can go wrong in a run; the targets are 0 for each.
enum problem {
  lost,
  false_report,
  unnamed,
  mistyped,
  unreported_leak,
  exit_noise,
  device_moved,
  error_left,
  capture_left,
  work_left,
  device_fault,
  problems
};
const char* const problem_names[problems] = {
    "lost result",     "false report", "unnamed error",      "wrong exception type",
    "unreported leak", "exit noise",   "device moved",       "error left",
    "capture left",    "work left",    "device fault/misuse"};

// Allocations outstanding beside graph memory, which is the device's and no session's.
std::size_t outstanding_allocations_outside_graphs() {
  const std::string report = cuscope::sim::outstanding_report();
  std::size_t graph = 0;
  for (std::size_t at = report.find("from graph memory"); at != std::string::npos;
       at = report.find("from graph memory", at + 1))
    ++graph;
  return cuscope::sim::outstanding_allocations() - graph;
}

// How a run ended.
enum ending { ended_clean, ended_threw, ended_reported, ended_both, endings };

// One run of a scenario: the counting run (no fault), or one with the nth call of api failing.
// The scenario's own checks (what the pool and the device really hold) run with the fault
// suspended, so that they are neither counted nor failed.
class sweep_run {
 public:
  sweep_run() = default;
  sweep_run(std::string api, std::size_t nth, cudaError_t error,
            const std::vector<session_report>* clean_reports)
      : api_(std::move(api)), nth_(nth), error_(error), clean_reports_(clean_reports) {}

  void arm() {
    if (api_.empty()) {
      for (const char* a : sweep_apis)
        marks_[a] = cuscope::sim::call_count(a);
    } else {
      mark_ = cuscope::sim::call_count(api_.c_str());
      if (armed_calls_ < nth_) cuscope::sim::fail_api(api_.c_str(), nth_ - armed_calls_, error_);
    }
    armed_ = true;
  }
  void disarm() {
    if (!armed_) return;
    armed_ = false;
    cuscope::sim::clear_faults();
    if (api_.empty()) {
      for (const char* a : sweep_apis) {
        const std::size_t n = cuscope::sim::call_count(a) - marks_[a];
        if (n != 0) calls_[a] += n;
      }
    } else {
      armed_calls_ += cuscope::sim::call_count(api_.c_str()) - mark_;
    }
  }

  bool fired() const {
    if (api_.empty()) return false;
    const std::size_t made =
        armed_calls_ + (armed_ ? cuscope::sim::call_count(api_.c_str()) - mark_ : 0);
    return made >= nth_;
  }
  /// A sticky error or cudaErrorCudartUnloading has fired: every later call fails.
  bool sticky_fired() const { return permanent(error_) && fired(); }
  bool unloading_fired() const { return error_ == cudaErrorCudartUnloading && fired(); }
  bool counting() const { return api_.empty(); }

  /// Runs check with the fault suspended; skipped once a sticky error has made every call fail.
  template <class F>
  void verify(F&& check) {
    if (sticky_fired()) return;
    disarm();
    try {
      check();
    } catch (const std::exception& e) {
      note(false_report, std::string("a check of the truth failed: ") + e.what());
    }
    arm();
  }

  /// Checks that stream has no work left, as the operation that just returned promised (it
  /// synchronized the stream).
  void synchronized(cuscope::stream_ref stream, const char* after) {
    verify([&] {
      const cudaError_t e = cudaStreamQuery(stream.get());
      (void)cudaGetLastError();
      if (e != cudaSuccess)
        note(work_left,
             std::string("work left on a stream after ") + after + ": " + cudaGetErrorName(e));
    });
  }

  /// A result element: correct, or not.
  void result(bool correct) {
    if (!correct) ++wrong_;
  }

  /// Checks a session's report, right after the session ended, against what the pool and the
  /// device hold (after a sticky error: against the counting run's report), and its live
  /// allocations against what the simulated device still holds beyond outside.
  void check_report(const session_report& r, const cuscope::memory_pool_ref& pool,
                    std::size_t outside) {
    const std::size_t index = reports_.size();
    reports_.push_back(r);
    const std::string text = r.to_string();
    if (r.complete() != r.unknown.empty() && r.complete())
      note(false_report, "a complete report with unknown figures");
    if (!r.complete() && text.find("INCOMPLETE") == std::string::npos)
      note(false_report, "an incomplete report whose text does not say so");
    const std::string json = cuscope::to_json(r);
    for (const std::string& u : r.unknown) {
      if (text.find(u) == std::string::npos)
        note(false_report, "an unknown figure the text does not name: " + u);
      if (json.find("\"" + u + "\":null") == std::string::npos)
        note(false_report, "an unknown figure that is not null in the JSON: " + u);
    }
    if (json.find(r.complete() ? "\"complete\":true" : "\"complete\":false") == std::string::npos)
      note(false_report, "the JSON's \"complete\" disagrees with the report");
    const std::size_t live = outstanding_allocations_outside_graphs();
    // At exit the runtime frees everything: releases that meet cudaErrorCudartUnloading are
    // taken as done, and their memory is neither freed here nor counted.
    if (!unloading_fired() && r.leaked_allocations + outside != live)
      note(false_report, "leaks: the report says " + std::to_string(r.leaked_allocations) +
                             ", the device holds " + std::to_string(live - outside));
    const auto compare = [&](const char* figure, std::size_t reported, std::size_t truth) {
      if (r.known(figure) && reported != truth)
        note(false_report, std::string(figure) + " reads " + std::to_string(reported) + ", truth " +
                               std::to_string(truth) + "\n" + text);
    };
    if (sticky_fired()) {
      if (clean_reports_ == nullptr || index >= clean_reports_->size()) return;
      const session_report& c = (*clean_reports_)[index];
      compare("reserved_at_exit_bytes", r.reserved_at_exit_bytes, c.reserved_at_exit_bytes);
      compare("reserved_at_finish_bytes", r.reserved_at_finish_bytes, c.reserved_at_finish_bytes);
      compare("used_at_exit_bytes", r.used_at_exit_bytes, c.used_at_exit_bytes);
      compare("driver_free_at_exit_bytes", r.driver_free_at_exit_bytes,
              c.driver_free_at_exit_bytes);
      compare("returned_bytes", r.returned_bytes, c.returned_bytes);
      return;
    }
    verify([&] {
      const cuscope::pool_stats st = pool.stats();
      compare("reserved_at_exit_bytes", r.reserved_at_exit_bytes, st.reserved_bytes);
      compare("used_at_exit_bytes", r.used_at_exit_bytes, st.used_bytes);
      const cuscope::scoped_device on(pool.device());
      std::size_t free_bytes = 0;
      std::size_t total = 0;
      CUSCOPE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
      compare("driver_free_at_exit_bytes", r.driver_free_at_exit_bytes, free_bytes);
      if (r.known("returned_bytes") && r.known("reserved_at_finish_bytes") &&
          r.known("reserved_at_exit_bytes") &&
          r.returned_bytes != (r.reserved_at_finish_bytes > r.reserved_at_exit_bytes
                                   ? r.reserved_at_finish_bytes - r.reserved_at_exit_bytes
                                   : 0))
        note(false_report, "returned_bytes disagrees with the reserve it was computed from");
    });
  }

  void note(problem p, std::string what) {
    ++found_[p];
    if (first_[p].empty()) first_[p] = std::move(what);
  }

  const std::string& api() const { return api_; }
  std::size_t nth() const { return nth_; }
  cudaError_t error() const { return error_; }
  std::size_t wrong() const { return wrong_; }
  const std::map<std::string, std::size_t>& calls() const { return calls_; }
  const std::vector<session_report>& reports() const { return reports_; }
  std::size_t found(problem p) const { return found_[p]; }
  const std::string& first(problem p) const { return first_[p]; }

 private:
  std::string api_;
  std::size_t nth_ = 0;
  cudaError_t error_ = cudaSuccess;
  const std::vector<session_report>* clean_reports_ = nullptr;
  bool armed_ = false;
  std::size_t mark_ = 0;
  std::size_t armed_calls_ = 0;
  std::map<std::string, std::size_t> marks_;
  std::map<std::string, std::size_t> calls_;
  std::size_t wrong_ = 0;
  std::vector<session_report> reports_;
  std::size_t found_[problems] = {};
  std::string first_[problems];
};

struct scenario {
  const char* name;
  std::function<void(sweep_run&)> body;
  int devices = 1;
};

struct tally {
  std::size_t scenarios = 0;
  std::size_t calls = 0;
  std::size_t runs = 0;
  std::size_t ends[endings] = {};
  std::size_t found[problems] = {};
};

bool names_a_call(const std::string& what) {
  for (const char* a : sweep_apis)
    if (what.find(a) != std::string::npos) return true;
  return false;
}

// The address each line of sim::outstanding_report() names.
// Graph memory is the graph's: a graph allocation outstanding is named by the report of the
// failed destruction of its graph (or executable graph).
std::vector<const void*> outstanding_handles() {
  std::vector<const void*> handles;
  const std::string report = cuscope::sim::outstanding_report();
  std::size_t at = 0;
  while (at < report.size()) {
    const std::size_t end = std::min(report.find('\n', at), report.size());
    const std::size_t hex = report.find("0x", at);
    const bool graph_memory =
        report.substr(at, end - at).find("from graph memory") != std::string::npos;
    const bool graph_reported =
        std::any_of(cleanups.begin(), cleanups.end(), [](const cleanup_record& r) {
          return r.operation.find("cudaGraph") != std::string::npos ||
                 r.operation.find("Captur") != std::string::npos;
        });
    if (hex < end && !(graph_memory && graph_reported))
      handles.push_back(reinterpret_cast<const void*>(  // NOLINT: an address read back
          static_cast<std::uintptr_t>(std::stoull(report.substr(hex, 18), nullptr, 16))));
    at = end + 1;
  }
  return handles;
}

// Judges the exception a run ended with: it names the failed call and its error, and has the type
// and status the error maps to (out_of_memory for cudaErrorMemoryAllocation, cuda_error for the
// others).
void judge_exception(sweep_run& run, const std::exception& e) {
  const std::string what = e.what();
  const bool named =
      run.fired() && what.find(cudaGetErrorName(run.error())) != std::string::npos &&
      (run.sticky_fired() ? names_a_call(what) : what.find(run.api()) != std::string::npos);
  // A failure reported through the cleanup channel first, and a later call that failed because of
  // it (a graph whose free node failed cannot launch twice): named where it happened.
  const bool reported_before =
      run.fired() && std::any_of(cleanups.begin(), cleanups.end(), [&](const cleanup_record& r) {
        return r.status == run.error() && r.operation.find(run.api()) != std::string::npos;
      });
  if (!named && reported_before && names_a_call(what)) return;
  if (!named) {
    std::string why = what + "\n" + cuscope::sim::fault_report();
    for (const cleanup_record& r : cleanups)
      why += "\ncleanup: " + r.operation + " " + r.message;
    run.note(unnamed, why);
    return;
  }
  // Without a device every device id is invalid: std::invalid_argument, naming CUDA's answer.
  if (run.error() == cudaErrorNoDevice && dynamic_cast<const std::invalid_argument*>(&e) != nullptr)
    return;
  const auto* cuda = dynamic_cast<const cuscope::cuda_error*>(&e);
  const auto* oom = dynamic_cast<const cuscope::out_of_memory*>(&e);
  const cudaError_t status = cuda != nullptr  ? cuda->status()
                             : oom != nullptr ? oom->status()
                                              : cudaSuccess;
  const bool should_be_oom = run.error() == cudaErrorMemoryAllocation;
  // A driver that does not know a device attribute: the feature is not supported.
  const bool translated = run.api() == "cudaDeviceGetAttribute" &&
                          run.error() == cudaErrorInvalidValue && status == cudaErrorNotSupported;
  if ((status != run.error() && !translated) || (oom != nullptr) != should_be_oom)
    run.note(mistyped, std::string(typeid(e).name()) + " with status " + cudaGetErrorName(status) +
                           " for " + cudaGetErrorName(run.error()) + ": " + what);
}

// Runs one scenario once, on a fresh simulated device, and judges the run.
void run_once(const scenario& sc, sweep_run& run, tally& t) {
  cuscope::test::device_setup setup;
  setup.device_count = sc.devices;
  setup.total_bytes = std::size_t{1} << 30;
  cuscope::sim::device_config c;
  c.device_count = setup.device_count;
  c.total_bytes = setup.total_bytes;
  c.context_bytes = setup.context_bytes;
  c.pool_granularity_bytes = setup.pool_granularity_bytes;
  try {
    cuscope::sim::reset(c);
  } catch (const std::logic_error&) {
    // What the previous run left: judged at its end.
  }
  cleanups.clear();
  bool threw = false;
  run.arm();
  try {
    sc.body(run);
  } catch (const std::exception& e) {
    threw = true;
    judge_exception(run, e);
  }
  const bool sticky = run.sticky_fired();
  const bool unloading = run.unloading_fired();
  run.disarm();
  bool missing = false;
  bool restore_reported = false;
  for (const cleanup_record& r : cleanups) {
    missing = missing || r.operation.find("missing") != std::string::npos;
    restore_reported = restore_reported || r.operation.find("cudaSetDevice") != std::string::npos;
    // At exit a release that meets cudaErrorCudartUnloading has nothing left to release.
    if (unloading) run.note(exit_noise, r.operation + ": " + r.message);
  }
  // At exit nothing reads results any more.
  if (run.wrong() != 0 && !threw && !missing && !unloading)
    run.note(lost, std::to_string(run.wrong()) + " wrong result elements, no error");
  if (!unloading) {
    for (const void* h : outstanding_handles()) {
      const bool named = std::any_of(cleanups.begin(), cleanups.end(),
                                     [&](const cleanup_record& r) { return r.handle == h; });
      if (!named) {
        std::string why = cuscope::sim::outstanding_report();
        for (const cleanup_record& r : cleanups)
          why += "cleanup: " + r.operation + " " + r.message + "\n";
        run.note(unreported_leak, why);
      }
    }
  }
  if (!sticky) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess || (device != 0 && !restore_reported))
      run.note(device_moved, "device " + std::to_string(device) + " is current");
    const cudaError_t left = cudaGetLastError();
    if (left != cudaSuccess) run.note(error_left, cudaGetErrorName(left));
    const std::string outstanding = cuscope::sim::outstanding_report();
    if (outstanding.find("stream capture") != std::string::npos)
      run.note(capture_left, outstanding);
    // The work still enqueued runs now: none of it may touch memory already freed, and no free
    // may have been a second one.
    for (int d = 0; d < sc.devices; ++d) {
      (void)cudaSetDevice(d);
      (void)cudaDeviceSynchronize();
    }
    (void)cudaSetDevice(0);
    (void)cudaGetLastError();
    std::string faults = cuscope::sim::fault_report();
    const std::string misuses = cuscope::sim::misuse_report();
    // The exporter freeing what an importer still maps (in another process, as a rule): the
    // consequence of the importer's failed free, which was reported.
    if (misuses.find("still mapped it") == std::string::npos || cleanups.empty()) faults += misuses;
    if (!faults.empty()) run.note(device_fault, faults);
  }
  ++t.runs;
  t.ends[threw ? (cleanups.empty() ? ended_threw : ended_both)
               : (cleanups.empty() ? ended_clean : ended_reported)]++;
  for (int p = 0; p < problems; ++p) {
    t.found[p] += run.found(static_cast<problem>(p));
    // The first three runs of a scenario with each problem are printed.
    if (run.found(static_cast<problem>(p)) != 0 && t.found[p] <= 3) {
      std::printf("  %s: %s call %zu failing with %s: %s: %s\n", sc.name, run.api().c_str(),
                  run.nth(), cudaGetErrorName(run.error()), problem_names[p],
                  run.first(static_cast<problem>(p)).c_str());
    }
  }
}

tally sweep(const scenario& sc) {
  tally t;
  sweep_run counting;
  run_once(sc, counting, t);
  const std::vector<session_report> clean_reports = counting.reports();
  t = tally{};  // the counting run must be clean: its own problems are counted below
  for (int p = 0; p < problems; ++p)
    t.found[p] += counting.found(static_cast<problem>(p));
  for (const auto& [api, count] : counting.calls()) {
    t.calls += count;
    std::vector<cudaError_t> errors = errors_of(api);
    errors.insert(errors.end(), std::begin(sticky_errors), std::end(sticky_errors));
    for (std::size_t nth = 1; nth <= count; ++nth) {
      for (const cudaError_t error : errors) {
        sweep_run run(api, nth, error, &clean_reports);
        run_once(sc, run, t);
      }
    }
  }
  try {
    cuscope::sim::reset();
  } catch (const std::logic_error&) {
    // Leaks of the last run: already judged.
  }
  return t;
}

// ---- the scenarios: every public operation, as a user writes it ----------------------------

constexpr std::size_t KiB = 1024;

std::vector<int> ints(std::size_t n, int first = 1) {
  std::vector<int> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = first + static_cast<int>(i);
  return v;
}

// Options for a session of the sweep: leaks (every free fails after a sticky error) are judged
// from the report, not printed.
cuscope::session_options quiet(std::string name) {
  cuscope::session_options o;
  o.name = std::move(name);
  o.leak_sink = [](const session_report&) {};
  return o;
}

void check_equal(sweep_run& run, const std::vector<int>& got, const std::vector<int>& expected) {
  run.result(got.size() == expected.size());
  for (std::size_t i = 0; i < std::min(got.size(), expected.size()); ++i)
    run.result(got[i] == expected[i]);
}

// A raw allocation the scenario owns: on an exception its release goes through the cleanup
// channel, as a careful caller's RAII would do it.
struct raw_allocation {
  cuscope::memory_pool_ref pool;
  cudaStream_t stream;
  void* p = nullptr;
  std::size_t bytes = 0;
  ~raw_allocation() {
    if (p != nullptr) cuscope::pool_resource(pool).deallocate(stream, p, bytes);
  }
};

// A stream capture the scenario begins; ended (and its graph destroyed) when an exception leaves
// it open, as a careful caller's RAII would do, so that the stream can be used again.
class capture {
 public:
  explicit capture(cudaStream_t stream) : stream_(stream) {
    CUSCOPE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }
  capture(const capture&) = delete;
  capture& operator=(const capture&) = delete;
  ~capture() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (!CUSCOPE_DETAIL_CLEANUP(cudaStreamIsCapturing(stream_, &status), "the user's capture",
                                stream_) ||
        status == cudaStreamCaptureStatusNone)
      return;
    cudaGraph_t graph = nullptr;
    if (CUSCOPE_DETAIL_CLEANUP(cudaStreamEndCapture(stream_, &graph), "the user's capture",
                               stream_) &&
        graph != nullptr)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaGraphDestroy(graph), "the user's graph", graph);
  }
  /// Ends the capture and returns its graph.
  cudaGraph_t end() {
    cudaGraph_t graph = nullptr;
    CUSCOPE_CUDA_TRY(cudaStreamEndCapture(stream_, &graph));
    return graph;
  }

 private:
  cudaStream_t stream_;
};

// A graph and its executable graph, destroyed through the cleanup channel.
struct graph_objects {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  graph_objects() = default;
  graph_objects(const graph_objects&) = delete;
  graph_objects& operator=(const graph_objects&) = delete;
  ~graph_objects() { destroy(); }
  void destroy() noexcept {
    if (exec != nullptr)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaGraphExecDestroy(exec), "the user's executable graph", exec);
    if (graph != nullptr)
      (void)CUSCOPE_DETAIL_CLEANUP(cudaGraphDestroy(graph), "the user's graph", graph);
    exec = nullptr;
    graph = nullptr;
  }
};

// Synchronizes a stream when it goes out of scope, as a user who frees pinned memory must.
struct synchronize_on_exit {
  explicit synchronize_on_exit(cudaStream_t s) noexcept : stream(s) {}
  cudaStream_t stream;
  synchronize_on_exit(const synchronize_on_exit&) = delete;
  synchronize_on_exit& operator=(const synchronize_on_exit&) = delete;
  ~synchronize_on_exit() {
    (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamSynchronize(stream), "the user's stream", stream);
  }
};

template <class Out, class Make>
void run_batches(sweep_run& run, std::size_t samples, std::size_t sample_elements,
                 std::size_t batch_size, Make&& make, bool per_sample,
                 std::optional<std::size_t> break_after = std::nullopt) {
  (void)sizeof(Out);
  const std::vector<value_t> data = make_source(samples * sample_elements);
  const std::size_t batch_count = (samples + batch_size - 1) / batch_size;
  std::vector<result_t> results(per_sample ? samples : batch_count, -1);
  std::deque<sum_job>& jobs = new_jobs(batch_count);
  std::size_t seen = 0;
  {
    auto range = make(data, results);
    for (const auto& b : range) {
      enqueue_sum(b, jobs[b.index()], sample_elements);
      ++seen;
      if (break_after && b.index() == *break_after) break;
    }
  }
  const std::size_t handed = break_after ? std::min(*break_after + 1, batch_count) : batch_count;
  run.result(seen == handed);
  for (std::size_t k = 0; k < handed; ++k) {
    const std::size_t first = k * batch_size;
    const std::size_t n = std::min(batch_size, samples - first);
    if (per_sample) {
      for (std::size_t i = first; i < first + n; ++i)
        run.result(results[i] == sum_of(data.data() + i * sample_elements, sample_elements));
    } else {
      run.result(results[k] == sum_of(data.data() + first * sample_elements, n * sample_elements));
    }
  }
}

std::vector<scenario> scenarios() {
  using cuscope::memory_pool_ref;
  std::vector<scenario> list;
  list.push_back({"memory_pool: settings, statistics, trim", [](sweep_run& run) {
                    memory_pool pool;
                    pool.set_release_threshold(KiB * KiB);
                    run.result(pool.release_threshold() == KiB * KiB);
                    pool.reset_peaks();
                    pool.set_reuse(pool.reuse());
                    pool.trim_to(0);
                    run.result(pool.stats().reserved_bytes == 0);
                  }});
  list.push_back({"memory_pool: initial_bytes and max_bytes", [](sweep_run& run) {
                    cuscope::pool_options o;
                    o.initial_bytes = KiB * KiB;
                    o.max_bytes = 64 * KiB * KiB;
                    memory_pool pool(o);
                    run.result(pool.stats().reserved_bytes >= KiB * KiB);
                    run.result(pool.max_bytes() >= o.max_bytes);
                  }});
  list.push_back({"memory_pool: allocate and deallocate", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    raw_allocation a{pool, s.get()};
                    a.p = pool.allocate(s, 4 * KiB, cuscope::alloc_policy::retry_after_trim);
                    a.bytes = 4 * KiB;
                    pool.deallocate(s, a.p, a.bytes);
                    a.p = nullptr;
                    s.synchronize();
                    run.result(pool.stats().used_bytes == 0);
                  }});
  list.push_back({"device_allocation: allocate_like, set_stream", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    stream t;
                    cuscope::device_allocation a(s, 4 * KiB, pool);
                    cuscope::device_allocation b = a.allocate_like(t, 8 * KiB);
                    a.set_stream(t);
                    run.result(b.size_bytes() == 8 * KiB && a.stream() == t.ref());
                  }});
  list.push_back({"device_buffer: from host and back", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    const std::vector<int> host = ints(1000);
                    device_buffer<int> b(s, host, pool);
                    check_equal(run, b.to_vector(s), host);
                    run.synchronized(s, "device_buffer::to_vector");
                  }});
  list.push_back({"device_buffer: copy, resize, copy_from, set_stream, swap, release, adopt",
                  [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    stream t;
                    const std::vector<int> host = ints(500);
                    const std::vector<int> extra = ints(20, 5000);
                    device_buffer<int> a(s, host, pool);
                    device_buffer<int> b(t, a);
                    b.resize(t, 520);
                    b.copy_from(t, extra.data(), 20, 500);
                    b.set_stream(s);
                    device_buffer<int> c;
                    swap(b, c);
                    int* raw = c.release();
                    device_buffer<int> d = device_buffer<int>::adopt(s, raw, 520, pool);
                    std::vector<int> expected = host;
                    expected.insert(expected.end(), extra.begin(), extra.end());
                    std::vector<int> back(520, -1);
                    d.copy_to(s, back);
                    s.synchronize();
                    check_equal(run, back, expected);
                  }});
  list.push_back(
      {"pinned_buffer: the source and target of asynchronous copies", [](sweep_run& run) {
         memory_pool pool;
         stream s;
         pinned_buffer<int> in(256);
         pinned_buffer<int> out(256);
         // Pinned buffers must outlive the copies that use them (pinned_buffer.hpp): when an
         // exception leaves the scope, the stream is synchronized before they are freed.
         const synchronize_on_exit sync{s.get()};
         for (std::size_t i = 0; i < in.size(); ++i)
           in[i] = static_cast<int>(3 * i);
         device_buffer<int> b(s, in, pool);
         b.copy_to(s, out.data(), out.size());
         s.synchronize();
         for (std::size_t i = 0; i < out.size(); ++i)
           run.result(out[i] == static_cast<int>(3 * i));
       }});
  list.push_back({"session: make_buffer, finish()", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    session e(pool, s, quiet("epoch"));
                    {
                      auto b = e.make_buffer<int>(4 * KiB);
                      const std::vector<int> host = ints(4 * KiB);
                      b.copy_from(s, host);
                      check_equal(run, b.to_vector(s), host);
                    }
                    try {
                      run.check_report(e.finish(), pool, 0);
                      run.synchronized(s, "session::finish");
                    } catch (...) {
                      run.check_report(e.report(), pool, 0);
                      throw;
                    }
                  }});
  list.push_back({"session: ended by its destructor", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    std::optional<session_report> seen;
                    {
                      cuscope::session_options o = quiet("request");
                      o.on_finish = [&](const session_report& r) { seen = r; };
                      session e(pool, s, o);
                      auto b = e.make_buffer<int>(64 * KiB);
                      auto c = e.make_buffer<double>(KiB);
                    }
                    run.result(seen.has_value());
                    if (seen) run.check_report(*seen, pool, 0);
                  }});
  list.push_back({"session: nested", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    std::optional<session_report> outer_seen;
                    {
                      cuscope::session_options o = quiet("outer");
                      o.on_finish = [&](const session_report& r) { outer_seen = r; };
                      session outer(pool, s, o);
                      auto kept = outer.make_buffer<int>(KiB);
                      {
                        session inner(outer, quiet("inner"));
                        auto b = inner.make_buffer<int>(16 * KiB);
                        b = device_buffer<int>();
                        try {
                          run.check_report(inner.finish(), pool, 1);
                        } catch (...) {
                          run.check_report(inner.report(), pool, 1);
                          throw;
                        }
                      }
                      kept = device_buffer<int>();
                    }
                    if (outer_seen) run.check_report(*outer_seen, pool, 0);
                  }});
  list.push_back({"session: a budget refuses before CUDA is asked", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    cuscope::session_options o = quiet("budget");
                    o.budget_bytes = 64 * KiB;
                    session e(pool, s, o);
                    {
                      auto b = e.make_buffer<char>(48 * KiB);
                      bool refused = false;
                      try {
                        auto c = e.make_buffer<char>(32 * KiB);
                      } catch (const cuscope::out_of_memory& x) {
                        if (x.status() != cudaSuccess) throw;
                        refused = true;
                      }
                      run.result(refused);
                    }
                    try {
                      run.check_report(e.finish(), pool, 0);
                    } catch (...) {
                      run.check_report(e.report(), pool, 0);
                      throw;
                    }
                  }});
  list.push_back({"session: release threshold, a leak outliving it", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    device_buffer<int> kept;
                    cuscope::session_options o;
                    o.release_threshold_bytes = 0;
                    o.on_leak = cuscope::leak_policy::ignore;
                    session e(pool, s, o);
                    kept = e.make_buffer<int>(KiB);
                    try {
                      const session_report& r = e.finish();
                      run.check_report(r, pool, 0);
                      run.result(r.leaked_allocations >= 1);
                    } catch (...) {
                      run.check_report(e.report(), pool, 0);
                      throw;
                    }
                  }});
  using range_t = std::vector<value_t>;
  using results_t = std::vector<result_t>;
  list.push_back({"batches: pageable source, no output", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    const std::vector<value_t> data = make_source(50);
                    std::deque<result_t>& sums = arena().results;
                    sums.assign(5, -1);
                    std::deque<sum_job>& jobs = new_jobs(5);
                    for (const auto& b : cuscope::batches(s, data, 10, pool)) {
                      sum_job& j = jobs[b.index()];
                      j.in = b.span().data();
                      j.size = b.size();
                      j.host_out = &sums[b.index()];
                      CUSCOPE_CUDA_TRY(cudaLaunchHostFunc(b.stream().get(), &run_sum, &j));
                    }
                    s.synchronize();
                    for (std::size_t k = 0; k < 5; ++k)
                      run.result(sums[k] == sum_of(data.data() + 10 * k, 10));
                  }});
  list.push_back({"batches: pageable source, results per sample", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    cuscope::batch_options o;
                    o.sample_elements = 3;
                    run_batches<result_t>(
                        run, 20, 3, 6,
                        [&](const range_t& d, results_t& r) {
                          return cuscope::batches(s, d, 6, pool, cuscope::output_per_sample(r, 1),
                                                  o);
                        },
                        true);
                  }});
  list.push_back({"batches: pinned source, results per batch", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    pinned_buffer<value_t> pinned(40);
                    run_batches<result_t>(
                        run, 40, 1, 10,
                        [&](const range_t& d, results_t& r) {
                          std::copy(d.begin(), d.end(), pinned.begin());
                          return cuscope::batches(s, pinned, 10, pool,
                                                  cuscope::output_per_batch(r, 1));
                        },
                        false);
                  }});
  list.push_back({"batches: device source, results per sample", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    device_buffer<value_t> source;
                    run_batches<result_t>(
                        run, 30, 1, 8,
                        [&](const range_t& d, results_t& r) {
                          source = device_buffer<value_t>(s, d, pool);
                          return cuscope::batches(s, source.data(), source.size(), 8, pool,
                                                  cuscope::output_per_sample(r, 1));
                        },
                        true);
                  }});
  list.push_back({"batches: producer source, results per batch", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    run_batches<result_t>(
                        run, 36, 1, 12,
                        [&](const range_t& d, results_t& r) {
                          auto fill = [&d](std::size_t first, std::size_t n, value_t* out) {
                            std::copy(d.begin() + static_cast<std::ptrdiff_t>(first),
                                      d.begin() + static_cast<std::ptrdiff_t>(first + n), out);
                          };
                          return cuscope::batches(s, cuscope::from_producer<value_t>(36, fill), 12,
                                                  pool, cuscope::output_per_batch(r, 1));
                        },
                        false);
                  }});
  list.push_back({"batches: break out of the loop", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    run_batches<result_t>(
                        run, 40, 1, 10,
                        [&](const range_t& d, results_t& r) {
                          return cuscope::batches(s, d, 10, pool, cuscope::output_per_batch(r, 1));
                        },
                        false, std::size_t{1});
                  }});
  list.push_back({"batches: a moved range", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    run_batches<result_t>(
                        run, 30, 1, 10,
                        [&](const range_t& d, results_t& r) {
                          auto range =
                              cuscope::batches(s, d, 10, pool, cuscope::output_per_batch(r, 1));
                          auto moved = std::move(range);
                          return moved;
                        },
                        false);
                  }});
  list.push_back({"batches: adapt_to_memory", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    cuscope::batch_options o;
                    o.adapt_to_memory = true;
                    run_batches<result_t>(
                        run, 30, 1, 10,
                        [&](const range_t& d, results_t& r) {
                          return cuscope::batches(s, d, 10, pool, cuscope::output_per_batch(r, 1),
                                                  o);
                        },
                        false);
                  }});
  list.push_back({"batches: a loop body that throws", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    const std::vector<value_t> data = make_source(40);
                    std::vector<result_t> results(4, -1);
                    std::deque<sum_job>& jobs = new_jobs(4);
                    struct body_error {};
                    bool caught = false;
                    try {
                      for (const auto& b : cuscope::batches(
                               s, data, 10, pool, cuscope::output_per_batch(results, 1))) {
                        enqueue_sum(b, jobs[b.index()]);
                        if (b.index() == 1) throw body_error{};
                      }
                    } catch (const body_error&) {
                      caught = true;
                    }
                    run.result(caught);
                    s.synchronize();  // the work on batch 1 read jobs[1]
                  }});
  list.push_back({"thrust_allocator: storage of a device_vector", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    const cuscope::thrust_allocator<int> a(s, pool);
                    thrust::device_vector<int, cuscope::thrust_allocator<int>> v(a);
                    v.reserve(KiB);
                    run.result(v.capacity() == KiB);
                    auto policy = cuscope::thrust_policy(s, pool);
                    const auto buffer = thrust::get_temporary_buffer<double>(policy, KiB);
                    thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
                    s.synchronize();
                  }});
  list.push_back({"pool_resource: stream-ordered and synchronous", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    cuscope::pool_resource r(pool, s);
                    raw_allocation a{pool, s.get()};
                    a.bytes = 4 * KiB;
                    a.p = r.allocate(s, a.bytes);
                    r.deallocate(s, a.p, a.bytes);
                    a.p = nullptr;
                    raw_allocation b{pool, s.get()};
                    b.bytes = 8 * KiB;
                    b.p = r.allocate_sync(b.bytes);
                    r.deallocate_sync(b.p, b.bytes);
                    b.p = nullptr;
                    s.synchronize();
                    // A free that failed was reported, and its memory is still in use.
                    run.result(pool.stats().used_bytes == 0 || !cleanups.empty());
                  }});
  list.push_back({"memory_report: a pool and the default pool", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    device_buffer<int> b(s, 64 * KiB, pool);
                    cuscope::report_options o;
                    o.query_nvml = false;
                    const auto r = cuscope::memory_report(0, {{"activations", pool}}, o);
                    run.verify([&] {
                      const cuscope::pool_stats st = pool.stats();
                      run.result(r.pools.size() == 2 &&
                                 r.pools[0].reserved_bytes == st.reserved_bytes &&
                                 r.pools[0].used_bytes == st.used_bytes);
                      std::size_t free_bytes = 0;
                      std::size_t total = 0;
                      CUSCOPE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
                      run.result(r.free_bytes == free_bytes && r.total_bytes == total);
                    });
                  }});
  list.push_back({"stream: priority, ready, synchronize, wait, adopt", [](sweep_run& run) {
                    cuscope::stream_options so;
                    so.priority = -1;
                    stream s(so);
                    run.verify([&] {
                      int priority = 0;
                      CUSCOPE_CUDA_TRY(cudaStreamGetPriority(s.get(), &priority));
                      run.result(s.priority() == priority);
                    });
                    (void)s.ready();
                    stream t;
                    t.wait(s.ref());
                    s.synchronize();
                    cudaStream_t raw = nullptr;
                    CUSCOPE_CUDA_TRY(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking));
                    try {
                      stream adopted = stream::adopt(raw, 0);
                      adopted.synchronize();
                    } catch (...) {
                      // adopt refused: the handle is still the caller's.
                      (void)CUSCOPE_DETAIL_CLEANUP(cudaStreamDestroy(raw), "the caller's stream",
                                                   raw);
                      throw;
                    }
                  }});
  list.push_back({"event: record, ready, synchronize, elapsed_ms", [](sweep_run& run) {
                    stream s;
                    cuscope::event_options o;
                    o.timing = true;
                    cuscope::event start(o);
                    cuscope::event end(o);
                    start.record(s);
                    end.record(s);
                    end.synchronize();
                    // A query that answers cudaErrorNotReady says "not ready", not an error.
                    run.result(end.ready() || (run.fired() && run.error() == cudaErrorNotReady));
                    run.result(cuscope::elapsed_ms(start, end) >= 0);
                  }});
  list.push_back({"two devices: pool, stream, buffer, session and report on device 1",
                  [](sweep_run& run) {
                    cuscope::pool_options po;
                    po.device = 1;
                    memory_pool pool(po);
                    cuscope::stream_options so;
                    so.device = 1;
                    stream s(so);
                    const std::vector<int> host = ints(300);
                    device_buffer<int> b(s, host, pool);
                    check_equal(run, b.to_vector(s), host);
                    session e(pool, s, quiet("device 1"));
                    { auto c = e.make_buffer<int>(KiB); }
                    try {
                      run.check_report(e.finish(), pool, 1);
                    } catch (...) {
                      run.check_report(e.report(), pool, 1);
                      throw;
                    }
                    cuscope::report_options o;
                    o.query_nvml = false;
                    const auto r = cuscope::memory_report(1, {{"d1", pool}}, o);
                    run.result(r.device == 1);
                  },
                  2});
  list.push_back(
      {"graph: buffers and a session in a stream capture, launched, graph memory trimmed",
       [](sweep_run& run) {
         memory_pool pool;
         stream s;
         cuscope::session_options o = quiet("graph");
         o.trim_graph_memory = true;
         session e(pool, s, o);
         graph_objects g;
         {
           capture c(s.get());
           {
             auto scratch = e.make_buffer<int>(4 * KiB);  // an allocation node
             CUSCOPE_CUDA_TRY(cudaMemsetAsync(scratch.data(), 0, scratch.size_bytes(), s.get()));
           }  // a free node
           run.result(cuscope::stream_capture_status(s) == cuscope::capture_status::active);
           g.graph = c.end();
         }
         CUSCOPE_CUDA_TRY(cudaGraphInstantiate(&g.exec, g.graph, 0));
         CUSCOPE_CUDA_TRY(cudaGraphLaunch(g.exec, s.get()));
         CUSCOPE_CUDA_TRY(cudaGraphLaunch(g.exec, s.get()));
         s.synchronize();
         run.result(cuscope::graph_memory(0).reserved_bytes > 0);
         g.destroy();
         try {
           const session_report& r = e.finish();
           run.check_report(r, pool, 0);
           run.synchronized(s, "session::finish");
           run.result(r.graph_trimmed);
           run.verify([&] { run.result(cuscope::graph_memory(0).reserved_bytes == 0); });
         } catch (...) {
           run.check_report(e.report(), pool, 0);
           throw;
         }
       }});
  list.push_back(
      {"graph: a session and batches refuse a capturing stream and leave the capture intact",
       [](sweep_run& run) {
         memory_pool pool;
         stream s;
         const std::vector<value_t> data = make_source(20);
         std::optional<session> e(std::in_place, pool, s, quiet("capturing"));
         graph_objects g;
         {
           capture c(s.get());
           bool refused = false;
           try {
             (void)e->finish();
           } catch (const std::logic_error&) {
             refused = true;
           }
           run.result(refused);
           refused = false;
           try {
             auto range = cuscope::batches(s, data, 10, pool);
           } catch (const std::logic_error&) {
             refused = true;
           }
           run.result(refused);
           run.result(cuscope::stream_capture_status(s) == cuscope::capture_status::active);
           g.graph = c.end();
         }
         g.destroy();
         run.check_report(e->report(), pool, 0);
         e.reset();
       }});
  list.push_back(
      {"ipc: an exported pool imported, an imported_buffer counted by a session, "
       "interprocess events",
       [](sweep_run& run) {
         cuscope::pool_options po;
         po.export_handle = cuscope::pool_export::posix_file_descriptor;
         memory_pool pool(po);
         stream s;
         const std::vector<int> host = ints(512);
         device_buffer<int> shared(s, host, pool);
         s.synchronize();
         const cuscope::allocation_export exported = cuscope::export_allocation(shared);
         const cuscope::pool_descriptor descriptor(pool);
         cuscope::imported_pool imported(descriptor);
         cuscope::event_options eo;
         eo.interprocess = true;
         const cuscope::event written(eo);
         const cuscope::event opened = cuscope::open_ipc_event(cuscope::ipc_handle(written));
         written.record(s);
         stream t;
         t.wait(opened);
         session work(imported.ref(), t, quiet("import"));
         {
           const cuscope::imported_buffer<int> view(work, imported, exported);
           std::vector<int> back(view.size(), -1);
           CUSCOPE_CUDA_TRY(cudaMemcpyAsync(back.data(), view.data(), view.size_bytes(),
                                            cudaMemcpyDeviceToHost, t.get()));
           t.synchronize();
           check_equal(run, back, host);
         }
         try {
           run.check_report(work.finish(), imported.ref(), 1);
           run.synchronized(t, "session::finish");
         } catch (...) {
           run.check_report(work.report(), imported.ref(), 1);
           throw;
         }
       }});
  list.push_back(
      {"pinned_memory_pool: pinned_buffers from it, copies both ways, trim", [](sweep_run& run) {
         cuscope::pinned_memory_pool host_pool;
         memory_pool pool;
         stream s;
         {
           // Pooled pinned buffers go back to their pool in stream order: no synchronization
           // before their end is needed.
           pinned_buffer<int> in(s, 256, host_pool);
           for (std::size_t i = 0; i < in.size(); ++i)
             in[i] = static_cast<int>(7 * i);
           device_buffer<int> b(s, in, pool);
           pinned_buffer<int> out(s, 256, host_pool);
           b.copy_to(s, out.data(), out.size());
           s.synchronize();
           for (std::size_t i = 0; i < out.size(); ++i)
             run.result(out[i] == static_cast<int>(7 * i));
         }
         s.synchronize();
         host_pool.trim_to(0);
         // A free that failed was reported, and its memory is still in use.
         run.result(host_pool.stats().reserved_bytes == 0 || !cleanups.empty());
       }});
  list.push_back({"batches: staged through a pinned_memory_pool", [](sweep_run& run) {
                    cuscope::pinned_memory_pool staging;
                    memory_pool pool;
                    stream s;
                    cuscope::batch_options o;
                    o.staging_pool = staging.ref();
                    run_batches<result_t>(
                        run, 30, 1, 10,
                        [&](const range_t& d, results_t& r) {
                          return cuscope::batches(s, d, 10, pool, cuscope::output_per_batch(r, 1),
                                                  o);
                        },
                        false);
                    s.synchronize();
                    run.result(staging.stats().used_bytes == 0 || !cleanups.empty());
                  }});
  list.push_back({"empty_cache: pools on two devices",
                  [](sweep_run& run) {
                    memory_pool a;
                    cuscope::pool_options po;
                    po.device = 1;
                    memory_pool b(po);
                    stream s;
                    cuscope::stream_options so;
                    so.device = 1;
                    stream t(so);
                    {
                      device_buffer<int> x(s, 64 * KiB, a);
                      device_buffer<int> y(t, 64 * KiB, b);
                    }
                    std::size_t held = 0;
                    run.verify([&] { held = a.stats().reserved_bytes + b.stats().reserved_bytes; });
                    const std::size_t returned = cuscope::empty_cache(a, b);
                    run.synchronized(s, "empty_cache");
                    run.synchronized(t, "empty_cache");
                    run.verify([&] {
                      // What a failed free (reported) still holds stays reserved.
                      const std::size_t kept = a.stats().reserved_bytes + b.stats().reserved_bytes;
                      run.result(kept == 0 || !cleanups.empty());
                      run.result(returned == held - kept);
                    });
                  },
                  2});
  list.push_back({"session: concurrent nested sessions on two streams", [](sweep_run& run) {
                    memory_pool pool;
                    stream s;
                    stream t;
                    std::optional<session_report> outer_seen;
                    {
                      cuscope::session_options o = quiet("service");
                      o.on_finish = [&](const session_report& r) { outer_seen = r; };
                      session service(pool, s, o);
                      session a(service, s, quiet("a"));
                      session b(service, t, quiet("b"));
                      { auto x = a.make_buffer<char>(64 * KiB); }
                      auto y = b.make_buffer<char>(32 * KiB);
                      try {
                        run.check_report(a.finish(), pool, 1);  // y is still live
                        run.synchronized(s, "session::finish");
                      } catch (...) {
                        run.check_report(a.report(), pool, 1);
                        throw;
                      }
                      y = device_buffer<char>();
                      // What a's report names as leaked (a free that failed) lives on beside b.
                      const std::size_t outside = a.report().leaked_allocations;
                      try {
                        run.check_report(b.finish(), pool, outside);
                        run.synchronized(t, "session::finish");
                      } catch (...) {
                        run.check_report(b.report(), pool, outside);
                        throw;
                      }
                    }
                    if (outer_seen) run.check_report(*outer_seen, pool, 0);
                  }});
  return list;
}

}  // namespace

TEST_CASE(
    "fault sweep: every call of every public operation failing in turn ends in a named error or "
    "a reported cleanup, never in a lost result, a false report, a moved device or a silent leak",
    "[fault_sweep]") {
  const recording_cleanups recording;
  tally total;
  const auto problems_text = [](const tally& t) {
    std::string text;
    for (int p = 0; p < problems; ++p)
      text += (p == 0 ? "" : "/") + std::to_string(t.found[p]);
    return text;
  };
  std::printf("%-74s %6s %6s | %6s %6s %6s %6s | %s\n", "operation", "calls", "runs", "clean",
              "threw", "report", "both",
              "lost/false/unnamed/type/leak/exit/device/error/capture/work/fault");
  const auto start = std::chrono::steady_clock::now();
  for (const scenario& sc : scenarios()) {
    const tally t = sweep(sc);
    std::printf("%-74s %6zu %6zu | %6zu %6zu %6zu %6zu | %s\n", sc.name, t.calls, t.runs,
                t.ends[ended_clean], t.ends[ended_threw], t.ends[ended_reported],
                t.ends[ended_both], problems_text(t).c_str());
    total.calls += t.calls;
    total.runs += t.runs;
    ++total.scenarios;
    for (int e = 0; e < endings; ++e)
      total.ends[e] += t.ends[e];
    for (int p = 0; p < problems; ++p)
      total.found[p] += t.found[p];
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-74s %6zu %6zu | %6zu %6zu %6zu %6zu | %s\n", "total", total.calls, total.runs,
              total.ends[ended_clean], total.ends[ended_threw], total.ends[ended_reported],
              total.ends[ended_both], problems_text(total).c_str());
  std::printf("%zu scenarios, crashes 0 (the sweep ran to its end), %.1f s\n", total.scenarios,
              seconds);
  std::fflush(stdout);
  CHECK(total.runs > 1000);
  for (int p = 0; p < problems; ++p) {
    INFO(problem_names[p]);
    CHECK(total.found[p] == 0);
  }
}

#else

TEST_CASE("fault sweep: needs the simulated device's fault injection", "[fault_sweep]") {
#  if defined(SKIP)
  SKIP("fault injection exists on the simulated device only");
#  else
  WARN("skipped: fault injection exists on the simulated device only");
#  endif
}

#endif
