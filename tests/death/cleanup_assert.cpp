// SPDX-License-Identifier: Apache-2.0
// In a build with assertions, the default cleanup handler prints the failure and fails an
// assertion: a stream whose destruction fails takes the process down.
#undef NDEBUG
#undef CUSCOPE_NO_CLEANUP_ASSERT
#include <cuscope/cuscope.hpp>
#include <cuscope/sim.hpp>

int main() {
  cuscope::stream stream;
  cuscope::sim::fail_api("cudaStreamDestroy", 1, cudaErrorInvalidResourceHandle);
  return 0;  // the stream's destructor does not return
}
