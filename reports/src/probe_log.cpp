#include "attncheck/reports/probe_log.hpp"

#include "attncheck/records/results_folder.hpp"

#include "attncheck/records/json_fields.hpp"
#include "attncheck/records/probe_keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

namespace attncheck::reports {

namespace {
struct QuantityInfo {
  ProbeQuantity quantity;
  std::string_view key;
  std::string_view meaning;
  std::string_view activation;  // the trained activation whose own norm this is
  bool gradient;                 // ||dA/dS||_F rather than ||A||_F
  bool required;                 // the norms in W_Q, W_K are absent from lines measured on scores alone
};
// In the order of ProbeQuantity.
constexpr QuantityInfo kQuantities[] = {
    {ProbeQuantity::softmax, records::probe_keys::softmax_fro, "||A||_F, softmax", "softmax", false, true},
    {ProbeQuantity::poly3_scaled, records::probe_keys::poly3_scaled_fro, "||A||_F, x^3/sqrt(N)", "poly3_scaled", false, false},
    {ProbeQuantity::poly3, records::probe_keys::poly3_fro, "||A||_F, x^3", "poly3", false, false},
    {ProbeQuantity::relu_n, records::probe_keys::relu_n_fro, "||A||_F, relu/N", "relu_n", false, false},
    {ProbeQuantity::grad, records::probe_keys::grad_fro, "||dA/dS||_F, softmax", "softmax", true, true},
    {ProbeQuantity::poly3_scaled_grad, records::probe_keys::poly3_scaled_grad_fro, "||dA/dS||_F, x^3/sqrt(N)", "poly3_scaled", true, false},
    {ProbeQuantity::poly3_grad, records::probe_keys::poly3_grad_fro, "||dA/dS||_F, x^3", "poly3", true, false},
    {ProbeQuantity::relu_n_grad, records::probe_keys::relu_n_grad_fro, "||dA/dS||_F, relu/N", "relu_n", true, false},
    {ProbeQuantity::dWq, records::probe_keys::dWq_fro, "||dA/dW_Q||_F, softmax", "", false, false},
    {ProbeQuantity::dWk, records::probe_keys::dWk_fro, "||dA/dW_K||_F, softmax", "", false, false},
};
static_assert(std::size(kQuantities) == kProbeQuantityCount);
const QuantityInfo& info(ProbeQuantity q) { return kQuantities[static_cast<int>(q)]; }
}  // namespace

std::string_view probe_key(ProbeQuantity quantity) { return info(quantity).key; }
std::string_view probe_meaning(ProbeQuantity quantity) { return info(quantity).meaning; }
std::string_view probe_activation(ProbeQuantity quantity) { return info(quantity).activation; }

namespace {
std::optional<ProbeQuantity> own_quantity(const std::string& activation, bool gradient) {
  for (const QuantityInfo& q : kQuantities) {
    if (!q.activation.empty() && q.activation == activation && q.gradient == gradient) return q.quantity;
  }
  return std::nullopt;
}
}  // namespace

std::optional<ProbeQuantity> own_attention_quantity(const std::string& activation) {
  return own_quantity(activation, false);
}
std::optional<ProbeQuantity> own_gradient_quantity(const std::string& activation) {
  return own_quantity(activation, true);
}

std::vector<ProbeRecord> parse_probe_log(const std::string& text, const std::string& name) {
  std::vector<ProbeRecord> records;
  records::detail::for_each_json_line(text, name, [&](const records::detail::JsonFields& fields, int line) {
    ProbeRecord r;
    r.line = line;
    namespace keys = records::probe_keys;
    r.checkpoint = fields.text(keys::checkpoint);
    r.step = fields.integer_or_null(keys::step);
    r.layer = fields.integer(keys::layer);
    r.head = fields.integer(keys::head);
    r.N = fields.integer(keys::N);
    if (r.N < 1) fields.fail(fmt::format("\"N\" = {} must be >= 1", r.N));
    // What probe --watch writes: config.json's attention_activation, or a name whose norm the log has a column for.
    r.activation = fields.word_or_null(keys::activation, {"softmax", "poly3_scaled", "poly3", "relu_n"});
    for (const QuantityInfo& q : kQuantities) {
      const std::string key(q.key);
      auto& value = r.values[static_cast<int>(q.quantity)];
      value = q.required ? std::optional<double>(fields.number(key.c_str())) : fields.number_or_null(key.c_str());
      if (value && *value < 0) fields.fail(fmt::format("\"{}\" = {} is negative, but it is a norm", key, *value));
    }
    records.push_back(std::move(r));
  });
  return records;
}

std::vector<ProbeRecord> read_probe_log(const std::filesystem::path& path) {
  return parse_probe_log(records::read_text_file(path), path.string());
}

std::vector<ProbeSeries> summarize_probe_log(const std::vector<ProbeRecord>& records) {
  // activation -> checkpoint (in order of first appearance) -> (layer, head) -> record
  std::vector<std::string> activations;
  std::map<std::string, std::vector<std::string>> checkpoint_order;
  std::map<std::pair<std::string, std::string>, std::map<std::pair<long long, long long>, const ProbeRecord*>> heads;
  for (const ProbeRecord& r : records) {
    const std::string activation = r.activation.value_or("unknown");
    if (std::find(activations.begin(), activations.end(), activation) == activations.end()) activations.push_back(activation);
    auto& order = checkpoint_order[activation];
    if (std::find(order.begin(), order.end(), r.checkpoint) == order.end()) order.push_back(r.checkpoint);
    heads[{activation, r.checkpoint}][{r.layer, r.head}] = &r;
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
          if (!record->values[q]) continue;
          const double x = *record->values[q];
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
