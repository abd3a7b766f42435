// SPDX-License-Identifier: Apache-2.0
// Tables printed on stdout and kept in the JSON.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "json.hpp"

namespace cuscope_bench {

// Tables
// -------------------------------------------------------------------------------------------

/// A table printed on stdout and kept in the JSON (the results report shows it again).
class table {
 public:
  table(std::string title, std::vector<std::string> columns)
      : title_(std::move(title)), columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) {
    cells.resize(columns_.size());
    rows_.push_back(std::move(cells));
  }

  void print(FILE* f = stdout) const {
    std::vector<std::size_t> width(columns_.size());
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      width[c] = columns_[c].size();
      for (const auto& r : rows_)
        width[c] = std::max(width[c], display_width(r[c]));
    }
    std::fprintf(f, "\n%s\n", title_.c_str());
    const auto line = [&](const std::vector<std::string>& cells) {
      std::string out;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const std::size_t fill = width[c] - std::min(width[c], display_width(cells[c]));
        if (c == 0)
          out += cells[c] + std::string(fill, ' ');
        else
          out += "  " + std::string(fill, ' ') + cells[c];
      }
      std::fprintf(f, "%s\n", out.c_str());
    };
    line(columns_);
    std::size_t total = 0;
    for (const std::size_t w : width)
      total += w + 2;
    std::fprintf(f, "%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
    for (const auto& r : rows_)
      line(r);
  }

  [[nodiscard]] json to_json() const {
    json j = json::object();
    j.set("title", title_);
    json cols = json::array();
    for (const auto& c : columns_)
      cols.push(c);
    j.set("columns", std::move(cols));
    json rows = json::array();
    for (const auto& r : rows_) {
      json row = json::array();
      for (const auto& c : r)
        row.push(c);
      rows.push(std::move(row));
    }
    j.set("rows", std::move(rows));
    return j;
  }

 private:
  // Counts UTF-8 code points, so that "±" takes one column.
  static std::size_t display_width(const std::string& s) {
    std::size_t n = 0;
    for (const char c : s)
      if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
    return n;
  }

  std::string title_;
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace cuscope_bench
