// SPDX-License-Identifier: Apache-2.0
// Reuse of freed memory: which frees an allocation on a stream may reuse, by stream order, event
// dependencies, opportunistic reuse and what synchronizations have shown the host.
// docs/simulated-device.md, "Reuse of freed memory".
#include <algorithm>

#include "internal.hpp"

namespace cuscope::sim::detail {

reuse_rank rank_for(const state& g, const CUmemPoolHandle_st& pool, const CUstream_st& s,
                    const free_tag& freed_by, bool free_pending) {
  if (freed_by.stream == 0 || freed_by.stream == s.id) return reuse_rank::now;
  if (!free_pending && pool.allocator.opportunistic()) return reuse_rank::now;
  // Streams get their ids in creation order, from 1, and live until the next reset.
  const CUstream_st& freeing = *g.streams[freed_by.stream - 1];
  if (freeing.observed >= freed_by.seq) return reuse_rank::now;
  if (pool.follow_event_dependencies) {
    const auto it = s.known.find(freed_by.stream);
    if (it != s.known.end() && it->second >= freed_by.seq) return reuse_rank::now;
  }
  if (pool.allow_internal_dependencies) return reuse_rank::after_wait;
  return reuse_rank::never;
}

void observe(state& g, CUstream_st& s, std::uint64_t seq, const order_clock& known) {
  const auto see = [](CUstream_st& t, std::uint64_t upto) {
    t.observed = std::max(t.observed, std::min(upto, t.completed));
  };
  see(s, seq);
  // Streams get their ids in creation order, from 1, and live until the next reset.
  for (const auto& [id, upto] : known)
    if (id >= 1 && id <= g.streams.size()) see(*g.streams[id - 1], upto);
}

}  // namespace cuscope::sim::detail
