#pragma once
// Small randomly initialized checkpoints written by the tests themselves (config.json + safetensors).

#include "attncheck/probes/safetensors.hpp"
#include "attncheck/streams/random_stream.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::probes::testing {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / fmt::format("attncheck-probes-{}-{}", ::getpid(), counter++);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

class WeightWriter {
 public:
  explicit WeightWriter(std::uint64_t seed) : stream_(seed, 0) {}
  void add(const std::string& name, std::vector<std::int64_t> shape, double sd, double mean = 0) {
    std::int64_t count = 1;
    for (auto dim : shape) count *= dim;
    std::vector<double> values(static_cast<std::size_t>(count));
    stream_.fill_normal(values.begin(), values.end(), sd);
    for (auto& v : values) v += mean;
    tensors_.push_back({name, std::move(shape), std::move(values), DType::F32});
  }
  std::vector<NamedTensor>& tensors() { return tensors_; }

 private:
  streams::PhiloxStream stream_;
  std::vector<NamedTensor> tensors_;
};

struct TinyShape {
  int layers = 2, heads = 2, hidden = 8, vocab = 20, positions = 16;
};

inline void write_config(const fs::path& folder, const nlohmann::json& config) {
  std::ofstream(folder / "config.json") << config.dump();
}

// GPT-2 layout; `file` is the safetensors path, config.json goes beside it.
// `ln1_gain` scales the layer norms' gains in front of attention: a huge gain makes huge (finite) scores.
// `attention_scale` scales the query, key and value weights and biases: tiny, it makes scores below float32's range.
inline void write_tiny_gpt2(const fs::path& file, const TinyShape& s = {}, std::uint64_t seed = 1,
                            const std::string& attention_activation = "softmax", double ln1_gain = 1,
                            double attention_scale = 1) {
  const int D = s.hidden;
  fs::create_directories(file.parent_path());
  WeightWriter w(seed);
  w.add("wte.weight", {s.vocab, D}, 0.5);
  w.add("wpe.weight", {s.positions, D}, 0.5);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    w.add(p + "ln_1.weight", {D}, 0.1 * ln1_gain, ln1_gain);
    w.add(p + "ln_1.bias", {D}, 0.1);
    w.add(p + "attn.c_attn.weight", {D, 3 * D}, 0.6 * attention_scale);
    w.add(p + "attn.c_attn.bias", {3 * D}, 0.2 * attention_scale);
    w.add(p + "attn.c_proj.weight", {D, D}, 0.4);
    w.add(p + "attn.c_proj.bias", {D}, 0.1);
    w.add(p + "ln_2.weight", {D}, 0.1, 1);
    w.add(p + "ln_2.bias", {D}, 0.1);
    w.add(p + "mlp.c_fc.weight", {D, 4 * D}, 0.4);
    w.add(p + "mlp.c_fc.bias", {4 * D}, 0.1);
    w.add(p + "mlp.c_proj.weight", {4 * D, D}, 0.3);
    w.add(p + "mlp.c_proj.bias", {D}, 0.1);
  }
  write_safetensors(file, w.tensors());
  nlohmann::json config = {{"model_type", "gpt2"}, {"n_embd", D},           {"n_head", s.heads},
                           {"n_layer", s.layers},  {"vocab_size", s.vocab}, {"n_positions", s.positions}};
  if (attention_activation != "softmax") config["attention_activation"] = attention_activation;
  write_config(file.parent_path(), config);
}

// GPT-NeoX layout (gpt_neox. prefix): fused query_key_value, rotary on half of each head, parallel residual.
inline void write_tiny_gptneox(const fs::path& folder, const TinyShape& s = {}, std::uint64_t seed = 7) {
  const int D = s.hidden, I = 4 * s.hidden;
  fs::create_directories(folder);
  WeightWriter w(seed);
  w.add("gpt_neox.embed_in.weight", {s.vocab, D}, 0.5);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("gpt_neox.layers.{}.", l);
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
      w.add(p + norm + ".weight", {D}, 0.1, 1);
      w.add(p + norm + ".bias", {D}, 0.1);
    }
    w.add(p + "attention.query_key_value.weight", {3 * D, D}, 0.6);
    w.add(p + "attention.query_key_value.bias", {3 * D}, 0.2);
    w.add(p + "attention.dense.weight", {D, D}, 0.4);
    w.add(p + "attention.dense.bias", {D}, 0.1);
    w.add(p + "mlp.dense_h_to_4h.weight", {I, D}, 0.4);
    w.add(p + "mlp.dense_h_to_4h.bias", {I}, 0.1);
    w.add(p + "mlp.dense_4h_to_h.weight", {D, I}, 0.3);
    w.add(p + "mlp.dense_4h_to_h.bias", {D}, 0.1);
  }
  write_safetensors(folder / "model.safetensors", w.tensors());
  write_config(folder, {{"model_type", "gpt_neox"},
                        {"hidden_size", D},
                        {"num_attention_heads", s.heads},
                        {"num_hidden_layers", s.layers},
                        {"intermediate_size", I},
                        {"vocab_size", s.vocab},
                        {"max_position_embeddings", s.positions},
                        {"rotary_pct", 0.5}});
}

