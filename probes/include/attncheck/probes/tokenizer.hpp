#pragma once
// The tokenizers `probe --text` uses.
//
// BERT's tokenizer: basic splitting (whitespace, punctuation, CJK characters, optional lower-casing) then
// greedy longest-match WordPiece over vocab.txt (or tokenizer.json's vocabulary), wrapped in [CLS] ... [SEP].
// Accents are stripped for Latin-1 letters only (no Unicode normalization tables): other non-ASCII letters
// are kept as they are, which may tokenize differently from the reference tokenizer.
//
// GPT-2's byte-level BPE: the text is split by the pre-tokenizer's regular expression (GPT-2's, run by PCRE2
// with Unicode properties), each piece's UTF-8 bytes become printable characters (GPT-2's byte-to-unicode
// map), adjacent symbols are merged lowest rank first (leftmost first among equal ranks), and the symbols are
// looked up in the vocabulary. Special tokens written in the text are tokenized as plain text; chat templates
// are not applied.

#include "attncheck/probes/gguf.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attncheck::probes {

class WordPieceTokenizer {
 public:
  WordPieceTokenizer(const std::filesystem::path& vocab_txt, bool lower_case);
  // A vocabulary given as token -> id (tokenizer.json's); `source` names it in messages.
  WordPieceTokenizer(std::unordered_map<std::string, std::int64_t> vocab, bool lower_case,
                     const std::filesystem::path& source);
  // A GGUF file's vocabulary of tokenizer.ggml.model "bert", which llama.cpp's converter writes with a word's first
  // piece prefixed by U+2581 and its continuations without "##" (control tokens as they are); read back into
  // WordPiece's spelling and lower-cased, as llama.cpp's tokenizer lower-cases.
  static WordPieceTokenizer from_gguf(const GgufHeader& header);
  std::vector<std::int64_t> encode(std::string_view text) const;  // with [CLS] and [SEP]
  std::vector<std::string> basic_split(std::string_view text) const;
  std::vector<std::int64_t> word_pieces(const std::string& word) const;
  std::int64_t id(const std::string& token) const;  // throws InputError naming the token when absent

 private:
  std::filesystem::path vocab_path_;
  bool lower_case_;
  std::unordered_map<std::string, std::int64_t> vocab_;
};

class ByteLevelBpeTokenizer {
 public:
  enum class PreTokenizer {
    gpt2,              // GPT-2's expression alone
    digits_then_gpt2,  // every number character (\p{N}) split off alone first (SmolLM2's, llama.cpp's "smollm")
  };
  // tokens[id] is the token of that id; merges are "left right" in rank order. Errors name `source` and the
  // bad entry.
  ByteLevelBpeTokenizer(std::vector<std::string> tokens, const std::vector<std::string>& merges, PreTokenizer pre,
                        std::string source, std::optional<std::int64_t> bos = std::nullopt);
  ~ByteLevelBpeTokenizer();
  ByteLevelBpeTokenizer(ByteLevelBpeTokenizer&&) noexcept;

  // tokenizer.ggml.model "gpt2" with tokenizer.ggml.tokens, .merges and .pre ("gpt2", "smollm"); the BOS
  // token first when tokenizer.ggml.add_bos_token says so.
  static ByteLevelBpeTokenizer from_gguf(const GgufHeader& header);
  // vocab.json (token -> id) and merges.txt (one "left right" per line after an optional "#version" line).
  static ByteLevelBpeTokenizer from_files(const std::filesystem::path& vocab_json,
                                          const std::filesystem::path& merges_txt,
                                          PreTokenizer pre = PreTokenizer::gpt2);

  std::vector<std::int64_t> encode(std::string_view text) const;
  // The pre-tokenizer's pieces of the text, in its own UTF-8.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

 private:
  struct Regexes;
  std::vector<std::int64_t> encode_piece(std::string_view piece) const;
  std::string source_;
  std::unordered_map<std::string, std::int64_t> vocab_;
  std::unordered_map<std::string, std::int64_t> merge_rank_;  // "left right" -> rank
  PreTokenizer pre_;
  std::optional<std::int64_t> bos_;
  std::unique_ptr<Regexes> regexes_;
};

// The tokenizer of a Hugging Face tokenizer.json: WordPiece (its vocabulary and lower-casing) or byte-level
// BPE (with a ByteLevel pre-tokenizer, alone or after Digits(individual_digits)); anything else is refused
// naming what it is. Returns the ids of `text` as the probe feeds them.
std::vector<std::int64_t> encode_with_tokenizer_json(const std::filesystem::path& tokenizer_json,
                                                     std::string_view text);

// The string of each id in the vocabulary of a Hugging Face checkpoint's FOLDER, from the file its tokenizer reads
// (vocab.txt, vocab.json or tokenizer.json's model.vocab); empty when the folder has none. A malformed vocabulary
// is an InputError naming the file, as it is for the tokenizer.
std::vector<std::string> vocabulary_strings(const std::filesystem::path& folder);

// Whitespace-separated integer token ids from a file; errors name the file and the bad entry.
std::vector<std::int64_t> read_token_file(const std::filesystem::path& path);

}  // namespace attncheck::probes
