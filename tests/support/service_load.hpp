// SPDX-License-Identifier: Apache-2.0
// The load of a service for the tests that run it (tests/service_test.cpp under Catch2,
// tests/testing/gtest_service.cpp under GoogleTest's leak check): requests on worker threads,
// each a session nested in the service's on the thread's stream, with budgets, admission,
// out-of-memory refusals and buffers made and freed in random order. Framework-free: a worker
// writes what it saw into its log, which the test checks on its own thread.
#pragma once

#include <cuscope/device_buffer.hpp>
#include <cuscope/session.hpp>
#include <cuscope/stream.hpp>

#include <cstddef>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace cuscope::test {

// What one worker saw.
struct worker_log {
  std::vector<std::string> errors;
  std::set<std::string> served;                // names of the requests that began
  std::map<std::string, std::size_t> budgets;  // of every request, 0 for none
  std::size_t admitted = 0;
  std::size_t admission_refusals = 0;
  std::size_t budget_refusals = 0;
  std::size_t pool_refusals = 0;
  std::size_t faults = 0;
  std::size_t failed_ends = 0;

  // Adds other's counts and names to this log.
  void add(const worker_log& other) {
    errors.insert(errors.end(), other.errors.begin(), other.errors.end());
    served.insert(other.served.begin(), other.served.end());
    budgets.insert(other.budgets.begin(), other.budgets.end());
    admitted += other.admitted;
    admission_refusals += other.admission_refusals;
    budget_refusals += other.budget_refusals;
    pool_refusals += other.pool_refusals;
    faults += other.faults;
    failed_ends += other.failed_ends;
  }
};

// Serves requests requests of worker id, each nested in service, on a stream of its own. The
// service's 32 MiB of weights in a 64 MiB pool leave at most 32 MiB: a tenth of the requests ask
// admission for three quarters of the pool's limit (always refused), a tenth for 16 MiB, one in
// fifty asks the pool for 80 MiB (refused by the pool). A refused request's report
// (admission_error::report()) goes to refusals, unless it is null.
inline void serve_requests(session& service, int id, int requests, worker_log& log,
                           report_sink* refusals) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  stream s;
  std::mt19937 rng(static_cast<unsigned>(id) * 7919U + 1U);
  for (int i = 0; i < requests; ++i) {
    session_options o;
    o.name = "request " + std::to_string(id) + "." + std::to_string(i);
    o.budget_bytes = (1 + rng() % 8) * MiB;
    o.on_leak = leak_policy::ignore;  // the lines are checked instead
    const bool huge = i % 50 == 7;    // beyond the pool's limit
    if (huge) o.budget_bytes = 0;
    if (i % 10 == 3) o.admission.pool_fraction = 0.75;
    if (i % 10 == 5) o.admission.bytes = 16 * MiB;
    log.budgets[o.name] = o.budget_bytes;
    try {
      session request(service, s, o);
      ++log.admitted;
      log.served.insert(o.name);
      {
        std::vector<device_buffer<char>> live;
        const int buffers = 1 + static_cast<int>(rng() % 6);
        for (int k = 0; k < buffers; ++k) {
          const std::size_t bytes = huge && k == 0 ? 80 * MiB : (1 + rng() % 4) * MiB / 2;
          try {
            live.push_back(request.make_buffer<char>(bytes, "activations"));
          } catch (const out_of_memory& e) {
            if (e.status() == cudaSuccess)  // a budget, before CUDA was asked
              ++log.budget_refusals;
            else
              ++log.pool_refusals;
          } catch (const cuda_error&) {
            ++log.faults;
          }
          if (rng() % 3 == 0 && !live.empty()) live.pop_back();
        }
      }
      try {
        const session_report& r = request.finish();
        if (r.leaked()) log.errors.push_back(o.name + ": leaked\n" + r.to_string());
      } catch (const cuda_error&) {
        ++log.failed_ends;
        if (!request.finished()) log.errors.push_back(o.name + ": not finished after a failure");
        if (request.report().leaked())
          log.errors.push_back(o.name + ": leaked\n" + request.report().to_string());
      }
    } catch (const admission_error& e) {
      ++log.admission_refusals;
      if (refusals != nullptr) refusals->write(e.report());
    }
  }
}

}  // namespace cuscope::test
