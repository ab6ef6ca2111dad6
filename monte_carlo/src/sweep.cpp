#include "attncheck/monte_carlo/sweep.hpp"

#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string_view>

namespace attncheck::monte_carlo {

using records::parse_real;
using theory::ActivationKind;
using theory::Index;
using theory::InputError;
using theory::Pointwise;

double InnerRule::at(Index d) const { return inverse_sqrt_d ? 1 / std::sqrt(static_cast<double>(d)) : value; }

std::optional<double> SeriesSpec::claimed_for(Estimand estimand) const {
  if (!claimed_exponent) return std::nullopt;
  return estimand == Estimand::row_mean && claim_is_of_row_sums ? *claimed_exponent - 1 : *claimed_exponent;
}

bool SeriesSpec::counts_for_exit_of(Estimand estimand) const {
  return counts_for_exit && std::find(secondary.begin(), secondary.end(), estimand) == secondary.end();
}

records::Claim claim_info(const std::string& id) {
  const std::optional<records::Claim> claim = records::find_claim(id);
  if (!claim || !claim->sampled) {
    std::string ids;
    for (std::string_view sampled : records::sampled_claim_ids())
      ids += (ids.empty() ? "" : ", ") + std::string(sampled);
    throw InputError(fmt::format("--claim: '{}' is not one of {} (C1, C2 are exact: attncheck bounds)", id, ids));
  }
  return *claim;
}

namespace {

// A map without a claim: --phi with the scales and estimands given, one series per p where p matters.
std::vector<SeriesSpec> custom_series(const SweepRequest& rq) {
  if (!rq.phi)
    throw InputError("without --claim, give --phi (and optionally --inner-scale, --outer-scale, --estimand)");
  std::vector<SeriesSpec> out;
  for (int p : rq.p) {
    SeriesSpec s;
    s.activation = parse_phi(*rq.phi, p, rq.normalize);
    s.inner = rq.inner_scale ? parse_inner_scale(*rq.inner_scale) : InnerRule{};
    s.outer = rq.outer_scale ? parse_outer_scale(*rq.outer_scale) : OuterRule{};
    s.estimands = rq.estimands ? parse_estimands(*rq.estimands) : std::vector<Estimand>{Estimand::value};
    if (std::find(s.estimands.begin(), s.estimands.end(), Estimand::dV) != s.estimands.end()) {
      throw InputError(
          "--estimand dV: the derivative in the values belongs to C9's cross-normalized output (--claim C9)");
    }
    s.claimed_exponent = rq.claimed_exponent;
    out.push_back(s);
    if (!theory::takes_p(s.activation)) break;  // p only matters for x^p and the matrix power
  }
  return out;
}

// The claims' presets, each as its paper states it (THEORY.md, "How each claim is checked"). A series starts from
// the claim (id, claimed exponent) and adds what the preset fixes.
SeriesSpec claim_series(const records::Claim& claim) {
  SeriesSpec s;
  s.claim = std::string(claim.id);
  s.claimed_exponent = claim.claimed_exponent;
  return s;
}

// C3, C4: E||(T/sqrt d)^p||_F, both readings of ^p (only the elementwise one counts), C4 with 1/sqrt(N) in front.
std::vector<SeriesSpec> power_series(const SweepRequest& rq, const records::Claim& claim, bool scaled) {
  std::vector<SeriesSpec> out;
  for (int p : rq.p) {
    for (const char* phi : {"poly", "matpow"}) {
      SeriesSpec s = claim_series(claim);
      s.activation = parse_phi(phi, p);
      s.outer = scaled ? parse_outer_scale("1/sqrt(N)") : OuterRule{};
      s.estimands = {Estimand::value};
      s.counts_for_exit = s.activation.kind == ActivationKind::pointwise;
      out.push_back(s);
    }
  }
  return out;
}

// C5, C6: the Jacobians of T^p / sqrt(d) (sqrt(d) outside the power), C6 with 1/sqrt(N) and K too.
std::vector<SeriesSpec> derivative_series(const SweepRequest& rq, const records::Claim& claim, bool scaled) {
  std::vector<SeriesSpec> out;
  for (int p : rq.p) {
    SeriesSpec s = claim_series(claim);
    s.activation = parse_phi("poly", p);
    s.inner = InnerRule{false, 1};
    s.outer = scaled ? parse_outer_scale("1/sqrt(N)") : OuterRule{};
    s.outer.d_exponent = 0.5;
    s.estimands = scaled ? std::vector<Estimand>{Estimand::dQ, Estimand::dK} : std::vector<Estimand>{Estimand::dQ};
    out.push_back(s);
  }
  return out;
}

// C7: row sums of N^-alpha h(S) with and without qk-layernorm; alpha = 1 is the claim, 0 and 0.5 show that the
// factor L^-1 is needed (row sums then grow). The Frobenius norm is reported beside them, not counted.
std::vector<SeriesSpec> relu_paper_series(const SweepRequest& rq, const records::Claim& claim) {
  const std::string h = rq.phi.value_or("relu");
  std::vector<std::string_view> maps;  // the pointwise h of one map each
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    if (term.kind == ActivationKind::pointwise && !term.takes_p) maps.push_back(term.word);
  }
  if (std::find(maps.begin(), maps.end(), h) == maps.end())
    throw InputError(fmt::format("--phi {}: C7 is about h in {}", h, fmt::join(maps, ", ")));
  std::vector<SeriesSpec> out;
  for (double alpha : rq.alpha.value_or(std::vector<double>{0.0, 0.5, 1.0})) {
    for (const auto scores : {theory::ScoreModel::projected_layernorm, theory::ScoreModel::projected}) {
      SeriesSpec s = claim_series(claim);
      s.activation = parse_phi(h, 1);
      s.alpha = alpha;
      s.outer = parse_outer_scale(fmt::format("N^-{}", alpha));
      s.scores = scores;
      s.estimands = {Estimand::row_sum, Estimand::row_mean, Estimand::value};
      s.secondary = {Estimand::value};
      s.claimed_exponent = 1 - alpha;
      s.claim_is_of_row_sums = true;
      out.push_back(s);
    }
  }
  return out;
}

// C8: Var(q . k) = d_k over d, for i.i.d. pairs, the literal zero-covariance hypothesis and the projected model
// (reported as what it is: its entries are neither unit-variance nor independent).
std::vector<SeriesSpec> variance_series(const SweepRequest&, const records::Claim& claim) {
  std::vector<SeriesSpec> out;
  for (const auto scores :
       {theory::ScoreModel::unit_pairs, theory::ScoreModel::sign_coupled_pairs, theory::ScoreModel::projected}) {
    SeriesSpec s = claim_series(claim);
    s.activation = parse_phi("identity", 1);
    s.inner = InnerRule{false, 1};
    s.scores = scores;
    s.estimands = {Estimand::score_var};
    s.fit_over_d = true;
    s.claims_variance_equals_d = scores != theory::ScoreModel::projected;
    s.counts_for_exit = scores != theory::ScoreModel::projected;
    out.push_back(s);
  }
  return out;
}

// C9: O = softmax(S) P_mix, one series per mix alpha.
std::vector<SeriesSpec> cross_norm_series(const SweepRequest& rq, const records::Claim& claim) {
  std::vector<SeriesSpec> out;
  for (double mix : rq.mix.value_or(std::vector<double>{1.0})) {
    if (!(mix >= 0 && mix <= 1)) throw InputError(fmt::format("--mix: {} is not in [0, 1]", mix));
    SeriesSpec s = claim_series(claim);
    s.activation = parse_phi("softmax", 1);
    s.mix = mix;
    s.estimands = {Estimand::value, Estimand::dV, Estimand::dS, Estimand::dQ};
    out.push_back(s);
  }
  return out;
}

using Preset = std::vector<SeriesSpec> (*)(const SweepRequest&, const records::Claim&);
struct ClaimPreset {
  std::string_view id;
  Preset build;
  bool takes_phi;  // C7 reads its h from --phi; the others fix the map
};
const ClaimPreset kPresets[] = {
    {"C3", [](const SweepRequest& rq, const records::Claim& c) { return power_series(rq, c, false); }, false},
    {"C4", [](const SweepRequest& rq, const records::Claim& c) { return power_series(rq, c, true); }, false},
    {"C5", [](const SweepRequest& rq, const records::Claim& c) { return derivative_series(rq, c, false); }, false},
    {"C6", [](const SweepRequest& rq, const records::Claim& c) { return derivative_series(rq, c, true); }, false},
    {"C7", relu_paper_series, true},
    {"C8", variance_series, false},
    {"C9", cross_norm_series, false},
};

}  // namespace

