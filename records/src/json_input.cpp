#include "attncheck/records/json_input.hpp"

#include "attncheck/records/input_file.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <vector>

namespace attncheck::records {

using nlohmann::json;
using theory::InputError;

namespace {

// "line L column C" (or "column C") of the byte at `offset`, both 1-based.
std::string place(std::string_view text, std::size_t offset, JsonPlacement placement) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return placement == JsonPlacement::line_and_column ? fmt::format("line {} column {}", line, column)
                                                     : fmt::format("column {}", column);
}

// `text` cut to at most `limit` bytes, not inside a UTF-8 sequence.
std::string_view cut_utf8(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text;
  while (limit > 0 && (static_cast<unsigned char>(text[limit]) & 0xC0) == 0x80) --limit;
  return text.substr(0, limit);
}

// One level of nesting met by the scan: an object with the text of its current key, or an array with the index of
// its current element.
struct Level {
  bool object = false;
  std::string_view key;
  std::size_t index = 0;
};

[[noreturn]] void refuse_depth(std::string_view text, std::size_t offset, const std::vector<Level>& levels,
                               const std::string& where, JsonPlacement placement) {
  constexpr std::size_t kShown = 8;
  std::string path;
  for (std::size_t k = 0; k < levels.size() && k < kShown; ++k) {
    const Level& level = levels[k];
    path += k ? " > " : "";
    path += level.object ? fmt::format("\"{}\"", cut_utf8(level.key, 40)) : fmt::format("[{}]", level.index);
  }
  if (levels.size() > kShown) path += " > ...";
  throw InputError(
      fmt::format("{} {}: JSON nested more than {} levels deep (under {}), deeper than any file "
                  "attncheck reads",
                  where, place(text, offset, placement), kMaxJsonDepth, path));
}

// Refuses nesting beyond kMaxJsonDepth, naming where it happens, before the parser builds anything. Strings are
// skipped with their escapes; a text that is not JSON at all is left to the parser's message.
void check_depth(std::string_view text, const std::string& where, JsonPlacement placement) {
  std::vector<Level> levels;
  std::string_view last_string;
  for (std::size_t i = 0; i < text.size(); ++i) {
    switch (text[i]) {
      case '"': {
        const std::size_t begin = i + 1;
        for (++i; i < text.size() && text[i] != '"'; ++i) {
          if (text[i] == '\\') ++i;
        }
        last_string = text.substr(begin, std::min(i, text.size()) - begin);
        break;
      }
      case '{':
      case '[':
        if (levels.size() == kMaxJsonDepth) refuse_depth(text, i, levels, where, placement);
        levels.push_back({text[i] == '{', {}, 0});
        break;
      case '}':
      case ']':
        if (!levels.empty()) levels.pop_back();
        break;
      case ':':
        if (!levels.empty() && levels.back().object) levels.back().key = last_string;
        break;
      case ',':
        if (!levels.empty() && !levels.back().object) ++levels.back().index;
        break;
      default: break;
    }
  }
}

}  // namespace

json parse_json(std::string_view text, const std::string& where, JsonPlacement placement,
                const json::parser_callback_t& callback) {
  check_depth(text, where, placement);
  // A parsed value takes up to 16 bytes of memory per byte of text ("[[],[],..." or {"":0,...}); small texts are
  // not worth reading the budget for.
  constexpr std::uint64_t kBytesPerCharacter = 16;
  if (text.size() > (std::size_t{1} << 20)) {
    require_memory(saturating_product({text.size(), kBytesPerCharacter}), fmt::format("parsing {}", where));
  }
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based: the byte the parser stopped at.
    const std::string reason = e.what();
    const auto colon = reason.rfind(": ");
    const std::string detail = colon == std::string::npos ? reason : reason.substr(colon + 2);
    throw InputError(
        fmt::format("{} {}: malformed JSON: {}", where, place(text, e.byte > 0 ? e.byte - 1 : 0, placement), detail));
  } catch (const json::exception& e) {
    // A number beyond double's range (out_of_range.406), and whatever else the parser refuses without a position.
    // The library's own tag ("[json.exception.out_of_range.406] ") means nothing to a user: the reason after it is
    // kept.
    const std::string reason = e.what();
    const auto tag_end = reason.rfind("] ", reason.find(' '));
    throw InputError(fmt::format("{}: malformed JSON: {}", where,
                                 reason.starts_with("[json.exception") && tag_end != std::string::npos
                                     ? reason.substr(tag_end + 2)
                                     : reason));
  }
}

json read_json_file(const std::filesystem::path& path) { return parse_json(read_text_file(path), path.string()); }

std::string json_excerpt(const json& value, std::size_t limit) {
  std::string out;
  const auto quoted = [&](std::string_view text) {
    const std::string_view shown = cut_utf8(text, limit);
    out += json(std::string(shown)).dump();
    if (shown.size() < text.size()) out += "...";
  };
  // The containers being written, each with the position of its next element.
  struct Open {
    const json* container;
    json::const_iterator next;
  };
  std::vector<Open> open;
  const auto begin = [&](const json& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      open.push_back({&v, v.cbegin()});
    } else if (v.is_string()) {
      quoted(v.get_ref<const std::string&>());
    } else {
      out += v.dump();  // a number, true, false, null or binary: short
    }
  };
  begin(value);
  while (!open.empty() && out.size() <= limit) {
    Open& top = open.back();
    if (top.next == top.container->cend()) {
      out += top.container->is_object() ? '}' : ']';
      open.pop_back();
      continue;
    }
    if (top.next != top.container->cbegin()) out += ',';
    const auto element = top.next++;
    if (top.container->is_object()) {
      quoted(element.key());
      out += ':';
    }
    begin(*element);  // may grow `open`: `top` is not used after this
  }
  if (out.size() > limit || !open.empty()) {
    out = std::string(cut_utf8(out, limit)) + "...";
  }
  return out;
}

}  // namespace attncheck::records
