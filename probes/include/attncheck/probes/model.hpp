#pragma once
// Transformer checkpoints as the probes see them: the architecture from config.json (or a GGUF file's
// metadata), the weights from safetensors or GGUF, and a double-precision forward pass that yields each
// layer's attention inputs per head.

#include "attncheck/probes/float_kernels.hpp"
#include "attncheck/probes/safetensors.hpp"
#include "attncheck/theory/attention.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace attncheck::probes {

namespace detail {
struct FamilyAdapter;  // how one model family is read and run: probes/src/adapters.hpp
}

struct ModelConfig {
  // The family the configuration was read for (BERT, GPT-2, Llama, Mistral, ViT, ...): set by load and
  // read_model_config.
  const detail::FamilyAdapter* family = nullptr;
  std::int64_t layers = 0, heads = 0, hidden = 0, intermediate = 0;
  std::int64_t vocab = 0, max_positions = 0, type_vocab = 0;
  double layer_norm_eps = 1e-12;
  std::string hidden_act;                   // "gelu", "gelu_new", "relu", ...
  bool causal = false;                      // decoders: each position attends to itself and the earlier ones
  bool scale_attn_weights = true;           // GPT-2: divide scores by sqrt(head dim)
  bool scale_by_inverse_layer_idx = false;  // GPT-2: also divide by (layer + 1)
  // The attention the model was trained with: config.json's "attention_activation" ("softmax" when absent,
  // "poly3_scaled" for N^-1/2 (S)^3, "poly3" for (S)^3, entrywise). The forward pass propagates through it.
  std::string attention_activation = "softmax";
  std::string tensor_prefix;  // "bert.", "transformer.", "model." or empty
  // BERT: the LayerNorm parameters' names ("weight"/"bias", or the older "gamma"/"beta").
  std::string norm_gain = "weight", norm_bias = "bias";
  // RoBERTa: the padding token, whose position embedding is padding_idx; the other tokens' positions count from
  // padding_idx + 1. -1: positions 0 .. N-1.
  std::int64_t padding_idx = -1;
  // Llama: the query heads share kv_heads key/value heads (query head h uses kv head h / (heads / kv_heads)).
  std::int64_t kv_heads = 0;     // 0: as many as the query heads
  std::int64_t head_size = 0;    // 0: hidden / heads
  double rope_theta = 10000;     // rotary frequencies rope_theta^(-2p/d)
  std::int64_t rotary_dims = 0;  // GPT-NeoX: the rotated coordinates of each head, the first ones (0: all d)
  // GPT-NeoX: the attention and the MLP read the same hidden states, their outputs added together.
  bool parallel_residual = false;
  bool rope_interleaved = false;  // pairs (2p, 2p+1) as in Llama's GGUF files; else (p, p + d/2)
  bool gguf = false;              // tensor names as llama.cpp writes them
  // CLIP mmproj GGUF files of llama.cpp's older converter name the MLP's first projection ffn_down and its second
  // ffn_up; llama.cpp tells them apart by their shapes, as the probes do.
  bool gguf_mlp_swapped = false;
  // Mistral: position i attends to the keys i - sliding_window < j <= i (0: every earlier one).
  std::int64_t sliding_window = 0;
  // Gemma 2, Gemma 3: the layers the window applies to (empty: all), the others attending to every earlier key.
  std::vector<bool> sliding_layers;
  // Gemma 2, Gemma 3: scores scaled by query_pre_attn_scalar^(-1/2) (0: by head_dim^(-1/2)); Gemma 2's softmax logits
  // soft-capped, cap tanh(S / cap) (0: none).
  double query_pre_attn_scalar = 0, logit_softcap = 0;
  // Gemma 3: the sliding layers' rotary base (0: rope_theta), and the other layers' linear rope scaling (positions
  // divided by the factor).
  double rope_local_theta = 0, rope_linear_factor = 1;
  // ViT, DINOv2, CLIP vision: square patches of patch_size pixels over images of num_channels channels; image_size is
  // the side the position embeddings were trained for (DINOv2 interpolates them to other grids).
  std::int64_t image_size = 0, patch_size = 0, channels = 0;
  std::int64_t head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  std::int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t kv_head_of(std::int64_t head) const { return head / (heads / key_value_heads()); }
};

