// SPDX-License-Identifier: Apache-2.0
// <cuscope/kernel.hpp> is the light header for kernel files (nvcc parses it once per
// architecture): it compiles alone and brings none of the standard headers that make
// <cuscope/cuscope.hpp> costly. Compiled by the header check.
#include <cuscope/kernel.hpp>

#if defined(_GLIBCXX_STRING) || defined(_GLIBCXX_VECTOR) || defined(_GLIBCXX_STDEXCEPT) ||    \
    defined(_GLIBCXX_ATOMIC) || defined(_GLIBCXX_MUTEX) || defined(_GLIBCXX_CHRONO) ||        \
    defined(_GLIBCXX_OPTIONAL) || defined(_GLIBCXX_FUNCTIONAL) || defined(_GLIBCXX_MEMORY) || \
    defined(_LIBCPP_STRING) || defined(_LIBCPP_VECTOR) || defined(_LIBCPP_STDEXCEPT) ||       \
    defined(_LIBCPP_ATOMIC) || defined(_LIBCPP_MUTEX) || defined(_LIBCPP_CHRONO) ||           \
    defined(_LIBCPP_OPTIONAL) || defined(_LIBCPP_FUNCTIONAL) || defined(_LIBCPP_MEMORY)
#  error "<cuscope/kernel.hpp> includes a heavy standard header (<string>, <vector>, <atomic>...)"
#endif

namespace cuscope::test {

// What a launcher needs, usable without anything else.
launch_status kernel_light_status(device_span<const float> x);
launch_status kernel_light_status(device_span<const float> x) {
  return x.empty() ? launch_status{} : CUSCOPE_LAUNCH_STATUS(kernel_light);
}

}  // namespace cuscope::test
