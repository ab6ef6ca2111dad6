#include <catch2/catch.hpp>

#include "attncheck/probes/live_metrics.hpp"
#include "attncheck/probes/model.hpp"
#include "attncheck/probes/tokenizer.hpp"
#include "attncheck/probes/watch.hpp"
#include "attncheck/records/probe_record.hpp"
#include "attncheck/theory/moments.hpp"
#include "attncheck/theory/softmax.hpp"
#include "records/memory_limit.hpp"
#include "run_command.hpp"
#include "tiny_models.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <tuple>
#include <thread>

using namespace attncheck::probes;
using namespace attncheck::probes::testing;
using attncheck::theory::Index;

TEST_CASE("WordPiece splits words, punctuation and accents as BERT does", "[tokenizer]") {
  TempDir dir;
  write_tiny_bert(dir.path);
  const WordPieceTokenizer lower(dir.path / "vocab.txt", true);
  // [CLS]=2 the=4 cat=5 ##s=9 sat=6 ,=11 on=7 mat=8 .=10 [SEP]=3
  CHECK(lower.encode("The cats sat, on the MAT.") == std::vector<std::int64_t>{2, 4, 5, 9, 6, 11, 7, 4, 8, 10, 3});
  CHECK(lower.encode("  unable\tcafé\n") == std::vector<std::int64_t>{2, 13, 14, 12, 3});
  CHECK(lower.encode("dog") == std::vector<std::int64_t>{2, 1, 3});  // unknown word
  CHECK(lower.encode("cat\x01"
                     "s") == std::vector<std::int64_t>{2, 5, 9, 3});  // control characters dropped
  CHECK(lower.encode("\xe4\xb8\xad"
                     "cat") == std::vector<std::int64_t>{2, 15, 5, 3});  // CJK split off
  CHECK(lower.encode(std::string(101, 'a')) == std::vector<std::int64_t>{2, 1, 3});
  CHECK(lower.encode("") == std::vector<std::int64_t>{2, 3});
  const WordPieceTokenizer cased(dir.path / "vocab.txt", false);
  CHECK(cased.encode("The") == std::vector<std::int64_t>{2, 1, 3});
  CHECK_THROWS_WITH(WordPieceTokenizer(dir.path / "missing.txt", true), Catch::Contains("missing.txt"));
}

TEST_CASE("token files are whitespace-separated integers and anything else is named", "[tokenizer]") {
  TempDir dir;
  std::ofstream(dir.path / "ok.txt") << "1 2\n3\t4\n";
  CHECK(read_token_file(dir.path / "ok.txt") == std::vector<std::int64_t>{1, 2, 3, 4});
  std::ofstream(dir.path / "bad.txt") << "1 2x 3";
  CHECK_THROWS_WITH(read_token_file(dir.path / "bad.txt"), Catch::Contains("'2x' (entry 2)"));
  std::ofstream(dir.path / "empty.txt") << "\n";
  CHECK_THROWS_WITH(read_token_file(dir.path / "empty.txt"), Catch::Contains("no token ids"));
}

TEST_CASE("GPT-2 forward pass: causal rows are probability vectors and metrics match the matrices", "[model]") {
  TempDir dir;
  const TinyShape shape;
  write_tiny_gpt2(dir.path / "model.safetensors", shape);
  const auto model = TransformerModel::load(dir.path / "model.safetensors");
  CHECK(architecture_name(model.config()) == "GPT-2");
  const std::vector<std::int64_t> ids{3, 1, 4, 1, 5, 9, 2, 6};
  const auto layers = model.forward(ids);
  REQUIRE(layers.size() == 2);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto& layer = layers[l];
    CHECK(layer.causal);
    CHECK(layer.inner == Approx(1 / std::sqrt(4.0)));
    for (std::size_t h = 0; h < layer.heads.size(); ++h) {
      const auto& head = layer.heads[h];
      const Matrix& A = head.attention;
      for (Index i = 0; i < A.rows(); ++i) {
        CHECK(A.row(i).sum() == Approx(1.0).epsilon(1e-12));
        for (Index j = i + 1; j < A.cols(); ++j) CHECK(A(i, j) == 0.0);
      }
      const auto m = measure_head(layer, static_cast<int>(l), static_cast<int>(h));
      CHECK(m.N == 8);
      CHECK(m.softmax.value == Approx(A.norm()).epsilon(1e-12));
      CHECK(m.softmax.value <= m.sqrt_n);
      CHECK(m.softmax.grad <= m.grad_tight_bound);
      // S^3 / sqrt(N) over the lower triangle, from the projections directly.
      const Matrix S = layer.inner * head.queries * head.keys.transpose();
      double poly_sq = 0, relu_sq = 0, max_abs = 0;
      for (Index i = 0; i < 8; ++i) {
        for (Index j = 0; j <= i; ++j) {
          poly_sq += std::pow(S(i, j), 6);
          relu_sq += std::pow(std::max(S(i, j), 0.0), 2);
          max_abs = std::max(max_abs, std::abs(S(i, j)));
        }
      }
      CHECK(m.poly3.value == Approx(std::sqrt(poly_sq)).epsilon(1e-12));
      CHECK(m.poly3_scaled.value == Approx(std::sqrt(poly_sq / 8)).epsilon(1e-12));
      CHECK(m.relu_n.value == Approx(std::sqrt(relu_sq) / 8).epsilon(1e-12));
      CHECK(m.score_max_abs == Approx(max_abs).epsilon(1e-14));
      // Projections carry the biases: V = X W_Q + b_Q.
      Matrix V = layer.X * head.W_Q;
      V.rowwise() += head.b_Q.transpose();
      CHECK((V - head.queries).cwiseAbs().maxCoeff() < 1e-12);
    }
  }
}

TEST_CASE("the i.i.d. prediction counts the attended entries: all for BERT, the lower triangle for GPT-2", "[model]") {
  TempDir dir;
  write_tiny_gpt2(dir.path / "gpt2" / "model.safetensors", {}, 3);
  write_tiny_bert(dir.path / "bert", {}, 4);
  const std::vector<std::int64_t> ids{2, 5, 6, 7, 4, 8, 3};
  for (const char* name : {"gpt2", "bert"}) {
    const auto model = TransformerModel::load(dir.path / name);
    const auto layers = model.forward(ids);
    const auto m = measure_head(layers[1], 1, 0);
    const attncheck::theory::GaussianModel iid{m.D, m.d, m.sigma_x, m.sigma_t, m.inner};
    const double n = 7, off = attncheck::theory::offdiagonal_abs_moment(iid, 2),
                 diag = attncheck::theory::diagonal_abs_moment(iid, 2);
    const double pairs = std::string(name) == "gpt2" ? n * (n - 1) / 2 : n * (n - 1);
    CHECK(m.iid_scores_fro == Approx(std::sqrt(pairs * off + n * diag)).epsilon(1e-12));
    const double off3 = attncheck::theory::offdiagonal_abs_moment(iid, 6),
                 diag3 = attncheck::theory::diagonal_abs_moment(iid, 6);
    CHECK(m.iid_poly3_scaled_fro == Approx(std::sqrt((pairs * off3 + n * diag3) / n)).epsilon(1e-12));
    CHECK(m.sigma_x == Approx(std::sqrt(layers[1].X.squaredNorm() / layers[1].X.size())));
  }
}

TEST_CASE("a model trained with x^3/sqrt(N) attention propagates through that map", "[model]") {
  TempDir dir;
  write_tiny_gpt2(dir.path / "soft" / "model.safetensors", {}, 5, "softmax");
  write_tiny_gpt2(dir.path / "poly" / "model.safetensors", {}, 5, "poly3_scaled");
  const std::vector<std::int64_t> ids{1, 2, 3, 4, 5};
  const auto soft = TransformerModel::load(dir.path / "soft").forward(ids);
  const auto poly_model = TransformerModel::load(dir.path / "poly");
  CHECK(poly_model.config().attention_activation == "poly3_scaled");
  const auto poly = poly_model.forward(ids);
  // Layer 0 sees the same input; its map is N^-1/2 S^3 on the lower triangle.
  CHECK((soft[0].X - poly[0].X).cwiseAbs().maxCoeff() == 0.0);
  const auto& head = poly[0].heads[1];
  const Matrix S = poly[0].inner * head.queries * head.keys.transpose();
  for (Index i = 0; i < 5; ++i) {
    for (Index j = 0; j < 5; ++j) {
      const double expected = j <= i ? std::pow(S(i, j), 3) / std::sqrt(5.0) : 0.0;
      CHECK(head.attention(i, j) == Approx(expected).epsilon(1e-12).margin(1e-300));
    }
  }
  // Layer 1's input differs: the trained map, not softmax, carried the signal.
  CHECK((soft[1].X - poly[1].X).cwiseAbs().maxCoeff() > 1e-3);
}

