// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Conversions between cuscope::stream_ref and CCCL's cuda::stream_ref, both ways.
///
/// Opt-in: include it where both meet. The core headers do not, so that they need no CCCL header
/// and stream_ref converts from nothing but cudaStream_t (and the types a header like this names).
#pragma once

#include <type_traits>

#include <cuda/stream_ref>

#include "stream.hpp"

namespace cuscope::detail {

/// cuda::stream_ref: get() gives the cudaStream_t, and it is constructible from one.
template <>
struct stream_interop<::cuda::stream_ref> : std::true_type {};

}  // namespace cuscope::detail
