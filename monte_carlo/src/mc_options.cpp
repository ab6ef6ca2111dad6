#include "attncheck/monte_carlo/mc_options.hpp"

#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/records/claims.hpp"
#include "attncheck/theory/expression.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string_view>

namespace attncheck::monte_carlo {

using records::parse_real;
using theory::Index;
using theory::InputError;

std::string McOption::python_name() const {
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

namespace {

std::string phi_help() {
  std::string words;
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    words += (words.empty() ? "" : ", ") + std::string(term.word);
    if (!term.help.empty()) words += fmt::format(" ({})", term.help);
  }
  return "Activation without --claim (C7: the h): " + words + "; or " + theory::expression_language_help() +
         ", e.g. 'sigmoid(x - log(N))', 'relu(x)^2/N', 'x^3/6 + x' (quote it for the shell)";
}

std::string estimand_help() {
  std::string words;
  for (const theory::EstimandTerm& term : theory::all_estimands()) {
    words += fmt::format("{}{} ({})", words.empty() ? "" : ", ", term.word, term.help);
  }
  return "Comma list of " + words + "; default value. C9 fixes value, dV, dS and dQ";
}

constexpr McPreset kPresets[] = {{"quick", "16:2048:x2", "32", "32", 4}, {"paper", "16:1024:x2", "64", "64", 600}};

std::string preset_help() {
  std::string out =
      "Sizes and time limit per point wherever --N, --D, --d or --max-seconds is not given: quick (default; a first "
      "sweep of one claim in about a minute on two cores) or paper (the papers' dimensions)";
  for (const McPreset& preset : kPresets) {
    out += fmt::format("; {}: --N {} --D {} --d {} --max-seconds {:g}", preset.name, preset.N, preset.D, preset.d,
                       preset.max_seconds);
  }
  return out;
}

std::vector<std::string> claim_choices() {
  std::vector<std::string> out;
  for (std::string_view id : records::sampled_claim_ids()) out.emplace_back(id);
  return out;
}

McOption text(std::string_view name, std::string help, std::string McRequest::*field) {
  return {name, std::move(help), field};
}
McOption optional_text(std::string_view name, std::string help, std::optional<std::string> McRequest::*field) {
  return {name, std::move(help), field};
}
McOption real(std::string_view name, std::string help, double McRequest::*field, records::RealRange range) {
  McOption option{name, std::move(help), field};
  option.real_range = range;
  return option;
}
McOption flag(std::string_view name, std::string help, bool McRequest::*field) {
  return {name, std::move(help), field};
}

std::vector<McOption> make_options() {
  std::vector<McOption> options;
  McOption claim = optional_text(
      "claim",
      "Preset exactly as the paper states it: C3 (E||(T/sqrt d)^p||_F = O(N), both readings of ^p), C4 (with "
      "1/sqrt(N): O(sqrt N)), C5 (E||d/dQ (T^p/sqrt d)||_F = O(N)), C6 (with 1/sqrt(N), Q and K: O(sqrt N)), C7 "
      "(relu paper: row sums of N^-alpha h(q.k/sqrt d) are O(1) at alpha = 1 and grow like N^(1-alpha) below, with and "
      "without qk-layernorm; the Frobenius norm as a secondary series), C8 (Var(q.k) = d_k over --d: i.i.d. entries, "
      "the literal zero-covariance hypothesis, the projected model), C9 (cross-normalization: O = softmax(S) (alpha "
      "softmax_col(V) + (1 - alpha) V), ||O||_F, ||dO/dV||_F, ||dO/dS||_F, ||dO/dW_Q||_F are O(sqrt N); at mix alpha "
      "= 1 a deterministic bound, checked on every sample)",
      &McRequest::claim);
  claim.choices = claim_choices();
  options.push_back(std::move(claim));
  options.push_back(
      optional_text("N",
                    "Sequence lengths: list (16,64,256) or start:stop:xfactor (16:4096:x2); default the --preset's",
                    &McRequest::N));
  options.push_back(optional_text("D", "Model dimensions (list or grid); default the --preset's", &McRequest::D));
  options.push_back(optional_text("d", "Head dimensions (list or grid); default the --preset's", &McRequest::d));
  McOption preset = text("preset", preset_help(), &McRequest::preset);
  for (const McPreset& each : kPresets) preset.choices.emplace_back(each.name);
  options.push_back(std::move(preset));
  options.push_back(text("p", "Exponents of poly/matpow (list)", &McRequest::p));
  options.push_back(optional_text("phi", phi_help(), &McRequest::phi));
  McOption normalize =
      optional_text("normalize",
                    "rows: divide each row of phi(S) by its sum (an expression --phi only; --phi 'exp(x)' "
                    "--normalize rows is softmax, 'exp(x/T)' softmax at temperature T); a row whose sum is 0 "
                    "counts as a row of zeros",
                    &McRequest::normalize);
  normalize.choices = {"rows"};
  options.push_back(std::move(normalize));
  options.push_back(
      optional_text("alpha", "C7's exponent in N^-alpha (list; default 0,0.5,1: the claim at 1, the growth without it)",
                    &McRequest::alpha));
  options.push_back(optional_text("mix",
                                  "C9's mix alpha of P = alpha softmax_col(V) + (1 - alpha) V (list of values in [0, "
                                  "1]; default 1, the RFP's softmax(S) softmax^T(V)); one series each",
                                  &McRequest::mix));
  options.push_back(optional_text("dv", "C9's value columns d_v of W_V (list or grid; default d)", &McRequest::dv));
  options.push_back(optional_text("inner-scale", "lambda in F = c(N) phi(lambda T): 1/sqrt(d) (default) or a number",
                                  &McRequest::inner_scale));
  options.push_back(optional_text("outer-scale",
                                  "c(N): none (default), 1/sqrt(N), 1/k:K (e.g. 1/k:8), N^-a (e.g. N^-1)",
                                  &McRequest::outer_scale));
  options.push_back(optional_text("estimand", estimand_help(), &McRequest::estimand));
  McOption claimed{"claimed-exponent", "Without --claim: the claimed exponent a of E||F|| = O(N^a)",
                   &McRequest::claimed_exponent};
  claimed.real_range = kClaimedExponentRange;
  options.push_back(std::move(claimed));
  options.push_back(text("samples",
                         "Samples per point: an integer, or auto (until --rel-se, --max-samples or --max-seconds)",
                         &McRequest::samples));
  options.push_back(real("rel-se",
                         "auto: stop when se/mean <= this for every estimand (C8: of the mean square), with a reliable "
                         "se unless proofs decide every verdict of the point",
                         &McRequest::rel_se, kRelativeErrorRange));
  McOption max_samples{"max-samples", "auto: at most this many samples per point", &McRequest::max_samples};
  max_samples.count_range = std::pair<std::uint64_t, std::uint64_t>{2, kMaxSamples};
  options.push_back(std::move(max_samples));
  McOption max_seconds{"max-seconds",
                       "auto: at most this much wall time per point (read after every sample from the second on); "
                       "default the --preset's",
                       &McRequest::max_seconds};
  max_seconds.real_range = kSecondsRange;
  options.push_back(std::move(max_seconds));
  options.push_back(real("sigma-x", "Standard deviation of the entries of X", &McRequest::sigma_x, kSigmaRange));
  options.push_back(real("sigma-t", "Standard deviation of the entries of Q and K", &McRequest::sigma_t, kSigmaRange));
  McOption seed{"seed", "Run seed; each point's seed is derived from it and the point", &McRequest::seed};
  seed.count_range = std::pair<std::uint64_t, std::uint64_t>{0, std::numeric_limits<std::uint64_t>::max()};
  options.push_back(std::move(seed));
  McOption threads{"threads", "CPU threads (0: all cores); results do not depend on it", &McRequest::threads};
  threads.integer_range = std::pair<std::int64_t, std::int64_t>{0, records::kMaxThreads};
  options.push_back(std::move(threads));
  // The real limit of the tile is the memory check; its side must fit the BLAS integer type.
  McOption tile{"tile", "Score tile size (tile x tile entries per thread)", &McRequest::tile};
  tile.integer_range = std::pair<std::int64_t, std::int64_t>{1, std::numeric_limits<std::int32_t>::max()};
  options.push_back(std::move(tile));
  options.push_back(real("tolerance", "Slack on the claimed exponent in the asymptotic-fit verdict",
                         &McRequest::tolerance, kToleranceRange));
  options.push_back(text("backend", backend_names(), &McRequest::backend));
  options.push_back(text("precision",
                         "double, or mixed: FP32 score tiles of x^p (p = 2..6) with FP64 sums, CPU only; the relative "
                         "error bound per (p, d) is printed and kept in the provenance",
                         &McRequest::precision));
  options.push_back(text("path",
                         "How the CPU evaluates a sample: direct (score tiles, Gram matrices), tensor (x^p by "
                         "symmetric tensor powers, O(N C(d+2p, 2p)), exact), or auto (the cheaper by a flop estimate, "
                         "per point); recorded per point",
                         &McRequest::path));
  options.push_back(optional_text("out",
                                  "Folder for points.jsonl, points.csv (each point written when it finishes) and "
                                  "fits.json (the fits of every series in the folder)",
                                  &McRequest::out));
  options.push_back(flag("resume",
                         "Keep the points already in --out and skip those this run would repeat (same point, estimand "
                         "and --seed); runs of other claims accumulate in one folder, and several runs may write it "
                         "at once",
                         &McRequest::resume));
  options.push_back(flag("force",
                         "Remove the points already in --out first (without --resume or --force, a folder that holds "
                         "points is refused)",
                         &McRequest::force));
  return options;
}

}  // namespace

const std::vector<McOption>& mc_options() {
  // Built on first use: the backend names come from the registry, which other files fill at static initialization.
  static const std::vector<McOption> options = make_options();
  return options;
}

const std::vector<McPreset>& mc_presets() {
  static const std::vector<McPreset> presets(std::begin(kPresets), std::end(kPresets));
  return presets;
}

const McPreset& mc_preset(const std::string& name) {
  std::string words;
  for (const McPreset& preset : mc_presets()) {
    if (preset.name == name) return preset;
    words += (words.empty() ? "" : ", ") + std::string(preset.name);
  }
  throw InputError(fmt::format("--preset {}: not one of {}", name, words));
}

McSizes sizes_of(const McRequest& request) {
  const McPreset& preset = mc_preset(request.preset);
  return {request.N.value_or(std::string(preset.N)), request.D.value_or(std::string(preset.D)),
          request.d.value_or(std::string(preset.d)), request.max_seconds.value_or(preset.max_seconds)};
}

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The largest size a grid may hold: the sweep multiplies sizes (N^2 scores, N x D inputs) in 64-bit counts, and
// far below this every point is refused by the memory check anyway.
constexpr Index kMaxGridValue = Index{1} << 31;

[[noreturn]] void refuse_beyond(std::string_view value, const std::string& option, const std::string& whole) {
  throw InputError(fmt::format("{}: {} in '{}' is beyond what attncheck can run: sizes go up to {} (2^31)", option,
                               value, whole, kMaxGridValue));
}

Index parse_positive_index(const std::string& raw, const std::string& option, const std::string& whole) {
  const std::string text = trim(raw);
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range && text.find_first_not_of("0123456789") == std::string::npos) {
    refuse_beyond(text, option, whole);
  }
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
    throw InputError(fmt::format("{}: '{}' in '{}' is not an integer", option, raw, whole));
  }
  if (value < 1) throw InputError(fmt::format("{}: {} in '{}' must be >= 1", option, value, whole));
  if (value > kMaxGridValue) refuse_beyond(text, option, whole);
  return static_cast<Index>(value);
}

}  // namespace

