// SPDX-License-Identifier: Apache-2.0
// A service on a GPU it may share: requests on worker threads, each a session nested in the
// service's, admitted only when the device has room for it, each writing one JSON line to the sink
// that CUSCOPE_SERVICE_REPORT names (stdout when it is not set). The pool's limits and the
// sessions' trim policy come from CUSCOPE_SERVICE_* variables where they are set.
// scripts/report_metrics.py turns the lines into Prometheus metrics.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cuscope/cuscope.hpp>
#include <cuscope/json_line_sink.hpp>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int workers = 4;
constexpr int requests_per_worker = 25;

struct tally {
  std::atomic<int> served{0};
  std::atomic<int> refused{0};
  std::atomic<int> failed{0};
  std::atomic<int> leaked{0};
};

// One request: its memory estimate is admitted first, then used.
void handle(cuscope::session& service, cuscope::stream_ref s, const cuscope::session_options& base,
            cuscope::report_sink& sink, int worker, int index, tally& t) {
  cuscope::session_options o = base;
  o.name = "request " + std::to_string(worker) + "." + std::to_string(index);
  const std::size_t estimate = (8 + static_cast<std::size_t>((worker * 7 + index * 13) % 24)) * MiB;
  o.admission.bytes = estimate;
  o.budget_bytes = estimate;
  const std::vector<float> input(estimate / 2 / sizeof(float), 1.0F);  // outlives the copy
  try {
    cuscope::session request(service, s, o);
    {
      auto activations = request.make_buffer<float>(input.size(), "activations");
      auto scratch = request.make_buffer<char>(estimate / 4, "scratch");
      activations.copy_from(s, input);
    }  // freed in stream order before the end counts what is still live
    if (request.finish().leaked()) ++t.leaked;  // its line goes to the service's sink
    ++t.served;
  } catch (const cuscope::admission_error& e) {
    ++t.refused;
    std::fprintf(stderr, "refused: %s\n", e.what());
    try {
      sink.write(e.report());  // the refused request's line: "admission_refused":true
    } catch (const std::exception& w) {
      ++t.failed;
      std::fprintf(stderr, "failed: %s\n", w.what());
    }
  } catch (const std::exception& e) {
    ++t.failed;
    std::fprintf(stderr, "failed: %s\n", e.what());
  }
}

}  // namespace

int main() {
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("no CUDA device\n");
      return 77;
    }
    cuscope::pool_options po;
    po.max_bytes = 256 * MiB;
    cuscope::memory_pool pool(cuscope::pool_options::from_env("service", po));
    cuscope::session_options defaults;
    defaults.on_leak = cuscope::leak_policy::report;
    defaults.admission.on_shortfall = cuscope::admission_policy::trim_and_retry;
    const cuscope::session_options options =
        cuscope::session_options::from_env("service", defaults);
    std::unique_ptr<cuscope::json_line_sink> sink = cuscope::json_line_sink::from_env("service");
    if (!sink) sink = std::make_unique<cuscope::json_line_sink>(stdout);

    cuscope::stream service_stream;
    cuscope::session_options so;
    so.name = "service";
    so.report_to = sink.get();  // every request's line, and the service's own at its end
    tally t;
    bool clean = false;
    {
      cuscope::session service(pool, service_stream, so);
      std::vector<std::thread> threads;
      for (int w = 0; w < workers; ++w) {
        threads.emplace_back([&service, &options, &sink, &t, w] {
          cuscope::stream s;
          for (int i = 0; i < requests_per_worker; ++i)
            handle(service, s, options, *sink, w, i, t);
        });
      }
      for (std::thread& th : threads)
        th.join();
      const cuscope::session_report& r = service.finish();
      clean = !r.leaked() && r.complete();
    }
    const cuscope::pool_stats after = pool.stats();
    std::fprintf(stderr,
                 "served %d requests, refused %d, failed %d, leaked %d; %zu report lines to %s "
                 "(%zu failed); "
                 "the pool holds %zu bytes, %zu in use\n",
                 t.served.load(), t.refused.load(), t.failed.load(), t.leaked.load(), sink->lines(),
                 sink->target().c_str(), sink->failures(), after.reserved_bytes, after.used_bytes);
    const bool ok = clean && t.failed == 0 && t.leaked == 0 && after.used_bytes == 0 &&
                    sink->lines() == static_cast<std::size_t>(t.served + t.refused) + 1 &&
                    sink->failures() == 0;
    std::fprintf(stderr, ok ? "every request reported, nothing leaked\n" : "FAILED\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "service: %s\n", e.what());
    return 1;
  }
}
