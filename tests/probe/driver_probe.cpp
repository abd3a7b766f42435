// SPDX-License-Identifier: Apache-2.0
// What the runtime answers where CUDA's documentation leaves the answer open: the choices listed
// in docs/simulated-device.md ("Choices the documentation leaves open", "Open questions").
//
// Built twice (cuscope_add_program): driver_probe on the real runtime and driver_probe_sim on the
// simulated device. scripts/gpu-run.sh runs both on a GPU machine and prints the lines whose
// values differ; docs/gpu-checklist.md says what to do about each. Not a test: it asserts
// nothing, and prints one "key: value" line per answer, flushed at once, so that a run killed
// midway still shows what it answered. Keys starting with "info." describe the machine and are
// not compared.
//
// Two modes. Without arguments it asks the questions that are safe on any driver, the cheap and
// important ones first, and ends with "# driver_probe: done, N calls failed". With --risky it asks
// only the questions that may abort the process or corrupt a pool on a real driver (second frees,
// a free inside an allocation) and ends with "# driver_probe --risky: done, N calls failed". The
// two modes print no key in common.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();

int failed_calls = 0;

void put(const std::string& key, const std::string& value) {
  std::printf("%s: %s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

std::string name_of(cudaError_t e) {
  return cudaGetErrorName(e);
}

std::string yes_no(bool b) {
  return b ? "yes" : "no";
}

// A call the probe needs to go on; a failure is printed as a comment and counted.
bool ok(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return true;
  std::printf("# %s failed: %s\n", call, cudaGetErrorName(e));
  std::fflush(stdout);
  (void)cudaGetLastError();
  ++failed_calls;
  return false;
}
#define PROBE_TRY(call) ok((call), #call)

// A call whose error code is the answer; the error is cleared so that it does not linger.
std::string answer(cudaError_t e) {
  (void)cudaGetLastError();
  return name_of(e);
}

std::uint64_t attribute(cudaMemPool_t pool, cudaMemPoolAttr a) {
  std::uint64_t v = 0;
  (void)PROBE_TRY(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}

std::uint64_t used(cudaMemPool_t pool) {
  return attribute(pool, cudaMemPoolAttrUsedMemCurrent);
}

std::uint64_t reserved(cudaMemPool_t pool) {
  return attribute(pool, cudaMemPoolAttrReservedMemCurrent);
}

std::string mib(std::uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%llu (%.3f MiB)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / static_cast<double>(MiB));
  return text;
}

// An attribute whose absence is an answer too: its value, or the error that refused it.
std::string attribute_or_error(cudaMemPool_t pool, cudaMemPoolAttr a) {
  std::uint64_t v = 0;
  const cudaError_t e = cudaMemPoolGetAttribute(pool, a, &v);
  return e == cudaSuccess ? mib(v) : answer(e);
}

// cudaMemPoolAttrMaxPoolSize came with the CUDA 13.2 headers (0xD in driver_types.h); with older
// headers it is asked by number, and a driver that does not know it refuses it.
#if CUDART_VERSION >= 13020
constexpr cudaMemPoolAttr max_pool_size_attr = cudaMemPoolAttrMaxPoolSize;
#else
constexpr auto max_pool_size_attr = static_cast<cudaMemPoolAttr>(0xD);
#endif

// What an allocation call left in its out-pointer, which held `sentinel` before the call.
void* const sentinel = reinterpret_cast<void*>(std::uintptr_t{0x5e5e000});

std::string pointer_after(const void* p) {
  return p == nullptr ? "nullptr" : p == sentinel ? "unchanged" : "an address";
}

// Whether an allocation call handed out memory that must be freed.
bool allocated(cudaError_t e, const void* p) {
  return e == cudaSuccess && p != nullptr && p != sentinel;
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string signed_mib(std::size_t after, std::size_t before) {
  const bool more = after >= before;
  return std::string(more ? "+" : "-") + mib(more ? after - before : before - after);
}

void set_threshold(cudaMemPool_t pool, std::uint64_t bytes) {
  (void)PROBE_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes));
}

cudaMemPool_t make_pool(std::uint64_t threshold, std::size_t max_bytes = 0) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
#if CUDART_VERSION >= 12020
  props.maxSize = max_bytes;
#else
  (void)max_bytes;
#endif
  cudaMemPool_t pool = nullptr;
  if (!PROBE_TRY(cudaMemPoolCreate(&pool, &props))) return nullptr;
  set_threshold(pool, threshold);
  return pool;
}

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  (void)PROBE_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

