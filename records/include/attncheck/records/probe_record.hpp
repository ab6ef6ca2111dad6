#pragma once
// What a probe measures, typed: one head's norms (a row of `attncheck probe --json` "heads", and the body of a
// probe-log line), one line of the log `attncheck probe --watch DIR` appends to (DIR/attncheck-probe.jsonl: one
// line per checkpoint, layer and head), and their one JSON form each (docs/results-format.md). The probes write
// these records and the reports read them; the JSON keys are named only in probe_record.cpp.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attncheck::records {

// "format_version" of probe-log lines and of `probe --json` documents. Version 1 wrote no such key (and had the
// same keys otherwise); a version above this one is refused, since its keys may mean something else.
inline constexpr int kProbeFormatVersion = 2;

// The norms a probe log line may carry: ||A||_F of the attention map under each activation evaluated on the same
// scores, the norm of its Jacobian in the scores (grad_fro is softmax's), and softmax's Jacobians in W_Q, W_K;
// and the two training-stability signals, the softmax attention's entropy and the largest logit.
enum class ProbeQuantity {
  softmax,
  poly3_scaled,
  poly3,
  relu_n,
  grad,
  poly3_scaled_grad,
  poly3_grad,
  relu_n_grad,
  dWq,
  dWk,
  entropy,
  max_logit,
};
inline constexpr int kProbeQuantityCount = 12;
inline constexpr ProbeQuantity kAttentionQuantities[] = {ProbeQuantity::softmax, ProbeQuantity::poly3_scaled,
                                                         ProbeQuantity::poly3, ProbeQuantity::relu_n};
inline constexpr ProbeQuantity kScoreGradientQuantities[] = {ProbeQuantity::grad, ProbeQuantity::poly3_scaled_grad,
                                                             ProbeQuantity::poly3_grad, ProbeQuantity::relu_n_grad};

// The JSON key ("softmax_fro", ...) and what it measures ("||A||_F, softmax", ...).
std::string_view probe_key(ProbeQuantity quantity);
std::string_view probe_meaning(ProbeQuantity quantity);
// The activation a quantity is the norm of ("softmax", "poly3_scaled", ...); empty for the weight gradients.
std::string_view probe_activation(ProbeQuantity quantity);

// ||A||_F and ||dA/dS||_F of the activation a model was trained with ("softmax", "poly3_scaled", "poly3",
// "relu_n"); none for other names.
std::optional<ProbeQuantity> own_attention_quantity(const std::string& activation);
std::optional<ProbeQuantity> own_gradient_quantity(const std::string& activation);

// Every number below may be non-finite (x^3 of huge scores): JSON writes it as null, which reads back as NaN.
// A key an older line lacks reads as NaN too ("not recorded"), except the ones a line cannot do without.

// ||F||_F, ||dF/dS||_F, ||dF/dW_Q||_F, ||dF/dW_K||_F of one activation on the head's scores.
struct ProbeNorms {
  double value = 0, grad = 0, dWq = 0, dWk = 0;
};

// An activation the probe was asked about (`--what-if 'EXPR'`), elementwise on the head's own scores: phi as its
// canonical text (theory/expression.hpp, N and d as written), its norms as ProbeNorms (the weight Jacobians 0 where
// the record has no weights).
struct ProbeWhatIf {
  std::string phi;
  ProbeNorms norms;
};

// ||O||_F and ||dO/dV||_F of O = A P_mix for one mix alpha of the cross-normalization what-if (claim C9).
struct ProbeCrossNormMix {
  double mix = 0, output_fro = 0, grad_values_fro = 0;
};

// The mixes every cross-normalization what-if measures: standard attention (alpha 0), halfway, and the proposal
// softmax(S) softmax^T(V) (alpha 1).
inline constexpr double kCrossNormMixes[] = {0.0, 0.5, 1.0};

