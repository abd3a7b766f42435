// SPDX-License-Identifier: Apache-2.0
// pool_resource reaches a session's ledger through detail::ledger_access alone: its header brings
// neither the ledger (detail/ledger.hpp, which defines CUSCOPE_DETAIL_THREAD_ATEXIT) nor
// device_allocation.hpp, nor the <mutex> they need (checked with libstdc++, whose <string>,
// <vector> and <atomic> do not bring it). thrust.hpp is checked the same way by the nvcc header
// check. Compiled by the header check.
#include <cuscope/memory_resource.hpp>

#if defined(CUSCOPE_DETAIL_THREAD_ATEXIT) || defined(_GLIBCXX_MUTEX)
#  error "cuscope/memory_resource.hpp includes the session's ledger or <mutex>"
#endif