std::size_t free_memory() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  (void)PROBE_TRY(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

// Host function: keeps its stream busy for the given milliseconds.
void busy(void* milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(milliseconds)));
}

void empty_pool(cudaMemPool_t pool, cudaStream_t s) {
  (void)PROBE_TRY(cudaStreamSynchronize(s));
  (void)PROBE_TRY(cudaMemPoolTrimTo(pool, 0));
}

void probe_device() {
  cudaDeviceProp prop{};
  if (PROBE_TRY(cudaGetDeviceProperties(&prop, 0))) put("info.device", prop.name);
  int driver = 0;
  int runtime = 0;
  (void)PROBE_TRY(cudaDriverGetVersion(&driver));
  (void)PROBE_TRY(cudaRuntimeGetVersion(&runtime));
  put("info.driver_version", std::to_string(driver));
  put("info.runtime_version", std::to_string(runtime));
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  (void)PROBE_TRY(cudaMemGetInfo(&free_bytes, &total));
  put("info.total", mib(total));
  put("info.free_at_start", mib(free_bytes));
  put("device.meminfo_total_is_totalGlobalMem", yes_no(total == prop.totalGlobalMem));
  cudaMemPool_t def = nullptr;
  if (PROBE_TRY(cudaDeviceGetDefaultMemPool(&def, 0)))
    put("default_pool.release_threshold", mib(attribute(def, cudaMemPoolAttrReleaseThreshold)));
}

// Used bytes per allocation: the simulation rounds each up to 256.
void probe_used_rounding(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{12}, std::size_t{1000}, 4 * KiB,
                                  100 * KiB, MiB, 3 * MiB, 48 * MiB}) {
    const std::uint64_t before = used(pool);
    void* p = nullptr;
    if (!PROBE_TRY(cudaMallocFromPoolAsync(&p, bytes, pool, s))) continue;
    put("used.of_" + std::to_string(bytes) + "_bytes", mib(used(pool) - before));
    (void)PROBE_TRY(cudaFreeAsync(p, s));
  }
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// How a pool grows: the simulation reserves one chunk of the request rounded up to 32 MiB.
void probe_growth(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&a, 1000, pool, s)))
    put("reserved.after_1000_bytes", mib(reserved(pool)));
  if (PROBE_TRY(cudaMallocFromPoolAsync(&b, 3 * MiB, pool, s)))
    put("reserved.after_1000_bytes_and_3_MiB", mib(reserved(pool)));
  if (PROBE_TRY(cudaMallocFromPoolAsync(&c, 48 * MiB, pool, s)))
    put("reserved.after_1000_bytes_3_MiB_and_48_MiB", mib(reserved(pool)));
  for (void* p : {a, b, c})
    if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// Reserved and used bytes as a fresh pool serves 256 B, 1000 B, 3 MiB and 48 MiB, one after the
