// Every JSON reader fuzzed from a fixed seed: each starts from a valid document of its own and reads it with one
// value replaced (nesting 100,000 deep, a megabyte of text, 200,000 elements, every JSON type, the ends of
// double's range, NUL and escape sequences), with a key renamed, cut short or with bytes changed. Each read must
// end in a value or an InputError whose message names the file, stays short and prints nothing raw; and the same
// input must end the same way twice. Anything else (a crash, another exception type) fails the test.

#include "attncheck/probes/image.hpp"
#include "attncheck/probes/live_metrics.hpp"
#include "attncheck/probes/model.hpp"
#include "attncheck/probes/safetensors.hpp"
#include "attncheck/probes/tokenizer.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/probe_record.hpp"
#include "attncheck/records/results_folder.hpp"
#include "attncheck/reports/head_maps.hpp"
#include "attncheck/reports/training_curves.hpp"
#include "attncheck/reports/vit_results.hpp"
#include "json_mutator.hpp"
#include "tiny_models.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <functional>

using namespace attncheck;
using namespace attncheck::probes::testing;
using nlohmann::json;

namespace {

const fs::path kReportsData = fs::path(ATTNCHECK_PROBES_TEST_DIR) / ".." / "reports" / "data";

std::string text_of(const fs::path& file) { return records::read_text_file(file); }
void write_text(const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; }

// One reader: a valid text, where its errors say it came from, and how to read a text through it.
struct Reader {
  std::string name;
  std::string where;  // every refusal names it (the file, or the name the text was given)
  std::string valid;
  bool lines = false;  // JSON lines: a mutation changes one line
  std::function<void(const std::string& text)> read;
};

// "read", or "refused: <message>"; another exception is the test's failure, with the input's start.
std::string outcome(const Reader& reader, const std::string& text) {
  try {
    reader.read(text);
    return "read";
  } catch (const theory::InputError& e) {
    return std::string("refused: ") + e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK(reader.name << ": " << typeid(e).name() << ": " << e.what() << "\n  input: " << text.substr(0, 300));
    return "failed";
  }
}

}  // namespace

