// SPDX-License-Identifier: Apache-2.0
// The headers of pools, buffers, streams and events, which most translation units include, bring
// none of <functional>, <algorithm>, <iterator> and <chrono> (the standard headers that made
// cuscope costly to parse). Checked with libstdc++, whose <string>, <vector> and <atomic> do not
// bring them either; other standard libraries may, so nothing is checked there. Compiled by the
// header check.
#include <cuscope/device.hpp>
#include <cuscope/device_allocation.hpp>
#include <cuscope/device_buffer.hpp>
#include <cuscope/device_span.hpp>
#include <cuscope/error.hpp>
#include <cuscope/event.hpp>
#include <cuscope/graph.hpp>
#include <cuscope/memory_pool.hpp>
#include <cuscope/nvtx.hpp>
#include <cuscope/pinned_buffer.hpp>
#include <cuscope/pinned_memory_pool.hpp>
#include <cuscope/report.hpp>
#include <cuscope/stream.hpp>
#include <cuscope/version.hpp>

#if defined(_GLIBCXX_FUNCTIONAL) || defined(_GLIBCXX_ALGORITHM) || defined(_GLIBCXX_ITERATOR) || \
    defined(_GLIBCXX_CHRONO)
#  error \
      "a pool, buffer or stream header includes <functional>, <algorithm>, <iterator> or <chrono>"
#endif
