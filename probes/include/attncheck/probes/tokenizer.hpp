#pragma once
// BERT's tokenizer: basic splitting (whitespace, punctuation, CJK characters, optional lower-casing) then
// greedy longest-match WordPiece over vocab.txt, wrapped in [CLS] ... [SEP].
// Accents are stripped for Latin-1 letters only (no Unicode normalization tables): other non-ASCII letters
// are kept as they are, which may tokenize differently from the reference tokenizer.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attncheck::probes {

class WordPieceTokenizer {
 public:
  WordPieceTokenizer(const std::filesystem::path& vocab_txt, bool lower_case);
  std::vector<std::int64_t> encode(std::string_view text) const;  // with [CLS] and [SEP]
  std::vector<std::string> basic_split(std::string_view text) const;
  std::vector<std::int64_t> word_pieces(const std::string& word) const;
  std::int64_t id(const std::string& token) const;  // throws InputError naming the token when absent

 private:
  std::filesystem::path vocab_path_;
  bool lower_case_;
  std::unordered_map<std::string, std::int64_t> vocab_;
};

// Whitespace-separated integer token ids from a file; errors name the file and the bad entry.
std::vector<std::int64_t> read_token_file(const std::filesystem::path& path);

}  // namespace attncheck::probes