std::vector<Index> parse_index_grid(const std::string& text, const std::string& option) {
  std::vector<Index> out;
  if (text.find(':') != std::string::npos) {
    const auto parts = split(text, ':');
    if (parts.size() != 3 || trim(parts[2]).empty() || trim(parts[2])[0] != 'x') {
      throw InputError(fmt::format("{}: '{}' is not start:stop:xFACTOR (e.g. 16:4096:x2)", option, text));
    }
    const Index start = parse_positive_index(parts[0], option, text);
    const Index stop = parse_positive_index(parts[1], option, text);
    const double factor = parse_real(trim(parts[2]).substr(1), option, text);
    if (!(factor > 1)) throw InputError(fmt::format("{}: factor x{} in '{}' must be > 1", option, factor, text));
    if (stop < start) throw InputError(fmt::format("{}: stop {} is below start {} in '{}'", option, stop, start, text));
    // A factor so close to 1 that the steps from start to stop are past counting would only repeat rounded values
    // (and one that rounds next * factor back to next would never arrive).
    if (std::log(static_cast<double>(stop) / static_cast<double>(start)) / std::log(factor) > 1e6) {
      throw InputError(fmt::format("{}: factor x{} in '{}' is too close to 1: more than a million steps from {} to {}",
                                   option, factor, text, start, stop));
    }
    // In doubles, compared with stop before rounding: every value stays below 2^31, where llround is exact.
    for (double next = static_cast<double>(start); next < static_cast<double>(stop) + 0.5; next *= factor) {
      const Index value = static_cast<Index>(std::llround(next));
      if (out.empty() || value != out.back()) out.push_back(value);
      if (out.size() > 10000) throw InputError(fmt::format("{}: '{}' has more than 10000 values", option, text));
    }
    return out;
  }
  for (const auto& part : split(text, ',')) out.push_back(parse_positive_index(part, option, text));
  if (out.empty()) throw InputError(fmt::format("{}: empty list", option));
  return out;
}

