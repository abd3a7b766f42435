// SPDX-License-Identifier: Apache-2.0
// What asking NVML costs a service. A query of this process's memory on the device
// (detail::nvml::process_usage, what memory_report and a session's admission call), with NVML
// loaded and initialized once per process, beside the former way of every query: dlopen,
// nvmlInit_v2, the query, nvmlShutdown, dlclose; from 1 thread and from 8 at once. Then sessions
// whose admission asks NVML every time (admission.query_nvml = always) beside sessions that never
// ask, nested in a service's session as a service runs them, from 1 and 8 threads. The
// alternatives run side by side, interleaved in rounds. On the simulated device the figures are
// the loader's and the simulation's host cost (no dlopen happens there), and the simulation counts
// the NVML calls; on a GPU they include libnvidia-ml.so.1 and the driver.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cuscope/cuscope.hpp>
#include <cuscope/detail/nvml.hpp>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"

#if CUSCOPE_BENCH_SIMULATED
#  include <cuscope/sim.hpp>
#endif

namespace {

namespace cb = cuscope_bench;
namespace nvml = cuscope::detail::nvml;
using cb::steady;

constexpr std::size_t threads = 8;

std::string device_bus_id(int device) {
  int domain = 0;
  int bus = 0;
  int slot = 0;
  CUSCOPE_BENCH_CHECK(cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device));
  CUSCOPE_BENCH_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device));
  CUSCOPE_BENCH_CHECK(cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, device));
  return nvml::bus_id(static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                      static_cast<unsigned>(slot));
}

// The former process_usage: the library loaded, NVML initialized and shut down, the library
// unloaded, at every query.
nvml::answer process_usage_per_query(const std::string& bus_id, unsigned int pid) {
  nvml::answer a;
  const nvml::library lib;
  a.source = lib.source();
  if (!lib.loaded()) return a;
  const auto init = lib.function<nvml::init_fn>("nvmlInit_v2");
  const auto shutdown = lib.function<nvml::init_fn>("nvmlShutdown");
  const auto by_bus = lib.function<nvml::by_bus_fn>("nvmlDeviceGetHandleByPciBusId_v2");
  const auto query = lib.function<nvml::query_v2_fn>("nvmlDeviceGetComputeRunningProcesses_v3");
  if (init == nullptr || shutdown == nullptr || by_bus == nullptr || query == nullptr) {
    a.source = "unavailable: " + a.source + " lacks an entry point";
    return a;
  }
  if (init() != nvml::success) {
    a.source = "unavailable: nvmlInit_v2 failed";
    return a;
  }
  nvml::device_t device = nullptr;
  nvml::process_list<nvml::process_info_v2> list;
  if (by_bus(bus_id.c_str(), &device) == nvml::success &&
      nvml::processes(query, device, list) == nvml::success)
    nvml::tally(list, pid, a);
  (void)shutdown();
  return a;
}

// Runs body(t) on n threads released together; returns the wall time in ns.
double at_once(std::size_t n, const std::function<void(std::size_t)>& body) {
  if (n == 1) {
    const auto t0 = steady::now();
    body(0);
    return cb::ns_between(t0, steady::now());
  }
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < n; ++t)
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load())
        std::this_thread::yield();
      body(t);
    });
  while (ready.load() < n)
    std::this_thread::yield();
  const auto t0 = steady::now();
  go = true;
  for (std::thread& w : workers)
    w.join();
  return cb::ns_between(t0, steady::now());
}

// ns per dlopen("libnvidia-ml.so.1") and, when it was found, dlclose: the loading that every
// query did before NVML was loaded once per process. Measured first, before any query has loaded
// the library (a dlopen of a library already loaded only counts a reference).
double time_loading(std::size_t calls, bool& found) {
  const auto t0 = steady::now();
  for (std::size_t i = 0; i < calls; ++i) {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    found = h != nullptr;
    if (h != nullptr) dlclose(h);
  }
  return cb::ns_between(t0, steady::now()) / static_cast<double>(calls);
}

cuscope::session_options request(cuscope::nvml_query q) {
  cuscope::session_options o;
  o.name = "request";
  o.admission.bytes = 1;  // an admission, so that it reads the device (and NVML when asked)
  o.admission.query_nvml = q;
  o.trim = false;
  return o;
}

struct alternative {
  const char* key;
  const char* label;
  std::size_t threads;
  std::function<void(std::size_t thread, std::size_t calls)> run;
};

struct nvml_calls {
  std::size_t init = 0;
  std::size_t shutdown = 0;
};

nvml_calls count_nvml_calls() {
  nvml_calls c;
#if CUSCOPE_BENCH_SIMULATED
  c.init = cuscope::sim::call_count("nvmlInit_v2");
  c.shutdown = cuscope::sim::call_count("nvmlShutdown");
#endif
  return c;
}

