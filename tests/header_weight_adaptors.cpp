// SPDX-License-Identifier: Apache-2.0
// pool_resource reaches a session's ledger through detail::ledger_access alone: its header brings
// neither the ledger (detail/ledger.hpp, which defines CUSCOPE_DETAIL_THREAD_ATEXIT) nor
// device_allocation.hpp. With CCCL 3.0 it brings neither the <mutex> they need nor <vector>
// (checked with libstdc++, whose <string> and <atomic> do not bring them); CCCL 3.1 and later's
// <cuda/memory_resource> includes both itself. thrust.hpp is checked the same way by the nvcc
// header check. Compiled by the header check.
#include <cuscope/memory_resource.hpp>

#if defined(CUSCOPE_DETAIL_THREAD_ATEXIT)
#  error "cuscope/memory_resource.hpp includes the session's ledger"
#endif
#if defined(_GLIBCXX_MUTEX) && defined(CCCL_VERSION) && CCCL_VERSION < 3001000
#  error "cuscope/memory_resource.hpp includes <mutex>"
#endif
#if defined(_GLIBCXX_VECTOR) && defined(CCCL_VERSION) && CCCL_VERSION < 3001000
#  error "cuscope/memory_resource.hpp includes <vector>"
#endif