// One encoder layer under the prefix `p`: the four attention projections, the two layer norms and the MLP's two
// linear layers by the names given (the MLP's default is BERT's and ViT's, intermediate.dense and output.dense).
inline void add_encoder_layer(WeightWriter& w, const std::string& p, std::initializer_list<const char*> attention,
                              std::initializer_list<const char*> norms, int D, int I,
                              std::pair<const char*, const char*> mlp = {"intermediate.dense", "output.dense"}) {
  for (const char* name : attention) {
    w.add(p + name + ".weight", {D, D}, 0.6);
    w.add(p + name + ".bias", {D}, 0.2);
  }
  w.add(p + mlp.first + ".weight", {I, D}, 0.4);
  w.add(p + mlp.first + ".bias", {I}, 0.1);
  w.add(p + mlp.second + ".weight", {D, I}, 0.4);
  w.add(p + mlp.second + ".bias", {D}, 0.1);
  for (const char* name : norms) {
    w.add(p + name + ".weight", {D}, 0.1, 1);
    w.add(p + name + ".bias", {D}, 0.1);
  }
}

inline void write_tiny_bert(const fs::path& folder, const TinyShape& s = {}, std::uint64_t seed = 2) {
  const int D = s.hidden, I = 2 * s.hidden;
  WeightWriter w(seed);
  w.add("embeddings.word_embeddings.weight", {s.vocab, D}, 0.5);
  w.add("embeddings.position_embeddings.weight", {s.positions, D}, 0.5);
  w.add("embeddings.token_type_embeddings.weight", {2, D}, 0.5);
  w.add("embeddings.LayerNorm.weight", {D}, 0.1, 1);
  w.add("embeddings.LayerNorm.bias", {D}, 0.1);
  for (int l = 0; l < s.layers; ++l) {
    add_encoder_layer(w, fmt::format("encoder.layer.{}.", l),
                      {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"},
                      {"attention.output.LayerNorm", "output.LayerNorm"}, D, I);
  }
  fs::create_directories(folder);
  write_safetensors(folder / "model.safetensors", w.tensors());
  write_config(folder, {{"model_type", "bert"},
                        {"hidden_size", D},
                        {"num_attention_heads", s.heads},
                        {"num_hidden_layers", s.layers},
                        {"intermediate_size", I},
                        {"vocab_size", s.vocab},
                        {"max_position_embeddings", s.positions}});
  std::ofstream vocab(folder / "vocab.txt");
  for (const char* word : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "##s", ".", ",",
                           "cafe", "un", "##able", "\xe4\xb8\xad"}) {
    vocab << word << "\n";
  }
  for (int k = 16; k < s.vocab; ++k) vocab << "w" << k << "\n";
}

// ViT layout: one layer on 16 x 16 pixels in 8 x 8 patches (five positions), with a preprocessor_config.json that
// resizes any image to that size.
inline void write_tiny_vit(const fs::path& folder, std::uint64_t seed = 5) {
  constexpr int D = 8, I = 16, P = 8, side = 16, positions = 1 + (side / P) * (side / P);
  WeightWriter w(seed);
  w.add("embeddings.cls_token", {1, 1, D}, 0.5);
  w.add("embeddings.position_embeddings", {1, positions, D}, 0.5);
  w.add("embeddings.patch_embeddings.projection.weight", {D, 3, P, P}, 0.05);
  w.add("embeddings.patch_embeddings.projection.bias", {D}, 0.1);
  add_encoder_layer(w, "encoder.layer.0.",
                    {"attention.attention.query", "attention.attention.key", "attention.attention.value",
                     "attention.output.dense"},
                    {"layernorm_before", "layernorm_after"}, D, I);
  fs::create_directories(folder);
  write_safetensors(folder / "model.safetensors", w.tensors());
  write_config(folder, {{"model_type", "vit"},
                        {"hidden_size", D},
                        {"num_attention_heads", 2},
                        {"num_hidden_layers", 1},
                        {"intermediate_size", I},
                        {"image_size", side},
                        {"patch_size", P}});
  std::ofstream(folder / "preprocessor_config.json")
      << R"({"do_resize": true, "size": {"height": 16, "width": 16}, "resample": 2, "do_rescale": true,)"
      << R"( "rescale_factor": 0.00392156862745098, "do_normalize": true, "image_mean": [0.5, 0.5, 0.5],)"
      << R"( "image_std": [0.5, 0.5, 0.5]})";
}