TEST_CASE("every JSON reader, fuzzed: a value or an InputError naming the file, the same twice", "[fuzz][hostile]") {
  TempDir dir;
  // The models the config, tokenizer and preprocessing readers belong to.
  const fs::path bert = dir.path / "bert", gpt2 = dir.path / "gpt2", index_model = dir.path / "sharded";
  const fs::path llama = dir.path / "llama", vit = dir.path / "vit";
  write_tiny_bert(bert);
  write_tiny_gpt2(gpt2 / "model.safetensors");
  write_tiny_llama(llama, "llama", 2);
  write_tiny_vit(vit);
  write_tiny_gpt2(index_model / "shard-1.safetensors");
  const probes::TransformerModel bert_model = probes::TransformerModel::load(bert);
  const std::string safetensors_bytes = text_of(gpt2 / "model.safetensors");
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, safetensors_bytes.data(), 8);
  const std::string safetensors_header = safetensors_bytes.substr(8, header_length);
  const std::string safetensors_data = safetensors_bytes.substr(8 + header_length);
  json index = {{"metadata", {{"total_size", 1}}}, {"weight_map", json::object()}};
  const json header = json::parse(safetensors_header);
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") index["weight_map"][name] = "shard-1.safetensors";
  }

  const auto in_file = [](const fs::path& file, std::function<void()> read) {
    return [file, read](const std::string& text) {
      write_text(file, text);
      read();
    };
  };
  std::vector<Reader> readers = {
      {"fits.json", "fits.json", text_of(kReportsData / "c3-small" / "fits.json"), false,
       [](const std::string& text) { (void)records::parse_fits_json(text, "fits.json"); }},
      {"points.jsonl", "points.jsonl line", text_of(kReportsData / "c3-small" / "points.jsonl"), true,
       [](const std::string& text) { (void)records::parse_points_jsonl(text, "points.jsonl"); }},
      {"probe log", "attncheck-probe.jsonl line", text_of(kReportsData / "probe-small" / "attncheck-probe.jsonl"), true,
       [](const std::string& text) { (void)records::parse_probe_log(text, "attncheck-probe.jsonl"); }},
      {"probe --json", "probe.json", text_of(kReportsData / "probe-minilm.json"), false,
       [](const std::string& text) { (void)reports::parse_probe_output(text, "probe.json"); }},
      {"vit-results.json", "vit-results.json",
       json{{"format", "attncheck-vit-digits"},
            {"format_version", 1},
            {"provenance", {{"command", "c"}, {"date", "d"}, {"wall_seconds", 1.0}}},
            {"runs",
             {{{"experiment", "activations"},
               {"activation", "softmax"},
               {"scale", nullptr},
               {"N", 16},
               {"patch", 2},
               {"seed", 1},
               {"steps", 10},
               {"accuracy", 0.9},
               {"test_size", 360},
               {"diverged_at", nullptr},
               {"wall_seconds", 1.0},
               {"trace", {{{"step", 0}, {"layer", 0}, {"attention_fro", 1.0}, {"jacobian_fro", 2.0}}}}}}}}
           .dump(),
       false, [](const std::string& text) { (void)reports::parse_vit_results(text, "vit-results.json"); }},
      {"training curves", "attncheck-curves.jsonl line",
       json{{"record", "curves"}, {"format", 1}, {"title", "t"}, {"headline", "accuracy"}}.dump() + "\n" +
           json{{"record", "variant"}, {"name", "a"}, {"label", "A"}}.dump() + "\n" +
           json{{"record", "metric"}, {"name", "accuracy"}, {"label", "accuracy"}}.dump() + "\n" +
           json{{"record", "point"}, {"variant", "a"}, {"seed", 1}, {"step", 1}, {"values", {{"accuracy", 0.5}}}}
               .dump() +
           "\n",
       true, [](const std::string& text) { (void)reports::parse_training_curves(text, "attncheck-curves.jsonl"); }},
      {"config.json (BERT)", "config.json", text_of(bert / "config.json"), false,
       in_file(bert / "config.json", [&] { (void)probes::TransformerModel::load(bert); })},
      {"config.json (GPT-2)", "config.json", text_of(gpt2 / "config.json"), false,
       in_file(gpt2 / "config.json", [&] { (void)probes::TransformerModel::load(gpt2); })},
      {"config.json (Llama)", "config.json",
       json{{"model_type", "llama"},
            {"hidden_size", 16},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 6},
            {"num_hidden_layers", 2},
            {"intermediate_size", 24},
            {"vocab_size", 40},
            {"max_position_embeddings", 16},
            {"rms_norm_eps", 1e-6},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}}
           .dump(),
       false, in_file(llama / "config.json", [&] { (void)probes::TransformerModel::load(llama); })},
      {"config.json (ViT)", "config.json",
       json{{"model_type", "vit"},
            {"hidden_size", 8},
            {"num_attention_heads", 2},
            {"num_hidden_layers", 1},
            {"intermediate_size", 16},
            {"image_size", 16},
            {"patch_size", 8},
            {"layer_norm_eps", 1e-12}}
           .dump(),
       false, in_file(vit / "config.json", [&] { (void)probes::TransformerModel::load(vit); })},
      {"vocab.json", "vocab.json", R"({"a": 0, "b": 1, "ab": 2, "\u0120the": 3})", false,
       in_file(dir.path / "vocab.json",
               [&] {
                 write_text(dir.path / "merges.txt", "#version: 0.2\na b\n");
                 (void)probes::ByteLevelBpeTokenizer::from_files(dir.path / "vocab.json", dir.path / "merges.txt")
                     .encode("abab");
               })},
      {"tokenizer.json (BPE)", "tokenizer.json",
       R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
           {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]}})",
       false,
       in_file(dir.path / "tokenizer.json",
               [&] { (void)probes::encode_with_tokenizer_json(dir.path / "tokenizer.json", "abab"); })},
      {"tokenizer.json (WordPiece)", "tokenizer.json",
       R"({"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4,
           "##s": 5}}, "normalizer": {"type": "BertNormalizer", "lowercase": true}})",
       false,
       in_file(dir.path / "tokenizer.json",
               [&] { (void)probes::encode_with_tokenizer_json(dir.path / "tokenizer.json", "The thes"); })},
      {"tokenizer_config.json", "tokenizer_config.json", R"({"do_lower_case": true, "model_max_length": 512})", false,
       in_file(bert / "tokenizer_config.json",
               [&] { (void)probes::tokenize_for_model(bert, bert_model, "the cat sat"); })},
      {"preprocessor_config.json", "preprocessor_config.json",
       R"({"do_resize": true, "size": {"height": 32, "width": 32}, "resample": 3, "do_center_crop": true,
           "crop_size": {"height": 24, "width": 24}, "do_rescale": true, "rescale_factor": 0.00392156862745098,
           "do_normalize": true, "image_mean": [0.5, 0.5, 0.5], "image_std": 0.5})",
       false,
       in_file(bert / "preprocessor_config.json",
               [&] { (void)probes::read_preprocessing(bert, bert_model.config()); })},
      {"safetensors header", "model.safetensors", safetensors_header, false,
       [&](const std::string& text) {
         std::string image(8, '\0');
         const std::uint64_t length = text.size();
         std::memcpy(image.data(), &length, 8);
         image += text + safetensors_data;
         (void)probes::parse_safetensors(std::span(reinterpret_cast<const std::byte*>(image.data()), image.size()),
                                         "model.safetensors");
       }},
      {"model.safetensors.index.json", "model.safetensors.index.json", index.dump(), false,
       in_file(index_model / "model.safetensors.index.json", [&] { (void)probes::Checkpoint::open(index_model); })},
  };
  // Each valid document reads: the mutations start from documents the readers take.
  for (const Reader& reader : readers) {
    INFO(reader.name);
    CHECK(outcome(reader, reader.valid) == "read");
  }
  attncheck::testing::Mutator mutator(20261121);
  const auto start = std::chrono::steady_clock::now();
  int refused = 0, read = 0;
  for (const Reader& reader : readers) {
    for (int run = 0; run < 60; ++run) {
      const std::string text = mutator.mutate(reader.valid, reader.lines);
      const std::string first = outcome(reader, text), second = outcome(reader, text);
      INFO(reader.name << " run " << run << ": " << first.substr(0, 400));
      CHECK(first == second);
      if (first == "read") {
        ++read;
        continue;
      }
      ++refused;
      CHECK(first.find(reader.where) != std::string::npos);
      CHECK(first.size() < 4500);  // theory::message_text's bound
      CHECK(first.find_first_of(std::string("\0\x1b\x07\r", 4)) == std::string::npos);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN(fmt::format("{} readers x 60 mutations in {:.1f} s: {} read, {} refused", readers.size(), seconds, read,
                   refused));
  CHECK(refused > read);
}

TEST_CASE("every JSON reader refuses 100,000 nested brackets naming the file, the place and the keys", "[hostile]") {
  // Once each of these ended the program: the value parsed, and printing it in a message recursed per level.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  CHECK_THROWS_WITH(records::parse_fits_json(deep, "fits.json"),
                    Catch::Contains("fits.json line 1 column 65: JSON nested more than 64 levels deep"));
  CHECK_THROWS_WITH(records::parse_points_jsonl("{\"key\": " + deep + "}\n", "points.jsonl"),
                    Catch::Contains("points.jsonl line 1 column 72") && Catch::Contains("under \"key\" > [0]"));
  CHECK_THROWS_WITH(records::parse_probe_log(deep + "\n", "log.jsonl"), Catch::Contains("log.jsonl line 1 column 65"));
  CHECK_THROWS_WITH(reports::parse_probe_output("{\"model\": {\"path\": " + deep + "}}", "p.json"),
                    Catch::Contains("p.json line 1 column") && Catch::Contains("under \"model\" > \"path\""));
  TempDir dir;
  write_tiny_gpt2(dir.path / "model.safetensors");
  const probes::TransformerModel model = probes::TransformerModel::load(dir.path);
  const std::string wrapped = "{\"model\": {\"vocab\": " + deep + "}}";
  const auto refused = [&](const char* file, const std::function<void()>& read) {
    INFO(file);
    write_text(dir.path / file, wrapped);
    CHECK_THROWS_WITH(read(), Catch::Contains((dir.path / file).string() + " line 1 column") &&
                                  Catch::Contains("under \"model\" > \"vocab\" > [0]"));
  };
  refused("preprocessor_config.json", [&] { (void)probes::read_preprocessing(dir.path, model.config()); });
  refused("tokenizer.json", [&] { (void)probes::encode_with_tokenizer_json(dir.path / "tokenizer.json", "a"); });
  refused("vocab.json", [&] {
    write_text(dir.path / "merges.txt", "a b\n");
    (void)probes::ByteLevelBpeTokenizer::from_files(dir.path / "vocab.json", dir.path / "merges.txt");
  });
  refused("config.json", [&] { (void)probes::TransformerModel::load(dir.path); });
}

