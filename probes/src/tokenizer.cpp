#include "attncheck/probes/tokenizer.hpp"

#include "adapters.hpp"

#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/theory/common.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <array>
#include <charconv>
#include <functional>
#include <queue>
#include <sstream>
#include <tuple>

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
         (c >= 0x2010 && c <= 0x205e) || (c >= 0xa1 && c <= 0xbf && c != 0xaa && c != 0xb5 && c != 0xba) || c == 0xd7 ||
         c == 0xf7 || (c >= 0x3000 && c <= 0x303f);
}
bool is_cjk(char32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x20000 && c <= 0x2a6df) ||
         (c >= 0x2a700 && c <= 0x2ceaf) || (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

// Lower-case and strip accents for ASCII and Latin-1 letters (what do_lower_case does to them).
char32_t lower_and_strip(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xc0 || c > 0xff || c == 0xd7 || c == 0xf7) return c;
  static constexpr char kBase[] =
      "aaaaaaaceeeeiiiidnooooo/ouuuuyts"    // U+00C0..U+00DF (0xD7, 0xDF handled)
      "aaaaaaaceeeeiiiidnooooo/ouuuuyty";   // U+00E0..U+00FF
  if (c == 0xc6 || c == 0xe6) return 0xe6;  // æ has no decomposition
  if (c == 0xd0 || c == 0xf0) return 0xf0;  // ð likewise
  if (c == 0xde || c == 0xfe) return 0xfe;  // þ likewise
  if (c == 0xd8 || c == 0xf8) return 0xf8;  // ø likewise
  if (c == 0xdf) return 0xdf;               // ß
  return static_cast<unsigned char>(kBase[c - 0xc0]);
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(std::unordered_map<std::string, std::int64_t> vocab, bool lower_case,
                                       const std::filesystem::path& source)
    : vocab_path_(source), lower_case_(lower_case), vocab_(std::move(vocab)) {
  for (const char* special : {"[CLS]", "[SEP]", "[UNK]"}) id(special);
}

WordPieceTokenizer WordPieceTokenizer::from_gguf(const GgufHeader& header) {
  const std::string& model = header.string("tokenizer.ggml.model");
  if (model != "bert") {
    throw InputError(fmt::format("{}: tokenizer.ggml.model '{}' is not WordPiece's (bert)", header.source, model));
  }
  const std::vector<std::string> tokens = header.strings("tokenizer.ggml.tokens");
  // Newer converters keep control tokens (type 3) as they are; older ones kept every "[...]" token.
  constexpr std::int64_t kControl = 3;
  const GgufValue* types = header.find("tokenizer.ggml.token_type");
  if (types && types->size() != tokens.size()) {
    throw InputError(fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", header.source,
                                 types->size(), tokens.size()));
  }
  const auto is_control = [&](std::size_t k) {
    if (types) {
      const GgufValue type = types->element(k);
      const auto* value = std::get_if<std::int64_t>(&type.data);
      const auto* unsigned_value = std::get_if<std::uint64_t>(&type.data);
      return (value && *value == kControl) || (unsigned_value && *unsigned_value == kControl);
    }
    return tokens[k].size() >= 2 && tokens[k].front() == '[' && tokens[k].back() == ']';
  };
  constexpr std::string_view kWordStart = "\xe2\x96\x81";  // U+2581
  std::unordered_map<std::string, std::int64_t> vocab;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const std::string& token = tokens[k];
    std::string piece;
    if (is_control(k)) {
      piece = token;
    } else if (token.starts_with(kWordStart)) {
      piece = token.substr(kWordStart.size());
    } else {
      piece = "##" + token;
    }
    vocab.emplace(std::move(piece), static_cast<std::int64_t>(k));
  }
  return WordPieceTokenizer(std::move(vocab), true, header.source);
}

