// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The whole core of cuscope: errors, devices, streams, events, pools, buffers, batches,
/// sessions and reports. Thrust support is separate, in <cuscope/thrust.hpp>.
#pragma once

#include "batch.hpp"
#include "device.hpp"
#include "device_allocation.hpp"
#include "device_buffer.hpp"
#include "device_span.hpp"
#include "error.hpp"
#include "event.hpp"
#include "graph.hpp"
#include "memory_pool.hpp"
#include "pinned_buffer.hpp"
#include "pinned_memory_pool.hpp"
#include "report.hpp"
#include "session.hpp"
#include "stream.hpp"
#include "version.hpp"