// The family's name as reports and probe logs write it: "BERT", "GPT-2", "Llama", "ViT", "DINOv2".
std::string_view architecture_name(const ModelConfig& config);
bool is_vision(const ModelConfig& config);  // images in, no tokens
// What `attncheck probe` says of the family's own traits under the model's sizes: lines, each ending in a
// newline, or nothing.
std::string describe_family(const ModelConfig& config);

// The map of the model's attention activation on scores S = inner * V U^T.
theory::AttentionMap trained_attention_map(const std::string& attention_activation, double inner);

// config.json beside the checkpoint (in the folder, or in the file's folder); the tensor prefix is found
// from the checkpoint's names. Errors name the file and the key.
ModelConfig read_model_config(const std::filesystem::path& config_json, const Checkpoint& checkpoint);
std::filesystem::path config_path_for(const std::filesystem::path& model);

// One head's attention inputs in one layer. THEORY.md writes the queries and keys V = X W_Q + b_Q and U = X W_K + b_K
// (theory's functions take them in that order); here they are named for what they are, since C9 and `values` below
// use V for the value projections.
struct HeadInputs {
  // N x d biased projections, normalized by the layer's query and key norms when it has them, then rotated to their
  // positions under rotary embeddings: the rows the scores are products of.
  Matrix queries, keys;
  Matrix W_Q, W_K;   // D x d slices of the weights (for the i.i.d. model's sigma_t)
  Vector b_Q, b_K;   // d
  Matrix attention;  // N x N: the map the forward pass applied (the trained activation)
  // N x d_v: the value projections X W_V + b_V this head's attention multiplies (its key/value head's under
  // grouped queries); empty when the weights were given without them.
  Matrix values;
  std::int64_t head = 0;     // this query head's place in the layer
  std::int64_t kv_head = 0;  // the key/value head this query head reads (itself without grouped queries)
};

// An RMSNorm over one head's d coordinates, y = x / sqrt(mean(x^2) + eps) * gain, one gain for every head (Gemma's
// 1 + weight already added).
using theory::HeadNorm;

struct LayerInputs {
  Matrix X;  // N x D: the rows the projections act on (after ln_1 for GPT-2, the attention RMSNorm for Llama)
  double inner = 1;
  bool causal = false;
  // Qwen3, Gemma 3: the norms applied to each head's queries and keys (X W + b) before the rotation. fill_heads
  // applies them, so they are set before it runs: the measures take the heads' rows as already normalized. A gain
  // of every head's coordinates (H d for the queries, kv_heads d for the keys) rather than d is OLMo 2's RMSNorm
  // over all the heads together.
  std::optional<HeadNorm> query_norm, key_norm;
  // Under norms over all the heads (fill_heads sets them): per position the squared length of the raw queries and
  // keys of every head, and the raw keys' Gram matrix over positions, of which each head takes the other heads' part.
  Vector all_query_squares, all_key_squares;
  Matrix all_key_gram;
  // Gemma 2: the softmax's logits are logit_softcap tanh(S / logit_softcap), S = inner queries keys^T (0: S).
  double logit_softcap = 0;
  std::optional<theory::Rotary> rotary;  // positions 0 .. N-1
  // Angles learned per head (timm's mixed rotary): head h's queries and keys turn by head_rotary[h], one key head
  // per query head. Empty: `rotary`, if any, turns every head.
  std::vector<theory::Rotary> head_rotary;
  // Entries attended when the mask is neither "all" nor causal (padding, a sliding window): then it is the whole
  // mask, with any causal part already in it.
  std::optional<theory::AttendedMask> attended;
  std::vector<HeadInputs> heads;
  // X X^T (N x N) while the layer's heads are measured under rotary keys (probes::measure_layer shares it among them);
  // empty otherwise.
  Matrix gram;
};

