// SPDX-License-Identifier: Apache-2.0
// The headers of pools and streams bring no <vector> (pool_options::access_from is a
// device_list): with libstdc++, <vector> is the heaviest standard header these would include,
// and thrust.hpp and memory_resource.hpp include the pool header. Compiled by the header check.
#include <cuscope/event.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/pinned_memory_pool.hpp>
#include <cuscope/stream.hpp>

#if defined(_GLIBCXX_VECTOR)
#  error "a pool or stream header includes <vector>"
#endif
