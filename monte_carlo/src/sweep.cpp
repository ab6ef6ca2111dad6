#include "attncheck/monte_carlo/sweep.hpp"

#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/moments.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string_view>

namespace attncheck::monte_carlo {

using theory::ActivationKind;
using theory::Index;
using theory::InputError;
using theory::Pointwise;

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

double parse_real(const std::string& raw, const std::string& option, const std::string& whole) {
  const std::string text = trim(raw);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    throw InputError(fmt::format("{}: '{}' in '{}' is not a number", option, raw, whole));
  }
  return value;
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

std::vector<double> parse_real_list(const std::string& text, const std::string& option) {
  std::vector<double> out;
  for (const auto& part : split(text, ',')) out.push_back(parse_real(part, option, text));
  if (out.empty()) throw InputError(fmt::format("{}: empty list", option));
  return out;
}

const char* estimand_name(Estimand e) {
  switch (e) {
    case Estimand::value: return "value";
    case Estimand::dQ: return "dQ";
    case Estimand::dK: return "dK";
    case Estimand::dS: return "dS";
    case Estimand::score_var: return "score-var";
    case Estimand::row_sum: return "row-sum";
    case Estimand::row_mean: return "row-mean";
    case Estimand::dV: return "dV";
  }
  return "?";
}

std::vector<Estimand> parse_estimands(const std::string& text) {
  std::vector<Estimand> out;
  for (const auto& raw : split(text, ',')) {
    const std::string name = trim(raw);
    bool found = false;
    for (int k = 0; k < kEstimandCount; ++k) {
      if (name == estimand_name(static_cast<Estimand>(k))) {
        if (std::find(out.begin(), out.end(), static_cast<Estimand>(k)) == out.end()) {
          out.push_back(static_cast<Estimand>(k));
        }
        found = true;
      }
    }
    if (!found) {
      throw InputError(
          fmt::format("--estimand: '{}' is not one of value, dQ, dK, dS, score-var, row-sum, row-mean, dV", name));
    }
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
    rule.text = fmt::format("N^-{:g}", a);
    rule.n_exponent = a;
    return rule;
  }
  throw InputError(
      fmt::format("--outer-scale: '{}' is not one of none, 1/sqrt(N), 1/k:K (e.g. 1/k:8), N^-a (e.g. N^-1)", raw));
}

double InnerRule::at(Index d) const { return inverse_sqrt_d ? 1 / std::sqrt(static_cast<double>(d)) : value; }

InnerRule parse_inner_scale(const std::string& raw) {
  const std::string text = trim(raw);
  if (text == "1/sqrt(d)") return {};
  const double value = parse_real(text, "--inner-scale", raw);
  if (value == 0) throw InputError("--inner-scale: 0 makes every score 0");
  return {false, value};
}

theory::Activation parse_phi(const std::string& name, int p) {
  theory::Activation a;
  a.p = p;
  if (name == "softmax") {
    a.kind = ActivationKind::softmax;
    return a;
  }
  if (name == "matpow") {
    if (p < 1) throw InputError(fmt::format("--p: the matrix power needs p >= 1, got {}", p));
    a.kind = ActivationKind::matpow;
    return a;
  }
  a.kind = ActivationKind::pointwise;
  static const std::pair<const char*, Pointwise> names[] = {
      {"poly", Pointwise::poly},   {"identity", Pointwise::identity}, {"relu", Pointwise::relu},
      {"relu2", Pointwise::relu2}, {"gelu", Pointwise::gelu},         {"softplus", Pointwise::softplus},
      {"relu6", Pointwise::relu6}, {"sigmoid", Pointwise::sigmoid}};
  for (const auto& [text, h] : names) {
    if (name == text) {
      a.h = h;
      if (h == Pointwise::poly && p < 1) throw InputError(fmt::format("--p: poly needs p >= 1, got {}", p));
      return a;
    }
  }
  throw InputError(fmt::format(
      "--phi: '{}' is not one of poly, matpow, softmax, relu, relu2, gelu, softplus, identity, relu6, sigmoid", name));
}

std::string phi_name(const theory::Activation& a) {
  switch (a.kind) {
    case ActivationKind::softmax: return "softmax";
    case ActivationKind::matpow: return "matpow";
    case ActivationKind::pointwise: break;
  }
  switch (a.h) {
    case Pointwise::poly: return "poly";
    case Pointwise::identity: return "identity";
    case Pointwise::relu: return "relu";
    case Pointwise::relu2: return "relu2";
    case Pointwise::gelu: return "gelu";
    case Pointwise::softplus: return "softplus";
    case Pointwise::relu6: return "relu6";
    case Pointwise::sigmoid: return "sigmoid";
  }
  return "?";
}

std::optional<double> SeriesSpec::claimed_for(Estimand estimand) const {
  if (!claimed_exponent) return std::nullopt;
  return estimand == Estimand::row_mean ? *claimed_exponent - 1 : *claimed_exponent;  // row mean = row sum / N
}

bool SeriesSpec::counts_for_exit_of(Estimand estimand) const {
  return counts_for_exit && std::find(secondary.begin(), secondary.end(), estimand) == secondary.end();
}

records::Claim claim_info(const std::string& id) {
  const std::optional<records::Claim> claim = records::find_claim(id);
  if (!claim || id == "C1" || id == "C2") {
    throw InputError(
        fmt::format("--claim: '{}' is not one of C3, C4, C5, C6, C7, C8, C9 (C1, C2 are exact: attncheck bounds)", id));
  }
  return *claim;
}

std::vector<SeriesSpec> build_series(const SweepRequest& rq) {
  std::vector<SeriesSpec> out;
  for (int p : rq.p) {
    if (p < 1 || p > 64) throw InputError(fmt::format("--p: {} must be between 1 and 64", p));
  }
  if (rq.mix && rq.claim != std::optional<std::string>("C9")) {
    throw InputError("--mix is C9's mix alpha of softmax_col(V) and V: give it with --claim C9");
  }
  if (!rq.claim) {
    if (!rq.phi)
      throw InputError("without --claim, give --phi (and optionally --inner-scale, --outer-scale, --estimand)");
    for (int p : rq.p) {
      SeriesSpec s;
      s.activation = parse_phi(*rq.phi, p);
      s.inner = rq.inner_scale ? parse_inner_scale(*rq.inner_scale) : InnerRule{};
      s.outer = rq.outer_scale ? parse_outer_scale(*rq.outer_scale) : OuterRule{};
      s.estimands = rq.estimands ? parse_estimands(*rq.estimands) : std::vector<Estimand>{Estimand::value};
      if (std::find(s.estimands.begin(), s.estimands.end(), Estimand::dV) != s.estimands.end()) {
        throw InputError(
            "--estimand dV: the derivative in the values belongs to C9's cross-normalized output (--claim C9)");
      }
      s.claimed_exponent = rq.claimed_exponent;
      if (s.activation.kind == ActivationKind::matpow) s.reading = "matrix";
      if (s.activation.kind == ActivationKind::pointwise && s.activation.h == Pointwise::poly)
        s.reading = "elementwise";
      out.push_back(s);
      // p only matters for poly and matpow: one series is enough for the others.
      const bool uses_p = s.activation.kind == ActivationKind::matpow ||
                          (s.activation.kind == ActivationKind::pointwise && s.activation.h == Pointwise::poly);
      if (!uses_p) break;
    }
    return out;
  }
  const std::string& id = *rq.claim;
  const records::Claim claim = claim_info(id);
  if (rq.claimed_exponent) throw InputError(fmt::format("--claimed-exponent: --claim {} fixes the exponent", id));
  const auto fixed = [&](const std::optional<std::string>& given, const char* option) {
    if (given)
      throw InputError(fmt::format("{} {}: --claim {} fixes it as the paper states it; drop one", option, *given, id));
  };
  fixed(rq.inner_scale, "--inner-scale");
  fixed(rq.outer_scale, "--outer-scale");
  fixed(rq.estimands, "--estimand");
  if (id != "C7") fixed(rq.phi, "--phi");

  if (id == "C3" || id == "C4") {
    for (int p : rq.p) {
      for (const char* reading : {"elementwise", "matrix"}) {
        SeriesSpec s;
        s.claim = id;
        s.reading = reading;
        s.activation = parse_phi(std::string(reading) == "matrix" ? "matpow" : "poly", p);
        s.outer = id == "C4" ? parse_outer_scale("1/sqrt(N)") : OuterRule{};
        s.estimands = {Estimand::value};
        s.claimed_exponent = claim.claimed_exponent;
        s.counts_for_exit = std::string(reading) == "elementwise";
        out.push_back(s);
      }
    }
  } else if (id == "C5" || id == "C6") {
    for (int p : rq.p) {
      SeriesSpec s;
      s.claim = id;
      s.reading = "elementwise";
      s.activation = parse_phi("poly", p);
      s.inner = InnerRule{false, 1};
      s.outer = id == "C6" ? parse_outer_scale("1/sqrt(N)") : OuterRule{};
      s.outer.d_exponent = 0.5;
      s.estimands =
          id == "C6" ? std::vector<Estimand>{Estimand::dQ, Estimand::dK} : std::vector<Estimand>{Estimand::dQ};
      s.claimed_exponent = claim.claimed_exponent;
      out.push_back(s);
    }
  } else if (id == "C7") {
    const std::string h = rq.phi.value_or("relu");
    if (h == "poly" || h == "matpow" || h == "softmax") {
      throw InputError(
          fmt::format("--phi {}: C7 is about h in relu, relu2, gelu, softplus, identity, relu6, sigmoid", h));
    }
    // alpha = 1 is the claim; 0 and 0.5 show that the factor L^-1 is needed (row sums then grow).
    for (double alpha : rq.alpha.value_or(std::vector<double>{0.0, 0.5, 1.0})) {
      for (const auto scores : {theory::ScoreModel::projected_layernorm, theory::ScoreModel::projected}) {
        SeriesSpec s;
        s.claim = id;
        s.activation = parse_phi(h, 1);
        s.alpha = alpha;
        s.outer = parse_outer_scale(fmt::format("N^-{}", alpha));
        s.scores = scores;
        s.estimands = {Estimand::row_sum, Estimand::row_mean, Estimand::value};
        s.secondary = {Estimand::value};
        s.claimed_exponent = 1 - alpha;
        out.push_back(s);
      }
    }
  } else if (id == "C9") {
    for (double mix : rq.mix.value_or(std::vector<double>{1.0})) {
      if (!(mix >= 0 && mix <= 1)) throw InputError(fmt::format("--mix: {} is not in [0, 1]", mix));
      SeriesSpec s;
      s.claim = id;
      s.activation = parse_phi("softmax", 1);
      s.mix = mix;
      s.estimands = {Estimand::value, Estimand::dV, Estimand::dS, Estimand::dQ};
      s.claimed_exponent = claim.claimed_exponent;
      out.push_back(s);
    }
  } else if (id == "C8") {
    for (const auto scores :
         {theory::ScoreModel::unit_pairs, theory::ScoreModel::sign_coupled_pairs, theory::ScoreModel::projected}) {
      SeriesSpec s;
      s.claim = id;
      s.activation = parse_phi("identity", 1);
      s.inner = InnerRule{false, 1};
      s.scores = scores;
      s.estimands = {Estimand::score_var};
      s.claimed_exponent = claim.claimed_exponent;
      s.fit_over_d = true;
      // The projected model is reported as what it is: its entries are neither unit-variance nor independent.
      s.claims_variance_equals_d = scores != theory::ScoreModel::projected;
      s.counts_for_exit = scores != theory::ScoreModel::projected;
      out.push_back(s);
    }
  }
  return out;
}

std::uint64_t point_seed(std::uint64_t run_seed, const std::string& key) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (const unsigned char ch : key) {
    hash ^= ch;
    hash *= 0x100000001b3ULL;
  }
  return streams::derive_point_seed(run_seed, hash);
}

