#include <catch2/catch.hpp>

#include "attncheck/probes/tokenizer.hpp"
#include "tiny_models.hpp"

#include <fstream>

using namespace attncheck::probes;
using Pre = ByteLevelBpeTokenizer::PreTokenizer;
using Ids = std::vector<std::int64_t>;
using Pieces = std::vector<std::string>;

TEST_CASE("byte-level BPE: GPT-2's pre-tokenizer pieces, and SmolLM2's with numbers split off first") {
  const ByteLevelBpeTokenizer gpt2({"a"}, {}, Pre::gpt2, "test");
  CHECK(gpt2.pre_tokenize("Hello  world's 123") == Pieces{"Hello", " ", " world", "'s", " 123"});
  CHECK(gpt2.pre_tokenize("x\n\n  y ") == Pieces{"x", "\n\n ", " y", " "});
  CHECK(gpt2.pre_tokenize("caf\xc3\xa9!?") == Pieces{"caf\xc3\xa9", "!?"});
  CHECK(gpt2.pre_tokenize("") == Pieces{});
  const ByteLevelBpeTokenizer smollm({"a"}, {}, Pre::digits_then_gpt2, "test");
  CHECK(smollm.pre_tokenize("Hello  world's 123") == Pieces{"Hello", " ", " world", "'s", " ", "1", "2", "3"});
  // U+00B2 (superscript two) is a number character too.
  CHECK(smollm.pre_tokenize("x\xc2\xb2") == Pieces{"x", "\xc2\xb2"});
}

TEST_CASE("byte-level BPE merges the lowest rank first, the leftmost first among equals") {
  const std::vector<std::string> tokens{"a",
                                        "b",
                                        "c",
                                        "ab",
                                        "bc",
                                        "abc",
                                        "aa",
                                        "\xc4\xa0",
                                        "\xc4\xa0"
                                        "a"};
  // "b c" outranks "a b": abc -> a + bc -> abc.
  const ByteLevelBpeTokenizer first({tokens}, {"b c", "a b", "a bc"}, Pre::gpt2, "test");
  CHECK(first.encode("abc") == Ids{5});
  // "a b" first and no "ab c": ab + c.
  const ByteLevelBpeTokenizer second({tokens}, {"a b", "b c"}, Pre::gpt2, "test");
  CHECK(second.encode("abc") == Ids{3, 2});
  // Three a's and the merge "a a": the leftmost pair merges, the last a stays.
  const ByteLevelBpeTokenizer third({tokens}, {"a a"}, Pre::gpt2, "test");
  CHECK(third.encode("aaa") == Ids{6, 0});
  // The space byte is the character U+0120 in the vocabulary.
  const ByteLevelBpeTokenizer space({tokens}, {"\xc4\xa0 a"}, Pre::gpt2, "test");
  CHECK(space.encode("a a") == Ids{0, 8});
  const ByteLevelBpeTokenizer with_bos({tokens}, {}, Pre::gpt2, "test", 2);
  CHECK(with_bos.encode("b") == Ids{2, 1});
}

TEST_CASE("byte-level BPE refuses bad vocabularies and text, naming them") {
  const std::vector<std::string> tokens{"a", "b"};
  CHECK_THROWS_WITH(ByteLevelBpeTokenizer(tokens, {"ab"}, Pre::gpt2, "vocab.json"),
                    Catch::Contains("vocab.json: merge 0 ('ab') is not two symbols separated by one space"));
  CHECK_THROWS_WITH(ByteLevelBpeTokenizer(tokens, {}, Pre::gpt2, "x.gguf", 5),
                    Catch::Contains("x.gguf: the BOS token id 5 is outside the 2 tokens"));
  const ByteLevelBpeTokenizer tokenizer(tokens, {}, Pre::gpt2, "vocab.json");
  CHECK_THROWS_WITH(tokenizer.encode("abc"), Catch::Contains("vocab.json: the text needs the symbol 'c'"));
  CHECK_THROWS_WITH(tokenizer.encode("ab\xff"), Catch::Contains("the text is not valid UTF-8 (at byte 2 of 3)"));
  CHECK_THROWS_WITH(tokenizer.encode("\xc3"), Catch::Contains("not valid UTF-8"));
}

TEST_CASE("vocab.json, merges.txt and tokenizer.json are read: what is not supported is refused by name") {
  attncheck::probes::testing::TempDir dir;
  std::ofstream(dir.path / "vocab.json") << R"({"a": 0, "b": 1, "ab": 2})";
  std::ofstream(dir.path / "merges.txt") << "#version: 0.2\na b\n";
  CHECK(ByteLevelBpeTokenizer::from_files(dir.path / "vocab.json", dir.path / "merges.txt").encode("abba") ==
        Ids{2, 1, 0});
  std::ofstream(dir.path / "bad.json") << R"({"a": 0, "b": 0})";
  CHECK_THROWS_WITH(ByteLevelBpeTokenizer::from_files(dir.path / "bad.json", dir.path / "merges.txt"),
                    Catch::Contains("bad.json: the id of token 'b' (0) is not a distinct id below 2"));
  std::ofstream(dir.path / "bpe.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})";
  CHECK(encode_with_tokenizer_json(dir.path / "bpe.json", "abab") == Ids{2, 2});
  std::ofstream(dir.path / "unigram.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  CHECK_THROWS_WITH(encode_with_tokenizer_json(dir.path / "unigram.json", "a"),
                    Catch::Contains("model type 'Unigram' is not supported"));
  std::ofstream(dir.path / "prefix.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}})";
  CHECK_THROWS_WITH(encode_with_tokenizer_json(dir.path / "prefix.json", "a"),
                    Catch::Contains("the pre-tokenizer") && Catch::Contains("is not supported"));
  std::ofstream(dir.path / "wordpiece.json")
      << R"({"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4,
            "cat": 5, "##s": 6}}, "normalizer": {"type": "BertNormalizer", "lowercase": true}})";
  CHECK(encode_with_tokenizer_json(dir.path / "wordpiece.json", "The cats dog") == Ids{2, 4, 5, 6, 1, 3});
  // A value of the wrong type names the file and the key, never the JSON library's bare type_error.302.
  for (
      const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
          {R"({"model": {"type": 5}})", "\"model.type\" is 5, not text"},
          {R"({"model": {"type": "BPE", "vocab": {}, "byte_fallback": "yes"}, "pre_tokenizer": {"type": "ByteLevel"}})",
           "\"model.byte_fallback\" is \"yes\", not true or false"},
          {R"({"model": {"type": "BPE"}, "pre_tokenizer": {"type": ["ByteLevel"]}})",
           "\"pre_tokenizer.type\" is [\"ByteLevel\"], not text"},
          {R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}, "normalizer": {"lowercase": 1}})",
           "\"normalizer.lowercase\" is 1, not true or false"}}) {
    std::ofstream(dir.path / "typed.json") << text;
    CHECK_THROWS_WITH(encode_with_tokenizer_json(dir.path / "typed.json", "a"),
                      Catch::Contains((dir.path / "typed.json").string() + ": " + fragment));
  }
}