// other, all four live at the end. The simulation: 32 MiB units, used rounded up to 256.
void probe_growth_sequence(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  struct step {
    std::size_t bytes;
    const char* name;
  };
  const step steps[] = {{256, "256_bytes"},
                        {1000, "then_1000_bytes"},
                        {3 * MiB, "then_3_MiB"},
                        {48 * MiB, "then_48_MiB"}};
  void* live[4] = {};
  for (std::size_t i = 0; i < 4; ++i) {
    if (!PROBE_TRY(cudaMallocFromPoolAsync(&live[i], steps[i].bytes, pool, s))) break;
    put(std::string("growth.") + steps[i].name + ".reserved", mib(reserved(pool)));
    put(std::string("growth.") + steps[i].name + ".used", mib(used(pool)));
  }
  for (void* p : live)
    if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// When used bytes drop, and what a trim can release, while a free waits behind other work.
void probe_pending_free(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* p = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&p, 4 * MiB, pool, s)) &&
      PROBE_TRY(cudaStreamSynchronize(s))) {
    const std::uint64_t held = reserved(pool);
    static int wait_ms = 300;
    (void)PROBE_TRY(cudaLaunchHostFunc(s, &busy, &wait_ms));
    (void)PROBE_TRY(cudaFreeAsync(p, s));
    put("used.when_the_free_is_enqueued_behind_work", mib(used(pool)));
    (void)PROBE_TRY(cudaMemPoolTrimTo(pool, 0));
    put("trim.before_the_free_runs_keeps_all", yes_no(reserved(pool) == held));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    put("used.after_the_free_ran", mib(used(pool)));
    (void)PROBE_TRY(cudaMemPoolTrimTo(pool, 0));
    put("trim.after_synchronizing_releases_all", yes_no(reserved(pool) == 0));
  }
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// Watermarks reset to 0 or to the current value, and which attributes may be set.
void probe_watermarks(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* a = nullptr;
  void* b = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&a, 2 * MiB, pool, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&b, 2 * MiB, pool, s))) {
    (void)PROBE_TRY(cudaFreeAsync(b, s));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    put("used_high.before_reset", mib(attribute(pool, cudaMemPoolAttrUsedMemHigh)));
    std::uint64_t value = 5;
    put("error.set_used_high_to_5",
        answer(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value)));
    value = 0;
    put("error.set_used_current_to_0",
        answer(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value)));
    if (PROBE_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value))) {
      const std::uint64_t high = attribute(pool, cudaMemPoolAttrUsedMemHigh);
      put("used_high.after_reset", mib(high));
      put("used_high.reset_gives_current", yes_no(high == used(pool)));
    }
    if (PROBE_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &value)))
      put("reserved_high.reset_gives_current",
          yes_no(attribute(pool, cudaMemPoolAttrReservedMemHigh) == reserved(pool)));
    (void)PROBE_TRY(cudaFreeAsync(a, s));
  }
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// Whether a trim can release part of a reserve built by several allocations.
void probe_partial_trim(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* blocks[4] = {};
  for (void*& p : blocks)
    (void)PROBE_TRY(cudaMallocFromPoolAsync(&p, 16 * MiB, pool, s));
  for (void* p : blocks)
    if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
  (void)PROBE_TRY(cudaStreamSynchronize(s));
  put("reserved.after_four_16_MiB", mib(reserved(pool)));
  (void)PROBE_TRY(cudaMemPoolTrimTo(pool, 20 * MiB));
  put("reserved.after_trim_to_20_MiB", mib(reserved(pool)));
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// What cudaMemGetInfo says around allocations that are given back.
void probe_meminfo(cudaStream_t s) {
  const std::size_t first = free_memory();
  put("meminfo.two_readings_differ_by", signed_mib(free_memory(), first));
  void* p = nullptr;
  if (PROBE_TRY(cudaMalloc(&p, 64 * MiB))) {
    put("meminfo.cudaMalloc_64_MiB_takes", signed_mib(first, free_memory()));
    (void)PROBE_TRY(cudaFree(p));
    put("meminfo.after_cudaFree_vs_before", signed_mib(free_memory(), first));
  }
  const std::size_t before_async = free_memory();
  if (PROBE_TRY(cudaMalloc(&p, 16 * MiB))) {
    (void)PROBE_TRY(cudaFreeAsync(p, s));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    put("meminfo.after_cudaFreeAsync_of_cudaMalloc_vs_before",
        signed_mib(free_memory(), before_async));
  }
  const std::size_t before_pool = free_memory();
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* a = nullptr;
  void* b = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&a, 64 * MiB, pool, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&b, 32 * MiB, pool, s))) {
    put("meminfo.pool_of_64_and_32_MiB_takes", signed_mib(before_pool, free_memory()));
    put("reserved.after_64_and_32_MiB", mib(reserved(pool)));
    (void)PROBE_TRY(cudaFreeAsync(a, s));
    (void)PROBE_TRY(cudaFreeAsync(b, s));
  }
  empty_pool(pool, s);
  put("meminfo.after_trim_to_0_vs_before", signed_mib(free_memory(), before_pool));
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
  put("meminfo.after_pool_destroy_vs_before", signed_mib(free_memory(), before_pool));
}

