// SPDX-License-Identifier: Apache-2.0
// A strict JSON syntax check (RFC 8259), for tests of exported files: returns an empty string for a
// valid document, else where and why it is not.
#pragma once

#include <cctype>
#include <cstddef>
#include <string>

namespace cuscope::test {

class json_checker {
 public:
  explicit json_checker(const std::string& text) : s_(text) {}

  std::string check() {
    skip();
    if (!value()) return error_;
    skip();
    if (i_ != s_.size()) fail("trailing characters");
    return error_;
  }

 private:
  bool value() {
    skip();
    if (i_ >= s_.size()) return fail("unexpected end"), false;
    const char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c)) != 0) return number();
    for (const char* word : {"true", "false", "null"}) {
      const std::string w(word);
      if (s_.compare(i_, w.size(), w) == 0) {
        i_ += w.size();
        return true;
      }
    }
    return fail("unexpected character"), false;
  }
  bool object() {
    ++i_;
    skip();
    if (peek('}')) return ++i_, true;
    for (;;) {
      skip();
      if (!peek('"') || !string()) return fail("expected a member name"), false;
      skip();
      if (!peek(':')) return fail("expected ':'"), false;
      ++i_;
      if (!value()) return false;
      skip();
      if (peek(',')) {
        ++i_;
        continue;
      }
      if (peek('}')) return ++i_, true;
      return fail("expected ',' or '}'"), false;
    }
  }
  bool array() {
    ++i_;
    skip();
    if (peek(']')) return ++i_, true;
    for (;;) {
      if (!value()) return false;
      skip();
      if (peek(',')) {
        ++i_;
        continue;
      }
      if (peek(']')) return ++i_, true;
      return fail("expected ',' or ']'"), false;
    }
  }
  bool string() {
    ++i_;
    while (i_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return fail("control character in a string"), false;
      if (c == '\\') {
        if (i_ >= s_.size()) break;
        const char e = s_[i_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k, ++i_)
            if (i_ >= s_.size() || std::isxdigit(static_cast<unsigned char>(s_[i_])) == 0)
              return fail("bad \\u escape"), false;
        } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
          return fail("bad escape"), false;
        }
      }
    }
    return fail("unterminated string"), false;
  }
  bool number() {
    const std::size_t start = i_;
    if (peek('-')) ++i_;
    if (peek('0')) {
      ++i_;
    } else if (!digits()) {
      return fail("bad number"), false;
    }
    if (peek('.')) {
      ++i_;
      if (!digits()) return fail("bad fraction"), false;
    }
    if (peek('e') || peek('E')) {
      ++i_;
      if (peek('+') || peek('-')) ++i_;
      if (!digits()) return fail("bad exponent"), false;
    }
    return i_ > start;
  }
  bool digits() {
    const std::size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])) != 0)
      ++i_;
    return i_ > start;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at offset " + std::to_string(i_);
    return false;
  }

  const std::string& s_;
  std::size_t i_ = 0;
  std::string error_;
};

/// Empty when text is valid JSON; otherwise what is wrong and where.
inline std::string json_error(const std::string& text) {
  return json_checker(text).check();
}

/// The text of the first value under key in a JSON object written by cuscope (a report line): a
/// number, true, false or null as written, a string without its quotes and escaping backslashes;
/// empty when key is absent. Keys at the top of a report come before its "leaks" array, so the
/// first match is the report's own.
inline std::string json_field(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  std::size_t at = json.find(k);
  if (at == std::string::npos) return {};
  at += k.size();
  if (at < json.size() && json[at] == '"') {
    std::string out;
    for (std::size_t i = at + 1; i < json.size() && json[i] != '"'; ++i) {
      if (json[i] == '\\' && i + 1 < json.size()) ++i;
      out += json[i];
    }
    return out;
  }
  const std::size_t end = json.find_first_of(",}]", at);
  return json.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace cuscope::test