WordPieceTokenizer::WordPieceTokenizer(const std::filesystem::path& vocab_txt, bool lower_case)
    : vocab_path_(vocab_txt), lower_case_(lower_case) {
  std::int64_t next = 0;
  records::InputFile(vocab_txt).for_each_line([&](std::string_view line, std::size_t) {
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

namespace {

// GPT-2's reversible map of bytes to printable characters: the printable Latin-1 bytes ('!'..'~', U+00A1..
// U+00AC, U+00AE..U+00FF) stand for themselves, every other byte b becomes U+0100 + (its rank among them).
const std::array<std::string, 256>& byte_characters() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> out;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      encode_utf8(printable ? static_cast<char32_t>(b) : next++, out[static_cast<std::size_t>(b)]);
    }
    return out;
  }();
  return table;
}

// GPT-2's pre-tokenizer expression, as Hugging Face's ByteLevel pre-tokenizer runs it.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kNumberPattern = R"(\p{N})";

pcre2_code* compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (!code) throw std::logic_error(fmt::format("PCRE2 refuses the pre-tokenizer expression (error {})", error));
  return code;
}

// Calls `piece(begin, end, matched)` for the matches of `code` in text and the stretches between them.
void split(const pcre2_code* code, std::string_view text,
           const std::function<void(std::size_t, std::size_t, bool)>& piece) {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  while (at < text.size()) {
    // The text was checked as UTF-8 once, before the first piece.
    const int rc = pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw InputError(fmt::format("the pre-tokenizer's expression failed on the text (PCRE2 error {})", rc));
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    if (range[0] > at) piece(at, range[0], false);
    if (range[1] == range[0]) {  // cannot happen with these expressions; guards against a loop
      ++at;
      continue;
    }
    piece(range[0], range[1], true);
    at = range[1];
  }
  if (at < text.size()) piece(at, text.size(), false);
}

// PCRE2 with PCRE2_NO_UTF_CHECK needs valid UTF-8: one checked match validates the whole text.
void check_utf8(const pcre2_code* code, std::string_view text) {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, match.get(), nullptr);
  if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
    throw InputError(
        fmt::format("the text is not valid UTF-8 (at byte {} of {})", pcre2_get_startchar(match.get()), text.size()));
  }
}

}  // namespace

struct ByteLevelBpeTokenizer::Regexes {
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> gpt2{compile(kGpt2Pattern), &pcre2_code_free};
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> number{compile(kNumberPattern), &pcre2_code_free};
};

ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;
ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(ByteLevelBpeTokenizer&&) noexcept = default;

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(std::vector<std::string> tokens, const std::vector<std::string>& merges,
                                             PreTokenizer pre, std::string source, std::optional<std::int64_t> bos)
    : source_(std::move(source)), pre_(pre), bos_(bos), regexes_(std::make_unique<Regexes>()) {
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    // A repeated token keeps its first id, as Hugging Face's vocabulary maps do when built from a list.
    vocab_.emplace(std::move(tokens[id]), static_cast<std::int64_t>(id));
  }
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto space = merges[rank].find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == merges[rank].size() ||
        merges[rank].find(' ', space + 1) != std::string::npos) {
      throw InputError(
          fmt::format("{}: merge {} ('{}') is not two symbols separated by one space", source_, rank, merges[rank]));
    }
    merge_rank_.emplace(merges[rank], static_cast<std::int64_t>(rank));
  }
  if (bos_ && (*bos_ < 0 || *bos_ >= static_cast<std::int64_t>(tokens.size()))) {
    throw InputError(fmt::format("{}: the BOS token id {} is outside the {} tokens", source_, *bos_, tokens.size()));
  }
}

