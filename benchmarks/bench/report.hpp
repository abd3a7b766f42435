// SPDX-License-Identifier: Apache-2.0
// The report a benchmark prints and writes, and run_main.
#pragma once

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "baselines.hpp"
#include "common.hpp"
#include "json.hpp"
#include "stats.hpp"
#include "table.hpp"
#include "text.hpp"

namespace cuscope_bench {

// Reports ----------------------------------------------------------------------------------------

/// Collects what a benchmark prints and writes: configuration, notes, tables, rows of results and
/// the headline figures (ratios with the goal they are measured against).
class report {
 public:
  report(std::string benchmark, const args& a) : args_(a) {
    root_.set("schema", "cuscope-bench/1");
    root_.set("benchmark", std::move(benchmark));
    root_.set("simulated", simulated);
    root_.set("quick", a.quick());
    root_.set("command_line", a.command_line());
    root_.set("device", device_info());
    root_.set("build", build_info());
  }

  json config = json::object();  ///< What was run: sizes, rounds, iterations.
  json results = json::array();  ///< One entry per measured configuration.

  /// A sentence printed after the tables and kept in the JSON.
  void note(std::string text) { notes_.push_back(std::move(text)); }

  /// Prints the table now and keeps it.
  void add_table(const table& t) {
    t.print();
    tables_.push(t.to_json());
  }

  /// A headline figure. goal is "at most" or "at least" the target (or "" for none): the report
  /// and the plot mark whether the figure meets it.
  void headline(const std::string& name, double value, const std::string& unit,
                const std::string& goal = "", double target = 0, const std::string& detail = "") {
    json h = json::object();
    h.set("name", name);
    h.set("value", value);
    h.set("unit", unit);
    if (!goal.empty()) {
      h.set("goal", goal);
      h.set("target", target);
      const bool meets = goal == "at most" ? value <= target : value >= target;
      h.set("meets", std::isfinite(value) ? json(meets) : json());
    }
    if (!detail.empty()) h.set("detail", detail);
    headlines_.push(std::move(h));
    std::string line = "headline: " + name + ": " + fixed(value, value < 10 ? 3 : 1) +
                       (unit == "x" || unit == "%" ? unit : " " + unit);
    if (!goal.empty()) {
      line += " (goal: " + goal + " " + fixed(target, 2) + ": ";
      line += !std::isfinite(value)                                     ? "not measured)"
              : (goal == "at most" ? value <= target : value >= target) ? "met)"
                                                                        : "NOT met)";
    }
    headline_lines_.push_back(line);
  }

  /// Prints the notes and headlines and writes the JSON file when --json was given.
  /// Returns the exit code for main.
  int finish() {
    if (simulated)
      note(
          "Simulated device: timings measure the simulation on the host, not a GPU; only the "
          "shape of the output and the self-checks mean anything.");
    std::printf("\n");
    for (const auto& n : notes_)
      std::printf("note: %s\n", n.c_str());
    for (const auto& h : headline_lines_)
      std::printf("%s\n", h.c_str());
    const std::string path = args_.json_path();
    if (path.empty()) return 0;
    root_.set("config", config);
    json notes = json::array();
    for (const auto& n : notes_)
      notes.push(n);
    root_.set("notes", std::move(notes));
    root_.set("tables", tables_);
    root_.set("results", results);
    root_.set("headline", headlines_);
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    const std::string text = root_.dump();
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", path.c_str());
    return 0;
  }

 private:
  const args& args_;
  json root_ = json::object();
  json tables_ = json::array();
  json headlines_ = json::array();
  std::vector<std::string> notes_;
  std::vector<std::string> headline_lines_;
};

/// Runs a benchmark's body: an exception (a CUDA error, a failed self-check) ends it with exit
/// code 1 and a message on stderr.
template <class F>
int run_main(const char* name, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace cuscope_bench
