#include "attncheck/records/probe_record.hpp"

#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_fields.hpp"
#include "attncheck/records/json_output.hpp"
#include "attncheck/theory/expression.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace attncheck::records {

using detail::JsonFields;
using nlohmann::json;

namespace {

struct QuantityInfo {
  ProbeQuantity quantity;
  std::string_view key;
  std::string_view meaning;
  std::string_view activation;  // the trained activation whose own norm this is
  bool gradient;                // ||dA/dS||_F rather than ||A||_F
  double (*get)(const ProbeHeadRecord&);
};
#define ATTNCHECK_QUANTITY(q, key, meaning, activation, gradient, member)                                   \
  QuantityInfo {                                                                                            \
    ProbeQuantity::q, key, meaning, activation, gradient, [](const ProbeHeadRecord& r) { return r.member; } \
  }
// In the order of ProbeQuantity.
constexpr QuantityInfo kQuantities[] = {
    ATTNCHECK_QUANTITY(softmax, "softmax_fro", "||A||_F, softmax", "softmax", false, softmax.value),
    ATTNCHECK_QUANTITY(poly3_scaled, "poly3_scaled_fro", "||A||_F, x^3/sqrt(N)", "poly3_scaled", false,
                       poly3_scaled.value),
    ATTNCHECK_QUANTITY(poly3, "poly3_fro", "||A||_F, x^3", "poly3", false, poly3.value),
    ATTNCHECK_QUANTITY(relu_n, "relu_n_fro", "||A||_F, relu/N", "relu_n", false, relu_n.value),
    ATTNCHECK_QUANTITY(grad, "grad_fro", "||dA/dS||_F, softmax", "softmax", true, softmax.grad),
    ATTNCHECK_QUANTITY(poly3_scaled_grad, "poly3_scaled_grad_fro", "||dA/dS||_F, x^3/sqrt(N)", "poly3_scaled", true,
                       poly3_scaled.grad),
    ATTNCHECK_QUANTITY(poly3_grad, "poly3_grad_fro", "||dA/dS||_F, x^3", "poly3", true, poly3.grad),
    ATTNCHECK_QUANTITY(relu_n_grad, "relu_n_grad_fro", "||dA/dS||_F, relu/N", "relu_n", true, relu_n.grad),
    ATTNCHECK_QUANTITY(dWq, "dWq_fro", "||dA/dW_Q||_F, softmax", "", false, softmax.dWq),
    ATTNCHECK_QUANTITY(dWk, "dWk_fro", "||dA/dW_K||_F, softmax", "", false, softmax.dWk),
    ATTNCHECK_QUANTITY(entropy, "softmax_entropy", "entropy of A (nats), softmax", "", false, softmax_entropy),
    ATTNCHECK_QUANTITY(max_logit, "score_max_abs", "max |S|, the largest logit", "", false, score_max_abs),
};
#undef ATTNCHECK_QUANTITY
static_assert(std::size(kQuantities) == kProbeQuantityCount);
const QuantityInfo& info(ProbeQuantity q) { return kQuantities[static_cast<int>(q)]; }

std::optional<ProbeQuantity> own_quantity(const std::string& activation, bool gradient) {
  for (const QuantityInfo& q : kQuantities) {
    if (!q.activation.empty() && q.activation == activation && q.gradient == gradient) return q.quantity;
  }
  return std::nullopt;
}

// One scalar key of a head record. Integers are members of their own (so that no value passes through a
// double); every other number has a getter and a setter.
enum class FieldKind { integer, boolean, number };
struct Field {
  const char* key;
  FieldKind kind;
  bool weights;   // known only with the weights: left out of records measured from the scores alone
  bool required;  // a line without it cannot be plotted
  std::int64_t ProbeHeadRecord::*integer = nullptr;
  double (*get)(const ProbeHeadRecord&) = nullptr;
  void (*set)(ProbeHeadRecord&, double) = nullptr;
};
#define ATTNCHECK_INTEGER(key, member, weights, required) \
  Field { key, FieldKind::integer, weights, required, &ProbeHeadRecord::member }
#define ATTNCHECK_NUMBER(key, member, weights, required)                                                   \
  Field {                                                                                                  \
    key, FieldKind::number, weights, required, nullptr, [](const ProbeHeadRecord& r) { return r.member; }, \
        [](ProbeHeadRecord& r, double x) { r.member = x; }                                                 \
  }
// In the order `probe --csv` prints its columns.
const Field kFields[] = {
    ATTNCHECK_INTEGER("layer", layer, false, true),
    ATTNCHECK_INTEGER("head", head, false, true),
    ATTNCHECK_INTEGER("N", N, false, true),
    ATTNCHECK_INTEGER("D", D, true, false),
    ATTNCHECK_INTEGER("d", d, true, false),
    Field{"causal", FieldKind::boolean, false, false},
    ATTNCHECK_NUMBER("inner", inner, true, false),
    ATTNCHECK_NUMBER("softmax_fro", softmax.value, false, true),
    ATTNCHECK_NUMBER("grad_fro", softmax.grad, false, true),
    ATTNCHECK_NUMBER("dWq_fro", softmax.dWq, true, false),
    ATTNCHECK_NUMBER("dWk_fro", softmax.dWk, true, false),
    ATTNCHECK_INTEGER("kv_head", kv_head, true, false),
    ATTNCHECK_NUMBER("dWk_group_fro", dWk_group, true, false),
    ATTNCHECK_NUMBER("sqrt_N", sqrt_n, false, false),
    ATTNCHECK_NUMBER("softmax_over_sqrt_N", softmax_over_sqrt_n, false, false),
    ATTNCHECK_NUMBER("grad_over_2sqrt_N", grad_over_2sqrt_n, false, false),
    ATTNCHECK_NUMBER("grad_over_half_sqrt_N", grad_over_half_sqrt_n, false, false),
    ATTNCHECK_NUMBER("score_mean", score_mean, false, false),
    ATTNCHECK_NUMBER("score_std", score_std, false, false),
    ATTNCHECK_NUMBER("score_max_abs", score_max_abs, false, false),
    ATTNCHECK_NUMBER("scores_fro", scores_fro, false, false),
    ATTNCHECK_NUMBER("softmax_entropy", softmax_entropy, false, false),
    ATTNCHECK_NUMBER("linear_scaled_fro", linear_scaled.value, false, false),
    ATTNCHECK_NUMBER("linear_scaled_grad_fro", linear_scaled.grad, false, false),
    ATTNCHECK_NUMBER("poly3_scaled_fro", poly3_scaled.value, false, false),
    ATTNCHECK_NUMBER("poly3_scaled_grad_fro", poly3_scaled.grad, false, false),
    ATTNCHECK_NUMBER("poly3_scaled_dWq_fro", poly3_scaled.dWq, true, false),
    ATTNCHECK_NUMBER("poly3_scaled_dWk_fro", poly3_scaled.dWk, true, false),
    ATTNCHECK_NUMBER("poly3_fro", poly3.value, false, false),
    ATTNCHECK_NUMBER("poly3_grad_fro", poly3.grad, false, false),
    ATTNCHECK_NUMBER("poly3_dWq_fro", poly3.dWq, true, false),
    ATTNCHECK_NUMBER("poly3_dWk_fro", poly3.dWk, true, false),
    ATTNCHECK_NUMBER("relu_n_fro", relu_n.value, false, false),
    ATTNCHECK_NUMBER("relu_n_grad_fro", relu_n.grad, false, false),
    ATTNCHECK_NUMBER("sigma_x", sigma_x, true, false),
    ATTNCHECK_NUMBER("sigma_t", sigma_t, true, false),
    ATTNCHECK_NUMBER("iid_scores_fro", iid_scores_fro, true, false),
    ATTNCHECK_NUMBER("iid_poly3_scaled_fro", iid_poly3_scaled_fro, true, false),
    ATTNCHECK_NUMBER("iid_poly3_fro", iid_poly3_fro, true, false),
};
#undef ATTNCHECK_INTEGER
#undef ATTNCHECK_NUMBER

// The cross-normalization keys (claim C9), after the fields.
constexpr const char* kValueDimension = "d_v";
constexpr const char* kOutputBound = "cross_norm_out_bound";
constexpr const char* kGradValuesBound = "cross_norm_dV_bound";
constexpr std::string_view kOutputPrefix = "out_fro_mix";
constexpr std::string_view kGradValuesPrefix = "dV_fro_mix";

// "0", "0_5", "1": key suffixes without '.', so that every key is a plain identifier.
std::string mix_suffix(double mix) {
  std::string out = fmt::format("{:g}", mix);
  std::replace(out.begin(), out.end(), '.', '_');
  return out;
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

constexpr double kNotRecorded = std::numeric_limits<double>::quiet_NaN();

constexpr const char* kFormatVersion = "format_version";
constexpr const char* kCheckpoint = "checkpoint";
constexpr const char* kStep = "step";
constexpr const char* kActivation = "activation";
constexpr const char* kFingerprint = "checkpoint_fingerprint";

}  // namespace

std::string_view probe_key(ProbeQuantity quantity) { return info(quantity).key; }
std::string_view probe_meaning(ProbeQuantity quantity) { return info(quantity).meaning; }
std::string_view probe_activation(ProbeQuantity quantity) { return info(quantity).activation; }

std::optional<ProbeQuantity> own_attention_quantity(const std::string& activation) {
  return own_quantity(activation, false);
}
std::optional<ProbeQuantity> own_gradient_quantity(const std::string& activation) {
  return own_quantity(activation, true);
}

std::optional<double> ProbeHeadRecord::value(ProbeQuantity quantity) const {
  const double x = info(quantity).get(*this);
  if (!std::isfinite(x)) return std::nullopt;
  return x;
}

json to_json(const ProbeHeadRecord& r) {
  json out = json::object();
  for (const Field& field : kFields) {
    if (r.from_scores && field.weights) continue;
    switch (field.kind) {
      case FieldKind::integer: out[field.key] = r.*field.integer; break;
      case FieldKind::boolean: out[field.key] = r.causal ? json(*r.causal) : json(nullptr); break;
      case FieldKind::number: out[field.key] = number_or_null(field.get(r)); break;
    }
  }
  if (!r.what_if.empty()) {
    json list = json::array();
    for (const ProbeWhatIf& w : r.what_if) {
      json item{{"phi", w.phi}, {"fro", number_or_null(w.norms.value)}, {"grad_fro", number_or_null(w.norms.grad)}};
      if (!r.from_scores) {
        item["dWq_fro"] = number_or_null(w.norms.dWq);
        item["dWk_fro"] = number_or_null(w.norms.dWk);
      }
      list.push_back(std::move(item));
    }
    out["what_if"] = std::move(list);
  }
  if (r.cross_norm) {
    out[kValueDimension] = r.cross_norm->d_v;
    out[kOutputBound] = number_or_null(r.cross_norm->output_bound);
    out[kGradValuesBound] = number_or_null(r.cross_norm->grad_values_bound);
    for (const ProbeCrossNormMix& what_if : r.cross_norm->mixes) {
      const std::string suffix = mix_suffix(what_if.mix);
      out[std::string(kOutputPrefix) + suffix] = number_or_null(what_if.output_fro);
      out[std::string(kGradValuesPrefix) + suffix] = number_or_null(what_if.grad_values_fro);
    }
  }
  return out;
}

namespace {

// The mix alpha a key suffix names ("0_5" -> 0.5), none when the suffix is not a number in [0, 1].
std::optional<double> mix_of_suffix(std::string suffix) {
  std::replace(suffix.begin(), suffix.end(), '_', '.');
  if (suffix.empty() || suffix.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
  try {
    std::size_t used = 0;
    const double mix = std::stod(suffix, &used);
    if (used != suffix.size() || mix < 0 || mix > 1) return std::nullopt;
    return mix;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The what-if's numbers; its d_v too unless `d_v` gives it (a standard-error object has none: d_v is a shape).
ProbeCrossNorm cross_norm_from(const JsonFields& fields, std::optional<std::int64_t> d_v = std::nullopt) {
  ProbeCrossNorm out;
  if (d_v) {
    out.d_v = *d_v;
  } else {
    const long long written = fields.integer(kValueDimension);
    if (written < 1) fields.fail(fmt::format("\"{}\" = {} must be >= 1", kValueDimension, written));
    out.d_v = written;
  }
  out.output_bound = fields.number_or_nan(kOutputBound);
  out.grad_values_bound = fields.number_or_nan(kGradValuesBound);
  for (const auto& [key, value] : fields.object().items()) {
    if (!key.starts_with(kOutputPrefix)) continue;
    const std::string suffix = key.substr(kOutputPrefix.size());
    const auto mix = mix_of_suffix(suffix);
    if (!mix) fields.fail(fmt::format("\"{}\" names no mix alpha in [0, 1]", key));
    const std::string grad_key = std::string(kGradValuesPrefix) + suffix;
    out.mixes.push_back({*mix, fields.number_or_nan(key.c_str()), fields.number_or_nan(grad_key.c_str())});
  }
  std::sort(out.mixes.begin(), out.mixes.end(),
            [](const ProbeCrossNormMix& a, const ProbeCrossNormMix& b) { return a.mix < b.mix; });
  return out;
}

ProbeHeadRecord head_from(const JsonFields& fields) {
  ProbeHeadRecord r;
  r.from_scores = true;
  for (const Field& field : kFields) {
    if (!field.required && !fields.has(field.key)) {
      if (field.kind == FieldKind::number) field.set(r, kNotRecorded);
      continue;
    }
    if (field.weights) r.from_scores = false;
    switch (field.kind) {
      case FieldKind::integer: r.*field.integer = fields.integer(field.key); break;
      case FieldKind::boolean:
        if (!fields.is_null(field.key)) r.causal = fields.boolean(field.key);
        break;
      // A required norm must be a number: without it the line says nothing a report could draw.
      case FieldKind::number:
        field.set(r, field.required ? fields.number(field.key) : fields.number_or_nan(field.key));
        break;
    }
  }
  if (r.layer < 0 || r.head < 0) {
    fields.fail(fmt::format("\"layer\" = {} and \"head\" = {} must be >= 0", r.layer, r.head));
  }
  if (r.N < 1) fields.fail(fmt::format("\"N\" = {} must be >= 1", r.N));
  for (const QuantityInfo& q : kQuantities) {
    const double x = q.get(r);
    if (x < 0) fields.fail(fmt::format("\"{}\" = {} is negative, but it is a norm", q.key, x));
  }
  if (fields.has(kValueDimension)) r.cross_norm = cross_norm_from(fields);
  if (fields.has("what_if")) {
    const auto& list = fields.array("what_if");
    for (std::size_t k = 0; k < list.size(); ++k) {
      const JsonFields item(list[k], fmt::format("\"what_if\"[{}]", k));
      ProbeWhatIf w;
      w.phi = item.text("phi");
      // Read back as an expression: only the tool's own text reaches a report.
      try {
        w.phi = theory::PhiExpression::parse(w.phi, "\"phi\"").text();
      } catch (const theory::InputError& e) {
        item.fail(e.what());
      }
      const auto optional_norm = [&](const char* key) {
        return item.has(key) ? item.number_or_nan(key) : std::numeric_limits<double>::quiet_NaN();
      };
      w.norms = {item.number_or_nan("fro"), item.number_or_nan("grad_fro"), optional_norm("dWq_fro"),
                 optional_norm("dWk_fro")};
      for (const double x : {w.norms.value, w.norms.grad, w.norms.dWq, w.norms.dWk}) {
        if (x < 0) item.fail(fmt::format("a norm of '{}' is negative: {}", w.phi, x));
      }
      r.what_if.push_back(std::move(w));
    }
  }
  return r;
}

int format_version(const JsonFields& fields) {
  if (!fields.has(kFormatVersion)) return 1;  // version 1 wrote none
  const long long version = fields.integer(kFormatVersion);
  if (version < 1 || version > kProbeFormatVersion) {
    fields.fail(
        fmt::format("\"{}\" = {}: this attncheck reads probe records of versions 1 to {}{}", kFormatVersion, version,
                    kProbeFormatVersion,
                    version > kProbeFormatVersion ? " (written by a newer attncheck: read it with that one)" : ""));
  }
  return static_cast<int>(version);
}

ProbeRecord record_from(const JsonFields& fields) {
  format_version(fields);
  ProbeRecord r;
  r.checkpoint = fields.text(kCheckpoint);
  r.step = fields.integer_or_null(kStep);
  // What probe --watch writes: config.json's attention_activation, or a name whose norm the log has a column for.
  r.activation = fields.word_or_null(kActivation, {"softmax", "poly3_scaled", "poly3", "relu_n"});
  r.fingerprint = fields.text_or_null(kFingerprint);
  r.metrics = head_from(fields);
  return r;
}

}  // namespace

ProbeHeadRecord probe_head_from_json(const json& object, const std::string& where) {
  return head_from(JsonFields(object, where));
}

json to_json(const ProbeRecord& record) {
  json out = to_json(record.metrics);
  out[kFormatVersion] = kProbeFormatVersion;
  out[kCheckpoint] = record.checkpoint;
  out[kStep] = record.step ? json(*record.step) : json(nullptr);
  out[kActivation] = record.activation ? json(*record.activation) : json(nullptr);
  if (record.fingerprint) out[kFingerprint] = *record.fingerprint;
  return out;
}

ProbeRecord probe_record_from_json(const json& object, const std::string& where) {
  return record_from(JsonFields(object, where));
}

int probe_format_version(const json& object, const std::string& where) {
  return format_version(JsonFields(object, where));
}

std::string probe_log_line(const ProbeRecord& record) {
  try {
    return to_json(record).dump() + '\n';
  } catch (const json::type_error&) {
    // File names on Linux are bytes; JSON text is UTF-8.
    throw theory::InputError(fmt::format("checkpoint {}: its name is not UTF-8 text, which a JSON log cannot hold",
                                         json_text(json(record.checkpoint))));
  }
}

std::vector<std::string> probe_head_columns(bool cross_norm) {
  std::vector<std::string> out;
  for (const Field& field : kFields) out.emplace_back(field.key);
  if (cross_norm) {
    out.insert(out.end(), {kValueDimension, kOutputBound, kGradValuesBound});
    for (const double mix : kCrossNormMixes) {
      out.push_back(std::string(kOutputPrefix) + mix_suffix(mix));
      out.push_back(std::string(kGradValuesPrefix) + mix_suffix(mix));
    }
  }
  return out;
}

std::vector<double> probe_head_values(const ProbeHeadRecord& r) {
  std::vector<double> out;
  for (const Field& field : kFields) {
    if (r.from_scores && field.weights) {
      out.push_back(kNotRecorded);
      continue;
    }
    switch (field.kind) {
      case FieldKind::integer: out.push_back(static_cast<double>(r.*field.integer)); break;
      case FieldKind::boolean: out.push_back(r.causal ? (*r.causal ? 1.0 : 0.0) : kNotRecorded); break;
      case FieldKind::number: out.push_back(field.get(r)); break;
    }
  }
  if (r.cross_norm) {
    out.insert(out.end(),
               {static_cast<double>(r.cross_norm->d_v), r.cross_norm->output_bound, r.cross_norm->grad_values_bound});
    for (const ProbeCrossNormMix& what_if : r.cross_norm->mixes) {
      out.push_back(what_if.output_fro);
      out.push_back(what_if.grad_values_fro);
    }
  }
  return out;
}

namespace {

constexpr std::string_view kInputKinds[] = {"text", "tokens", "random", "pixels", "image", "text_file"};
constexpr const char* kSentences = "sentences";
constexpr const char* kStandardError = "standard_error";

template <class T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json sentence_json(const std::string& text, const std::vector<std::int64_t>& ids,
                   const std::optional<std::vector<std::string>>& tokens) {
  return {{"text", text}, {"token_ids", ids}, {"tokens", optional_json(tokens)}};
}

// The standard errors: every number of the row but the shapes (layer, head, kv_head, D, d, d_v) and causal.
json standard_error_json(const ProbeOutputRow& row) {
  const ProbeSentenceMeans& means = *row.over_sentences;
  json out = json::object();
  out["N"] = number_or_null(means.N_standard_error);
  for (const Field& field : kFields) {
    if (field.kind != FieldKind::number || (row.metrics.from_scores && field.weights)) continue;
    out[field.key] = number_or_null(field.get(means.standard_error));
  }
  if (row.metrics.cross_norm && means.standard_error.cross_norm) {
    ProbeHeadRecord what_if_only;
    what_if_only.cross_norm = means.standard_error.cross_norm;
    const json cross = to_json(what_if_only);
    for (const auto& [key, value] : cross.items()) {
      if (key == kOutputBound || key == kGradValuesBound || key.starts_with(kOutputPrefix) ||
          key.starts_with(kGradValuesPrefix)) {
        out[key] = value;
      }
    }
  }
  return out;
}

json row_json(const ProbeOutputRow& row) {
  json out = to_json(row.metrics);
  if (row.over_sentences) {
    out["N"] = number_or_null(row.over_sentences->N);
    out[kSentences] = row.over_sentences->sentences;
    out[kStandardError] = standard_error_json(row);
  }
  return out;
}

std::optional<std::vector<std::string>> strings_or_null(const JsonFields& fields, const char* key) {
  if (fields.is_null(key)) return std::nullopt;
  std::vector<std::string> out;
  for (const json& item : fields.array(key)) {
    if (!item.is_string()) fields.fail(fmt::format("\"{}\" must be a list of text", key));
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::vector<std::int64_t> integers_of(const JsonFields& fields, const char* key) {
  std::vector<std::int64_t> out;
  for (long long id : fields.integers(key)) out.push_back(id);
  return out;
}

ProbeInputInfo input_from(const JsonFields& f) {
  using Kind = ProbeInputInfo::Kind;
  ProbeInputInfo in;
  const std::string kind = f.word("kind", JsonFields::Words(kInputKinds));
  in.kind =
      static_cast<Kind>(std::find(std::begin(kInputKinds), std::end(kInputKinds), kind) - std::begin(kInputKinds));
  switch (in.kind) {
    case Kind::text: in.text = f.text("text"); break;
    case Kind::random: {
      in.seed = std::stoull(f.count_text("seed"));
      in.length = f.integer("length");
      in.sigma = f.number("sigma");
      break;
    }
    default: in.file = f.text("file"); break;
  }
  if (in.kind == Kind::text || in.kind == Kind::tokens) {
    in.token_ids = integers_of(f, "token_ids");
    in.tokens = strings_or_null(f, "tokens");
  }
  if (in.kind == Kind::pixels || in.kind == Kind::image) {
    in.height = f.integer("height");
    in.width = f.integer("width");
    in.preprocessing = f.text_or_null("preprocessing");
  }
  if (in.kind == Kind::text_file) {
    std::size_t k = 0;
    for (const json& item : f.array(kSentences)) {
      const JsonFields sentence(item, fmt::format("{} sentences[{}]", f.where(), k++));
      in.sentences.push_back(
          {sentence.text("text"), integers_of(sentence, "token_ids"), strings_or_null(sentence, "tokens")});
    }
  }
  return in;
}

ProbeOutputRow row_from(const JsonFields& fields) {
  ProbeOutputRow row;
  if (!fields.has(kSentences)) {
    row.metrics = head_from(fields);
    return row;
  }
  ProbeSentenceMeans means;
  means.sentences = fields.integer(kSentences);
  if (means.sentences < 1) fields.fail(fmt::format("\"{}\" = {} must be >= 1", kSentences, means.sentences));
  means.N = fields.number("N");
  if (means.N < 1) fields.fail(fmt::format("\"N\" = {} must be >= 1", means.N));
  // The head's other keys read as for one input, its N the nearest whole number of positions.
  json whole = fields.object();
  whole["N"] = std::llround(means.N);
  row.metrics = head_from(JsonFields(whole, fields.where()));
  const JsonFields errors(fields.at(kStandardError), fields.where() + " " + kStandardError);
  means.N_standard_error = errors.has("N") ? errors.number_or_nan("N") : kNotRecorded;
  means.standard_error.from_scores = row.metrics.from_scores;
  for (const Field& field : kFields) {
    if (field.kind != FieldKind::number) continue;
    field.set(means.standard_error, errors.has(field.key) ? errors.number_or_nan(field.key) : kNotRecorded);
  }
  if (row.metrics.cross_norm) means.standard_error.cross_norm = cross_norm_from(errors, row.metrics.cross_norm->d_v);
  row.over_sentences = std::move(means);
  return row;
}

}  // namespace

std::string_view input_kind_name(ProbeInputInfo::Kind kind) { return kInputKinds[static_cast<int>(kind)]; }

json to_json(const ProbeOutput& output) {
  using Kind = ProbeInputInfo::Kind;
  const ProbeModelInfo& m = output.model;
  json model = {{"path", m.path},
                {"architecture", m.architecture},
                {"config_file", optional_json(m.config_file)},
                {"config_sha256", optional_json(m.config_sha256)},
                {"layers", m.layers},
                {"heads", m.heads},
                {"head_dim", m.head_dim},
                {"hidden", m.hidden},
                {"attention_activation", m.attention_activation}};
  const ProbeInputInfo& i = output.input;
  json in = {{"kind", input_kind_name(i.kind)}};
  switch (i.kind) {
    case Kind::text: in["text"] = i.text; break;
    case Kind::random:
      in["seed"] = i.seed;
      in["length"] = i.length;
      in["sigma"] = i.sigma;
      break;
    default: in["file"] = i.file; break;
  }
  if (i.kind == Kind::text || i.kind == Kind::tokens) {
    in["token_ids"] = i.token_ids;
    in["tokens"] = optional_json(i.tokens);
  }
  if (i.kind == Kind::pixels || i.kind == Kind::image) {
    in["height"] = i.height;
    in["width"] = i.width;
    if (i.preprocessing) in["preprocessing"] = *i.preprocessing;
  }
  if (i.kind == Kind::text_file) {
    json sentences = json::array();
    for (const ProbeSentence& s : i.sentences) sentences.push_back(sentence_json(s.text, s.token_ids, s.tokens));
    in[kSentences] = std::move(sentences);
  }
  json above = json::array();
  for (const ProbeHeadAbove& h : output.verdict.heads_above_a_bound) {
    json item = {{"layer", h.layer}, {"head", h.head}};
    if (h.sentence) item["sentence"] = *h.sentence;
    above.push_back(std::move(item));
  }
  json heads = json::array();
  for (const ProbeOutputRow& row : output.heads) heads.push_back(row_json(row));
  json tool = {{"name", "attncheck"}, {"version", output.tool_version}, {"precision", output.precision}};
  if (output.precision == "mixed") tool["float_kernels"] = output.float_kernels;
  if (const auto& check = output.mixed_against_double) {
    // An infinite difference (a number finite in one precision only) is written as null.
    tool["mixed_against_double"] = {{"largest_relative_difference", number_or_null(check->largest)},
                                    {"field", check->field},
                                    {"layer", check->layer},
                                    {"head", check->head},
                                    {"norms_largest_relative_difference", number_or_null(check->largest_norm)},
                                    {"float_kernels", check->float_kernels}};
  }
  return {{kFormatVersion, kProbeFormatVersion},
          {"model", std::move(model)},
          {"input", std::move(in)},
          {"tool", std::move(tool)},
          {"verdict",
           {{"holds", output.verdict.holds},
            {"basis", "exact"},
            {"statement", output.verdict.statement},
            {"heads_above_a_bound", std::move(above)}}},
          {"heads", std::move(heads)}};
}

ProbeOutput probe_output_from_json(const json& object, const std::string& where) {
  const JsonFields top(object, where);
  format_version(top);
  ProbeOutput out;
  const JsonFields model(top.at("model"), where + " model");
  out.model.path = model.text("path");
  out.model.architecture = model.text("architecture");
  out.model.config_file = model.text_or_null("config_file");
  out.model.config_sha256 = model.text_or_null("config_sha256");
  out.model.layers = model.integer("layers");
  out.model.heads = model.integer("heads");
  out.model.head_dim = model.integer("head_dim");
  out.model.hidden = model.integer("hidden");
  out.model.attention_activation = model.text("attention_activation");
  out.input = input_from(JsonFields(top.at("input"), where + " input"));
  const JsonFields tool(top.at("tool"), where + " tool");
  tool.word("name", {"attncheck"});
  out.tool_version = tool.text("version");
  // Output of attncheck before --precision was added ran in double precision.
  out.precision = tool.is_null("precision") ? "double" : tool.word("precision", {"double", "mixed"});
  // Mixed output of attncheck before the AVX-512 kernels did not name its kernels: the portable ones.
  if (out.precision == "mixed") {
    out.float_kernels = tool.is_null("float_kernels") ? "portable" : tool.word("float_kernels", {"avx512", "portable"});
  }
  if (!tool.is_null("mixed_against_double")) {
    const JsonFields check(tool.at("mixed_against_double"), where + " tool mixed_against_double");
    const auto difference = [&check](const char* key) {
      const double value = check.number_or_nan(key);
      return std::isnan(value) ? std::numeric_limits<double>::infinity() : value;
    };
    out.mixed_against_double =
        ProbePrecisionCheck{.largest = difference("largest_relative_difference"),
                            .field = check.text("field"),
                            .layer = check.integer("layer"),
                            .head = check.integer("head"),
                            .largest_norm = difference("norms_largest_relative_difference"),
                            .float_kernels = check.word("float_kernels", {"avx512", "portable"})};
  }
  const JsonFields verdict(top.at("verdict"), where + " verdict");
  out.verdict.holds = verdict.boolean("holds");
  verdict.word("basis", {"exact"});
  out.verdict.statement = verdict.text("statement");
  std::size_t k = 0;
  for (const json& item : verdict.array("heads_above_a_bound")) {
    const JsonFields above(item, fmt::format("{} verdict heads_above_a_bound[{}]", where, k++));
    const auto sentence = above.integer_or_null("sentence");
    out.verdict.heads_above_a_bound.push_back({sentence ? std::optional<std::int64_t>(*sentence) : std::nullopt,
                                               above.integer("layer"), above.integer("head")});
  }
  std::size_t row = 0;
  for (const json& item : top.array("heads")) {
    out.heads.push_back(row_from(JsonFields(item, fmt::format("{} heads[{}]", where, row++))));
  }
  return out;
}

ProbeHeadRecord probe_head_from_values(const std::vector<double>& values, bool cross_norm) {
  const std::size_t columns = probe_head_columns(cross_norm).size();
  if (values.size() != columns) {
    throw std::invalid_argument(fmt::format("{} values for the {} columns of a head record", values.size(), columns));
  }
  ProbeHeadRecord r;
  std::size_t i = 0;
  for (const Field& field : kFields) {
    const double x = values[i++];
    switch (field.kind) {
      case FieldKind::integer: r.*field.integer = std::llround(x); break;
      case FieldKind::boolean:
        if (!std::isnan(x)) r.causal = x != 0;
        break;
      case FieldKind::number: field.set(r, x); break;
    }
  }
  if (cross_norm) {
    ProbeCrossNorm cross{std::llround(values[i]), values[i + 1], values[i + 2], {}};
    i += 3;
    for (const double mix : kCrossNormMixes) {
      cross.mixes.push_back({mix, values[i], values[i + 1]});
      i += 2;
    }
    r.cross_norm = std::move(cross);
  }
  return r;
}

std::vector<ProbeRecord> parse_probe_log(const std::string& text, const std::string& name, const Warn& warn) {
  std::vector<ProbeRecord> records;
  detail::for_each_json_line(
      text, name,
      [&](const JsonFields& fields, int line) {
        ProbeRecord r = record_from(fields);
        r.line = line;
        records.push_back(std::move(r));
      },
      warn);
  return records;
}

std::vector<ProbeRecord> read_probe_log(const std::filesystem::path& path, const Warn& warn) {
  return parse_probe_log(read_text_file(path), path.string(), warn);
}

}  // namespace attncheck::records