std::vector<SeriesSpec> build_series(const SweepRequest& rq) {
  for (int p : rq.p) {
    if (p < 1 || p > 64) throw InputError(fmt::format("--p: {} must be between 1 and 64", p));
  }
  if (rq.mix && rq.claim != std::optional<std::string>("C9")) {
    throw InputError("--mix is C9's mix alpha of softmax_col(V) and V: give it with --claim C9");
  }
  if (!rq.claim) return custom_series(rq);
  const std::string& id = *rq.claim;
  const records::Claim claim = claim_info(id);
  const auto preset = std::find_if(std::begin(kPresets), std::end(kPresets),
                                   [&](const ClaimPreset& candidate) { return candidate.id == id; });
  if (preset == std::end(kPresets)) throw std::logic_error("a sampled claim without a preset: " + id);
  if (rq.claimed_exponent) throw InputError(fmt::format("--claimed-exponent: --claim {} fixes the exponent", id));
  const auto fixed = [&](const std::optional<std::string>& given, const char* option) {
    if (given)
      throw InputError(fmt::format("{} {}: --claim {} fixes it as the paper states it; drop one", option, *given, id));
  };
  fixed(rq.inner_scale, "--inner-scale");
  fixed(rq.outer_scale, "--outer-scale");
  fixed(rq.estimands, "--estimand");
  fixed(rq.normalize, "--normalize");
  if (!preset->takes_phi) fixed(rq.phi, "--phi");
  return preset->build(rq, claim);
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
  const auto key_of = [&](const std::string& phi, int p) {
    std::string key =
        fmt::format("phi={};p={};inner={:.17g};outer={:.17g}*N^-{:.17g};N={};D={};d={};sigma_x={:.17g};sigma_t={:.17g}",
                    phi, p, pt.map.inner, pt.map.outer.factor, pt.map.outer.n_exponent, N, D, d, sigma_x, sigma_t);
    // The papers' model keeps the key (and the seed) it always had.
    if (series.scores != theory::ScoreModel::projected)
      key += fmt::format(";scores={}", theory::term_of(series.scores).word);
    if (series.mix) key += fmt::format(";cross-norm;mix={:.17g};dv={}", *pt.mix, pt.dv);
    return key;
  };
  ps.key = key_of(theory::phi_identity(series.activation), series.activation.p);
  // An expression that is x^k itself draws x^k's samples (its key stays its own, so --resume never mixes the two):
  // --phi 'x^3' and --phi poly --p 3 then give the same estimates for the same --seed.
  std::string seed_key = ps.key;
  if (series.activation.kind == theory::ActivationKind::expression && !series.activation.normalize_rows) {
    const auto law = series.activation.expression->power_law();
    if (law && law->coefficient == 1 && law->n_exponent == 0 && law->d_exponent == 0) {
      seed_key =
          key_of(std::string(
                     theory::term_of(theory::Activation{ActivationKind::pointwise, Pointwise::poly, law->power}).word),
                 law->power);
    }
  }
  pt.seed = point_seed(run_seed, seed_key);
  return ps;
}

}  // namespace attncheck::monte_carlo