struct ProbeCrossNorm {
  std::int64_t d_v = 0;
  double output_bound = 0;       // sqrt(N d_v)
  double grad_values_bound = 0;  // sqrt(N d_v / 8)
  std::vector<ProbeCrossNormMix> mixes;
};

// One head's measurement. Required in every line: layer, head, N, softmax.value and softmax.grad.
struct ProbeHeadRecord {
  std::int64_t layer = 0, head = 0;
  std::int64_t N = 0;          // attended positions
  std::optional<bool> causal;  // unknown only in lines of writers that did not record it
  // Known only with the weights (from_scores: measured on the scores alone, these keys are left out).
  bool from_scores = false;
  std::int64_t D = 0, d = 0, kv_head = 0;
  double inner = 1, dWk_group = 0;
  double sigma_x = 0, sigma_t = 0, iid_scores_fro = 0, iid_poly3_scaled_fro = 0, iid_poly3_fro = 0;
  // softmax's norms and their ratios to Theorem 4.1's bounds sqrt(N), 2 sqrt(N) and sqrt(N)/2.
  ProbeNorms softmax;
  double sqrt_n = 0, softmax_over_sqrt_n = 0, grad_over_2sqrt_n = 0, grad_over_half_sqrt_n = 0;
  double score_mean = 0, score_std = 0, score_max_abs = 0, scores_fro = 0;
  double softmax_entropy = 0;  // nats, mean over rows of the softmax attention's Shannon entropy
  // The other activations on the same scores; linear_scaled and relu_n record no weight Jacobians.
  ProbeNorms linear_scaled, poly3_scaled, poly3, relu_n;
  std::optional<ProbeCrossNorm> cross_norm;
  std::vector<ProbeWhatIf> what_if;  // "what_if" in JSON, absent when none was asked; not in the CSV columns

  // The norm `quantity` names, none when not recorded or not finite.
  std::optional<double> value(ProbeQuantity quantity) const;
};

// One line of the probe log: a head's measurement and the checkpoint it was made on.
struct ProbeRecord {
  std::string checkpoint;
  std::optional<std::int64_t> step;        // the training step, none when the name has none
  std::optional<std::string> activation;   // what the model was trained with, where known
  std::optional<std::string> fingerprint;  // size, time and inodes of the checkpoint's files when it was probed
  ProbeHeadRecord metrics;
  int line = 0;  // where it was read (1-based), 0 for a record not read from a file

  std::optional<double> value(ProbeQuantity quantity) const { return metrics.value(quantity); }
};

// `attncheck probe MODEL --json`: what produced the measurement (model, input, tool), the verdict and the heads.
struct ProbeModelInfo {
  std::string path;          // as given
  std::string architecture;  // the model family's name as the probes print it ("BERT", "Llama", ...): any text
  std::optional<std::string> config_file, config_sha256;  // none for a GGUF file: its metadata is its configuration
  std::int64_t layers = 0, heads = 0, head_dim = 0, hidden = 0;
  std::string attention_activation;
};

struct ProbeSentence {
  std::string text;
  std::vector<std::int64_t> token_ids;
  std::optional<std::vector<std::string>> tokens;  // the vocabulary's string of each id, none without a vocabulary
};

// Which keys an input has depends on its kind (docs/results-format.md).
struct ProbeInputInfo {
  enum class Kind { text, tokens, random, pixels, image, text_file } kind = Kind::random;
  std::string text;        // text
  std::string file;        // tokens, pixels, image, text_file
  std::uint64_t seed = 0;  // random
  std::int64_t length = 0;
  double sigma = 0;
  std::vector<std::int64_t> token_ids;  // text, tokens
  std::optional<std::vector<std::string>> tokens;
  std::int64_t height = 0, width = 0;        // pixels, image
  std::optional<std::string> preprocessing;  // image
  std::vector<ProbeSentence> sentences;      // text_file
};
std::string_view input_kind_name(ProbeInputInfo::Kind kind);

struct ProbeHeadAbove {
  std::optional<std::int64_t> sentence;  // 1-based, for --text-file
  std::int64_t layer = 0, head = 0;
};