// Which call applies a release threshold to a pool with cached memory. Each trigger gets a pool
// of its own, so that one trigger's release cannot hide the next: 32 MiB allocated and freed on
// stream a and a synchronized while the threshold keeps everything, then the threshold lowered
// to 0 and the trigger run. The simulation releases at cudaStreamSynchronize (of any stream of
// the device), cudaEventSynchronize and cudaDeviceSynchronize, not at a query or a blocking copy.
enum class trigger {
  unrelated_stream_sync,
  freeing_stream_sync,
  event_sync,
  stream_query,
  blocking_copy,
  device_sync
};

void release_after(trigger t, const std::string& key, bool print_cached) {
  cudaMemPool_t pool = make_pool(keep_all);
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  cudaEvent_t e = nullptr;
  (void)PROBE_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  void* target = nullptr;
  if (t == trigger::blocking_copy) (void)PROBE_TRY(cudaMalloc(&target, 4 * KiB));
  void* p = nullptr;
  if (pool != nullptr && PROBE_TRY(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, a)) &&
      PROBE_TRY(cudaFreeAsync(p, a)) && PROBE_TRY(cudaStreamSynchronize(a))) {
    if (print_cached) put("release.cached_before", mib(reserved(pool)));
    set_threshold(pool, 0);
    bool ran = true;
    switch (t) {
      case trigger::unrelated_stream_sync:
        ran = PROBE_TRY(cudaStreamSynchronize(b));
        break;
      case trigger::freeing_stream_sync:
        ran = PROBE_TRY(cudaStreamSynchronize(a));
        break;
      case trigger::event_sync:
        ran = PROBE_TRY(cudaEventRecord(e, a)) && PROBE_TRY(cudaEventSynchronize(e));
        break;
      case trigger::stream_query:
        ran = PROBE_TRY(cudaStreamQuery(a));
        break;
      case trigger::blocking_copy: {
        unsigned char bytes[4 * KiB] = {};
        ran = target != nullptr &&
              PROBE_TRY(cudaMemcpy(target, bytes, sizeof bytes, cudaMemcpyHostToDevice));
        break;
      }
      case trigger::device_sync:
        ran = PROBE_TRY(cudaDeviceSynchronize());
        break;
    }
    if (ran) put(key, mib(reserved(pool)));
  }
  (void)PROBE_TRY(cudaDeviceSynchronize());
  if (target != nullptr) (void)PROBE_TRY(cudaFree(target));
  if (pool != nullptr) (void)PROBE_TRY(cudaMemPoolTrimTo(pool, 0));
  if (pool != nullptr) (void)PROBE_TRY(cudaMemPoolDestroy(pool));
  (void)PROBE_TRY(cudaEventDestroy(e));
  (void)PROBE_TRY(cudaStreamDestroy(a));
  (void)PROBE_TRY(cudaStreamDestroy(b));
}

void probe_release_at_sync() {
  release_after(trigger::unrelated_stream_sync, "release.after_synchronizing_an_unrelated_stream",
                true);
  release_after(trigger::freeing_stream_sync,
                "release.after_synchronizing_the_freeing_stream_again", false);
  release_after(trigger::event_sync,
                "release.after_cudaEventSynchronize_of_an_event_recorded_after_the_free", false);
  release_after(trigger::stream_query,
                "release.after_a_successful_cudaStreamQuery_of_the_freeing_stream", false);
  release_after(trigger::blocking_copy,
                "release.after_a_blocking_cudaMemcpy_to_the_device_on_the_legacy_stream", false);
  release_after(trigger::device_sync, "release.after_cudaDeviceSynchronize", false);
}