PointSpec make_point(const SeriesSpec& series, Index N, Index D, Index d, double sigma_x, double sigma_t,
                     std::uint64_t run_seed, Index dv) {
  if (!(sigma_x > 0) || !(sigma_t > 0)) {
    throw InputError(fmt::format("--sigma-x {} and --sigma-t {} must be > 0", sigma_x, sigma_t));
  }
  PointSpec ps;
  ps.series = &series;
  theory::AttentionMap map;
  map.activation = series.activation;
  map.inner = series.inner.at(d);
  map.outer.factor = series.outer.factor * std::pow(static_cast<double>(d), -series.outer.d_exponent);
  map.outer.n_exponent = series.outer.n_exponent;
  // The seed follows from the key, which names the point's fields: set once they are.
  ps.point = make_sweep_point({N, D, d, sigma_x, sigma_t}, map, 0, series.scores, series.mix, dv);
  SweepPoint& pt = ps.point;
  ps.key =
      fmt::format("phi={};p={};inner={:.17g};outer={:.17g}*N^-{:.17g};N={};D={};d={};sigma_x={:.17g};sigma_t={:.17g}",
                  phi_name(series.activation), series.activation.p, pt.map.inner, pt.map.outer.factor,
                  pt.map.outer.n_exponent, N, D, d, sigma_x, sigma_t);
  // The papers' model keeps the key (and the seed) it always had.
  if (series.scores != theory::ScoreModel::projected)
    ps.key += fmt::format(";scores={}", theory::score_model_name(series.scores));
  if (series.mix) {
    ps.key += fmt::format(";cross-norm;mix={:.17g};dv={}", *pt.mix, pt.dv);
  }
  pt.seed = point_seed(run_seed, ps.key);
  return ps;
}