ByteLevelBpeTokenizer ByteLevelBpeTokenizer::from_gguf(const GgufHeader& header) {
  const std::string& model = header.string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw InputError(
        fmt::format("{}: tokenizer.ggml.model '{}' is not supported (gpt2: byte-level BPE); pass the "
                    "ids with --tokens FILE",
                    header.source, model));
  }
  const std::string pre_name = header.find("tokenizer.ggml.pre") ? header.string("tokenizer.ggml.pre") : "gpt2";
  PreTokenizer pre;
  if (pre_name == "gpt2" || pre_name == "default") {
    pre = PreTokenizer::gpt2;
  } else if (pre_name == "smollm") {
    pre = PreTokenizer::digits_then_gpt2;
  } else {
    throw InputError(
        fmt::format("{}: tokenizer.ggml.pre '{}' is not supported (gpt2, smollm); pass the ids with "
                    "--tokens FILE",
                    header.source, pre_name));
  }
  std::optional<std::int64_t> bos;
  if (header.find("tokenizer.ggml.add_bos_token") && header.boolean("tokenizer.ggml.add_bos_token")) {
    bos = static_cast<std::int64_t>(header.unsigned_integer("tokenizer.ggml.bos_token_id"));
  }
  return ByteLevelBpeTokenizer(header.strings("tokenizer.ggml.tokens"), header.strings("tokenizer.ggml.merges"), pre,
                               header.source, bos);
}

namespace {
// token -> id from a JSON object; the ids must be distinct and dense enough to index a list.
std::vector<std::string> tokens_by_id(const nlohmann::json& vocab, const std::filesystem::path& source) {
  if (!vocab.is_object())
    throw InputError(fmt::format("{}: the vocabulary is not an object of token ids", source.string()));
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::uint64_t>() >= vocab.size() ||
        seen[id.get<std::size_t>()]) {
      throw InputError(fmt::format("{}: the id of token '{}' ({}) is not a distinct id below {}", source.string(),
                                   token, records::json_excerpt(id), vocab.size()));
    }
    seen[id.get<std::size_t>()] = true;
    tokens[id.get<std::size_t>()] = token;
  }
  return tokens;
}

std::vector<std::string> merges_of(const nlohmann::json& merges, const std::filesystem::path& source) {
  if (!merges.is_array()) throw InputError(fmt::format("{}: \"merges\" is not a list", source.string()));
  std::vector<std::string> out;
  for (const auto& merge : merges) {
    if (merge.is_string()) {
      out.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      out.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      throw InputError(fmt::format("{}: merge {} is neither \"left right\" nor [left, right]", source.string(),
                                   records::json_excerpt(merge)));
    }
  }
  return out;
}
}  // namespace

ByteLevelBpeTokenizer ByteLevelBpeTokenizer::from_files(const std::filesystem::path& vocab_json,
                                                        const std::filesystem::path& merges_txt, PreTokenizer pre) {
  std::vector<std::string> tokens = tokens_by_id(records::read_json_file(vocab_json), vocab_json);
  std::istringstream in(records::read_text_file(merges_txt));
  std::vector<std::string> merges;
  std::string line;
  for (bool first = true; std::getline(in, line); first = false) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if ((first && line.starts_with("#version")) || line.empty()) continue;
    merges.push_back(line);
  }
  return ByteLevelBpeTokenizer(std::move(tokens), merges, pre, vocab_json.string() + " and " + merges_txt.string());
}

std::vector<std::string> ByteLevelBpeTokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(regexes_->number.get(), text);
  std::vector<std::string> pieces;
  const auto gpt2 = [&](std::string_view part) {
    split(regexes_->gpt2.get(), part,
          [&](std::size_t begin, std::size_t end, bool) { pieces.emplace_back(part.substr(begin, end - begin)); });
  };
  if (pre_ == PreTokenizer::gpt2) {
    gpt2(text);
  } else {
    split(regexes_->number.get(), text,
          [&](std::size_t begin, std::size_t end, bool) { gpt2(text.substr(begin, end - begin)); });
  }
  return pieces;
}