// Theorem 4.1's deterministic bounds on every measured head; its basis is always exact.
struct ProbeVerdict {
  bool holds = false;
  std::string statement;
  std::vector<ProbeHeadAbove> heads_above_a_bound;
};

// --text-file: the row's values are means over the sentences (N too, so it may be fractional here), with the
// standard error of each (sample standard deviation / sqrt(sentences)) in a record of the same shape.
struct ProbeSentenceMeans {
  std::int64_t sentences = 0;
  double N = 0, N_standard_error = 0;
  ProbeHeadRecord standard_error;
};

struct ProbeOutputRow {
  ProbeHeadRecord metrics;
  std::optional<ProbeSentenceMeans> over_sentences;
};

// How far a probe's numbers moved when its forward pass ran in mixed precision (`probe --precision compare`: the probe
// in double, then again in mixed): |mixed - double| / max(|double|, 1e-12) over every number of every head.
struct ProbePrecisionCheck {
  double largest = 0;  // over every number; infinite when one of the two is not finite and the other differs
  std::string field;   // where it is: a column of `probe --csv`, a layer and a head
  std::int64_t layer = 0, head = 0;
  double largest_norm = 0;    // over the Frobenius norms alone (the columns ending in "_fro")
  std::string float_kernels;  // the float32 kernels the mixed forward ran on: "avx512" or "portable"
};

struct ProbeOutput {
  ProbeModelInfo model;
  ProbeInputInfo input;
  std::string tool_version;
  // The forward pass's precision: "double", or "mixed" (its products, GELU and softmax in float32, every norm in
  // double: probe --precision).
  std::string precision = "double";
  std::string float_kernels;  // with precision "mixed": the float32 kernels it ran on, "avx512" or "portable"
  std::optional<ProbePrecisionCheck> mixed_against_double;  // with probe --precision compare (then precision double)
  ProbeVerdict verdict;
  std::vector<ProbeOutputRow> heads;  // in layer, head order
};

// The JSON forms. from_json throws theory::InputError naming `where` and the bad key.
nlohmann::json to_json(const ProbeHeadRecord& head);
ProbeHeadRecord probe_head_from_json(const nlohmann::json& object, const std::string& where);
nlohmann::json to_json(const ProbeRecord& record);  // with "format_version": kProbeFormatVersion
ProbeRecord probe_record_from_json(const nlohmann::json& object, const std::string& where);

// The "format_version" of a probe record or `probe --json` document: 1 when absent; a theory::InputError naming
// `where` for a version this attncheck does not read.
int probe_format_version(const nlohmann::json& object, const std::string& where);

nlohmann::json to_json(const ProbeOutput& output);  // with "format_version": kProbeFormatVersion
ProbeOutput probe_output_from_json(const nlohmann::json& object, const std::string& where);

// The head record whose columns (probe_head_columns) hold `values`, as probe_head_values gives them; integers
// are rounded (a mean of N over sentences is fractional).
ProbeHeadRecord probe_head_from_values(const std::vector<double>& values, bool cross_norm);

// One line of the log, ending in '\n'.
std::string probe_log_line(const ProbeRecord& record);

// The head's keys in the order `probe --csv` prints them (the cross-normalization columns last, with
// `cross_norm`), and its values in that order (NaN where not recorded).
std::vector<std::string> probe_head_columns(bool cross_norm);
std::vector<double> probe_head_values(const ProbeHeadRecord& head);

// Every line of the log; the first malformed one is a theory::InputError naming `name` and the line. With `warn`, a
// last line cut short (no newline, not JSON: its writer was killed mid-append) is skipped and `warn` told so.
using Warn = std::function<void(const std::string&)>;
std::vector<ProbeRecord> parse_probe_log(const std::string& text, const std::string& name, const Warn& warn = {});
std::vector<ProbeRecord> read_probe_log(const std::filesystem::path& path, const Warn& warn = {});

}  // namespace attncheck::records
