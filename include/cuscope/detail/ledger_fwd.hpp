// SPDX-License-Identifier: Apache-2.0
// What the public headers' declarations need of the ledger (detail/ledger.hpp), which only their
// host-only definitions use: nvcc's device passes see this and not the ledger itself.
#pragma once

#include <cstdint>
#include <type_traits>

namespace cuscope {
class session;
}  // namespace cuscope

namespace cuscope::detail {

class ledger;
struct ledger_record;

/// Enables the overloads that take a session (thrust_policy(session), batches(session, ...)),
/// declared where session.hpp need not be included.
template <class S>
using if_session = std::enable_if_t<std::is_same_v<S, session>, int>;

}  // namespace cuscope::detail