std::vector<Estimand> parse_estimands(const std::string& text) {
  std::vector<Estimand> out;
  for (const auto& raw : split(text, ',')) {
    const std::string name = trim(raw);
    const std::optional<Estimand> estimand = theory::estimand_from_word(name);
    if (!estimand) {
      throw InputError(
          fmt::format("--estimand: '{}' is not one of {}", name, theory::words_of(theory::all_estimands())));
    }
    if (std::find(out.begin(), out.end(), *estimand) == out.end()) out.push_back(*estimand);
  }
  if (out.empty()) throw InputError("--estimand: empty list");
  return out;
}

OuterRule parse_outer_scale(const std::string& raw) {
  const std::string text = trim(raw);
  OuterRule rule;
  if (text == "none" || text == "1") return rule;
  if (text == "1/sqrt(N)") {
    rule.text = "1/sqrt(N)";
    rule.n_exponent = 0.5;
    return rule;
  }
  if (text.rfind("1/k:", 0) == 0) {
    const double k = parse_real(text.substr(4), "--outer-scale", text);
    if (!(k > 0)) throw InputError(fmt::format("--outer-scale: K = {} in '{}' must be > 0", k, text));
    rule.text = fmt::format("1/k:{:g}", k);
    rule.factor = 1 / k;
    return rule;
  }
  if (text.rfind("N^-", 0) == 0) {
    const double a = parse_real(text.substr(3), "--outer-scale", text);
    rule.text = fmt::format("N^-{}", a);  // the shortest text that reads back as a: records keep alpha exactly
    rule.n_exponent = a;
    return rule;
  }
  throw InputError(
      fmt::format("--outer-scale: '{}' is not one of none, 1/sqrt(N), 1/k:K (e.g. 1/k:8), N^-a (e.g. N^-1)", raw));
}