// How much a synchronization keeps of a block just above the threshold: 16 MiB + 64 B freed with
// a threshold of 16 MiB. The simulation keeps the whole 32 MiB unit.
void probe_release_amount(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(16 * MiB);
  if (pool == nullptr) return;
  void* p = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&p, 16 * MiB + 64, pool, s)) &&
      PROBE_TRY(cudaFreeAsync(p, s)) && PROBE_TRY(cudaStreamSynchronize(s)))
    put("release.threshold_16_MiB_keeps_of_16_MiB_and_64_bytes", mib(reserved(pool)));
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// With every reuse policy off: does a successful cudaStreamQuery make a free reusable on another
// stream, as cudaStreamSynchronize does?
void probe_reuse_after_query() {
  cudaMemPool_t pool = make_pool(keep_all);
  cudaStream_t a = make_stream();
  cudaStream_t c = make_stream();
  if (pool == nullptr) return;
  int off = 0;
  for (const cudaMemPoolAttr policy :
       {cudaMemPoolReuseFollowEventDependencies, cudaMemPoolReuseAllowOpportunistic,
        cudaMemPoolReuseAllowInternalDependencies})
    (void)PROBE_TRY(cudaMemPoolSetAttribute(pool, policy, &off));
  void* p = nullptr;
  void* q = nullptr;
  void* r = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&p, 32 * MiB, pool, a)) && PROBE_TRY(cudaFreeAsync(p, a))) {
    cudaError_t query = cudaErrorNotReady;
    for (int i = 0; i < 1000 && query == cudaErrorNotReady; ++i) {
      query = cudaStreamQuery(a);
      if (query == cudaErrorNotReady) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    put("reuse.query_of_the_freeing_stream", answer(query));
    if (PROBE_TRY(cudaMallocFromPoolAsync(&q, 32 * MiB, pool, c)))
      put("reuse.on_another_stream_after_a_successful_query", yes_no(q == p));
    (void)PROBE_TRY(cudaStreamSynchronize(a));
    if (PROBE_TRY(cudaMallocFromPoolAsync(&r, 32 * MiB, pool, c)))
      put("reuse.on_another_stream_after_cudaStreamSynchronize", yes_no(r == p));
  }
  for (void* x : {q, r})
    if (x != nullptr) (void)PROBE_TRY(cudaFreeAsync(x, c));
  empty_pool(pool, c);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
  (void)PROBE_TRY(cudaStreamDestroy(a));
  (void)PROBE_TRY(cudaStreamDestroy(c));
}

// A query of pending work answers cudaErrorNotReady: does that stay the last error, for
// cudaPeekAtLastError and then cudaGetLastError? Nothing else runs between the three calls.
void probe_queries(cudaStream_t s) {
  static int wait_ms = 200;
  (void)cudaGetLastError();
  (void)PROBE_TRY(cudaLaunchHostFunc(s, &busy, &wait_ms));
  cudaError_t query = cudaStreamQuery(s);
  cudaError_t peek = cudaPeekAtLastError();
  cudaError_t last = cudaGetLastError();
  put("query.stream_with_work_running", name_of(query));
  put("query.stream_not_ready_in_cudaPeekAtLastError", name_of(peek));
  put("query.not_ready_is_the_last_error", name_of(last));
  (void)PROBE_TRY(cudaStreamSynchronize(s));

  cudaEvent_t e = nullptr;
  if (!PROBE_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming))) return;
  if (PROBE_TRY(cudaLaunchHostFunc(s, &busy, &wait_ms)) && PROBE_TRY(cudaEventRecord(e, s))) {
    query = cudaEventQuery(e);
    peek = cudaPeekAtLastError();
    last = cudaGetLastError();
    put("query.event_with_work_running", name_of(query));
    put("query.event_not_ready_in_cudaPeekAtLastError", name_of(peek));
    put("query.event_not_ready_in_cudaGetLastError", name_of(last));
  }
  (void)PROBE_TRY(cudaStreamSynchronize(s));
  (void)PROBE_TRY(cudaEventDestroy(e));
}

void probe_default_pool(cudaStream_t s) {
  cudaMemPool_t def = nullptr;
  if (!PROBE_TRY(cudaDeviceGetDefaultMemPool(&def, 0))) return;
  void* p = nullptr;
  if (PROBE_TRY(cudaMallocAsync(&p, 8 * MiB, s))) {
    put("default_pool.reserved_with_8_MiB_live", mib(reserved(def)));
    (void)PROBE_TRY(cudaFreeAsync(p, s));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    put("default_pool.reserved_after_free_and_synchronize", mib(reserved(def)));
  }
  put("error.destroy_the_default_pool", answer(cudaMemPoolDestroy(def)));
}

