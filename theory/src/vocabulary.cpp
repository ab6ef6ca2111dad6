#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <stdexcept>

namespace attncheck::theory {

namespace {

constexpr std::array<EstimandTerm, kEstimandCount> kEstimands{{
    {Estimand::value, "value", "E||F||_F", "||F||_F", "E||F||_F", "E||F||_F^2", true},
    {Estimand::dQ, "dQ", "E||dF/dQ||_F", "||dF/dQ||_F, the full Jacobian in Q", "E||dF/dQ||_F (the full Jacobian)",
     "E||dF/dQ||_F^2", true},
    {Estimand::dK, "dK", "E||dF/dK||_F", "||dF/dK||_F, the full Jacobian in K", "E||dF/dK||_F (the full Jacobian)",
     "E||dF/dK||_F^2", true},
    {Estimand::dS, "dS", "E||dF/dS||_F", "||dF/dS||_F, the Jacobian in the scores",
     "E||dF/dS||_F (the Jacobian in the scores)", "E||dF/dS||_F^2", true},
    {Estimand::score_var, "score-var", "E[RMS score]", "Var(s_ij), i != j",
     "E[sqrt(m)], m = the mean over i != j of s_ij^2 (one sample's root-mean-square score)", "E[m] = Var(s_ij), i != j",
     false},
    {Estimand::row_sum, "row-sum", "E[row sum of F]", "mean over rows of sum_j F_ij",
     "E[mean over rows i of sum_j F_ij]", "E[(mean over rows i of sum_j F_ij)^2]", false},
    {Estimand::row_mean, "row-mean", "E[row mean of F]", "row-sum / N", "E[mean over rows i of mean_j F_ij]",
     "E[(mean over rows i of mean_j F_ij)^2]", false},
    {Estimand::dV, "dV", "E||dO/dV||_F", "||dO/dV||_F, C9's Jacobian in the values",
     "E||dO/dV||_F (C9: the Jacobian in the values)", "E||dO/dV||_F^2", true},
}};

// sup of GELU's derivative Phi(x) + x phi(x), reached at x = sqrt(2).
const double kGeluDerivativeSup =
    standard_normal_cdf(std::sqrt(2.0)) + std::sqrt(2.0) * standard_normal_pdf(std::sqrt(2.0));

const std::array<ActivationTerm, 10> kActivations{{
    {"poly", ActivationKind::pointwise, Pointwise::poly, true, "x^p", "elementwise x^p", std::nullopt, std::nullopt,
     false},
    {"matpow", ActivationKind::matpow, Pointwise::identity, true, "matpow", "matrix power, value only", std::nullopt,
     std::nullopt, false},
    {"softmax", ActivationKind::softmax, Pointwise::identity, false, "softmax", "row-wise", std::nullopt, std::nullopt,
     false},
    {"relu", ActivationKind::pointwise, Pointwise::relu, false, "relu", "", std::nullopt, 1.0, true},
    {"relu2", ActivationKind::pointwise, Pointwise::relu2, false, "relu^2", "", std::nullopt, std::nullopt, true},
    {"gelu", ActivationKind::pointwise, Pointwise::gelu, false, "gelu", "", std::nullopt, kGeluDerivativeSup, true},
    {"softplus", ActivationKind::pointwise, Pointwise::softplus, false, "softplus", "", std::nullopt, 1.0, true},
    {"identity", ActivationKind::pointwise, Pointwise::identity, false, "identity", "", std::nullopt, 1.0, false},
    {"relu6", ActivationKind::pointwise, Pointwise::relu6, false, "relu6", "", 6.0, 1.0, true},
    {"sigmoid", ActivationKind::pointwise, Pointwise::sigmoid, false, "sigmoid", "", 1.0, 0.25, true},
}};

constexpr std::array<ScoreModelTerm, 4> kScoreModels{{
    {ScoreModel::projected, "projected", "s_ij = lambda v_i . u_j, the papers' model"},
    {ScoreModel::projected_layernorm, "qk-layernorm", "LayerNorm at initialisation on each query and key"},
    {ScoreModel::unit_pairs, "iid-unit", "q, k with i.i.d. N(0, 1) entries"},
    {ScoreModel::sign_coupled_pairs, "sign-coupled", "q_i = eps_i k_i: zero covariances, dependent entries"},
}};

}  // namespace

std::span<const EstimandTerm> all_estimands() { return kEstimands; }

const EstimandTerm& term_of(Estimand estimand) { return kEstimands.at(static_cast<std::size_t>(estimand)); }

std::optional<Estimand> estimand_from_word(std::string_view word) {
  for (const EstimandTerm& term : kEstimands) {
    if (term.word == word) return term.value;
  }
  return std::nullopt;
}

std::span<const ActivationTerm> all_activations() { return kActivations; }

const ActivationTerm& term_of(const Activation& activation) {
  if (activation.kind == ActivationKind::expression) {
    throw std::logic_error("an expression activation has no word of the vocabulary: use phi_word or phi_label");
  }
  for (const ActivationTerm& term : kActivations) {
    if (term.kind == activation.kind && (term.kind != ActivationKind::pointwise || term.h == activation.h)) return term;
  }
  throw std::logic_error("an activation without a word in the vocabulary");
}

std::optional<Activation> activation_from_word(std::string_view word, int p) {
  for (const ActivationTerm& term : kActivations) {
    if (term.word == word) return Activation{term.kind, term.h, term.takes_p ? p : 1};
  }
  return std::nullopt;
}

std::optional<std::string_view> reading_of(const Activation& activation) {
  if (activation.kind == ActivationKind::matpow) return "matrix";
  if (activation.kind == ActivationKind::pointwise && activation.h == Pointwise::poly) return "elementwise";
  return std::nullopt;
}

std::string_view phi_word(const Activation& activation) {
  return activation.kind == ActivationKind::expression ? kExpressionWord : term_of(activation).word;
}

std::string phi_label(const Activation& activation) {
  if (activation.kind != ActivationKind::expression) return std::string(term_of(activation).word);
  return fmt::format("'{}'{}", activation.expression->text(), activation.normalize_rows ? " normalized by rows" : "");
}

std::string phi_identity(const Activation& activation) {
  if (activation.kind != ActivationKind::expression) return std::string(term_of(activation).word);
  return fmt::format("expression:{}{}", activation.expression->text(),
                     activation.normalize_rows ? ";normalize=rows" : "");
}

bool takes_p(const Activation& activation) {
  return activation.kind != ActivationKind::expression && term_of(activation).takes_p;
}

Activation expression_activation(PhiExpression expression, bool normalize_rows) {
  Activation a;
  a.kind = ActivationKind::expression;
  a.expression = std::move(expression);
  a.normalize_rows = normalize_rows;
  return a;
}

std::optional<double> value_sup(const Activation& activation) {
  if (activation.kind == ActivationKind::expression) {
    return activation.normalize_rows ? std::nullopt : activation.expression->value_sup();
  }
  if (activation.kind != ActivationKind::pointwise) return std::nullopt;
  return term_of(activation).value_sup;
}

std::optional<double> derivative_sup(const Activation& activation) {
  if (activation.kind == ActivationKind::expression) {
    return activation.normalize_rows ? std::nullopt : activation.expression->derivative_sup();
  }
  if (activation.kind != ActivationKind::pointwise) return std::nullopt;
  if (activation.h == Pointwise::poly) return activation.p == 1 ? std::optional<double>(1.0) : std::nullopt;
  return term_of(activation).derivative_sup;
}

bool positive_mean(const Activation& activation) {
  if (activation.kind != ActivationKind::pointwise) return false;
  if (activation.h == Pointwise::poly) return activation.p % 2 == 0;
  return term_of(activation).positive_mean;
}

std::span<const ScoreModelTerm> all_score_models() { return kScoreModels; }

const ScoreModelTerm& term_of(ScoreModel model) {
  for (const ScoreModelTerm& term : kScoreModels) {
    if (term.value == model) return term;
  }
  throw std::logic_error("a score model without a word in the vocabulary");
}

std::optional<ScoreModel> score_model_from_word(std::string_view word) {
  for (const ScoreModelTerm& term : kScoreModels) {
    if (term.word == word) return term.value;
  }
  return std::nullopt;
}

}  // namespace attncheck::theory
