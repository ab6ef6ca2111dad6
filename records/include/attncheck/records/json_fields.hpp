#pragma once
// Typed access to the keys of one JSON object, with errors that say where the object came from
// ("points.jsonl line 3", "fits.json series[2]") and which key is missing or of the wrong type.

#include "attncheck/records/json_input.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <span>
#include <string_view>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::records::detail {

using nlohmann::json;

class JsonFields {
 public:
  JsonFields(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) fail(fmt::format("expected a JSON object, got {}", shorten(object_)));
  }

  const std::string& where() const { return where_; }
  const json& object() const { return object_; }
  bool has(const char* key) const { return object_.contains(key); }
  bool is_null(const char* key) const { return !has(key) || object_.at(key).is_null(); }

  const json& at(const char* key) const {
    if (!has(key)) fail(fmt::format("key \"{}\" is missing", key));
    return object_.at(key);
  }

  double number(const char* key) const { return as_number(at(key), key); }

  std::optional<double> number_or_null(const char* key) const {
    if (is_null(key)) return std::nullopt;
    return as_number(at(key), key);
  }

  long long integer(const char* key) const { return as_integer(at(key), key); }

  std::optional<long long> integer_or_null(const char* key) const {
    if (is_null(key)) return std::nullopt;
    return as_integer(at(key), key);
  }

  std::string text(const char* key) const {
    const json& value = at(key);
    if (!value.is_string()) fail(fmt::format("\"{}\" must be text, got {}", key, shorten(value)));
    return value.get<std::string>();
  }

  std::optional<std::string> text_or_null(const char* key) const {
    if (is_null(key)) return std::nullopt;
    return text(key);
  }

  // Text that must be one of the words the writer uses (an estimand, a phi, ...): anything else is not from
  // attncheck and is refused here, before it can reach a report or a plot script.
  using Words = std::span<const std::string_view>;
  std::string word(const char* key, Words allowed) const {
    std::string value = text(key);
    check_word(key, value, allowed);
    return value;
  }
  std::string word(const char* key, std::initializer_list<std::string_view> allowed) const {
    return word(key, Words(allowed.begin(), allowed.size()));
  }

  std::optional<std::string> word_or_null(const char* key, Words allowed) const {
    if (is_null(key)) return std::nullopt;
    return word(key, allowed);
  }
  std::optional<std::string> word_or_null(const char* key, std::initializer_list<std::string_view> allowed) const {
    return word_or_null(key, Words(allowed.begin(), allowed.size()));
  }

  void check_word(const char* key, const std::string& value, Words allowed) const {
    std::string list;
    for (std::string_view word : allowed) {
      if (value == word) return;
      list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", word);
    }
    fail(fmt::format("\"{}\" must be one of {}, got {}", key, list, shorten(json(value))));
  }

  // A whole number >= 0 (a seed, a thread count) as written, so that a 64-bit seed keeps every digit.
  std::string count_text(const char* key) const {
    const json& value = at(key);
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<long long>() >= 0)) {
      fail(fmt::format("\"{}\" must be a whole number >= 0, got {}", key, shorten(value)));
    }
    return value.dump();
  }

  // A value shown as written: text as is, numbers in JSON form (so 64-bit seeds keep every digit), objects as
  // "name: value, ..." and null as "not recorded".
  std::string scalar_text(const char* key) const { return display(at(key)); }

  static std::string display(const json& value) {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_null()) return "not recorded";
    if (value.is_object()) {
      std::string out;
      for (const auto& [name, item] : value.items()) out += (out.empty() ? "" : ", ") + name + ": " + display(item);
      return out;
    }
    if (value.is_array()) {
      std::string out;
      for (const json& item : value) out += (out.empty() ? "" : ", ") + display(item);
      return out;
    }
    return value.dump();
  }

  // A number, or NaN where the writer put null for a value it could not compute.
  double number_or_nan(const char* key) const { return nan_for_null(at(key), key); }

  std::vector<double> numbers_or_nan(const char* key) const {
    std::vector<double> out;
    for (const json& item : array(key)) out.push_back(nan_for_null(item, key));
    return out;
  }

  // [lo, hi], either of which may be null (NaN).
  std::pair<double, double> interval_or_nan(const char* key) const {
    const json& value = at(key);
    if (value.is_null()) return {std::nan(""), std::nan("")};
    if (!value.is_array() || value.size() != 2) {
      fail(fmt::format("\"{}\" must be [lo, hi], got {}", key, shorten(value)));
    }
    const double lo = nan_for_null(value[0], key), hi = nan_for_null(value[1], key);
    if (lo > hi) fail(fmt::format("\"{}\" = [{}, {}] has lo > hi", key, lo, hi));
    return {lo, hi};
  }

  bool boolean(const char* key) const {
    const json& value = at(key);
    if (!value.is_boolean()) fail(fmt::format("\"{}\" must be true or false, got {}", key, shorten(value)));
    return value.get<bool>();
  }

  std::pair<double, double> interval(const char* key) const {
    const json& value = at(key);
    if (!value.is_array() || value.size() != 2) {
      fail(fmt::format("\"{}\" must be [lo, hi], got {}", key, shorten(value)));
    }
    const double lo = as_number(value[0], key), hi = as_number(value[1], key);
    if (lo > hi) fail(fmt::format("\"{}\" = [{}, {}] has lo > hi", key, lo, hi));
    return {lo, hi};
  }

  const json& array(const char* key) const {
    const json& value = at(key);
    if (!value.is_array()) fail(fmt::format("\"{}\" must be a list, got {}", key, shorten(value)));
    return value;
  }

  std::vector<double> numbers(const char* key) const {
    std::vector<double> out;
    for (const json& item : array(key)) out.push_back(as_number(item, key));
    return out;
  }

  std::vector<std::optional<double>> numbers_or_null(const char* key) const {
    std::vector<std::optional<double>> out;
    for (const json& item : array(key)) {
      out.push_back(item.is_null() ? std::nullopt : std::optional<double>(as_number(item, key)));
    }
    return out;
  }

  std::vector<long long> integers(const char* key) const {
    std::vector<long long> out;
    for (const json& item : array(key)) out.push_back(as_integer(item, key));
    return out;
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw theory::InputError(fmt::format("{}: {}", where_, message));
  }

 private:
  static std::string shorten(const json& value) { return json_excerpt(value); }

  double as_number(const json& value, const char* key) const {
    if (!value.is_number()) fail(fmt::format("\"{}\" must be a number, got {}", key, shorten(value)));
    const double x = value.get<double>();
    if (!std::isfinite(x)) fail(fmt::format("\"{}\" is not finite", key));
    return x;
  }

  double nan_for_null(const json& value, const char* key) const {
    return value.is_null() ? std::nan("") : as_number(value, key);
  }

  long long as_integer(const json& value, const char* key) const {
    if (value.is_number_integer()) {
      if (value.is_number_unsigned() && value.get<unsigned long long>() > 9223372036854775807ULL) {
        fail(fmt::format("\"{}\" = {} is too large", key, shorten(value)));
      }
      return value.get<long long>();
    }
    // Writers that go through doubles print 64 as 64.0; accept whole numbers, refuse fractions.
    if (value.is_number_float()) {
      const double x = value.get<double>();
      if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) return static_cast<long long>(x);
    }
    fail(fmt::format("\"{}\" must be a whole number, got {}", key, shorten(value)));
  }

  const json& object_;
  std::string where_;
};

