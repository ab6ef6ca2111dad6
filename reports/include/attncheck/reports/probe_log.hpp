#pragma once
// The log `attncheck probe --watch DIR` appends to (DIR/attncheck-probe.jsonl): one JSON line per checkpoint,
// layer and head with the Frobenius norms measured on that head's scores.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

// The norms a probe line may carry: ||A||_F of the attention map under each activation evaluated on the same
// scores, the norm of its Jacobian in the scores (grad_fro is softmax's), and softmax's Jacobians in W_Q, W_K.
enum class ProbeQuantity {
  softmax, poly3_scaled, poly3, relu_n,
  grad, poly3_scaled_grad, poly3_grad, relu_n_grad,
  dWq, dWk,
};
inline constexpr int kProbeQuantityCount = 10;
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

struct ProbeRecord {
  std::string checkpoint;
  std::optional<long long> step;
  long long layer = 0, head = 0, N = 0;
  std::optional<std::string> activation;  // what the model was trained with, where known
  std::optional<double> values[kProbeQuantityCount];  // indexed by ProbeQuantity
  int line = 0;

  const std::optional<double>& value(ProbeQuantity q) const { return values[static_cast<int>(q)]; }
};

// Every line of the log; the first malformed line is an theory::InputError naming `name` and the line.
std::vector<ProbeRecord> parse_probe_log(const std::string& text, const std::string& name);
std::vector<ProbeRecord> read_probe_log(const std::filesystem::path& path);

// One checkpoint of one model: the mean over its layers and heads of each quantity, with the range.
struct ProbeStep {
  std::string checkpoint;
  std::optional<long long> step;
  double position = 0;  // the x value: the step, or the checkpoint's place in the log when steps are unknown
  std::size_t heads = 0;  // layer-head pairs seen
  struct Summary {
    double mean = 0, min = 0, max = 0;
    std::size_t count = 0;
  };
  std::optional<Summary> summaries[kProbeQuantityCount];  // by ProbeQuantity; none when no head had it

  const std::optional<Summary>& summary(ProbeQuantity q) const { return summaries[static_cast<int>(q)]; }
};

// The checkpoints of one trained model (records sharing an activation), in training order.
struct ProbeSeries {
  std::string activation;  // "unknown" when the log does not say
  bool steps_known = true;  // false: positions are checkpoint order
  std::vector<ProbeStep> steps;
};

// Groups records by activation, then by checkpoint; a later line for the same checkpoint, layer and head
// replaces an earlier one (a watcher may re-probe a checkpoint).
std::vector<ProbeSeries> summarize_probe_log(const std::vector<ProbeRecord>& records);

}  // namespace attncheck::reports