TEST_CASE("bad models and inputs are InputErrors naming the value", "[model]") {
  TempDir dir;
  const TinyShape shape;
  write_tiny_gpt2(dir.path / "model.safetensors", shape);
  const auto model = TransformerModel::load(dir.path);
  const std::vector<std::int64_t> bad_id{1, 20};
  CHECK_THROWS_WITH(model.forward(bad_id), Catch::Contains("token id 20 at position 1"));
  const std::vector<std::int64_t> too_long(17, 1);
  CHECK_THROWS_WITH(model.forward(too_long), Catch::Contains("17 tokens, more than the model's 16 positions"));
  const std::vector<std::int64_t> ids{1, 2};
  CHECK_THROWS_WITH(model.forward(ids, {2}), Catch::Contains("layer 2 does not exist"));
  ProbeInput input;
  input.random_length = 4;
  CHECK_THROWS_WITH(probe_model(dir.path, input, {}, {5}), Catch::Contains("head 5 does not exist"));
  input.kind = ProbeInput::Kind::text;
  CHECK_THROWS_WITH(probe_model(dir.path, input, {}, {}), Catch::Contains("--tokens"));

  SECTION("config problems") {
    write_config(dir.path, {{"model_type", "mamba"}});
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("model_type 'mamba' is not supported"));
    // Llama's family read beside a checkpoint of its layout: the sizes agree with the tensors, the keys under test
    // do not.
    const fs::path decoder = dir.path / "decoder";
    write_tiny_llama(decoder, "llama", 2);
    write_config(decoder, {{"model_type", "llama"}});
    CHECK_THROWS_WITH(TransformerModel::load(decoder), Catch::Contains("config.json: no \"hidden_size\""));
    const nlohmann::json llama = {{"model_type", "llama"},    {"hidden_size", 16}, {"num_attention_heads", 4},
                                  {"num_key_value_heads", 3}, {"head_dim", 6},     {"num_hidden_layers", 1},
                                  {"intermediate_size", 24},  {"vocab_size", 40},  {"max_position_embeddings", 16}};
    write_config(decoder, llama);
    CHECK_THROWS_WITH(TransformerModel::load(decoder), Catch::Contains("4 query heads cannot share 3 key/value heads"));
    auto scaled = llama;
    scaled["num_key_value_heads"] = 2;
    scaled["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
    write_config(decoder, scaled);
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("rope_scaling") && Catch::Contains("not supported"));
    auto gelu = llama;
    gelu["num_key_value_heads"] = 2;
    gelu["hidden_act"] = "gelu";
    write_config(decoder, gelu);
    CHECK_THROWS_WITH(TransformerModel::load(decoder), Catch::Contains("hidden_act 'gelu' is not supported for Llama"));
    // Llama's descendants: what each reads beyond Llama's keys is refused naming the file and the key.
    auto family = llama;
    family["num_key_value_heads"] = 2;
    family["model_type"] = "mistral";
    for (const auto& window : {nlohmann::json(0), nlohmann::json("five")}) {
      family["sliding_window"] = window;
      write_config(decoder, family);
      CHECK_THROWS_WITH(TransformerModel::load(decoder),
                        Catch::Contains("config.json") && Catch::Contains("\"sliding_window\" is"));
    }
    family["model_type"] = "qwen2";
    family["use_sliding_window"] = true;
    write_config(decoder, family);
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("config.json") && Catch::Contains("\"use_sliding_window\" is true"));
    family.erase("use_sliding_window");
    family["model_type"] = "gemma";
    family["hidden_activation"] = "relu";
    write_config(decoder, family);
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("config.json") &&
                          Catch::Contains("hidden_activation 'relu' is not supported for Gemma"));
    family.erase("hidden_activation");
    family.erase("sliding_window");
    family["model_type"] = "qwen3";
    family["use_sliding_window"] = true;
    write_config(decoder, family);
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("config.json") && Catch::Contains("\"use_sliding_window\" is true"));
    family.erase("use_sliding_window");
    // Gemma 2 and 3: their attention's keys, each refused naming the file, the key and the value.
    for (const char* type : {"gemma2", "gemma3_text"}) {
      family["model_type"] = type;
      for (const auto& [key, value, fragment] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
               {"attn_logit_softcapping", -50, "\"attn_logit_softcapping\" is -50"},
               {"query_pre_attn_scalar", 0, "\"query_pre_attn_scalar\" is 0"},
               {"layer_types", nlohmann::json::array({"full_attention", "full_attention"}),
                "not a list of the 1 layers'"},
               {"layer_types", nlohmann::json::array({"local"}), "\"layer_types\"[0] is \"local\""}}) {
        auto bad = family;
        bad[key] = value;
        write_config(decoder, bad);
        CHECK_THROWS_WITH(TransformerModel::load(decoder), Catch::Contains("config.json") && Catch::Contains(fragment));
      }
    }
    family["model_type"] = "gemma3_text";
    family["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
    write_config(decoder, family);
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("rope_scaling") && Catch::Contains("not supported (linear only)"));
    family["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -4}};
    write_config(decoder, family);
    CHECK_THROWS_WITH(TransformerModel::load(decoder), Catch::Contains("\"rope_scaling.factor\" is -4"));
    family.erase("rope_scaling");
    write_config(decoder, {{"model_type", "gemma3"}, {"vision_config", nlohmann::json::object()}});
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("a \"gemma3\" configuration without a \"text_config\" object"));
    family["attention_activation"] = "poly3";
    family["model_type"] = "gemma2";
    write_config(decoder, family);
    CHECK_THROWS_WITH(TransformerModel::load(decoder),
                      Catch::Contains("attn_logit_softcapping caps a softmax's logits"));
    family.erase("attention_activation");
    write_config(dir.path, {{"model_type", "gpt2"},
                            {"n_embd", 8},
                            {"n_head", 3},
                            {"n_layer", 2},
                            {"vocab_size", 20},
                            {"n_positions", 16}});
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("not a multiple of the 3 heads"));
    write_config(dir.path, {{"model_type", "gpt2"}, {"n_embd", 8}, {"n_head", 2}, {"n_layer", "two"}});
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("\"n_layer\" is \"two\""));
    write_config(dir.path, {{"model_type", "gpt2"},
                            {"n_embd", 8},
                            {"n_head", 2},
                            {"n_layer", 2},
                            {"vocab_size", 20},
                            {"n_positions", 16},
                            {"attention_activation", "cubic"}});
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("attention_activation 'cubic'"));
    // Values of the wrong sign or type are refused naming the file and key, never ignored or truncated: once
    // n_inner -5 was read as the default, and a negative epsilon surfaced as "NaN logit at row 0".
    const nlohmann::json gpt2 = {{"model_type", "gpt2"}, {"n_embd", 8},      {"n_head", 2},
                                 {"n_layer", 2},         {"vocab_size", 20}, {"n_positions", 16}};
    for (const auto& [key, value, fragment] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
             {"n_inner", -5, "\"n_inner\" is -5, not a positive integer"},
             {"n_inner", 1.5, "\"n_inner\" is 1.5, not a positive integer"},
             {"layer_norm_epsilon", -1e-5, "\"layer_norm_epsilon\" is -1e-05: it must be a finite number >= 0"},
             {"layer_norm_epsilon", "small", "\"layer_norm_epsilon\" is \"small\", not a number"},
             {"scale_attn_weights", 1, "\"scale_attn_weights\" is 1, not true or false"},
             {"activation_function", 5, "\"activation_function\" is 5, not text"},
             {"model_type", nlohmann::json::array({"gpt2"}), "\"model_type\" is [\"gpt2\"], not text"}}) {
      auto bad = gpt2;
      bad[key] = value;
      write_config(dir.path, bad);
      CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("config.json: " + fragment));
    }
    auto bert = nlohmann::json{{"model_type", "bert"},          {"hidden_size", 8},       {"num_attention_heads", 2},
                               {"num_hidden_layers", 1},        {"intermediate_size", 8}, {"vocab_size", 20},
                               {"max_position_embeddings", 16}, {"layer_norm_eps", -1}};
    write_config(dir.path, bert);
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("\"layer_norm_eps\" is -1"));
    bert["layer_norm_eps"] = 1e-12;
    bert["type_vocab_size"] = -2;
    write_config(dir.path, bert);
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("\"type_vocab_size\" is -2"));
    // A NUL or an escape sequence in a value is shown, escaped, not cut or sent to the terminal.
    auto named = gpt2;
    named["attention_activation"] = std::string("cub\0ic\x1b]0;title\x07", 16);
    write_config(dir.path, named);
    CHECK_THROWS_WITH(TransformerModel::load(dir.path),
                      Catch::Contains("attention_activation 'cub\\x00ic\\x1b]0;title\\x07' is not one of"));
    std::ofstream(dir.path / "config.json") << "{not json";
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("config.json line 1 column 3: malformed JSON"));
    std::filesystem::remove(dir.path / "config.json");
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("config.json"));
  }
  SECTION("a model with more layers than tensors is refused as it is read, naming the key") {
    write_config(dir.path, {{"model_type", "gpt2"},
                            {"n_embd", 8},
                            {"n_head", 2},
                            {"n_layer", 3},
                            {"vocab_size", 20},
                            {"n_positions", 16}});
    CHECK_THROWS_WITH(TransformerModel::load(dir.path),
                      Catch::Contains("config.json: \"n_layer\" is 3, but the checkpoint holds layers 0..1 only") &&
                          Catch::Contains("tensor 'h.1."));
  }
  SECTION("a model whose tensors have the wrong shape is refused as it is read, naming the key and the tensor") {
    write_config(dir.path, {{"model_type", "gpt2"},
                            {"n_embd", 4},
                            {"n_head", 2},
                            {"n_layer", 2},
                            {"vocab_size", 20},
                            {"n_positions", 16}});
    CHECK_THROWS_WITH(TransformerModel::load(dir.path),
                      Catch::Contains("config.json: \"n_embd\" is 4, but tensor 'wte.weight'") &&
                          Catch::Contains("has shape [20, 8]: its extent 1 should be 4"));
  }
}

