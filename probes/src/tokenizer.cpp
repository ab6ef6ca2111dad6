#include "attncheck/probes/tokenizer.hpp"

#include "attncheck/reports/input_file.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <charconv>
#include <sstream>

namespace attncheck::probes {

using theory::InputError;

namespace {

// Decodes one UTF-8 code point at text[at]; a malformed byte decodes as U+FFFD, which the caller drops (as
// BERT's cleaning does).
char32_t decode(std::string_view text, std::size_t& at) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char first = byte(at);
  int length = first < 0x80 ? 1 : (first >> 5) == 0x6 ? 2 : (first >> 4) == 0xe ? 3 : (first >> 3) == 0x1e ? 4 : 0;
  if (length == 0 || at + length > text.size()) {
    ++at;
    return 0xfffd;
  }
  char32_t cp = length == 1 ? first : first & (0x7f >> length);
  for (int k = 1; k < length; ++k) {
    if ((byte(at + k) & 0xc0) != 0x80) {
      ++at;
      return 0xfffd;
    }
    cp = (cp << 6) | (byte(at + k) & 0x3f);
  }
  at += length;
  return cp;
}

void encode_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool is_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0xa0 || c == 0x3000 || (c >= 0x2000 && c <= 0x200a);
}
bool is_control(char32_t c) { return (c < 0x20 || (c >= 0x7f && c < 0xa0)) && !is_whitespace(c); }
// BERT treats every non-alphanumeric ASCII symbol as punctuation, plus Unicode's general punctuation block.
bool is_punctuation(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126) ||
         (c >= 0x2010 && c <= 0x205e) || (c >= 0xa1 && c <= 0xbf && c != 0xaa && c != 0xb5 && c != 0xba) ||
         c == 0xd7 || c == 0xf7 || (c >= 0x3000 && c <= 0x303f);
}
bool is_cjk(char32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x20000 && c <= 0x2a6df) ||
         (c >= 0x2a700 && c <= 0x2ceaf) || (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

// Lower-case and strip accents for ASCII and Latin-1 letters (what do_lower_case does to them).
char32_t lower_and_strip(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xc0 || c > 0xff || c == 0xd7 || c == 0xf7) return c;
  static constexpr char kBase[] = "aaaaaaaceeeeiiiidnooooo/ouuuuyts"  // U+00C0..U+00DF (0xD7, 0xDF handled)
                                  "aaaaaaaceeeeiiiidnooooo/ouuuuyty";  // U+00E0..U+00FF
  if (c == 0xc6 || c == 0xe6) return 0xe6;  // æ has no decomposition
  if (c == 0xd0 || c == 0xf0) return 0xf0;  // ð likewise
  if (c == 0xde || c == 0xfe) return 0xfe;  // þ likewise
  if (c == 0xd8 || c == 0xf8) return 0xf8;  // ø likewise
  if (c == 0xdf) return 0xdf;                // ß
  return static_cast<unsigned char>(kBase[c - 0xc0]);
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const std::filesystem::path& vocab_txt, bool lower_case)
    : vocab_path_(vocab_txt), lower_case_(lower_case) {
  std::int64_t next = 0;
  reports::InputFile(vocab_txt).for_each_line([&](std::string_view line, std::size_t) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    vocab_.emplace(std::string(line), next++);
  });
  for (const char* special : {"[CLS]", "[SEP]", "[UNK]"}) id(special);
}

std::int64_t WordPieceTokenizer::id(const std::string& token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) throw InputError(fmt::format("{}: no entry for '{}'", vocab_path_.string(), token));
  return it->second;
}

std::vector<std::string> WordPieceTokenizer::basic_split(std::string_view text) const {
  std::vector<std::string> words;
  std::string current;
  const auto flush = [&] {
    if (!current.empty()) words.push_back(std::move(current));
    current.clear();
  };
  for (std::size_t at = 0; at < text.size();) {
    char32_t c = decode(text, at);
    if (c == 0 || c == 0xfffd || is_control(c)) continue;
    if (is_whitespace(c)) {
      flush();
      continue;
    }
    if (lower_case_) c = lower_and_strip(c);
    if (is_punctuation(c) || is_cjk(c)) {
      flush();
      encode_utf8(c, current);
      flush();
      continue;
    }
    encode_utf8(c, current);
  }
  flush();
  return words;
}

std::vector<std::int64_t> WordPieceTokenizer::word_pieces(const std::string& word) const {
  constexpr std::size_t kMaxWordBytes = 100;  // BERT's max_input_chars_per_word: longer words are [UNK]
  if (word.size() > kMaxWordBytes) return {id("[UNK]")};
  std::vector<std::int64_t> pieces;
  std::size_t start = 0;
  while (start < word.size()) {
    std::size_t end = word.size();
    std::int64_t found = -1;
    while (end > start) {
      const std::string piece = (start > 0 ? "##" : "") + word.substr(start, end - start);
      const auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        found = it->second;
        break;
      }
      --end;
    }
    if (found < 0) return {id("[UNK]")};
    pieces.push_back(found);
    start = end;
  }
  return pieces;
}

std::vector<std::int64_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids{id("[CLS]")};
  for (const auto& word : basic_split(text)) {
    const auto pieces = word_pieces(word);
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }
  ids.push_back(id("[SEP]"));
  return ids;
}

std::vector<std::int64_t> read_token_file(const std::filesystem::path& path) {
  std::istringstream in(reports::read_text_file(path));
  std::vector<std::int64_t> ids;
  std::string word;
  while (in >> word) {
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (error != std::errc{} || end != word.data() + word.size()) {
      throw InputError(fmt::format("{}: '{}' (entry {}) is not an integer token id", path.string(), word,
                                   ids.size() + 1));
    }
    ids.push_back(value);
  }
  if (ids.empty()) throw InputError(fmt::format("{}: no token ids", path.string()));
  return ids;
}

}  // namespace attncheck::probes