// One image as the model takes it: channels x height x width values, row-major, already normalized.
struct Pixels {
  std::int64_t channels = 0, height = 0, width = 0;
  std::vector<double> values;
  double at(std::int64_t c, std::int64_t y, std::int64_t x) const {
    return values[static_cast<std::size_t>((c * height + y) * width + x)];
  }
};

// Query rows per block wherever rows of an N x N matrix are formed a block at a time: enough rows for the products
// to run at the BLAS's speed, few enough that a block stays small beside the layer (256 x N doubles).
inline constexpr theory::Index kQueryRowBlock = 256;

// A forward pass allocates and frees the same few sizes of matrix once per layer (weights, projections, blocks).
// glibc hands every block above its adaptive threshold back to the kernel when freed, so each layer faults its pages in
// again, zero-filled: about 15% of SmolLM2's forward at N = 512. This keeps freed blocks of up to 32 MiB (glibc's
// largest threshold) in the heap for the next layer. It sets the malloc policy of the whole process, so programs call
// it once at start (the CLI and the benchmarks do); a library does not. Elsewhere than glibc it does nothing.
void keep_freed_matrices_in_heap();

// Receives each layer's inputs as soon as the forward pass has computed them, layers in order. What the receiver
// leaves in `layer` is released before the next layer is computed, so a receiver that measures and drops each layer
// holds one layer at a time, whatever the depth.
struct LayerSink {
  std::function<void(LayerInputs& layer, std::int64_t index)> receive;
  // Each head's N x N attention kept in HeadInputs::attention (for the attention dump and comparisons). Without it the
  // heads' context is computed one block of query rows at a time and no N x N matrix is formed.
  bool keep_attention = true;
  theory::Index query_row_block = kQueryRowBlock;  // rows per block when the attention is not kept
  // The forward pass in float32 where its time goes (`probe --precision mixed`): the matrix products (the projections,
  // the scores, attention times values, the MLP), their inputs rounded to float32 and the results widened back; GELU;
  // and, when the attention is not kept, the softmax that weights the values over every key or a causal prefix. Layer
  // norms, residual sums, other masks and activations, the heads' rows and every norm the probe measures stay in
  // double. The float32 kernels are float_kernels.hpp's.
  bool float32_products = false;
};

// The mixed-precision forward met a value float32 cannot hold (`what`: where, `value`: its size in double); the
// message says that double precision takes it.
[[noreturn]] void throw_beyond_float32(std::string_view what, double value);
// The same for a value below float32's normal range (FLT_MIN, 1.2e-38), where float32 keeps fewer than its 24 bits.
[[noreturn]] void throw_below_float32(std::string_view what, double value);

// The lines of a matrix that a float32 product sums over, which rounded_to_float32 requires to keep float32's
// precision: the rows of its left factor, the columns of its right one; or neither, for values no product sums (the
// logits of the float32 softmax, which subtracts their largest and so keeps 24 bits of what it reads).
enum class SummedAlong { rows, columns, neither };

// m rounded to float32, in its own storage order (a transposed weight is read along its rows, not across them); a
// value beyond float32's range is an InputError, never an infinity in the forward pass. So is a line (`along`) whose
// largest magnitude is below FLT_MIN but not 0: each of its values keeps fewer than float32's 24 bits, or none, so
// every entry of the product it enters would lose them. Smaller values beside a normal one in their line are kept as
// float32 rounds them: their error is below 2^-24 of that one's.
template <class M>
auto rounded_to_float32(const M& m, SummedAlong along) {
  using Plain = typename M::PlainObject;
  using Float =
      Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Plain::IsRowMajor ? Eigen::RowMajor : Eigen::ColMajor>;
  Float rounded = m.template cast<float>();
  if (!theory::all_finite(rounded)) throw_beyond_float32("an activation or weight", m.cwiseAbs().maxCoeff());
  // One vectorized minimum first: the lines are looked at only when some value is below FLT_MIN (or 0).
  if (along != SummedAlong::neither && rounded.size() != 0 &&
      !(rounded.cwiseAbs().minCoeff() >= std::numeric_limits<float>::min())) {
    const bool rows = along == SummedAlong::rows;
    const theory::Vector largest = rows ? theory::Vector(m.cwiseAbs().rowwise().maxCoeff())
                                        : theory::Vector(m.cwiseAbs().colwise().maxCoeff().transpose());
    for (const double value : largest) {
      if (value > 0 && value < std::numeric_limits<float>::min()) {
        throw_below_float32(rows ? "a row of activations" : "a column of weights, keys or values", value);
      }
    }
  }
  return rounded;
}