TEST_CASE("RoBERTa, DistilBERT and CLIP configurations are refused naming the file and the key", "[model]") {
  TempDir dir;
  // Checkpoints of each layout, so that the sizes agree with the tensors and the keys under test decide.
  const fs::path encoder = dir.path / "encoder", distil = dir.path / "distilbert", clip = dir.path / "clip";
  write_tiny_bert(encoder, {.positions = 20});
  write_tiny_distilbert(distil);
  write_tiny_clip_vision(clip);
  fs::path folder = encoder;
  const auto refused = [&](const nlohmann::json& config, const std::string& fragment) {
    write_config(folder, config);
    CHECK_THROWS_WITH(TransformerModel::load(folder), Catch::Contains("config.json: " + fragment));
  };
  const nlohmann::json roberta = {{"model_type", "roberta"},       {"hidden_size", 8},
                                  {"num_attention_heads", 2},      {"num_hidden_layers", 1},
                                  {"intermediate_size", 16},       {"vocab_size", 20},
                                  {"max_position_embeddings", 20}, {"pad_token_id", 1}};
  // Positions past the padding index: 20 - 1 - 1 of them.
  write_config(encoder, roberta);
  const std::vector<std::int64_t> too_long(19, 0);
  CHECK_THROWS_WITH(TransformerModel::load(encoder).forward(too_long),
                    Catch::Contains("19 tokens, more than the model's 18 positions"));
  auto bad = roberta;
  bad["pad_token_id"] = 19;
  refused(bad, "\"pad_token_id\" is 19: RoBERTa's positions start past it, so it must lie in 0 .. 18");
  bad["pad_token_id"] = -1;
  refused(bad, "\"pad_token_id\" is -1");
  bad["pad_token_id"] = "one";
  refused(bad, "\"pad_token_id\" is \"one\", not a whole number");
  bad = roberta;
  bad["model_type"] = "xlm-roberta";
  bad["position_embedding_type"] = "relative_key";
  refused(bad, "position_embedding_type 'relative_key' is not supported");

  folder = distil;
  const nlohmann::json distilbert = {{"model_type", "distilbert"},
                                     {"dim", 8},
                                     {"n_heads", 2},
                                     {"n_layers", 1},
                                     {"hidden_dim", 16},
                                     {"vocab_size", 20},
                                     {"max_position_embeddings", 16}};
  bad = distilbert;
  bad["n_heads"] = 3;
  refused(bad, "hidden size 8 is not a multiple of the 3 heads");
  bad = distilbert;
  bad.erase("hidden_dim");
  refused(bad, "no \"hidden_dim\"");
  bad = distilbert;
  bad["sinusoidal_pos_embds"] = "yes";
  refused(bad, "\"sinusoidal_pos_embds\" is \"yes\", not true or false");

  folder = clip;
  refused({{"model_type", "clip"}, {"vision_config", {{"patch_size", -8}}}},
          "\"vision_config.patch_size\" is -8, not a positive integer");
  refused({{"model_type", "clip"}, {"vision_config", {{"patch_size", 64}, {"image_size", 32}}}},
          "patch_size 64 is larger than image_size 32");
  refused({{"model_type", "clip"}, {"vision_config", {{"layer_norm_eps", -1}}}},
          "\"vision_config.layer_norm_eps\" is -1");
  refused({{"model_type", "clip"}, {"vision_config", {{"hidden_act", 5}}}},
          "\"vision_config.hidden_act\" is 5, not text");
  refused({{"model_type", "clip"}, {"vision_config", 3}}, "\"vision_config\" is 3, not an object");
  refused({{"model_type", "clip_vision_model"}, {"num_attention_heads", 1.5}},
          "\"num_attention_heads\" is 1.5, not a whole number");
}

namespace {

// A tiny model of each layout, its config.json with `key` set to `value`.
void with_config_value(const fs::path& folder, const std::string& key, const nlohmann::json& value) {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(folder / "config.json"));
  config[key] = value;
  write_config(folder, config);
}

// `attncheck probe FOLDER ARGUMENTS` refused at once: exit 2, the message naming config.json and every fragment.
void refused_at_once(const fs::path& folder, const std::string& arguments, const std::vector<std::string>& fragments) {
  const auto start = std::chrono::steady_clock::now();
  const auto run = attncheck::testing::run_attncheck("probe " + folder.string() + " " + arguments);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(folder.string() << ": " << run.err);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains((folder / "config.json").string() + ": "));
  for (const std::string& fragment : fragments) CHECK_THAT(run.err, Catch::Contains(fragment));
  // Nothing proportional to the declared sizes runs before they are checked: once minutes of CPU, or out of memory.
  CHECK(seconds < 10);
}

}  // namespace

TEST_CASE("a declared layer count is checked against the layers' tensors before any work, naming the key and file",
          "[model][errors]") {
  TempDir dir;
  const fs::path bert = dir.path / "bert", gpt2 = dir.path / "gpt2", distilbert = dir.path / "distilbert",
                 llama = dir.path / "llama", gemma2 = dir.path / "gemma2", vit = dir.path / "vit",
                 clip = dir.path / "clip";
  write_tiny_bert(bert);
  write_tiny_gpt2(gpt2 / "model.safetensors");
  write_tiny_distilbert(distilbert);
  write_tiny_llama(llama, "llama", 2);
  write_tiny_llama(gemma2, "gemma2", 2);
  write_tiny_vit(vit);
  write_tiny_clip_vision(clip);
  // Every layout's own checkpoint probes: the check refuses nothing the weights bear out.
  for (const fs::path& folder : {bert, gpt2, distilbert, llama, vit, clip}) {
    const auto run = attncheck::testing::run_attncheck("probe " + folder.string() + " --random --length 4 --layers 0");
    INFO(folder.string() << ": " << run.err);
    CHECK(run.exit_code == 0);
  }
  // Weights for 2 layers (ViT's 1): 2^40 and 2^62 declared are refused as sizes no model declares; 2^31 - 1 and 3
  // against the layers the checkpoint holds, naming its last layer's tensor. Gemma 2 built a window flag per layer
  // (out of memory), the others counted the layers (minutes), even under --layers 0.
  const std::vector<std::tuple<fs::path, std::string, std::string>> models{
      {bert, "num_hidden_layers", "encoder.layer.1."},  {gpt2, "n_layer", "h.1."},
      {distilbert, "n_layers", "transformer.layer.1."}, {llama, "num_hidden_layers", "model.layers.1."},
      {gemma2, "num_hidden_layers", "model.layers.1."}, {vit, "num_hidden_layers", "encoder.layer.0."},
      {clip, "num_hidden_layers", "encoder.layers.1."}};
  for (const auto& [folder, key, last_layer] : models) {
    const nlohmann::json original = nlohmann::json::parse(std::ifstream(folder / "config.json"));
    for (const std::int64_t huge : {std::int64_t{1} << 40, std::int64_t{1} << 62}) {
      with_config_value(folder, key, huge);
      refused_at_once(folder, "--random --layers 0",
                      {fmt::format("\"{}\" is {}, more than the largest size a model declares", key, huge)});
    }
    for (const std::int64_t beyond : {std::int64_t{INT32_MAX}, std::int64_t{3}}) {
      with_config_value(folder, key, beyond);
      refused_at_once(folder, "--random --layers 0",
                      {fmt::format("\"{}\" is {}, but the checkpoint holds layers", key, beyond),
                       "tensor '" + last_layer, (folder / "model.safetensors").string()});
    }
    write_config(folder, original);
  }
}

TEST_CASE("RoBERTa's pad_token_id near 2^63 is refused without overflow, naming the key and the file",
          "[model][errors]") {
  TempDir dir;
  write_tiny_bert(dir.path, {.positions = 20});
  write_config(dir.path, {{"model_type", "roberta"},
                          {"hidden_size", 8},
                          {"num_attention_heads", 2},
                          {"num_hidden_layers", 2},
                          {"intermediate_size", 16},
                          {"vocab_size", 20},
                          {"max_position_embeddings", 20},
                          {"pad_token_id", 1}});
  const auto ok = attncheck::testing::run_attncheck("probe " + dir.path.string() + " --random --layers 0");
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Catch::Contains("at most 18 tokens"));
  // pad_token_id + 1 overflowed a signed sum there, and the probe printed a negative count of positions.
  for (const std::int64_t pad : {INT64_MAX, INT64_MAX - 1, std::int64_t{1} << 62, std::int64_t{19}}) {
    with_config_value(dir.path, "pad_token_id", pad);
    refused_at_once(dir.path, "--random",
                    {fmt::format("\"pad_token_id\" is {}: RoBERTa's positions start past it", pad)});
  }
  // The positions past the padding index must lie in the position embeddings' rows.
  with_config_value(dir.path, "pad_token_id", 1);
  with_config_value(dir.path, "max_position_embeddings", 514);
  refused_at_once(dir.path, "--random",
                  {"\"max_position_embeddings\" is 514, but tensor 'embeddings.position_embeddings.weight'",
                   "has shape [20, 8]: its extent 0 should be at least 514"});
}