std::vector<std::int64_t> ByteLevelBpeTokenizer::encode_piece(std::string_view piece) const {
  struct Symbol {
    std::string text;
    std::ptrdiff_t previous, next;
  };
  std::vector<Symbol> symbols;
  for (std::size_t k = 0; k < piece.size(); ++k) {
    symbols.push_back({byte_characters()[static_cast<unsigned char>(piece[k])], static_cast<std::ptrdiff_t>(k) - 1,
                       k + 1 < piece.size() ? static_cast<std::ptrdiff_t>(k + 1) : -1});
  }
  const auto rank_of = [&](std::ptrdiff_t left, std::ptrdiff_t right) -> std::int64_t {
    const auto it = merge_rank_.find(symbols[left].text + " " + symbols[right].text);
    return it == merge_rank_.end() ? -1 : it->second;
  };
  // Candidate merges by (rank, position of the left symbol); entries made stale by earlier merges are skipped.
  using Candidate = std::tuple<std::int64_t, std::ptrdiff_t, std::ptrdiff_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](std::ptrdiff_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const auto rank = rank_of(left, symbols[left].next);
    if (rank >= 0) queue.emplace(rank, left, symbols[left].next);
  };
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) offer(static_cast<std::ptrdiff_t>(k));
  std::vector<bool> alive(symbols.size(), true);
  while (!queue.empty()) {
    const auto [rank, left, right] = queue.top();
    queue.pop();
    if (!alive[left] || !alive[right] || symbols[left].next != right || rank_of(left, right) != rank) continue;
    symbols[left].text += symbols[right].text;
    alive[right] = false;
    symbols[left].next = symbols[right].next;
    if (symbols[left].next >= 0) symbols[symbols[left].next].previous = left;
    offer(symbols[left].previous);
    offer(left);
  }
  std::vector<std::int64_t> ids;
  for (std::ptrdiff_t k = 0; k >= 0 && k < static_cast<std::ptrdiff_t>(symbols.size()); k = symbols[k].next) {
    const auto it = vocab_.find(symbols[k].text);
    if (it == vocab_.end()) {
      throw InputError(
          fmt::format("{}: the text needs the symbol '{}', which is not in the vocabulary", source_, symbols[k].text));
    }
    ids.push_back(it->second);
  }
  return ids;
}

