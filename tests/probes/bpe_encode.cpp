// Prints the ids the probes' tokenizers give a text file, for the comparison with Hugging Face's tokenizers
// (tokenizer_oracle.py).
// Usage: bpe_encode TEXT_FILE --gguf FILE.gguf
//        bpe_encode TEXT_FILE --files VOCAB_JSON MERGES_TXT [gpt2|smollm]
//        bpe_encode TEXT_FILE --tokenizer-json TOKENIZER_JSON

#include "attncheck/probes/tokenizer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  using namespace attncheck::probes;
  if (argc < 4) {
    fmt::print(stderr,
               "usage: bpe_encode TEXT_FILE (--gguf FILE | --files VOCAB MERGES [PRE] | --tokenizer-json FILE)\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::string mode = argv[2];
  try {
    std::vector<std::int64_t> ids;
    if (mode == "--gguf") {
      const auto checkpoint = Checkpoint::open(argv[3]);
      ids = ByteLevelBpeTokenizer::from_gguf(checkpoint.gguf()->header()).encode(text);
    } else if (mode == "--files" && argc >= 5) {
      const auto pre = argc >= 6 && std::string(argv[5]) == "smollm"
                           ? ByteLevelBpeTokenizer::PreTokenizer::digits_then_gpt2
                           : ByteLevelBpeTokenizer::PreTokenizer::gpt2;
      ids = ByteLevelBpeTokenizer::from_files(argv[3], argv[4], pre).encode(text);
    } else if (mode == "--tokenizer-json") {
      ids = encode_with_tokenizer_json(argv[3], text);
    } else {
      fmt::print(stderr, "bpe_encode: unknown mode {}\n", mode);
      return 2;
    }
    fmt::print("{}\n", fmt::join(ids, " "));
  } catch (const InputError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  return 0;
}
