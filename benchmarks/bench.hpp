// SPDX-License-Identifier: Apache-2.0
// What every benchmark shares: command-line options, CUDA error checks, statistics, a table
// printed on stdout and the JSON file written with --json. The JSON layout ("schema":
// "cuscope-bench/1") is described in benchmarks/README.md; benchmarks/collect.py reads it.
#pragma once

#include "bench/args.hpp"
#include "bench/baselines.hpp"
#include "bench/common.hpp"
#include "bench/json.hpp"
#include "bench/report.hpp"
#include "bench/stats.hpp"
#include "bench/table.hpp"
#include "bench/text.hpp"