// Free memory in pieces: is it remapped for a larger request, or does the pool grow? And how
// much a threshold and a trim keep of one large free block and around a live allocation.
void probe_remap_and_release_amounts(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* d = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&a, 32 * MiB, pool, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&b, 32 * MiB, pool, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&c, 32 * MiB, pool, s))) {
    (void)PROBE_TRY(cudaFreeAsync(a, s));
    (void)PROBE_TRY(cudaFreeAsync(c, s));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    put("remap.reserved_with_b_live", mib(reserved(pool)));
    if (PROBE_TRY(cudaMallocFromPoolAsync(&d, 64 * MiB, pool, s)))
      put("remap.reserved_after_64_MiB_from_a_and_c", mib(reserved(pool)));
    for (void* p : {b, d})
      if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
  }
  empty_pool(pool, s);
  void* big = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&big, 256 * MiB, pool, s))) {
    (void)PROBE_TRY(cudaFreeAsync(big, s));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    set_threshold(pool, 100 * MiB);
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    put("release.threshold_100_MiB_keeps_of_256_MiB", mib(reserved(pool)));
    set_threshold(pool, keep_all);
  }
  empty_pool(pool, s);
  void* live = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&big, 128 * MiB, pool, s)) &&
      PROBE_TRY(cudaFreeAsync(big, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&live, 1 * MiB, pool, s))) {
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    (void)PROBE_TRY(cudaMemPoolTrimTo(pool, 0));
    put("trim.keeps_around_1_MiB_live_in_128_MiB", mib(reserved(pool)));
    (void)PROBE_TRY(cudaFreeAsync(live, s));
  }
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// Error codes and out-pointers of calls that are safe on any driver.
void probe_errors(cudaStream_t s) {
  int on_stack = 0;
  put("error.cudaFree_of_a_host_pointer", answer(cudaFree(&on_stack)));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 0);
  put("error.cudaMalloc_of_0_bytes", answer(e));
  put("cudaMalloc_of_0_bytes_gives_null", yes_no(p == nullptr));
  if (e == cudaSuccess && p != nullptr) (void)PROBE_TRY(cudaFree(p));
  p = sentinel;
  e = cudaMallocAsync(&p, 0, s);
  put("error.cudaMallocAsync_of_0_bytes", answer(e));
  put("pointer.after_cudaMallocAsync_of_0_bytes", pointer_after(p));
  if (allocated(e, p)) (void)PROBE_TRY(cudaFreeAsync(p, s));
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool != nullptr) {
    p = sentinel;
    e = cudaMallocFromPoolAsync(&p, 0, pool, s);
    put("error.cudaMallocFromPoolAsync_of_0_bytes", answer(e));
    put("pointer.after_cudaMallocFromPoolAsync_of_0_bytes", pointer_after(p));
    if (allocated(e, p)) (void)PROBE_TRY(cudaFreeAsync(p, s));
    empty_pool(pool, s);
    (void)PROBE_TRY(cudaMemPoolDestroy(pool));
  }
  for (const int id : {9999, -1}) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = id;
    cudaMemPool_t bad = nullptr;
    e = cudaMemPoolCreate(&bad, &props);
    put(std::string("error.cudaMemPoolCreate_on_device_") + (id < 0 ? "minus_1" : "9999"),
        answer(e));
    if (e == cudaSuccess && bad != nullptr) (void)PROBE_TRY(cudaMemPoolDestroy(bad));
  }
}