TEST_CASE("an image_size beyond the position embeddings' rows is refused before a probe, naming the keys and the file",
          "[model][errors]") {
  TempDir dir;
  const fs::path vit = dir.path / "vit", clip = dir.path / "clip";
  write_tiny_vit(vit);
  write_tiny_clip_vision(clip);
  // 16 x 16 pixels in 8 x 8 patches: 5 position rows. Under --random the probe once ran at its own N regardless.
  for (const auto& [folder, tensor] : {std::pair{vit, std::string("embeddings.position_embeddings")},
                                       std::pair{clip, std::string("embeddings.position_embedding.weight")}}) {
    with_config_value(folder, "image_size", 1 << 20);
    refused_at_once(folder, "--random",
                    {"\"image_size\" 1048576 in patches of \"patch_size\" 8 is 1 + 131072 x 131072 positions",
                     "tensor '" + tensor + "'", "should be at least 17179869185"});
    with_config_value(folder, "image_size", 16);
    with_config_value(folder, "patch_size", 1);
    refused_at_once(folder, "--random", {"\"patch_size\" 1 is 1 + 16 x 16 positions"});
    with_config_value(folder, "patch_size", INT64_MAX);
    refused_at_once(folder, "--random", {"\"patch_size\" is 9223372036854775807"});
  }
  // A whole CLIP's config names the tower's keys.
  write_config(clip, {{"model_type", "clip"},
                      {"vision_config",
                       {{"hidden_size", 8},
                        {"num_attention_heads", 2},
                        {"num_hidden_layers", 2},
                        {"intermediate_size", 16},
                        {"image_size", 64},
                        {"patch_size", 8}}}});
  refused_at_once(clip, "--random", {"\"vision_config.image_size\" 64 in patches of \"vision_config.patch_size\" 8"});
}

TEST_CASE("random input uses the embeddings' own scale and is reproducible by seed", "[model]") {
  TempDir dir;
  write_tiny_bert(dir.path);
  ProbeInput input;
  input.random_length = 6;
  input.seed = 11;
  const auto a = probe_model(dir.path, input, {1}, {0});
  const auto b = probe_model(dir.path, input, {1}, {0});
  REQUIRE(a.heads.size() == 1);
  CHECK(a.heads[0].layer == 1);
  CHECK(a.heads[0].N == 6);
  CHECK(a.heads[0].softmax.value == b.heads[0].softmax.value);
  CHECK(a.random_sigma == Approx(0.5).epsilon(0.1));  // the word embeddings were drawn with sd 0.5
  input.seed = 12;
  CHECK(probe_model(dir.path, input, {1}, {0}).heads[0].softmax.value != a.heads[0].softmax.value);
  const auto json = to_json(a.heads[0]);
  for (const char* key : {"layer", "head", "N", "softmax_fro", "grad_fro", "dWq_fro", "dWk_fro", "poly3_scaled_fro",
                          "poly3_fro", "relu_n_fro", "iid_scores_fro"}) {
    CHECK(json.contains(key));
  }
  CHECK(json["layer"].is_number_integer());
  CHECK(csv_columns().size() == csv_values(a.heads[0]).size());
}

TEST_CASE("a checkpoint truncated by another process after it was opened is refused naming it, not a crash",
          "[model][errors]") {
  TempDir dir;
  TinyShape shape;
  shape.layers = 4;
  shape.hidden = 32;
  write_tiny_bert(dir.path, shape);
  const fs::path weights = dir.path / "model.safetensors";
  const auto model = TransformerModel::load(dir.path);  // header read; the weights are read layer by layer
  const auto full = fs::file_size(weights);
  // Another process cuts the file to a third while this one holds it open (a mapped read would die of SIGBUS).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(::truncate(weights.c_str(), static_cast<off_t>(full / 3)) == 0 ? 0 : 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const std::vector<std::int64_t> ids{2, 4, 5, 3};
  CHECK_THROWS_WITH(model.forward(ids), Catch::Contains(weights.string()) && Catch::Contains("truncated"));
}

TEST_CASE("a config.json, vocabulary or index that is not a regular file is refused naming it", "[model][errors]") {
  TempDir dir;
  write_tiny_bert(dir.path);
  fs::remove(dir.path / "vocab.txt");
  REQUIRE(::mkfifo((dir.path / "vocab.txt").c_str(), 0600) == 0);
  ProbeInput input;
  input.kind = ProbeInput::Kind::text;
  input.text = "the cat";
  CHECK_THROWS_WITH(probe_model(dir.path, input, {}, {}), Catch::Contains("vocab.txt: is a FIFO"));
  fs::remove(dir.path / "config.json");
  fs::create_directories(dir.path / "config.json");
  CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("config.json: is a folder"));
  fs::create_directories(dir.path / "model.safetensors.index.json");
  CHECK_THROWS_WITH(Checkpoint::open(dir.path), Catch::Contains("model.safetensors.index.json: is a folder"));
}

TEST_CASE("values that overflow are flagged, never printed as plain numbers: the bounds still hold", "[model]") {
  TempDir dir;
  // Layer norm gains of 1e30 (near F32's limit) give finite scores near 1e60, whose cubes' squares overflow.
  write_tiny_gpt2(dir.path / "model.safetensors", {}, 31, "softmax", 1e30);
  ProbeInput input;
  input.random_length = 6;
  const auto result = probe_model(dir.path, input, {0}, {0});
  REQUIRE(result.heads.size() == 1);
  const HeadMetrics& m = result.heads[0];
  CHECK(std::isinf(m.poly3.value));
  CHECK(std::isfinite(m.softmax.value));
  CHECK(within_theorem_bounds(m));
  // The log line has null there, which the report reads as a missing optional value.
  const auto line = nlohmann::json::parse(checkpoint_lines("step-1.safetensors", result));
  CHECK(line["poly3_fro"].is_null());
  const auto records = attncheck::records::parse_probe_log(line.dump() + "\n", "log.jsonl");
  CHECK_FALSE(records[0].value(attncheck::records::ProbeQuantity::poly3).has_value());

  const auto table = attncheck::testing::run_attncheck("probe " + dir.path.string() + " --random --length 6");
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("inf!"));
  CHECK_THAT(table.out, !Catch::Contains(" inf ") && !Catch::Contains(" nan "));
  CHECK_THAT(table.err, Catch::Contains("not finite (marked inf! or nan!)"));
  const auto csv = attncheck::testing::run_attncheck("probe " + dir.path.string() + " --random --length 6 --csv");
  CHECK(csv.exit_code == 0);
  CHECK_THAT(csv.out, !Catch::Contains("inf") && Catch::Contains(",,"));
  CHECK_THAT(csv.err, Catch::Contains("left empty"));
  const auto json = attncheck::testing::run_attncheck("probe " + dir.path.string() + " --random --length 6 --json");
  CHECK(json.exit_code == 0);
  CHECK(nlohmann::json::parse(json.out)["heads"][0]["poly3_fro"].is_null());
  CHECK_THAT(json.err, Catch::Contains("written as null"));
}

