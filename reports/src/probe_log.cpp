#include "attncheck/reports/probe_log.hpp"

#include <algorithm>
#include <map>

namespace attncheck::reports {

std::vector<ProbeSeries> summarize_probe_log(const std::vector<ProbeRecord>& records) {
  // activation -> checkpoint (in order of first appearance) -> (layer, head) -> record
  std::vector<std::string> activations;
  std::map<std::string, std::vector<std::string>> checkpoint_order;
  std::map<std::pair<std::string, std::string>, std::map<std::pair<long long, long long>, const ProbeRecord*>> heads;
  for (const ProbeRecord& r : records) {
    const std::string activation = r.activation.value_or("unknown");
    if (std::find(activations.begin(), activations.end(), activation) == activations.end())
      activations.push_back(activation);
    auto& order = checkpoint_order[activation];
    if (std::find(order.begin(), order.end(), r.checkpoint) == order.end()) order.push_back(r.checkpoint);
    heads[{activation, r.checkpoint}][{r.metrics.layer, r.metrics.head}] = &r;
  }
  std::vector<ProbeSeries> out;
  for (const std::string& activation : activations) {
    ProbeSeries series;
    series.activation = activation;
    const auto& order = checkpoint_order[activation];
    for (std::size_t c = 0; c < order.size(); ++c) {
      const auto& by_head = heads[{activation, order[c]}];
      ProbeStep step;
      step.checkpoint = order[c];
      step.heads = by_head.size();
      for (const auto& [layer_head, record] : by_head) {
        if (record->step) step.step = record->step;  // one checkpoint, one step
        for (int q = 0; q < kProbeQuantityCount; ++q) {
          const auto value = record->value(static_cast<ProbeQuantity>(q));
          if (!value) continue;
          const double x = *value;
          auto& s = step.summaries[q];
          if (!s) s = ProbeStep::Summary{0, x, x, 0};
          s->mean += x;
          s->min = std::min(s->min, x);
          s->max = std::max(s->max, x);
          ++s->count;
        }
      }
      for (auto& s : step.summaries) {
        if (s) s->mean /= static_cast<double>(s->count);
      }
      if (!step.step) series.steps_known = false;
      series.steps.push_back(std::move(step));
    }
    for (std::size_t c = 0; c < series.steps.size(); ++c) {
      ProbeStep& step = series.steps[c];
      step.position = series.steps_known ? static_cast<double>(*step.step) : static_cast<double>(c + 1);
    }
    if (series.steps_known) {
      std::stable_sort(series.steps.begin(), series.steps.end(),
                       [](const ProbeStep& a, const ProbeStep& b) { return a.position < b.position; });
    }
    out.push_back(std::move(series));
  }
  return out;
}

}  // namespace attncheck::reports