namespace {

theory::GaussianModel model_of(const SweepPoint& pt) { return {pt.D, pt.d, pt.sigma_x, pt.sigma_t, pt.map.inner}; }

// The off-diagonal and diagonal expectations of one entry; for the matrix power they exist at p = 1 only,
// where it is the identity.
std::pair<theory::EntryExpectations, theory::EntryExpectations> entry_pair(const SweepPoint& pt) {
  theory::Activation a = pt.map.activation;
  if (a.kind == ActivationKind::matpow && a.p == 1) a = {ActivationKind::pointwise, Pointwise::identity, 1};
  const theory::GaussianModel model = model_of(pt);
  return {theory::entry_expectations(a, model, pt.scores, false),
          theory::entry_expectations(a, model, pt.scores, true)};
}

std::optional<double> both(const std::optional<double>& off, const std::optional<double>& diag,
                           const std::function<double(double, double)>& combine) {
  if (!off || !diag) return std::nullopt;
  return combine(*off, *diag);
}

}  // namespace

ExactMoments exact_moments(const PointSpec& ps, Estimand estimand) {
  const SweepPoint& pt = ps.point;
  ExactMoments out;
  if (pt.mix || estimand == Estimand::dV) return out;
  const double c = pt.map.outer.at(pt.N);
  const double n = static_cast<double>(pt.N);
  const bool softmax = pt.map.activation.kind == ActivationKind::softmax;
  if (estimand == Estimand::score_var) {
    out.second = theory::score_variance(pt.scores, model_of(pt));
  } else if (softmax && (estimand == Estimand::row_sum || estimand == Estimand::row_mean)) {
    out.mean = estimand == Estimand::row_sum ? c : c / n;  // every row of probabilities sums to 1
  } else {
    const auto [off, diag] = entry_pair(pt);
    const auto sum = [&](double o, double g) { return theory::entry_sum(pt.N, o, g); };
    const auto second = [&](const std::optional<double>& o, const std::optional<double>& g,
                            const std::optional<double>& o4, const std::optional<double>& g4) {
      out.second = both(o, g, sum);
      if (out.second) *out.second *= c * c;
      const auto fourth = both(o4, g4, sum);
      if (out.second && fourth)
        out.second_variance_floor = std::max(0.0, c * c * c * c * *fourth - *out.second * *out.second);
    };
    switch (estimand) {
      case Estimand::value: second(off.value_sq, diag.value_sq, off.value_4, diag.value_4); break;
      case Estimand::dS: second(off.deriv_sq, diag.deriv_sq, off.deriv_4, diag.deriv_4); break;
      case Estimand::dQ:
      case Estimand::dK: second(off.q_weight, diag.q_weight, off.q_weight_sq, diag.q_weight_sq); break;
      case Estimand::row_sum:
      case Estimand::row_mean:
        // One row holds N - 1 off-diagonal entries and its diagonal one.
        out.mean = both(off.value, diag.value, [&](double o, double g) { return c * ((n - 1) * o + g); });
        if (out.mean && estimand == Estimand::row_mean) *out.mean /= n;
        break;
      case Estimand::score_var:
      case Estimand::dV: break;
    }
  }
  for (std::optional<double>* x : {&out.mean, &out.second, &out.second_variance_floor}) {
    if (*x && !std::isfinite(**x)) {
      out.out_of_range = true;
      x->reset();
    }
  }
  if (!out.second) out.second_variance_floor.reset();
  return out;
}