// Parses one JSON text (records/json_input.hpp); a syntax error names `where` plus the line (when `report_line`) and
// column inside `text`.
inline json parse_json(const std::string& text, const std::string& where, bool report_line) {
  return records::parse_json(text, where, report_line ? JsonPlacement::line_and_column : JsonPlacement::column);
}

// Calls visit(fields, line) for every non-blank line of a JSON-lines text; `name` is the file named in errors.
// With `warn`, a last line that has no newline and is not JSON is a record whose append never finished (its
// writer was killed): it is skipped, and `warn` says so. Without it, such a line is malformed like any other.
template <class Visit>
void for_each_json_line(const std::string& text, const std::string& name, Visit&& visit,
                        const std::function<void(const std::string&)>& warn = {}) {
  std::size_t begin = 0;
  int line = 0;
  while (begin < text.size()) {
    const std::size_t newline = text.find('\n', begin);
    const bool last_unterminated = newline == std::string::npos;
    const std::string_view line_text =
        std::string_view(text).substr(begin, last_unterminated ? std::string::npos : newline - begin);
    begin = last_unterminated ? text.size() : newline + 1;
    ++line;
    if (line_text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{} line {}", name, line);
    json object;
    try {
      object = records::parse_json(line_text, where, JsonPlacement::column);
    } catch (const theory::InputError& e) {
      if (!last_unterminated || !warn) throw;
      warn(
          fmt::format("{}: skipped: it has no newline and is not whole JSON, a record whose writing never "
                      "finished ({})",
                      where, e.what()));
      continue;
    }
    visit(JsonFields(object, where), line);
  }
}

}  // namespace attncheck::records::detail