InnerRule parse_inner_scale(const std::string& raw) {
  const std::string text = trim(raw);
  if (text == "1/sqrt(d)") return {};
  const double value = parse_real(text, "--inner-scale", raw);
  if (value == 0) throw InputError("--inner-scale: 0 makes every score 0");
  return {false, value};
}

theory::Activation parse_phi(const std::string& name, int p, const std::optional<std::string>& normalize) {
  if (normalize && *normalize != "rows") {
    throw InputError(fmt::format("--normalize: '{}' is not rows (each row of phi(S) divided by its sum)", *normalize));
  }
  const std::optional<theory::Activation> activation = theory::activation_from_word(name, p);
  if (!activation) {
    // A lone name is a word mistyped more often than an expression without x.
    const bool one_name = !name.empty() && std::all_of(name.begin(), name.end(),
                                                       [](unsigned char ch) { return std::isalnum(ch) || ch == '_'; });
    if (one_name && name != "x") {
      throw InputError(fmt::format("--phi: '{}' is not one of {}, nor an expression in x such as 'relu(x)^2/N'",
                                   theory::printable(name, true), theory::words_of(theory::all_activations())));
    }
    return theory::expression_activation(theory::PhiExpression::parse(name, "--phi"), normalize.has_value());
  }
  if (normalize) {
    throw InputError(fmt::format(
        "--normalize rows divides an expression's rows by their sums: write --phi '{}(x)' --normalize rows (softmax "
        "is --phi 'exp(x)' --normalize rows)",
        name));
  }
  if (theory::takes_p(*activation) && p < 1) {
    throw InputError(fmt::format("--p: {} needs p >= 1, got {}", name == "matpow" ? "the matrix power" : name, p));
  }
  return *activation;
}

namespace {

// The choice whose word is `text`; the refusal lists every word, in the form the backend's refusal has.
template <class Choice>
Choice word_choice(const std::string& text, const char* option, std::initializer_list<Choice> choices,
                   const char* (*word)(Choice)) {
  std::string words;
  for (Choice choice : choices) {
    if (text == word(choice)) return choice;
    words += (words.empty() ? "" : ", ") + std::string(word(choice));
  }
  throw InputError(fmt::format("{} {}: not one of {}", option, text, words));
}

}  // namespace

EvaluationPath parse_evaluation_path(const std::string& text) {
  return word_choice(text, "--path", {EvaluationPath::automatic, EvaluationPath::direct, EvaluationPath::tensor},
                     evaluation_path_name);
}

ScorePrecision parse_score_precision(const std::string& text) {
  return word_choice(text, "--precision", {ScorePrecision::fp64, ScorePrecision::mixed}, precision_name);
}

}  // namespace attncheck::monte_carlo
