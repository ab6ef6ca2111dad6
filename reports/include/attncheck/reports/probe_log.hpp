#pragma once
// The probe log (records/probe_record.hpp) summarized for drawing: per trained model, per checkpoint, the mean
// and range over layers and heads of each norm.

#include "attncheck/records/probe_record.hpp"

#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

using records::kAttentionQuantities;
using records::kProbeQuantityCount;
using records::kScoreGradientQuantities;
using records::own_attention_quantity;
using records::own_gradient_quantity;
using records::probe_activation;
using records::probe_key;
using records::probe_meaning;
using records::ProbeQuantity;
using records::ProbeRecord;
using records::read_probe_log;

// One checkpoint of one model: the mean over its layers and heads of each quantity, with the range.
struct ProbeStep {
  std::string checkpoint;
  std::optional<long long> step;
  double position = 0;    // the x value: the step, or the checkpoint's place in the log when steps are unknown
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
  std::string activation;   // "unknown" when the log does not say
  bool steps_known = true;  // false: positions are checkpoint order
  std::vector<ProbeStep> steps;
};

// Groups records by activation, then by checkpoint; a later line for the same checkpoint, layer and head
// replaces an earlier one (a watcher may re-probe a checkpoint).
std::vector<ProbeSeries> summarize_probe_log(const std::vector<ProbeRecord>& records);

}  // namespace attncheck::reports