// Float32 gives an entry of a b within its rounding's k 2^-24 of s_ij = sum_k |a_ik b_kj| only while s_ij is at least
// FLT_MIN: below, each term that underflows may lose up to 2^-150, more than 2^-24 of s_ij; a b that rounds to 0
// loses everything. An entry below FLT_MIN (0 included) is looked at closer: its s_ij in double from the float32
// factors, an InputError when it is neither 0 nor at least FLT_MIN. An entry of at least FLT_MIN has s_ij as large.
template <class A, class B>
void require_float32_significance(const A& a, const B& b, const FloatMatrix& c) {
  constexpr float smallest = std::numeric_limits<float>::min();
  if (c.size() == 0 || c.cwiseAbs().minCoeff() >= smallest) return;
  for (theory::Index i = 0; i < c.rows(); ++i) {
    for (theory::Index j = 0; j < c.cols(); ++j) {
      if (std::abs(c(i, j)) >= smallest) continue;
      double s = 0;
      for (theory::Index k = 0; k < a.cols(); ++k) s += std::abs(double(a(i, k)) * double(b(k, j)));
      if (s > 0 && s < smallest) throw_below_float32("a matrix product", s);
    }
  }
}

// a b for float32 matrices stored whole (plain, or a plain one transposed: either storage order, no blocks) in
// float32, widened to double. A product beyond float32's range, or below its normal range where its terms are
// (require_float32_significance), is an InputError.
template <class A, class B>
Matrix float32_product(const A& a, const B& b) {
  static_assert(bool(A::Flags & Eigen::DirectAccessBit) && bool(B::Flags & Eigen::DirectAccessBit),
                "float32_product reads its factors' storage");
  const auto operand = [](const auto& m) {
    constexpr bool row_major = std::decay_t<decltype(m)>::IsRowMajor;
    // The kernels read rows x cols values in one block: a block of columns or a strided map would be misread.
    if (m.innerStride() != 1 || m.outerStride() != (row_major ? m.cols() : m.rows())) {
      throw std::invalid_argument("float32_product: a factor is not stored whole");
    }
    return float_kernels::Operand{m.data(), m.rows(), m.cols(), row_major};
  };
  if (a.cols() != b.rows()) throw std::invalid_argument("float32_product: the factors' shapes do not match");
  FloatMatrix c(a.rows(), b.cols());
  float_kernels::product(operand(a), operand(b), c.data());
  if (!theory::all_finite(c)) throw_beyond_float32("a matrix product", HUGE_VAL);
  require_float32_significance(a, b, c);
  return c.template cast<double>();
}

// a b in double, or with `float32` its factors rounded to float32, multiplied in float32 and the product widened back.
template <class A, class B>
Matrix forward_product(const A& a, const B& b, bool float32) {
  if (!float32) return a * b;
  return float32_product(rounded_to_float32(a, SummedAlong::rows), rounded_to_float32(b, SummedAlong::columns));
}

class TransformerModel {
 public:
  // MODEL is a folder (with config.json), a .safetensors file (config.json beside it) or a .gguf file.
  static TransformerModel load(const std::filesystem::path& model);

  const ModelConfig& config() const { return config_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }

