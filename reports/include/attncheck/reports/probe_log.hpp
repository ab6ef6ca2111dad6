#pragma once
// The log `attncheck probe --watch DIR` appends to (DIR/attncheck-probe.jsonl): one JSON line per checkpoint,
// layer and head with the Frobenius norms measured on that head's scores.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

// The norms a probe line may carry: ||A||_F of the attention map under each activation evaluated on the same
// scores, and the gradient norms.
enum class ProbeQuantity { softmax, poly3_scaled, poly3, relu_n, grad, dWq, dWk };
inline constexpr ProbeQuantity kAttentionQuantities[] = {ProbeQuantity::softmax, ProbeQuantity::poly3_scaled,
                                                         ProbeQuantity::poly3, ProbeQuantity::relu_n};
inline constexpr ProbeQuantity kGradientQuantities[] = {ProbeQuantity::grad, ProbeQuantity::dWq, ProbeQuantity::dWk};

// The JSON key ("softmax_fro", ...) and what it measures ("||A||_F, softmax", ...).
std::string_view probe_key(ProbeQuantity quantity);
std::string_view probe_meaning(ProbeQuantity quantity);

// The quantity that is ||A||_F of a model trained with `activation` ("softmax", "poly3_scaled", "poly3",
// "relu_n"), if the log has such a column.
std::optional<ProbeQuantity> own_attention_quantity(const std::string& activation);

struct ProbeRecord {
  std::string checkpoint;
  std::optional<long long> step;
  long long layer = 0, head = 0, N = 0;
  std::optional<std::string> activation;  // what the model was trained with, where known
  std::optional<double> values[7];        // indexed by ProbeQuantity
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
  std::optional<Summary> summaries[7];  // indexed by ProbeQuantity; none when no head had the quantity

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
