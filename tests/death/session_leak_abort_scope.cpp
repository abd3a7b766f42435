// SPDX-License-Identifier: Apache-2.0
// Under leak_policy::abort a session that ends by its destructor (finish() never called) prints
// its report to stderr and aborts the process, as finish() does.
#include <cuscope/cuscope.hpp>
#include <cuscope/sim.hpp>

#include <cstdio>

int main() {
  cuscope::memory_pool pool;
  cuscope::stream stream;
  cuscope::device_buffer<int> escaped;
  {
    cuscope::session_options options;
    options.name = "scoped";
    options.on_leak = cuscope::leak_policy::abort;
    cuscope::session work(pool, stream, options);
    escaped = work.make_buffer<int>(256);
  }
  std::puts("the session's end returned");
  return 0;
}