std::vector<std::int64_t> ByteLevelBpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  if (bos_) ids.push_back(*bos_);
  for (const auto& piece : pre_tokenize(text)) {
    const auto piece_ids = encode_piece(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

std::vector<std::int64_t> encode_with_tokenizer_json(const std::filesystem::path& path, std::string_view text) {
  using detail::value_or;
  const nlohmann::json json = records::read_json_file(path);
  if (!json.is_object() || !json.contains("model") || !json["model"].is_object()) {
    throw InputError(fmt::format("{}: no \"model\" object", path.string()));
  }
  const auto& model = json["model"];
  const auto member = [](const nlohmann::json& object, const char* key) -> const nlohmann::json& {
    static const nlohmann::json absent;
    return object.is_object() && object.contains(key) ? object[key] : absent;
  };
  const std::string type = value_or<std::string>(model, "type", "", path, "model");
  const auto refuse = [&](const std::string& what) {
    return InputError(fmt::format("{}: {} is not supported; pass the ids with --tokens FILE", path.string(), what));
  };
  if (type == "WordPiece") {
    if (value_or<std::string>(model, "continuing_subword_prefix", "##", path, "model") != "##" ||
        value_or<std::string>(model, "unk_token", "[UNK]", path, "model") != "[UNK]") {
      throw refuse("a WordPiece model without the \"##\" prefix and [UNK]");
    }
    std::unordered_map<std::string, std::int64_t> vocab;
    const auto tokens = tokens_by_id(member(model, "vocab"), path);
    for (std::size_t id = 0; id < tokens.size(); ++id) vocab.emplace(tokens[id], static_cast<std::int64_t>(id));
    const bool lower_case = value_or<bool>(member(json, "normalizer"), "lowercase", true, path, "normalizer");
    return WordPieceTokenizer(std::move(vocab), lower_case, path).encode(text);
  }
  if (type != "BPE") throw refuse(fmt::format("model type '{}'", type));
  // The pre-tokenizer: ByteLevel, alone or after Digits with individual_digits.
  const nlohmann::json& pre = member(json, "pre_tokenizer");
  const auto is_byte_level = [&](const nlohmann::json& p, std::string_view within) {
    return p.is_object() && value_or<std::string>(p, "type", "", path, within) == "ByteLevel" &&
           !value_or<bool>(p, "add_prefix_space", false, path, within) &&
           value_or<bool>(p, "use_regex", true, path, within);
  };
  const nlohmann::json& parts = member(pre, "pretokenizers");
  ByteLevelBpeTokenizer::PreTokenizer kind;
  if (is_byte_level(pre, "pre_tokenizer")) {
    kind = ByteLevelBpeTokenizer::PreTokenizer::gpt2;
  } else if (pre.is_object() && value_or<std::string>(pre, "type", "", path, "pre_tokenizer") == "Sequence" &&
             parts.is_array() && parts.size() == 2 && parts[0].is_object() &&
             value_or<std::string>(parts[0], "type", "", path, "pre_tokenizer.pretokenizers[0]") == "Digits" &&
             value_or<bool>(parts[0], "individual_digits", false, path, "pre_tokenizer.pretokenizers[0]") &&
             is_byte_level(parts[1], "pre_tokenizer.pretokenizers[1]")) {
    kind = ByteLevelBpeTokenizer::PreTokenizer::digits_then_gpt2;
  } else {
    throw refuse(fmt::format("the pre-tokenizer {}", records::json_excerpt(pre)));
  }
  if (value_or<bool>(model, "ignore_merges", false, path, "model") ||
      value_or<bool>(model, "byte_fallback", false, path, "model")) {
    throw refuse("a BPE model with ignore_merges or byte_fallback");
  }
  static const nlohmann::json no_merges = nlohmann::json::array();
  const nlohmann::json& merges = member(model, "merges").is_null() ? no_merges : member(model, "merges");
  return ByteLevelBpeTokenizer(tokens_by_id(member(model, "vocab"), path), merges_of(merges, path), kind, path.string())
      .encode(text);
}

std::vector<std::string> vocabulary_strings(const std::filesystem::path& folder) {
  if (std::filesystem::exists(folder / "vocab.txt")) {
    std::vector<std::string> strings;
    records::InputFile(folder / "vocab.txt").for_each_line([&](std::string_view line, std::size_t) {
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      strings.emplace_back(line);
    });
    return strings;
  }
  if (std::filesystem::exists(folder / "vocab.json")) {
    return tokens_by_id(records::read_json_file(folder / "vocab.json"), folder / "vocab.json");
  }
  if (std::filesystem::exists(folder / "tokenizer.json")) {
    const auto json = records::read_json_file(folder / "tokenizer.json");
    if (json.is_object() && json.contains("model") && json["model"].is_object() && json["model"].contains("vocab")) {
      return tokens_by_id(json["model"]["vocab"], folder / "tokenizer.json");
    }
  }
  return {};
}

std::vector<std::int64_t> read_token_file(const std::filesystem::path& path) {
  std::istringstream in(records::read_text_file(path));
  std::vector<std::int64_t> ids;
  std::string word;
  while (in >> word) {
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (error != std::errc{} || end != word.data() + word.size()) {
      throw InputError(
          fmt::format("{}: '{}' (entry {}) is not an integer token id", path.string(), word, ids.size() + 1));
    }
    ids.push_back(value);
  }
  if (ids.empty()) throw InputError(fmt::format("{}: no token ids", path.string()));
  return ids;
}

}  // namespace attncheck::probes
