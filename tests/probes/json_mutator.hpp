#pragma once
// Hostile variants of a valid file, drawn from a fixed seed: a JSON document (or one line of a JSON-lines file) with
// one value replaced (nesting 100,000 deep, a megabyte of text, 200,000 elements, every JSON type, the ends of
// double's range, NUL and escape sequences), a key renamed, cut short or with bytes changed; any other file cut
// short, with bytes changed or inserted. The in-process reader fuzz and the command-line file fuzz share it.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::testing {

using nlohmann::json;

// Values put in place of one value of a document: raw JSON text, spliced in after the document is printed. Among the
// numbers, sizes past 32 bits and at the ends of 64 (a count of layers or a padding index no tensor holds).
inline std::vector<std::string> hostile_values() {
  return {std::string(100'000, '[') + std::string(100'000, ']'),
          [] {
            std::string nested;
            for (int k = 0; k < 50'000; ++k) nested += "{\"a\":";
            return nested + "1" + std::string(50'000, '}');
          }(),
          "\"" + std::string(1 << 20, 'x') + "\"",
          "[" +
              [] {
                std::string zeros;
                for (int k = 0; k < 200'000; ++k) zeros += "0,";
                return zeros;
              }() +
              "0]",
          "null",
          "true",
          "false",
          "0",
          "-1",
          "-5",
          "1.5",
          "1e308",
          "-1e308",
          "5e-324",
          "1e999",
          "18446744073709551615",
          "-9223372036854775808",
          "2147483648",
          "1099511627776",
          "4611686018427387904",
          "9223372036854775807",
          "\"\"",
          "\"\\u0000\\u001b]0;title\\u0007<img src=x>\\n# x\"",
          "[]",
          "{}",
          "[1, 2, 3]",
          "{\"a\": {\"b\": []}}",
          "\"softmax\"",
          "\"C3\""};
}

// Every value's place in a document, outermost first (the documents here are a few levels deep).
inline std::vector<json::json_pointer> places(const json& document) {
  std::vector<json::json_pointer> out;
  std::vector<std::pair<json::json_pointer, const json*>> stack{{json::json_pointer(), &document}};
  while (!stack.empty()) {
    auto [at, value] = stack.back();
    stack.pop_back();
    out.push_back(at);
    if (value->is_object()) {
      for (const auto& [key, item] : value->items()) stack.emplace_back(at / key, &item);
    } else if (value->is_array()) {
      for (std::size_t k = 0; k < value->size(); ++k) stack.emplace_back(at / k, &(*value)[k]);
    }
  }
  return out;
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : random_(seed) {}

  // Any file: cut short, bytes changed, or bytes inserted.
  std::string mutate_bytes(const std::string& valid) {
    const int kind = static_cast<int>(pick(3));
    if (kind == 0) return valid.substr(0, pick(valid.size() + 1));
    std::string out = valid;
    for (int k = 0, n = 1 + static_cast<int>(pick(4)); k < n; ++k) {
      const std::size_t at = pick(out.size() + 1);
      const char byte = static_cast<char>(pick(256));
      if (kind == 1 && at < out.size()) {
        out[at] = byte;
      } else {
        out.insert(at, 1, byte);
      }
    }
    return out;
  }

  std::string mutate(const std::string& valid, bool lines) {
    if (valid.empty()) return mutate_bytes(valid);
    if (!lines) return mutate_document(valid);
    std::vector<std::string> all;
    for (std::size_t begin = 0; begin < valid.size();) {
      const auto end = std::min(valid.find('\n', begin), valid.size());
      all.push_back(valid.substr(begin, end - begin));
      begin = end + 1;
    }
    std::string& line = all[pick(all.size())];
    line = mutate_document(line);
    std::string out;
    for (const std::string& l : all) out += l + "\n";
    return chance(10) ? out.substr(0, out.size() - 1) : out;  // sometimes without the last newline
  }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_); }
  bool chance(int percent) { return static_cast<int>(pick(100)) < percent; }

  std::string mutate_document(const std::string& valid) {
    const int kind = static_cast<int>(pick(100));
    if (kind < 10) return valid.substr(0, pick(valid.size() + 1));  // cut short
    if (kind < 20) {                                                // bytes changed
      std::string out = valid;
      for (int k = 0, n = 1 + static_cast<int>(pick(3)); k < n && !out.empty(); ++k) {
        out[pick(out.size())] = static_cast<char>(pick(256));
      }
      return out;
    }
    json document = json::parse(valid);
    const std::vector<json::json_pointer> all = places(document);
    const json::json_pointer at = all[pick(all.size())];
    if (kind < 30 && !at.empty() && document.at(at.parent_pointer()).is_object()) {  // a key renamed
      json& parent = document.at(at.parent_pointer());
      json value = parent[at.back()];
      parent.erase(at.back());
      parent[chance(50) ? at.back() + "\u0000" : std::string("\x1b[2J")] = std::move(value);
      return document.dump();
    }
    // A value replaced: a marker printed in its place, then swapped for the raw text.
    static const std::vector<std::string> values = hostile_values();
    const std::string marker = "fuzz-value-here";
    if (at.empty()) return values[pick(values.size())];
    document.at(at) = marker;
    std::string text = document.dump();
    text.replace(text.find("\"" + marker + "\""), marker.size() + 2, values[pick(values.size())]);
    return text;
  }

  std::mt19937_64 random_;
};

}  // namespace attncheck::testing