int run(int argc, char** argv) {
  const cb::args a(argc, argv,
                   "The cost of asking NVML what this process uses: per query, with NVML loaded "
                   "once per process and as formerly at every query, and per session whose "
                   "admission asks it, from 1 and 8 threads.",
                   {{"--calls",
                     "queries and sessions per round and alternative (default 1000; "
                     "--quick 96)"},
                    {"--rounds", "rounds (default 7; --quick 2)"}});
  const std::size_t calls = (a.count("--calls", a.quick() ? 96 : 1000) + threads - 1) / threads *
                            threads;  // a multiple of the threads
  const std::size_t rounds = a.count("--rounds", a.quick() ? 2 : 7);
  cb::report rep("nvml", a);
  rep.config.set("calls", calls);
  rep.config.set("rounds", rounds);
  rep.config.set("threads", threads);

  bool found = false;
  const double loading_ns = time_loading(calls, found);

  CUSCOPE_BENCH_CHECK(cudaSetDevice(0));
  const std::string bus = device_bus_id(0);
  const unsigned pid = nvml::this_process();
  cuscope::pool_options po;
  po.device = 0;
  cuscope::memory_pool pool(po);
  cuscope::stream service_stream;
  cuscope::session_options so;
  so.name = "service";
  cuscope::session service(pool, service_stream, so);
  std::vector<cuscope::stream> streams(threads);

  std::string source;
  const auto query_once = [&](std::size_t t, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const nvml::answer answer = nvml::process_usage(bus, pid);
      if (t == 0) source = answer.source;
    }
  };
  const auto query_each = [&](std::size_t, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      (void)process_usage_per_query(bus, pid);
  };
  const auto sessions = [&](cuscope::nvml_query q) {
    return [&, q](std::size_t t, std::size_t n) {
      const cuscope::session_options o = request(q);
      for (std::size_t i = 0; i < n; ++i) {
        cuscope::session work(service, streams[t], o);
        auto b = work.make_buffer<char>(256);
        (void)b;
      }
    };
  };
  const std::vector<alternative> alts = {
      {"query_once_per_process", "query, NVML loaded once per process", 1, query_once},
      {"query_load_init_shutdown_each", "query, load + init + shutdown each (former)", 1,
       query_each},
      {"query_once_per_process_8_threads", "query, once per process, 8 threads", threads,
       query_once},
      {"query_load_init_shutdown_each_8_threads", "query, each (former), 8 threads", threads,
       query_each},
      {"session_always", "session, query_nvml = always", 1, sessions(cuscope::nvml_query::always)},
      {"session_never", "session, query_nvml = never", 1, sessions(cuscope::nvml_query::never)},
      {"session_always_8_threads", "session, always, 8 threads", threads,
       sessions(cuscope::nvml_query::always)},
      {"session_never_8_threads", "session, never, 8 threads", threads,
       sessions(cuscope::nvml_query::never)},
  };

  std::vector<std::vector<double>> samples(alts.size());
  std::vector<nvml_calls> counted(alts.size());
  for (std::size_t r = 0; r < rounds; ++r) {
    for (const std::size_t k : cb::round_order(alts.size(), r)) {
      const alternative& alt = alts[k];
      const nvml_calls before = count_nvml_calls();
      const double ns =
          at_once(alt.threads, [&](std::size_t t) { alt.run(t, calls / alt.threads); });
      const nvml_calls after = count_nvml_calls();
      counted[k].init += after.init - before.init;
      counted[k].shutdown += after.shutdown - before.shutdown;
      samples[k].push_back(ns / static_cast<double>(calls));
    }
  }

  cb::table t(
      "NVML: time per query or session (median ±spread over rounds; 8 threads: wall "
      "time / calls)",
      {"what", "time", std::to_string(calls) + " calls", "nvmlInit_v2 / nvmlShutdown"});
  cb::json results = cb::json::object();
  std::vector<cb::summary> sum;
  for (std::size_t k = 0; k < alts.size(); ++k) {
    sum.push_back(cb::summarize(samples[k]));
    const std::string count = cb::simulated ? std::to_string(counted[k].init) + " / " +
                                                  std::to_string(counted[k].shutdown)
                                            : "not counted";
    t.add_row({alts[k].label, cb::format_ns_spread(sum[k]),
               cb::format_ns(sum[k].median * static_cast<double>(calls)), count});
    cb::json j = sum[k].to_json();
    j.set("unit", "ns per call");
    j.set("threads", alts[k].threads);
    if (cb::simulated) {
      j.set("nvmlInit_v2_calls", counted[k].init);
      j.set("nvmlShutdown_calls", counted[k].shutdown);
    }
    results.set(alts[k].key, std::move(j));
  }
  t.add_row({std::string("dlopen + dlclose of libnvidia-ml.so.1 alone (") +
                 (found ? "found" : "not found") + ")",
             cb::format_ns(loading_ns), cb::format_ns(loading_ns * static_cast<double>(calls)),
             ""});
  cb::json loading = cb::json::object();
  loading.set("median", loading_ns);
  loading.set("found", found);
  loading.set("unit", "ns per call");
  results.set("dlopen_dlclose_libnvidia_ml", std::move(loading));
  rep.results.push(std::move(results));
  rep.add_table(t);
  rep.note("NVML answered from: " + source);
  rep.note(
      "The former way's dlopen and dlclose happen only outside the simulation; the row "
      "\"dlopen + dlclose alone\" is what they cost on this machine, measured before "
      "anything loaded the library.");
  const auto ms = [&](std::size_t k) { return sum[k].median * static_cast<double>(calls) / 1e6; };
  rep.headline("NVML: " + std::to_string(calls) + " queries, loaded once per process", ms(0), "ms");
  rep.headline("NVML: " + std::to_string(calls) + " queries, load + init + shutdown each", ms(1),
               "ms");
  rep.headline("NVML: former / once per process, per query", sum[1].median / sum[0].median, "x");
  rep.headline("NVML: former / once per process, per query, 8 threads",
               sum[3].median / sum[2].median, "x");
  rep.headline("NVML: " + std::to_string(calls) + " sessions with query_nvml = always", ms(4),
               "ms");
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return cuscope_bench::run_main("nvml_bench", [&] { return run(argc, argv); });
}