// Does a free wait for work pending on a stream (a host function that sleeps 300 ms)? cudaFree
// of stream-ordered memory is documented not to; cudaFreeHost was seen to on GPUs. The
// simulation frees at once in both (device_config::free_synchronizes, free_host_synchronizes).
void probe_free_waits(cudaStream_t s) {
  static int wait_ms = 300;
  constexpr double waited_ms = 250;
  void* p = nullptr;
  if (PROBE_TRY(cudaMallocAsync(&p, MiB, s)) && PROBE_TRY(cudaStreamSynchronize(s)) &&
      PROBE_TRY(cudaLaunchHostFunc(s, &busy, &wait_ms))) {
    const auto start = std::chrono::steady_clock::now();
    const bool freed = PROBE_TRY(cudaFree(p));
    const double took = milliseconds_since(start);
    if (freed) {
      put("free.cudaFree_of_cudaMallocAsync_memory_waits_for_pending_work",
          yes_no(took >= waited_ms));
      put("info.cudaFree_of_cudaMallocAsync_memory_ms", std::to_string(took));
    }
  }
  (void)PROBE_TRY(cudaStreamSynchronize(s));
  void* host = nullptr;
  if (PROBE_TRY(cudaMallocHost(&host, 4 * KiB)) &&
      PROBE_TRY(cudaLaunchHostFunc(s, &busy, &wait_ms))) {
    const auto start = std::chrono::steady_clock::now();
    const bool freed = PROBE_TRY(cudaFreeHost(host));
    const double took = milliseconds_since(start);
    if (freed) {
      put("free.cudaFreeHost_waits_for_pending_work", yes_no(took >= waited_ms));
      put("info.cudaFreeHost_ms", std::to_string(took));
    }
  }
  (void)PROBE_TRY(cudaStreamSynchronize(s));
}

// Free memory in 16 MiB pieces: A, B, C allocated, A and C freed and seen freed, then 32 MiB.
// Does the reserve grow? The simulation serves it from C's unit, without growing.
void probe_remap_16_MiB(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  if (pool == nullptr) return;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* d = nullptr;
  if (PROBE_TRY(cudaMallocFromPoolAsync(&a, 16 * MiB, pool, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&b, 16 * MiB, pool, s)) &&
      PROBE_TRY(cudaMallocFromPoolAsync(&c, 16 * MiB, pool, s))) {
    (void)PROBE_TRY(cudaFreeAsync(a, s));
    (void)PROBE_TRY(cudaFreeAsync(c, s));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    const std::uint64_t before = reserved(pool);
    put("remap.16_MiB_blocks.reserved_with_b_live", mib(before));
    if (PROBE_TRY(cudaMallocFromPoolAsync(&d, 32 * MiB, pool, s))) {
      const std::uint64_t after = reserved(pool);
      put("remap.16_MiB_blocks.reserved_after_32_MiB", mib(after));
      put("remap.16_MiB_blocks.reserve_grew", yes_no(after > before));
    }
    for (void* p : {b, d})
      if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
  }
  empty_pool(pool, s);
  (void)PROBE_TRY(cudaMemPoolDestroy(pool));
}

// --risky: calls that a driver may answer by aborting or by corrupting the pool. Each has a pool
// or an allocation of its own.
void probe_risky(cudaStream_t s) {
  cudaMemPool_t pool = make_pool(keep_all);
  void* p = nullptr;
  if (pool != nullptr && PROBE_TRY(cudaMallocFromPoolAsync(&p, 4 * KiB, pool, s)) &&
      PROBE_TRY(cudaFreeAsync(p, s))) {
    put("error.second_cudaFreeAsync_of_a_pointer", answer(cudaFreeAsync(p, s)));
    (void)PROBE_TRY(cudaStreamSynchronize(s));
    // A double free the driver did not catch may hand the same memory out twice.
    void* x = nullptr;
    void* y = nullptr;
    if (PROBE_TRY(cudaMallocFromPoolAsync(&x, 4 * KiB, pool, s)) &&
        PROBE_TRY(cudaMallocFromPoolAsync(&y, 4 * KiB, pool, s)))
      put("after_a_second_cudaFreeAsync.two_allocations_are_distinct", yes_no(x != y));
    for (void* q : {x, y})
      if (q != nullptr) (void)PROBE_TRY(cudaFreeAsync(q, s));
  }
  if (pool != nullptr) {
    empty_pool(pool, s);
    (void)PROBE_TRY(cudaMemPoolDestroy(pool));
  }
  void* m = nullptr;
  if (PROBE_TRY(cudaMalloc(&m, 4 * KiB))) {
    put("error.cudaFree_inside_an_allocation", answer(cudaFree(static_cast<char*>(m) + 256)));
    (void)PROBE_TRY(cudaFree(m));
  }
  m = nullptr;
  if (PROBE_TRY(cudaMalloc(&m, 4 * KiB)) && PROBE_TRY(cudaFree(m)))
    put("error.second_cudaFree_of_a_pointer", answer(cudaFree(m)));
}