TEST_CASE("config.json's sizes, fuzzed: read and probed, or refused at once naming the file and the key",
          "[fuzz][hostile]") {
  TempDir dir;
  // Each family's tiny checkpoint and the sizes its config.json declares (and those it may).
  struct Family {
    fs::path folder;
    std::vector<std::string> keys;
  };
  const std::vector<std::string> text_keys{"num_hidden_layers", "num_attention_heads", "hidden_size",
                                           "intermediate_size", "vocab_size",          "max_position_embeddings"};
  const auto with = [](std::vector<std::string> keys, std::initializer_list<std::string> more) {
    keys.insert(keys.end(), more);
    return keys;
  };
  const std::vector<std::string> vision_keys{"num_hidden_layers", "num_attention_heads", "hidden_size",
                                             "intermediate_size", "image_size",          "patch_size",
                                             "num_channels"};
  std::vector<Family> families{
      {dir.path / "bert", with(text_keys, {"type_vocab_size"})},
      {dir.path / "roberta", with(text_keys, {"pad_token_id"})},
      {dir.path / "distilbert", {"n_layers", "n_heads", "dim", "hidden_dim", "vocab_size", "max_position_embeddings"}},
      {dir.path / "gpt2", {"n_layer", "n_head", "n_embd", "n_inner", "vocab_size", "n_positions"}},
      {dir.path / "llama", with(text_keys, {"num_key_value_heads", "head_dim"})},
      {dir.path / "mistral", with(text_keys, {"num_key_value_heads", "head_dim", "sliding_window"})},
      {dir.path / "gemma2", with(text_keys, {"num_key_value_heads", "head_dim", "sliding_window"})},
      {dir.path / "qwen3", with(text_keys, {"num_key_value_heads", "head_dim"})},
      {dir.path / "vit", vision_keys},
      {dir.path / "clip", vision_keys}};
  write_tiny_bert(families[0].folder);
  write_tiny_bert(families[1].folder);
  {
    auto config = json::parse(text_of(families[1].folder / "config.json"));
    config["model_type"] = "roberta";
    config["pad_token_id"] = 1;
    write_config(families[1].folder, config);
  }
  write_tiny_distilbert(families[2].folder);
  write_tiny_gpt2(families[3].folder / "model.safetensors");
  write_tiny_llama(families[4].folder, "llama", 2);
  write_tiny_llama(families[5].folder, "mistral", 2, 3);
  write_tiny_llama(families[6].folder, "gemma2", 2);
  write_tiny_llama(families[7].folder, "qwen3", 2);
  write_tiny_vit(families[8].folder);
  write_tiny_clip_vision(families[9].folder);
  // Small, odd, at 32 bits, past them, at the ends of 64 bits, and not whole numbers.
  const std::vector<std::string> values{"0",
                                        "-1",
                                        "1",
                                        "2",
                                        "3",
                                        "7",
                                        "1000",
                                        "2147483647",
                                        "2147483648",
                                        "1099511627776",
                                        "4611686018427387904",
                                        "9223372036854775806",
                                        "9223372036854775807",
                                        "18446744073709551615",
                                        "-9223372036854775808",
                                        "1e300",
                                        "2.5"};
  const auto start = std::chrono::steady_clock::now();
  int read = 0, refused = 0;
  for (const Family& family : families) {
    const json original = json::parse(text_of(family.folder / "config.json"));
    const std::string config_file = (family.folder / "config.json").string();
    for (const std::string& key : family.keys) {
      for (const std::string& value : values) {
        json config = original;
        config[key] = json::parse(value);
        write_config(family.folder, config);
        INFO(config_file << ": \"" << key << "\" = " << value);
        const auto case_start = std::chrono::steady_clock::now();
        probes::ProbeInput input;
        input.random_length = 4;
        input.random_length_chosen = false;
        try {
          (void)probes::TransformerModel::load(family.folder);
          ++read;
          // What loads either probes or is refused for a reason of its own (Gemma 2's norms are not in a Llama
          // checkpoint), but never runs long.
          try {
            (void)probes::probe_model(family.folder, input, {0}, {0});
          } catch (const theory::InputError&) {
          }
        } catch (const theory::InputError& e) {
          ++refused;
          const std::string message = e.what();
          INFO(message);
          CHECK_THAT(message, Catch::Contains(config_file));
          // A size past 32 bits is named by its key (a small one may be named by what it contradicts: "hidden size 8
          // is not a multiple of the 3 heads").
          const double magnitude = std::fabs(json::parse(value).get<double>());
          if (magnitude > 2147483647) CHECK_THAT(message, Catch::Contains("\"" + key + "\""));
        } catch (const std::exception& e) {
          FAIL_CHECK(typeid(e).name() << ": " << e.what());
        }
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - case_start).count() < 5);
      }
    }
    write_config(family.folder, original);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN(fmt::format("config.json sizes: {} read, {} refused in {:.1f} s", read, refused, seconds));
  CHECK(refused > read);
}