// DistilBERT layout: BERT's embeddings without token types, its layers under DistilBERT's names.
inline void write_tiny_distilbert(const fs::path& folder, const TinyShape& s = {}, std::uint64_t seed = 3) {
  const int D = s.hidden, I = 2 * s.hidden;
  WeightWriter w(seed);
  w.add("embeddings.word_embeddings.weight", {s.vocab, D}, 0.5);
  w.add("embeddings.position_embeddings.weight", {s.positions, D}, 0.5);
  w.add("embeddings.LayerNorm.weight", {D}, 0.1, 1);
  w.add("embeddings.LayerNorm.bias", {D}, 0.1);
  for (int l = 0; l < s.layers; ++l) {
    add_encoder_layer(w, fmt::format("transformer.layer.{}.", l),
                      {"attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin"},
                      {"sa_layer_norm", "output_layer_norm"}, D, I, {"ffn.lin1", "ffn.lin2"});
  }
  fs::create_directories(folder);
  write_safetensors(folder / "model.safetensors", w.tensors());
  write_config(folder, {{"model_type", "distilbert"},
                        {"dim", D},
                        {"n_heads", s.heads},
                        {"n_layers", s.layers},
                        {"hidden_dim", I},
                        {"vocab_size", s.vocab},
                        {"max_position_embeddings", s.positions}});
}

// CLIPVisionModel layout (model_type "clip_vision_model"): two layers on 16 x 16 pixels in 8 x 8 patches (five
// positions).
inline void write_tiny_clip_vision(const fs::path& folder, std::uint64_t seed = 6) {
  constexpr int D = 8, I = 16, P = 8, side = 16, positions = 1 + (side / P) * (side / P), layers = 2;
  WeightWriter w(seed);
  w.add("embeddings.class_embedding", {D}, 0.5);
  w.add("embeddings.patch_embedding.weight", {D, 3, P, P}, 0.05);
  w.add("embeddings.position_embedding.weight", {positions, D}, 0.5);
  w.add("pre_layrnorm.weight", {D}, 0.1, 1);
  w.add("pre_layrnorm.bias", {D}, 0.1);
  for (int l = 0; l < layers; ++l) {
    add_encoder_layer(w, fmt::format("encoder.layers.{}.", l),
                      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"},
                      {"layer_norm1", "layer_norm2"}, D, I, {"mlp.fc1", "mlp.fc2"});
  }
  fs::create_directories(folder);
  write_safetensors(folder / "model.safetensors", w.tensors());
  write_config(folder, {{"model_type", "clip_vision_model"},
                        {"hidden_size", D},
                        {"num_attention_heads", 2},
                        {"num_hidden_layers", layers},
                        {"intermediate_size", I},
                        {"image_size", side},
                        {"patch_size", P}});
}

// Llama layout (model_type "llama", "mistral" or "qwen3"): RMSNorms, rotary queries and keys, `kv_heads` key/value
// heads, a gated MLP; Mistral's window when `sliding_window` > 0, Qwen3's query and key norms.
inline void write_tiny_llama(const fs::path& folder, const std::string& model_type, int kv_heads,
                             int sliding_window = 0, std::uint64_t seed = 7, int positions = 64) {
  constexpr int D = 16, H = 4, d = 6, I = 24, V = 40, layers = 2;
  WeightWriter w(seed);
  w.add("model.embed_tokens.weight", {V, D}, 0.5);
  for (int l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    w.add(p + "input_layernorm.weight", {D}, 0.1, 1);
    w.add(p + "self_attn.q_proj.weight", {H * d, D}, 0.4);
    w.add(p + "self_attn.k_proj.weight", {kv_heads * d, D}, 0.4);
    w.add(p + "self_attn.v_proj.weight", {kv_heads * d, D}, 0.4);
    w.add(p + "self_attn.o_proj.weight", {D, H * d}, 0.3);
    if (model_type == "qwen3") {
      w.add(p + "self_attn.q_norm.weight", {d}, 0.1, 1);
      w.add(p + "self_attn.k_norm.weight", {d}, 0.1, 1);
    }
    w.add(p + "post_attention_layernorm.weight", {D}, 0.1, 1);
    w.add(p + "mlp.gate_proj.weight", {I, D}, 0.3);
    w.add(p + "mlp.up_proj.weight", {I, D}, 0.3);
    w.add(p + "mlp.down_proj.weight", {D, I}, 0.3);
  }
  w.add("model.norm.weight", {D}, 0.1, 1);
  fs::create_directories(folder);
  write_safetensors(folder / "model.safetensors", w.tensors());
  nlohmann::json config = {{"model_type", model_type},
                           {"hidden_size", D},
                           {"num_attention_heads", H},
                           {"num_key_value_heads", kv_heads},
                           {"head_dim", d},
                           {"num_hidden_layers", layers},
                           {"intermediate_size", I},
                           {"vocab_size", V},
                           {"max_position_embeddings", positions},
                           {"rms_norm_eps", 1e-6},
                           {"rope_theta", 100.0},
                           {"hidden_act", "silu"}};
  if (sliding_window > 0) config["sliding_window"] = sliding_window;
  write_config(folder, config);
}

}  // namespace attncheck::probes::testing