// A pool's maxSize: how it reads back, which requests it refuses, and what a refused request leaves
// in its out-pointer. The simulation rounds maxSize up to 32 MiB units.
void probe_max_size(cudaStream_t s) {
#if CUDART_VERSION >= 12020
  cudaMemPool_t small = make_pool(keep_all, 4 * MiB);
  if (small != nullptr) {
    put("max_size_4_MiB.max_pool_size_attribute", attribute_or_error(small, max_pool_size_attr));
    void* a = nullptr;
    void* b = nullptr;
    put("max_size_4_MiB.allocate_1_MiB", answer(cudaMallocFromPoolAsync(&a, MiB, small, s)));
    put("max_size_4_MiB.reserved_after_1_MiB", mib(reserved(small)));
    void* big = sentinel;
    const cudaError_t e = cudaMallocFromPoolAsync(&big, 8 * MiB, small, s);
    put("max_size_4_MiB.allocate_8_MiB_more", answer(e));
    put("max_size_4_MiB.pointer_after_8_MiB_more", pointer_after(big));
    if (!allocated(e, big)) big = nullptr;
    put("max_size_4_MiB.allocate_3_MiB_more",
        answer(cudaMallocFromPoolAsync(&b, 3 * MiB, small, s)));
    for (void* p : {a, b, big})
      if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
    empty_pool(small, s);
    void* huge = sentinel;
    const cudaError_t refused = cudaMallocFromPoolAsync(&huge, 33 * MiB, small, s);
    put("max_size_4_MiB.allocate_33_MiB_in_the_empty_pool", answer(refused));
    put("max_size_4_MiB.pointer_after_33_MiB", pointer_after(huge));
    if (allocated(refused, huge)) (void)PROBE_TRY(cudaFreeAsync(huge, s));
    empty_pool(small, s);
    (void)PROBE_TRY(cudaMemPoolDestroy(small));
  }
  cudaMemPool_t limited = make_pool(keep_all, 64 * MiB);
  if (limited != nullptr) {
    put("max_size_64_MiB.max_pool_size_attribute", attribute_or_error(limited, max_pool_size_attr));
    void* a = nullptr;
    void* b = nullptr;
    put("max_size_64_MiB.allocate_48_MiB",
        answer(cudaMallocFromPoolAsync(&a, 48 * MiB, limited, s)));
    put("max_size_64_MiB.reserved_after_48_MiB", mib(reserved(limited)));
    put("max_size_64_MiB.allocate_32_MiB_more",
        answer(cudaMallocFromPoolAsync(&b, 32 * MiB, limited, s)));
    for (void* p : {a, b})
      if (p != nullptr) (void)PROBE_TRY(cudaFreeAsync(p, s));
    empty_pool(limited, s);
    (void)PROBE_TRY(cudaMemPoolDestroy(limited));
  }
#else
  (void)s;
  put("max_size", "not in these headers (CUDA 12.2+)");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const bool risky = argc == 2 && std::string(argv[1]) == "--risky";
  if (argc > 2 || (argc == 2 && !risky)) {
    std::fprintf(stderr, "usage: %s [--risky]\n", argv[0]);
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("driver_probe: no CUDA device\n");
    return 77;
  }
  if (!PROBE_TRY(cudaSetDevice(0))) return 1;
  cudaStream_t s = make_stream();
  if (risky) {
    probe_risky(s);
  } else {
    // Cheap questions that tests depend on first, slower ones (host functions that sleep) later.
    probe_device();
    probe_max_size(s);
    probe_growth(s);
    probe_growth_sequence(s);
    probe_used_rounding(s);
    probe_pending_free(s);
    probe_queries(s);
    probe_release_amount(s);
    probe_release_at_sync();
    probe_errors(s);
    probe_remap_16_MiB(s);
    probe_remap_and_release_amounts(s);
    probe_watermarks(s);
    probe_partial_trim(s);
    probe_meminfo(s);
    probe_default_pool(s);
    probe_reuse_after_query();
    probe_free_waits(s);
  }
  (void)PROBE_TRY(cudaStreamSynchronize(s));
  (void)PROBE_TRY(cudaStreamDestroy(s));
  std::printf("# driver_probe%s: done, %d calls failed\n", risky ? " --risky" : "", failed_calls);
  return 0;
}