std::optional<double> exact_norm_sq(const PointSpec& ps, Estimand estimand) {
  return exact_moments(ps, estimand).second;
}

std::optional<double> cross_norm_sample_bound(const PointSpec& ps, Estimand estimand) {
  const SweepPoint& pt = ps.point;
  if (!pt.mix || *pt.mix != 1) return std::nullopt;
  const theory::CrossNormBounds bounds = theory::cross_norm_bounds(pt.N, pt.dv);
  switch (estimand) {
    case Estimand::value: return bounds.output;
    case Estimand::dV: return bounds.grad_values;
    case Estimand::dS: return bounds.grad_scores;
    default: return std::nullopt;
  }
}

std::optional<ExactLaw> exact_law(const PointSpec& ps, Estimand estimand) {
  const SweepPoint& pt = ps.point;
  if (pt.mix) {
    const auto bound = cross_norm_sample_bound(ps, estimand);
    if (!bound) return std::nullopt;
    ExactLaw law;
    law.of = fmt::format("sup over inputs of ||{}||_F (fact 11)", estimand == Estimand::value ? "O"
                                                                  : estimand == Estimand::dV  ? "dO/dV"
                                                                                              : "dO/dS");
    law.bound = true;
    law.deterministic = true;
    law.exponent = 0.5;  // sqrt(N d_v) or sqrt(N d_v / 8): the constant is the bound at N = 1
    law.constant = *bound / std::sqrt(static_cast<double>(pt.N));
    return law;
  }
  const double factor = pt.map.outer.factor;  // c(N) = factor N^-n_exponent
  const double n_exponent = pt.map.outer.n_exponent;
  ExactLaw law;
  if (estimand == Estimand::score_var) {
    const double var = theory::score_variance(pt.scores, model_of(pt));
    if (!std::isfinite(var) || pt.scores == theory::ScoreModel::projected_layernorm) return std::nullopt;
    law.of = "Var(s)";
    law.bound = false;
    // Var(s) = lambda^2 K d for the projected and pair models (K free of d): in d, lambda = 1/sqrt(d) cancels d.
    if (ps.series && ps.series->fit_over_d) {
      law.exponent = ps.series->inner.inverse_sqrt_d ? 0.0 : 1.0;
      law.constant = var / std::pow(static_cast<double>(pt.d), *law.exponent);
    } else {
      law.exponent = 0.0;
      law.constant = var;
    }
    return law;
  }
  if (pt.map.activation.kind == ActivationKind::softmax) {
    if (estimand != Estimand::row_sum && estimand != Estimand::row_mean) return std::nullopt;
    law.of = estimand == Estimand::row_sum ? "E[row sum]" : "E[row mean]";
    law.bound = false;
    law.exponent = -n_exponent - (estimand == Estimand::row_mean ? 1 : 0);
    law.constant = factor;
    return law;
  }
  const auto [off, diag] = entry_pair(pt);
  if (estimand == Estimand::row_sum || estimand == Estimand::row_mean) {
    if (!off.value || !diag.value) return std::nullopt;
    law.of = estimand == Estimand::row_sum ? "E[row sum]" : "E[row mean]";
    law.bound = false;
    const double shift = estimand == Estimand::row_mean ? -1 : 0;
    // E[row sum] = c(N) ((N - 1) off + diag).
    if (*off.value != 0) {
      law.exponent = 1 - n_exponent + shift;
      law.constant = factor * *off.value;
    } else if (*diag.value != 0) {
      law.exponent = -n_exponent + shift;
      law.constant = factor * *diag.value;
    }
    return law;
  }
  std::optional<double> o, g;
  switch (estimand) {
    case Estimand::value: o = off.value_sq, g = diag.value_sq; break;
    case Estimand::dS: o = off.deriv_sq, g = diag.deriv_sq; break;
    case Estimand::dQ:
    case Estimand::dK: o = off.q_weight, g = diag.q_weight; break;
    default: break;
  }
  if (!o || !g || !std::isfinite(*o) || !std::isfinite(*g)) return std::nullopt;
  law.of = "sqrt(E||F||^2)";
  law.bound = true;
  // sqrt(c(N)^2 (N(N-1) off + N diag)): N^(1 - n_exponent) when off > 0, else N^(1/2 - n_exponent).
  const double scale = std::abs(factor);
  if (*o > 0) {
    law.exponent = 1 - n_exponent;
    law.constant = scale * std::sqrt(*o);
  } else if (*g > 0) {
    law.exponent = 0.5 - n_exponent;
    law.constant = scale * std::sqrt(*g);
  }
  return law;
}

}  // namespace attncheck::monte_carlo