TEST_CASE("attncheck probe survives its checkpoint being cut short while it reads it: exit 0 or 2, never a signal",
          "[model][errors]") {
  TempDir dir;
  TinyShape shape;  // 24 layers read one after the other: about 13 MB of F32 weights
  shape.layers = 24;
  shape.heads = 4;
  shape.hidden = 128;
  write_tiny_bert(dir.path, shape);
  const fs::path weights = dir.path / "model.safetensors";
  const fs::path out = dir.path / "out.txt", err = dir.path / "err.txt";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::freopen(out.c_str(), "w", stdout);
    ::freopen(err.c_str(), "w", stderr);
    ::execl(ATTNCHECK_BINARY, ATTNCHECK_BINARY, "probe", dir.path.c_str(), "--random", "--length", "16",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Synchronize on the probe holding the file open (its header read, its layers not yet), then cut it to a tenth.
  const auto opened = [&] {
    std::error_code ignored;
    for (const auto& fd : fs::directory_iterator(fmt::format("/proc/{}/fd", child), ignored)) {
      if (fs::read_symlink(fd.path(), ignored) == weights) return true;
    }
    return false;
  };
  bool seen = false;
  for (int k = 0; k < 30000 && !seen; ++k) {
    seen = opened();
    if (!seen) {
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) FAIL("the probe ended before it opened the checkpoint");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  REQUIRE(seen);
  REQUIRE(::truncate(weights.c_str(), static_cast<off_t>(fs::file_size(weights) / 10)) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  std::ifstream in(err);
  const std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(message);
  REQUIRE(WIFEXITED(status));  // not killed by SIGBUS, as a mapped read would be
  const int code = WEXITSTATUS(status);
  CHECK((code == 0 || code == 2));
  // Cut while reading weights: "truncated"; cut between opening the file and reading its size (the fd is
  // already visible): the header's offsets "run beyond" the data. Either names the file.
  if (code == 2) {
    CHECK_THAT(message,
               Catch::Contains(weights.string()) && (Catch::Contains("truncated") || Catch::Contains("run beyond")));
  }
}

TEST_CASE("a layer split from weights given as maps of rows measures what the model's forward pass measures",
          "[model]") {
  TempDir dir;
  write_tiny_gpt2(dir.path / "model.safetensors", {}, 6);
  const std::vector<std::int64_t> ids{4, 2, 7, 1, 3, 6};
  const auto layers = TransformerModel::load(dir.path / "model.safetensors").forward(ids);
  const LayerInputs& layer = layers[1];
  const auto heads = static_cast<int>(layer.heads.size());
  const Index d = layer.heads[0].W_Q.cols();
  Matrix W_Q(layer.X.cols(), heads * d), W_K(layer.X.cols(), heads * d);
  Vector b_Q(heads * d), b_K(heads * d);
  for (int h = 0; h < heads; ++h) {
    W_Q.middleCols(h * d, d) = layer.heads[h].W_Q;
    W_K.middleCols(h * d, d) = layer.heads[h].W_K;
    b_Q.segment(h * d, d) = layer.heads[h].b_Q;
    b_K.segment(h * d, d) = layer.heads[h].b_K;
  }
  const LayerInputs split = split_heads(layer.X, W_Q, W_K, b_Q, b_K, heads, layer.inner, true);
  for (int h = 0; h < heads; ++h) {
    const auto from_model = to_json(measure_head(layer, 1, h)), from_split = to_json(measure_head(split, 1, h));
    for (const auto& [key, value] : from_model.items()) {
      INFO(key);
      if (value.is_boolean()) {
        CHECK(from_split[key] == value);
      } else {
        CHECK(from_split[key].get<double>() == Approx(value.get<double>()).epsilon(1e-13).margin(1e-300));
      }
    }
  }
  // The causal mask written out gives the same numbers; the i.i.d. model counts the same entries.
  LayerInputs masked = split;
  masked.attended = attncheck::theory::AttendedMask::Constant(6, 6, false);
  for (Index i = 0; i < 6; ++i) masked.attended->row(i).head(i + 1) = true;
  CHECK(to_json(measure_head(masked, 1, 0)) == to_json(measure_head(split, 1, 0)));

  CHECK_THROWS_WITH(split_heads(layer.X, W_Q, W_K, b_Q, b_K, 3, 1.0, false),
                    Catch::Contains("w_q has 8 columns, not a positive multiple of heads = 3"));
  CHECK_THROWS_WITH(split_heads(layer.X, W_Q, W_K, Vector::Zero(3), b_K, heads, 1.0, false),
                    Catch::Contains("b_q has 3 entries, w_q 8 columns"));
}

TEST_CASE("a head measured from its scores alone has the score norms of the full measurement and no weight norms",
          "[model]") {
  TempDir dir;
  write_tiny_bert(dir.path, {}, 8);
  const std::vector<std::int64_t> ids{2, 5, 6, 7, 4, 3};
  const auto layers = TransformerModel::load(dir.path).forward(ids);
  LayerInputs layer = layers[0];
  // Padding of the last key: every query ignores it.
  layer.attended = attncheck::theory::AttendedMask::Constant(6, 6, true);
  layer.attended->col(5) = false;
  const auto& head = layer.heads[1];
  const auto full = to_json(measure_head(layer, 0, 1));
  const HeadMetrics from_scores =
      measure_scores(layer.inner * head.queries * head.keys.transpose(), 0, 1, false, layer.attended);
  const auto scores_only = to_json(from_scores);
  for (const char* key :
       {"softmax_fro", "grad_fro", "poly3_scaled_fro", "poly3_scaled_grad_fro", "poly3_fro", "relu_n_fro", "score_mean",
        "score_std", "score_max_abs", "scores_fro", "sqrt_N", "softmax_entropy"}) {
    INFO(key);
    CHECK(scores_only[key].get<double>() == Approx(full[key].get<double>()).epsilon(1e-13));
  }
  for (const char* key : {"dWq_fro", "dWk_fro", "poly3_dWq_fro", "D", "d", "inner", "sigma_x", "iid_scores_fro"}) {
    CHECK_FALSE(scores_only.contains(key));
  }
  // The entropy is -sum a log a of the attention rows, the padded key left out.
  Matrix logits = layer.inner * head.queries * head.keys.transpose();
  logits.col(5).setConstant(-std::numeric_limits<double>::infinity());
  const Matrix attention = attncheck::theory::row_softmax(logits);
  double entropy = 0;
  for (Index i = 0; i < 6; ++i) {
    for (Index j = 0; j < 5; ++j) entropy -= attention(i, j) * std::log(attention(i, j)) / 6;
  }
  CHECK(from_scores.softmax_entropy == Approx(entropy).epsilon(1e-13));
  CHECK(full["softmax_entropy"].get<double>() <= std::log(5.0));
  // The padded key really is out: with it, softmax's norm differs.
  CHECK(measure_scores(layer.inner * head.queries * head.keys.transpose(), 0, 1, false).softmax.value !=
        Approx(from_scores.softmax.value).epsilon(1e-6));
  CHECK_THROWS_WITH(measure_scores(Matrix::Ones(2, 3), 0, 0, false), Catch::Contains("the scores are 2x3"));

  // What-ifs on the scores alone: N from the scores, d given by the caller; without d, an expression using it is
  // refused, not evaluated with a made-up d.
  const std::vector<attncheck::theory::PhiExpression> what_if{attncheck::theory::PhiExpression::parse("x^3/sqrt(N)",
                                                                                                      "what_if"),
                                                              attncheck::theory::PhiExpression::parse("tanh(x)/d",
                                                                                                      "what_if")};
  const auto with_weights = measure_head(layer, 0, 1, false, 1, what_if);
  const auto scores_what_if = measure_scores(layer.inner * head.queries * head.keys.transpose(), 0, 1, false,
                                             layer.attended, what_if, head.queries.cols());
  REQUIRE(scores_what_if.what_if.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(scores_what_if.what_if[k].first == with_weights.what_if[k].first);
    CHECK(scores_what_if.what_if[k].second.value == Approx(with_weights.what_if[k].second.value).epsilon(1e-13));
    CHECK(scores_what_if.what_if[k].second.grad == Approx(with_weights.what_if[k].second.grad).epsilon(1e-13));
  }
  CHECK_THROWS_WITH(measure_scores(layer.inner * head.queries * head.keys.transpose(), 0, 1, false, layer.attended,
                                   what_if),
                    Catch::Contains("what-if 'tanh(x)/d' uses d, the head size"));
}

TEST_CASE("the cross-normalization what-if reads the forward pass's values, with split heads and masks alike",
          "[model][cross_norm]") {
  TempDir dir;
  write_tiny_gpt2(dir.path / "model.safetensors", {}, 6);
  const auto model = TransformerModel::load(dir.path / "model.safetensors");
  const std::vector<std::int64_t> ids{4, 2, 7, 1, 3, 6};
  const auto layers = model.forward(ids);
  const LayerInputs& layer = layers[1];
  const auto heads = static_cast<int>(layer.heads.size());
  const Index D = layer.X.cols(), d = layer.heads[0].W_Q.cols();
  const Matrix c_attn = model.checkpoint().matrix(model.config().tensor_prefix + "h.1.attn.c_attn.weight", D, 3 * D);
  const Vector c_attn_b = model.checkpoint().vector(model.config().tensor_prefix + "h.1.attn.c_attn.bias", 3 * D);
  const LayerInputs split =
      split_heads(layer.X, c_attn.leftCols(D), c_attn.middleCols(D, D), c_attn_b.head(D), c_attn_b.segment(D, D), heads,
                  layer.inner, true, c_attn.rightCols(D), c_attn_b.tail(D));
  for (int h = 0; h < heads; ++h) {
    const HeadMetrics m = measure_head(layer, 1, h, true);
    REQUIRE(m.cross_norm.size() == std::size(kCrossNormMixes));
    CHECK(m.d_v == d);
    // Mix alpha 0 is the model's own output: its softmax attention times its values.
    CHECK(m.cross_norm[0].mix == 0);
    CHECK(m.cross_norm[0].output_fro ==
          Approx((layer.heads[h].attention * layer.heads[h].values).norm()).epsilon(1e-12));
    // dO/dV = A (x) I at mix alpha 0, so its norm is sqrt(d_v) ||A||_F.
    CHECK(m.cross_norm[0].grad_values_fro ==
          Approx(std::sqrt(static_cast<double>(d)) * m.softmax.value).epsilon(1e-12));
    CHECK(m.cross_norm_output_bound == Approx(std::sqrt(6.0 * static_cast<double>(d))).epsilon(1e-15));
    CHECK(within_cross_norm_bounds(m));
    const auto from_model = to_json(m), from_split = to_json(measure_head(split, 1, h, true));
    for (const char* key : {"d_v", "out_fro_mix0", "dV_fro_mix0", "out_fro_mix0_5", "dV_fro_mix0_5", "out_fro_mix1",
                            "dV_fro_mix1", "cross_norm_out_bound", "cross_norm_dV_bound"}) {
      INFO(key);
      REQUIRE(from_model.contains(key));
      CHECK(from_split[key].get<double>() == Approx(from_model[key].get<double>()).epsilon(1e-13));
    }
    // Without --cross-norm the JSON keeps its usual keys only.
    CHECK_FALSE(to_json(measure_head(layer, 1, h)).contains("out_fro_mix1"));
  }
  // The causal mask written out gives the same what-if.
  LayerInputs masked = split;
  masked.attended = attncheck::theory::AttendedMask::Constant(6, 6, false);
  for (Index i = 0; i < 6; ++i) masked.attended->row(i).head(i + 1) = true;
  CHECK(to_json(measure_head(masked, 1, 0, true)) == to_json(measure_head(split, 1, 0, true)));
  // The column count follows the what-if; a head without values cannot have one.
  CHECK(csv_columns(true).size() == csv_values(measure_head(layer, 1, 0, true)).size());
  CHECK(csv_columns().size() == csv_values(measure_head(layer, 1, 0)).size());
  const LayerInputs no_values = split_heads(layer.X, c_attn.leftCols(D), c_attn.middleCols(D, D), c_attn_b.head(D),
                                            c_attn_b.segment(D, D), heads, layer.inner, true);
  CHECK_THROWS_WITH(measure_head(no_values, 1, 0, true), Catch::Contains("value projections are unknown"));
  CHECK_THROWS_WITH(split_heads(layer.X, c_attn.leftCols(D), c_attn.middleCols(D, D), c_attn_b.head(D),
                                c_attn_b.segment(D, D), heads, layer.inner, true, c_attn.rightCols(D).leftCols(3)),
                    Catch::Contains("w_v is 8x3"));
}

namespace {
// One small model of each attention the streamed and mixed-precision paths treat apart, each in its own folder under
// `root`: gpt2 (learned positions, causal), bert (bidirectional), llama (rotary, grouped keys), mistral (a sliding
// window of 5) and qwen3 (query/key norms).
void write_tiny_family_models(const fs::path& root) {
  write_tiny_gpt2(root / "gpt2" / "model.safetensors", {.layers = 2, .heads = 2, .hidden = 8, .positions = 32}, 3);
  write_tiny_bert(root / "bert", {.layers = 2, .heads = 2, .hidden = 8, .positions = 32}, 4);
  write_tiny_llama(root / "llama", "llama", 2);
  write_tiny_llama(root / "mistral", "mistral", 2, 5);
  write_tiny_llama(root / "qwen3", "qwen3", 1);
}
}  // namespace

TEST_CASE("layers streamed a block of query rows at a time measure what layers kept whole measure, to 1e-12",
          "[model][streaming]") {
  TempDir dir;
  write_tiny_family_models(dir.path);
  std::vector<std::int64_t> ids;
  for (std::int64_t k = 0; k < 19; ++k) ids.push_back((7 * k + 3) % 20);
  for (const char* name : {"gpt2", "bert", "llama", "mistral", "qwen3"}) {
    INFO(name);
    const TransformerModel model = TransformerModel::load(dir.path / name);
    const int heads = static_cast<int>(model.config().heads);
    std::vector<int> all_heads(static_cast<std::size_t>(heads));
    std::iota(all_heads.begin(), all_heads.end(), 0);
    // Kept: every layer with its heads' whole attention, each head measured on its own (its own Gram matrix).
    std::vector<LayerInputs> kept = model.forward(ids);
    std::vector<std::vector<HeadMetrics>> expected;
    for (std::size_t l = 0; l < kept.size(); ++l) {
      std::vector<HeadMetrics> layer_heads;
      for (int h = 0; h < heads; ++h) layer_heads.push_back(measure_head(kept[l], static_cast<int>(l), h));
      set_group_key_derivatives(kept[l], layer_heads);
      expected.push_back(std::move(layer_heads));
    }
    // Streamed: blocks of 4 query rows (19 = 4 + 4 + 4 + 4 + 3), measured on two threads as each layer arrives.
    std::size_t received = 0;
    LayerSink sink;
    sink.keep_attention = false;
    sink.query_row_block = 4;
    sink.receive = [&](LayerInputs& layer, std::int64_t index) {
      REQUIRE(static_cast<std::size_t>(index) == received);
      for (const auto& head : layer.heads) CHECK(head.attention.size() == 0);
      CHECK((layer.X - kept[received].X).norm() <= 1e-12 * kept[received].X.norm());
      const auto measured = measure_layer(layer, static_cast<int>(index), all_heads, false, 2);
      CHECK(layer.gram.size() == 0);  // released with the layer's measurement
      for (int h = 0; h < heads; ++h) {
        const auto streamed = to_json(measured[static_cast<std::size_t>(h)]);
        const auto whole = to_json(expected[received][static_cast<std::size_t>(h)]);
        for (const auto& [key, value] : whole.items()) {
          INFO(key);
          if (value.is_number()) {
            CHECK(streamed[key].get<double>() == Approx(value.get<double>()).epsilon(1e-12).margin(1e-300));
          } else {
            CHECK(streamed[key] == value);
          }
        }
      }
      ++received;
    };
    model.forward_embeddings(model.embed_tokens(ids), {}, sink);
    CHECK(received == kept.size());
  }
}

TEST_CASE("a head's rows measured in parts on several threads give the same bits as on one thread",
          "[model][streaming]") {
  // N = 150: three parts of rows (64 + 64 + 22), under rotary keys with grouped queries, a sliding window, and
  // query/key norms.
  TempDir dir;
  write_tiny_llama(dir.path / "llama", "llama", 2, 0, 7, 256);
  write_tiny_llama(dir.path / "mistral", "mistral", 2, 40, 5, 256);
  write_tiny_llama(dir.path / "qwen3", "qwen3", 1, 0, 7, 256);
  std::vector<std::int64_t> ids;
  for (std::int64_t k = 0; k < 150; ++k) ids.push_back((7 * k + 3) % 20);
  for (const char* name : {"llama", "mistral", "qwen3"}) {
    INFO(name);
    const TransformerModel model = TransformerModel::load(dir.path / name);
    std::vector<LayerInputs> layers = model.forward(ids, {1});
    LayerInputs& layer = layers.back();
    const auto one_thread = to_json(measure_head(layer, 1, 0, false, 1));
    CHECK(to_json(measure_head(layer, 1, 0, false, 3)) == one_thread);
    // One head on two threads: measure_layer keeps a layer this small on one thread.
    std::vector<HeadMetrics> alone{measure_head(layer, 1, 0)};
    set_group_key_derivatives(layer, alone);
    CHECK(to_json(measure_layer(layer, 1, {0}, false, 2).front()) == to_json(alone.front()));
  }
  // N = 1100 (18 parts): work enough that measure_layer gives the two threads the head's rows (and the group's other
  // heads' key terms).
  write_tiny_llama(dir.path / "long", "llama", 2, 0, 7, 1100);
  std::vector<std::int64_t> long_ids;
  for (std::int64_t k = 0; k < 1100; ++k) long_ids.push_back((7 * k + 3) % 20);
  std::vector<LayerInputs> layers = TransformerModel::load(dir.path / "long").forward(long_ids, {1});
  LayerInputs& layer = layers.back();
  std::vector<HeadMetrics> alone{measure_head(layer, 1, 0)};
  set_group_key_derivatives(layer, alone);
  CHECK(to_json(measure_layer(layer, 1, {0}, false, 2).front()) == to_json(alone.front()));
}

TEST_CASE("a block of attention rows is the same rows of the whole attention, under every mask", "[model][streaming]") {
  attncheck::streams::PhiloxStream stream(11, 0);
  Matrix scores(9, 9);
  stream.fill_normal(scores.data(), scores.data() + scores.size(), 2.0);
  attncheck::theory::AttendedMask window = attncheck::theory::AttendedMask::Constant(9, 9, false);
  for (Index i = 0; i < 9; ++i) window.row(i).segment(std::max<Index>(0, i - 2), std::min<Index>(i, 2) + 1) = true;
  attncheck::theory::AttentionMap poly;
  poly.activation = {attncheck::theory::ActivationKind::pointwise, attncheck::theory::Pointwise::poly, 3};
  poly.outer = {1, 0.5};
  for (const auto& map : {attncheck::theory::AttentionMap{}, poly}) {
    for (const bool causal : {false, true}) {
      for (const auto* mask : {static_cast<const attncheck::theory::AttendedMask*>(nullptr),
                               static_cast<const attncheck::theory::AttendedMask*>(&window)}) {
        const Matrix whole = apply_attention(map, scores, causal, "test", mask);
        for (Index first = 0; first < 9; first += 4) {
          const Index rows = std::min<Index>(4, 9 - first);
          const Matrix block = apply_attention_rows(map, scores.middleRows(first, rows), first, causal, "test", mask);
          CHECK(block == whole.middleRows(first, rows));
        }
      }
    }
  }
}

TEST_CASE("a probe streams its layers within a memory budget that keeping them would exceed", "[model][streaming]") {
  if (!attncheck::testing::kAddressLimitsWork) {
    WARN("skipped under AddressSanitizer, which cannot run under an address-space limit");
    return;
  }
  TempDir dir;
  write_tiny_llama(dir.path, "llama", 2, 0, 7, 4096);
  const auto probe = [&](std::int64_t length, bool keep_layers) {
    ProbeInput input;
    input.random_length = length;
    return probe_model(dir.path, input, {}, {}, keep_layers, false, {}, 1);
  };
  // The libraries' own buffers (OpenBLAS's) are mapped before the fork, outside the budget.
  const auto small = probe(64, false);
  REQUIRE(small.heads.size() == 8);
  // N = 1024, 2 layers of 4 heads: kept, each head's 8 MiB attention (64 MiB) and the rest; streamed, one layer's
  // rows, the 8 MiB Gram matrix of its rows and blocks of 256 query rows.
  constexpr std::uint64_t room = 40 << 20;
  const std::string kept = attncheck::testing::outcome_with_memory_room(room, [&] { probe(1024, true); });
  CHECK_THAT(kept, Catch::StartsWith("InputError") && Catch::Contains("keeping 2 layers of 4 heads"));
  std::vector<HeadMetrics> streamed_heads;
  const std::string streamed = attncheck::testing::outcome_with_memory_room(room, [&] {
    const auto result = probe(1024, false);
    if (result.heads.size() != 8) throw std::runtime_error(fmt::format("{} heads measured", result.heads.size()));
    for (const auto& head : result.heads) {
      if (!within_theorem_bounds(head) || head.N != 1024 || !(head.softmax.dWk > 0)) {
        throw std::runtime_error(fmt::format("layer {} head {}: not a measurement", head.layer, head.head));
      }
    }
  });
  CHECK(streamed == "ok");
  // Query/key norms make softmax's dA/dW_K form an N x N kernel per query row: counted, the same probe of a Qwen3 is
  // refused before it allocates.
  write_tiny_llama(dir.path / "qwen3", "qwen3", 1, 0, 7, 4096);
  const std::string normalized = attncheck::testing::outcome_with_memory_room(room, [&] {
    ProbeInput input;
    input.random_length = 1024;
    probe_model(dir.path / "qwen3", input, {}, {}, false, false, {}, 1);
  });
  CHECK_THAT(normalized, Catch::StartsWith("InputError") && Catch::Contains("one layer of 4 heads"));
}

TEST_CASE("a mixed-precision forward in blocks of query rows follows double's, causal rows offset by their block",
          "[model][streaming]") {
  TempDir dir;
  write_tiny_family_models(dir.path);
  std::vector<std::int64_t> ids;
  for (std::int64_t k = 0; k < 19; ++k) ids.push_back((7 * k + 3) % 20);
  for (const char* name : {"gpt2", "bert", "llama"}) {
    INFO(name);
    const TransformerModel model = TransformerModel::load(dir.path / name);
    const std::vector<LayerInputs> exact = model.forward(ids);
    // Blocks of 4 rows (19 = 4 + 4 + 4 + 4 + 3): the float32 softmax of a causal row masks by its position, not by its
    // row in the block. A layer's inputs carry the previous layer's context, so a wrong mask moves them by O(1);
    // float32 moves them by about 1e-6 relative.
    LayerSink sink;
    sink.keep_attention = false;
    sink.query_row_block = 4;
    sink.float32_products = true;
    std::size_t received = 0;
    sink.receive = [&](LayerInputs& layer, std::int64_t index) {
      const Matrix& X = exact[static_cast<std::size_t>(index)].X;
      const double relative = (layer.X - X).norm() / X.norm();
      CHECK(relative <= 1e-4);
      if (index > 0) CHECK(relative > 1e-12);  // the forward did run in float32
      ++received;
    };
    model.forward_embeddings(model.embed_tokens(ids), {}, sink);
    CHECK(received == exact.size());
  }
}

TEST_CASE("mixed precision refuses a model whose attention underflows float32, which double precision measures",
          "[model][streaming]") {
  TempDir dir;
  const TinyShape shape{.layers = 2, .heads = 2, .hidden = 8, .positions = 32};
  write_tiny_gpt2(dir.path / "plain" / "model.safetensors", shape, 3);
  // Query, key and value weights scaled by 2^-70 (~8e-22, exactly, in float32): their products with the layer's rows
  // are normal floats, the scores' terms (~1e-42) are not. By 2^-140 (~7e-43) the weights themselves are below
  // FLT_MIN: rounded for the products, the queries would be 0 and relu(S)/N's gradient 0.
  write_tiny_gpt2(dir.path / "scores" / "model.safetensors", shape, 3, "softmax", 1, std::ldexp(1.0, -70));
  write_tiny_gpt2(dir.path / "weights" / "model.safetensors", shape, 3, "softmax", 1, std::ldexp(1.0, -140));
  ProbeInput input;
  input.random_length = 9;
  const auto plain = probe_model(dir.path / "plain", input, {0}, {}, false, false, {}, 1, false);
  for (const auto& [name, refusal] : {std::pair{"scores", "a matrix product is below float32's normal range"},
                                      std::pair{"weights", "a column of weights, keys or values is below float32's"}}) {
    INFO(name);
    CHECK_THROWS_WITH(probe_model(dir.path / name, input, {0}, {}, false, false, {}, 1, true),
                      Catch::Contains(std::string("--precision mixed: ") + refusal) &&
                          Catch::Contains("--precision double takes it"));
    const auto exact = probe_model(dir.path / name, input, {0}, {}, false, false, {}, 1, false);
    REQUIRE(exact.heads.size() == plain.heads.size());
    for (std::size_t k = 0; k < plain.heads.size(); ++k) {
      // relu(S)/N's gradient reads only the signs of S, which scaling every query and key by c leaves alone.
      CHECK(exact.heads[k].relu_n.grad > 0);
      if (std::string_view(name) == "scores") {
        CHECK(exact.heads[k].relu_n.grad == Approx(plain.heads[k].relu_n.grad).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("precision_difference finds the largest relative difference, where it is, and the norms' apart", "[model]") {
  TempDir dir;
  write_tiny_family_models(dir.path);
  ProbeInput input;
  input.random_length = 9;
  const ProbeResult exact = probe_model(dir.path / "bert", input, {}, {}, false, false, {}, 1, false);
  REQUIRE(exact.heads.size() == 4);
  ProbeResult mixed = exact;
  mixed.float_kernels = "portable";
  const auto nothing = precision_difference(exact, mixed);
  CHECK(nothing.largest == 0);
  CHECK(nothing.largest_norm == 0);
  CHECK(nothing.float_kernels == "portable");
  // A norm 1e-3 off in layer 1 head 0 (the third row), then a score statistic 1e-2 off elsewhere: the largest moves to
  // the statistic, the norms' stays.
  mixed.heads[2].softmax.dWq *= 1 + 1e-3;
  auto check = precision_difference(exact, mixed);
  CHECK(check.largest == Approx(1e-3).epsilon(1e-9));
  CHECK(check.field == "dWq_fro");
  CHECK(check.layer == 1);
  CHECK(check.head == 0);
  CHECK(check.largest_norm == Approx(1e-3).epsilon(1e-9));
  mixed.heads[1].score_std *= 1 - 1e-2;
  check = precision_difference(exact, mixed);
  CHECK(check.largest == Approx(1e-2).epsilon(1e-9));
  CHECK(check.field == "score_std");
  CHECK(check.layer == 0);
  CHECK(check.head == 1);
  CHECK(check.largest_norm == Approx(1e-3).epsilon(1e-9));
  // A number finite in one precision only is an infinite difference, never a silently small one.
  mixed.heads[3].softmax.dWk = std::numeric_limits<double>::infinity();
  check = precision_difference(exact, mixed);
  CHECK(std::isinf(check.largest));
  CHECK(check.field == "dWk_fro");
  CHECK(std::isinf(check.largest_norm));
  mixed.heads.pop_back();
  CHECK_THROWS_AS(precision_difference(exact, mixed), std::invalid_argument);
}

TEST_CASE("mixed precision: float32 products give every norm within float32's rounding of double's, and differ from it",
          "[model][streaming]") {
  TempDir dir;
  write_tiny_family_models(dir.path);
  // ViT: the float32 GELU; Mistral: a sliding window, whose softmax stays in double.
  write_tiny_vit(dir.path / "vit");
  for (const char* name : {"gpt2", "bert", "llama", "mistral", "vit"}) {
    INFO(name);
    ProbeInput input;
    input.random_length = std::string_view(name) == "vit" ? 5 : 24;
    const auto exact = probe_model(dir.path / name, input, {}, {}, false, false, {}, 1, false);
    const auto mixed = probe_model(dir.path / name, input, {}, {}, false, false, {}, 1, true);
    REQUIRE(exact.heads.size() == mixed.heads.size());
    // Float32 rounds each product's factors and sums to 2^-24 = 6e-8 relative per operation; over inner
    // dimensions of at most 24 and two layers the norms move by well under 1e-4 relative (1e-6 absolute near 0).
    double largest = 0;
    for (std::size_t k = 0; k < exact.heads.size(); ++k) {
      const auto a = csv_values(exact.heads[k]), b = csv_values(mixed.heads[k]);
      for (std::size_t v = 0; v < a.size(); ++v) {
        INFO(csv_columns()[v]);
        CHECK(b[v] == Approx(a[v]).epsilon(1e-4).margin(1e-6));
        if (a[v] != 0) largest = std::max(largest, std::abs(b[v] - a[v]) / std::abs(a[v]));
      }
    }
    CHECK(largest > 1e-12);  // the products did run in float32
    CHECK(mixed.float32_products);
    CHECK(mixed.float_kernels == float_kernels::instruction_set());
    CHECK(exact.float_kernels.empty());
  }
}

TEST_CASE("GPT-NeoX checkpoints are read, and what its adapter does not compute is refused naming the key", "[model]") {
  TempDir dir;
  write_tiny_gptneox(dir.path);
  const auto model = TransformerModel::load(dir.path);
  CHECK(model.config().rotary_dims == 2);  // half of heads of 4
  CHECK(model.config().parallel_residual);
  const auto layers = model.forward(std::vector<std::int64_t>{1, 4, 9, 2, 7});
  REQUIRE(layers.size() == 2);
  CHECK(layers[0].causal);
  REQUIRE(layers[0].rotary.has_value());
  CHECK(layers[0].rotary->frequency.size() == 1);
  CHECK(describe_family(model.config()).find("rotary positions on the first 2 of each head's 4") != std::string::npos);

  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.path / "config.json"));
  const auto refused = [&](const nlohmann::json& changed, const std::string& message) {
    write_config(dir.path, changed);
    CHECK_THROWS_WITH(TransformerModel::load(dir.path), Catch::Contains("config.json") && Catch::Contains(message));
  };
  auto scaled = config;
  scaled["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
  refused(scaled, "\"rope_scaling\" is {\"factor\":2,\"type\":\"linear\"}: GPT-NeoX's scaled rotary positions");
  auto odd = config;
  odd["rotary_pct"] = 0.25;  // one coordinate of 4
  refused(odd, "\"rotary_pct\" 0.25 of heads of 4 rotates 1 coordinates, not an even number");
  auto disagree = config;
  disagree["rope_theta"] = 500;
  disagree["rotary_emb_base"] = 1000;
  refused(disagree, "\"rotary_emb_base\" is 1000 and \"rope_theta\" is 500: they must agree");
  auto wide = config;
  wide["intermediate_size"] = 64;
  refused(wide, "intermediate_size");

  // transformers 5 writes the rotary settings into one rope_parameters object: the same layers as the older keys.
  auto newer = config;
  newer.erase("rotary_pct");
  newer.erase("rotary_emb_base");
  newer["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}, {"partial_rotary_factor", 0.5}};
  auto older = config;
  older["rotary_emb_base"] = 500.0;
  write_config(dir.path, older);
  const auto expected = TransformerModel::load(dir.path).forward(std::vector<std::int64_t>{1, 4, 9, 2, 7});
  write_config(dir.path, newer);
  const auto read = TransformerModel::load(dir.path);
  CHECK(read.config().rotary_dims == 2);
  CHECK(read.config().rope_theta == 500.0);
  const auto got = read.forward(std::vector<std::int64_t>{1, 4, 9, 2, 7});
  REQUIRE(got.size() == expected.size());
  for (std::size_t l = 0; l < got.size(); ++l) {
    const auto a = measure_head(got[l], static_cast<int>(l), 0), b = measure_head(expected[l], static_cast<int>(l), 0);
    CHECK(a.softmax.value == Approx(b.softmax.value).epsilon(1e-14));
    CHECK(a.softmax.dWk == Approx(b.softmax.dWk).epsilon(1e-14));
  }
  auto both = newer;
  both["rotary_pct"] = 0.25;
  refused(both, "\"rotary_pct\" is 0.25 and \"rope_parameters.partial_rotary_factor\" is 0.5: they must agree");
  auto per_kind = newer;
  per_kind["rope_parameters"] = {{"full_attention", newer["rope_parameters"]}};
  refused(per_kind, "\"rope_parameters\" has one object per kind of layer (\"full_attention\")");
  auto scaled_newer = newer;
  scaled_newer["rope_parameters"]["rope_type"] = "linear";
  refused(scaled_newer, "\"rope_parameters.rope_type\" is 'linear': scaled rotary positions are not supported");
}

TEST_CASE("a Phi-3 checkpoint, its projections fused, gives Mistral's numbers on the same weights", "[model]") {
  TempDir dir;
  const fs::path mistral = dir.path / "mistral", phi3 = dir.path / "phi3";
  write_tiny_llama(mistral, "mistral", 2, 4);
  const auto reference = TransformerModel::load(mistral);
  const Checkpoint& weights = reference.checkpoint();
  constexpr std::int64_t D = 16, H = 4, G = 2, d = 6, I = 24;
  std::vector<NamedTensor> tensors;
  const auto add = [&](const std::string& name, std::vector<Matrix> parts, std::int64_t cols) {
    std::vector<double> values;
    std::int64_t rows = 0;
    for (const Matrix& part : parts) {
      rows += part.rows();
      for (Index i = 0; i < part.rows(); ++i)
        values.insert(values.end(), part.row(i).data(), part.row(i).data() + cols);
    }
    tensors.push_back({name, rows == 1 ? std::vector<std::int64_t>{cols} : std::vector<std::int64_t>{rows, cols},
                       std::move(values), DType::F32});
  };
  const auto matrix = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    return weights.matrix(name, rows, cols);
  };
  const auto vector = [&](const std::string& name, std::int64_t n) {
    return Matrix(weights.vector(name, n).transpose());
  };
  add("model.embed_tokens.weight", {matrix("model.embed_tokens.weight", 40, D)}, D);
  add("model.norm.weight", {vector("model.norm.weight", D)}, D);
  for (int l = 0; l < 2; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
      add(p + norm, {vector(p + norm, D)}, D);
    }
    add(p + "self_attn.qkv_proj.weight",
        {matrix(p + "self_attn.q_proj.weight", H * d, D), matrix(p + "self_attn.k_proj.weight", G * d, D),
         matrix(p + "self_attn.v_proj.weight", G * d, D)},
        D);
    add(p + "self_attn.o_proj.weight", {matrix(p + "self_attn.o_proj.weight", D, H * d)}, H * d);
    add(p + "mlp.gate_up_proj.weight",
        {matrix(p + "mlp.gate_proj.weight", I, D), matrix(p + "mlp.up_proj.weight", I, D)}, D);
    add(p + "mlp.down_proj.weight", {matrix(p + "mlp.down_proj.weight", D, I)}, I);
  }
  fs::create_directories(phi3);
  write_safetensors(phi3 / "model.safetensors", tensors);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(mistral / "config.json"));
  config["model_type"] = "phi3";
  write_config(phi3, config);

  const auto model = TransformerModel::load(phi3);
  CHECK(architecture_name(model.config()) == "Phi-3");
  CHECK(model.config().sliding_window == 4);
  const std::vector<std::int64_t> ids{3, 9, 1, 30, 7, 12, 5, 22};
  auto expected = reference.forward(ids), got = model.forward(ids);
  REQUIRE(got.size() == expected.size());
  for (std::size_t l = 0; l < got.size(); ++l) {
    CHECK((got[l].X - expected[l].X).cwiseAbs().maxCoeff() <= 1e-13 * expected[l].X.cwiseAbs().maxCoeff());
    REQUIRE(got[l].attended.has_value());  // the window of 4 over 8 positions
    CHECK((*got[l].attended == *expected[l].attended).all());
    for (int head = 0; head < H; ++head) {
      const auto a = measure_head(got[l], static_cast<int>(l), head),
                 b = measure_head(expected[l], static_cast<int>(l), head);
      CHECK(a.softmax.value == Approx(b.softmax.value).epsilon(1e-12));
      CHECK(a.softmax.dWq == Approx(b.softmax.dWq).epsilon(1e-12));
      CHECK(a.softmax.dWk == Approx(b.softmax.dWk).epsilon(1e-12));
    }
  }

  const auto refused = [&](nlohmann::json changed, const std::string& message) {
    write_config(phi3, changed);
    CHECK_THROWS_WITH(TransformerModel::load(phi3), Catch::Contains("config.json") && Catch::Contains(message));
  };
  auto partial = config;
  partial["partial_rotary_factor"] = 0.75;
  refused(partial, "\"partial_rotary_factor\" is 0.75: a partial rotary is not supported for Phi-3");
  auto partial_newer = config;  // as transformers 5 writes Phi-4-mini's
  partial_newer["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.75}};
  refused(partial_newer, "\"partial_rotary_factor\" is 0.75: a partial rotary is not supported for Phi-3");
  auto longrope = config;
  longrope["rope_scaling"] = {{"type", "longrope"}};
  refused(longrope, "rope_scaling");
  auto wide = config;
  wide["num_key_value_heads"] = 4;
  refused(wide, "(\"num_attention_heads\" 4 + 2 x \"num_key_value_heads\" 4) x \"head_dim\" 6");
}
