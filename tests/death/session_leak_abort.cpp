// SPDX-License-Identifier: Apache-2.0
// Under leak_policy::abort a leaking session prints its report and aborts the process.
#include <cuscope/cuscope.hpp>
#include <cuscope/sim.hpp>

int main() {
  cuscope::memory_pool pool;
  cuscope::stream stream;
  cuscope::device_buffer<int> escaped;
  cuscope::session_options options;
  options.name = "doomed";
  options.on_leak = cuscope::leak_policy::abort;
  cuscope::session work(pool, stream, options);
  escaped = work.make_buffer<int>(1024);
  (void)work.finish();
  return 0;  // not reached
}