  // The embeddings (N x D) of token ids, checked against the vocabulary, with the sequence length checked against
  // the positions.
  Matrix embed_tokens(std::span<const std::int64_t> ids) const;
  // ViT, DINOv2, CLIP vision: the patch embeddings of an image with the CLS token and the position embeddings (N = 1 +
  // the number of patches).
  Matrix embed_pixels(const Pixels& pixels) const;
  // The forward pass from embeddings (N x D: the summed token + position (+ type) embeddings, or random rows for
  // --random) through every layer up to the last one in `layers` (all when empty), each layer's inputs handed to
  // `sink` as soon as they are computed. Memory is checked first (require_memory_for).
  void forward_embeddings(Matrix embeddings, const std::vector<int>& layers, const LayerSink& sink) const;
  // The same, every layer's inputs (with their attention) kept and returned.
  std::vector<LayerInputs> forward_embeddings(Matrix embeddings, const std::vector<int>& layers = {}) const;
  std::vector<LayerInputs> forward(std::span<const std::int64_t> ids, const std::vector<int>& layers = {}) const;
  std::vector<LayerInputs> forward_pixels(const Pixels& pixels, const std::vector<int>& layers = {}) const;
  // RMS of the token-embedding entries (vision models: of the position embeddings): the sigma of the model's own
  // embeddings.
  double token_embedding_rms() const;
  // Refuses (InputError naming the sizes) a probe over `positions` positions that would not fit in the memory
  // available, checked before anything is allocated. Streamed (`keep_layers` false), it holds one layer's weights,
  // activations and heads at a time, one N x N Gram matrix of the layer's rows when its keys are rotated, and per
  // measuring thread a block of query rows (an N x N attention per thread with `cross_norm`); kept, every layer up
  // to the last of `layers` with each head's N x N attention.
  void require_memory_for(std::int64_t positions, const std::vector<int>& layers = {}, bool keep_layers = true,
                          int measuring_threads = 1, bool cross_norm = false) const;

 private:
  TransformerModel(Checkpoint checkpoint, ModelConfig config)
      : checkpoint_(std::move(checkpoint)), config_(std::move(config)) {}
  Checkpoint checkpoint_;
  ModelConfig config_;
};

// Row-wise LayerNorm with gain and bias.
Matrix layer_norm(const Matrix& x, const Vector& gain, const Vector& bias, double eps);
// Row-wise RMSNorm: x / sqrt(mean(x^2) + eps) * gain.
Matrix rms_norm(const Matrix& x, const Vector& gain, double eps);

// The head's logits as its softmax takes them: S = inner queries keys^T, soft-capped when the layer caps them; rows
// first_row .. first_row + rows - 1 of them (rows < 0: to the last).
Matrix softmax_logits(const LayerInputs& layer, const HeadInputs& head, theory::Index first_row = 0,
                      theory::Index rows = -1, bool float32_products = false);
// One head's view of a norm over all the heads: its slice of the gains and the other heads' coordinates.
struct HeadNormSlice {
  HeadNorm norm;
  theory::OtherHeads others;
};
// What score_maps points into, owned by its caller: the head's raw projections and, under norms over all the heads,
// its views of them.
struct HeadMapStorage {
  Matrix raw_queries, raw_keys;
  HeadNormSlice query_slice, key_slice;
};
// The theory's maps of the layer for one head: rotary, the norms with the head's projections before them, the cap.
// `key_gram`: the other heads' key Gram matrix too, which only softmax's dA/dW_K reads.
theory::ScoreMaps score_maps(const LayerInputs& layer, const HeadInputs& head, HeadMapStorage& storage, bool key_gram);
// The rotation of query head `head` (and of its key head): its own under angles per head, else the layer's, or none.
const theory::Rotary* rotary_of(const LayerInputs& layer, theory::Index head);
// Whether the norm spans every head's coordinates (OLMo 2) rather than one head's d.
bool spans_all_heads(const HeadNorm& norm, theory::Index d);

// The map applied to one head's scores; masked entries (causal, j > i, or outside `attended` when given) are 0.
// Scores that are not finite are an InputError naming `where` (the layer and head) and the cause: activations that
// overflowed double precision.
Matrix apply_attention(const theory::AttentionMap& map, const Matrix& scores, bool causal, std::string_view where,
                       const theory::AttendedMask* attended = nullptr);
// The same on a block of rows: `scores` holds rows first_row .. of the N x N scores (N = its columns).
Matrix apply_attention_rows(const theory::AttentionMap& map, const Matrix& scores, theory::Index first_row, bool causal,
                            std::string_view where, const theory::AttendedMask* attended = nullptr);

}  // namespace attncheck::probes
