#pragma once
// attncheck's vocabulary, each word once: the activations (--phi), the estimands (--estimand) and the score models,
// with the word files and the command line use, the help text, and the properties of each that other layers need
// (the proofs' constants, what a record's mean estimates). Parsers, --help, the records, the GPU self-test and the
// tests iterate these tables; code holds the enums, and the words exist only where text is read or written.
// Adding an activation is an entry here and its formula in pointwise.hpp.

#include "attncheck/theory/attention.hpp"
#include "attncheck/theory/moments.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace attncheck::theory {

// What one sample of a sweep point measures of F (THEORY.md, Notation).
enum class Estimand : int {
  value = 0,  // ||F||_F
  dQ,         // ||dF/dQ||_F (full N^2 x (D d) Jacobian)
  dK,         // ||dF/dK||_F
  dS,         // ||dF/dS||_F, S = lambda T
  score_var,  // mean over i != j of s_ij^2 (E s_ij = 0, so an unbiased estimate of Var(s_ij)); C8
  row_sum,    // mean over rows i of sum_j F_ij (C7: the relu paper's row sums)
  row_mean,   // row_sum / N: the mean attention weight E_j[F_ij] of a row
  dV,         // ||dO/dV||_F of C9's cross-normalized output O (the Jacobian in the values V = X W_V)
};
inline constexpr int kEstimandCount = 8;

struct EstimandTerm {
  Estimand value;
  std::string_view word;    // --estimand, "estimand" in the results
  std::string_view symbol;  // what the fitted mean is, in tables and plots: "E||F||_F", "E[row sum of F]", ...
  std::string_view help;
  // What a record's "mean" and "mean_sq" estimate: for score-var the per-sample value is the root-mean-square
  // off-diagonal score, not |s|.
  std::string_view mean_of, mean_sq_of;
  bool norm;  // a Frobenius norm (>= 0; Jensen's sqrt(E||F||^2) bounds its mean); else an expectation itself
};
std::span<const EstimandTerm> all_estimands();
const EstimandTerm& term_of(Estimand estimand);
std::optional<Estimand> estimand_from_word(std::string_view word);

struct ActivationTerm {
  std::string_view word;  // --phi, "phi" in the results
  ActivationKind kind;
  Pointwise h;                    // for pointwise
  bool takes_p;                   // x^p and the matrix power read --p; the others are one map each
  std::string_view formula_name;  // as describe() writes the map: "x^p", "relu^2", ...
  std::string_view help;
  // What the proofs of THEORY.md "Bounds in N" read (pointwise maps only):
  std::optional<double> value_sup;  // sup |h| where finite (B5)
  // sup |h'| where finite, or for x^p at p = 1 (B5); GELU's derivative Phi(x) + x phi(x) peaks at sqrt(2), where its
  // own derivative phi(x) (2 - x^2) vanishes.
  std::optional<double> derivative_sup;
  // E h(s) > 0 for every symmetric score law with mass on (0, b) (B7): h >= 0 and not 0 there, or GELU, for which
  // h(x) + h(-x) = x (2 Phi(x) - 1) > 0. x^p: for even p (a property of p, see positive_mean()).
  bool positive_mean;
};
std::span<const ActivationTerm> all_activations();
const ActivationTerm& term_of(const Activation& activation);
// The activation of a word with the exponent p where it takes one; none for another word.
std::optional<Activation> activation_from_word(std::string_view word, int p = 1);
// "elementwise" for x^p, "matrix" for the matrix power: the two readings of "(.)^p" in C3/C4; none otherwise.
std::optional<std::string_view> reading_of(const Activation& activation);

// What "phi" holds in the results for an expression activation (the expression itself is beside it).
inline constexpr std::string_view kExpressionWord = "expression";
// The activation's word, or kExpressionWord.
std::string_view phi_word(const Activation& activation);
// The word, or the expression in quotes (and "normalized by rows"), for labels and messages.
std::string phi_label(const Activation& activation);
// What identifies phi in a point's key and a series' id: the word, or the expression's canonical text (and
// ";normalize=rows"), so that two spellings of one expression draw the same samples.
std::string phi_identity(const Activation& activation);
// Whether --p applies (x^p and the matrix power).
bool takes_p(const Activation& activation);
Activation expression_activation(PhiExpression expression, bool normalize_rows);

// sup |h| where finite: the table's, or an expression's by its intervals (B5); none for normalized rows.
std::optional<double> value_sup(const Activation& activation);

// sup |h'| and E h(s) > 0 for this activation, its exponent included (x^p: h' = p x^(p-1) is bounded at p = 1 only,
// E s^p > 0 for even p only).
std::optional<double> derivative_sup(const Activation& activation);
bool positive_mean(const Activation& activation);

struct ScoreModelTerm {
  ScoreModel value;
  std::string_view word;  // "scores" in the results
  std::string_view help;
};
std::span<const ScoreModelTerm> all_score_models();
const ScoreModelTerm& term_of(ScoreModel model);
std::optional<ScoreModel> score_model_from_word(std::string_view word);

// Every word of a table joined with `separator`, for messages and --help ("value, dQ, dK, ...").
template <class Table>
std::string words_of(const Table& table, std::string_view separator = ", ") {
  std::string text;
  for (const auto& term : table) text += (text.empty() ? "" : std::string(separator)) + std::string(term.word);
  return text;
}

}  // namespace attncheck::theory
