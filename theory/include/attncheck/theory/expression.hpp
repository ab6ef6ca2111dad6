#pragma once
// Expression activations: `--phi 'EXPR'`, a pointwise map phi(x) of the score x (after lambda) written in a small
// language, with N and d as variables, and its exact derivative phi'(x) formed symbolically (never by finite
// differences). docs/THEORY.md "Expression activations" states the language, the interval proofs and the
// convention for rows that sum to 0 under --normalize rows.
//
// An expression is parsed once into a graph whose equal subexpressions are one node (so phi and phi' share their
// work, sigmoid(u) once for sigmoid(u) (1 - sigmoid(u))); a sweep point binds N and d and compiles the graph into
// a straight-line program evaluated over a whole row of scores per instruction, not entry by entry.

#include "attncheck/theory/common.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::theory {

struct ExpressionGraph;

// phi and phi' of a row of scores, for one sweep point (N and d bound). Cheap to copy; the work buffers are the
// caller's, so one program serves every thread.
class PhiProgram {
 public:
  // value[k] = phi(x[k]), derivative[k] = phi'(x[k]) for k < n. `work` is resized as needed (kept by the caller
  // from row to row, it allocates once). Non-finite results are left in place for the caller to report.
  void evaluate(const double* x, Index n, double* value, double* derivative, std::vector<double>& work) const;

  struct Instruction;

 private:
  friend class PhiExpression;
  std::shared_ptr<const std::vector<Instruction>> code_;
  int registers_ = 0, value_register_ = 0, derivative_register_ = 0;
};

class PhiExpression {
 public:
  // Parses the text; throws InputError naming the character position (1-based) and what was expected there.
  // `option` names the option in messages ("--phi", "--what-if").
  static PhiExpression parse(std::string_view text, std::string_view option = "--phi");

  // The canonical form of phi and of phi' (x, N, d; constants folded): the provenance prints both, and a point's
  // seed follows from the first, so that spacing and redundant parentheses do not change a sweep's draws.
  const std::string& text() const { return text_; }
  std::string derivative_text() const;
  bool uses_sizes() const;      // whether N or d appears
  bool uses_head_size() const;  // whether d appears
  bool uses_length() const;     // whether N appears

  // phi and phi' at this N and d.
  PhiProgram compile(double N, double d) const;
  // The same expression with N and d replaced by these numbers (its text names them): what a model's head, whose
  // N and d are known, measures (theory::attention_norms_from_projections takes bound expressions only).
  PhiExpression bind(double N, double d) const;
  // For --normalize rows: phi(x) = exp(u(x)) where the expression's outermost operation is exp, so rows may be
  // rescaled by exp(-max u) without changing the normalized weights (softmax's trick, for exp(x / T) and the
  // like); the program then computes u and u' instead of phi and phi'. None for other expressions.
  std::optional<PhiProgram> compile_exponent(double N, double d) const;

  // phi = coefficient * x^power at this N and d (x^3, x^3/6, -2*x), power >= 1: the engine then runs the built-in
  // x^p's kernels and scales their norms; none for any other expression.
  struct Monomial {
    double coefficient = 1;
    int power = 1;
  };
  std::optional<Monomial> monomial(double N, double d) const;

  // phi as a polynomial in x at this N and d: its coefficients from x^0 up (x^3/6 + x: {0, 1, 0, 1/6}), of degree at
  // most kMaxPolynomialDegree; none for any other expression. The exact moments of a polynomial are sums of the
  // score's own (monte_carlo/src/exact_references.cpp).
  static constexpr int kMaxPolynomialDegree = 32;
  std::optional<std::vector<double>> polynomial(double N, double d) const;

  // phi = coefficient * N^n_exponent * d^d_exponent * x^power for every N and d, read from the expression's form
  // (products and quotients of numbers, N, d and their powers and square roots, around x or x^k): x^3/sqrt(N) is
  // the built-in x^3 with c(N) = N^-1/2, so the built-in's proofs and closed forms apply to it. None otherwise.
  struct PowerLaw {
    double coefficient = 1, n_exponent = 0, d_exponent = 0;
    int power = 1;
  };
  std::optional<PowerLaw> power_law() const;

  // sup over every real x and every N, d >= 1 of |phi| and of |phi'|, where interval arithmetic over the
  // expression proves them finite (a valid bound, not always the least); none otherwise.
  std::optional<double> value_sup() const;
  std::optional<double> derivative_sup() const;
  // inf of phi over every real x and N, d >= 1 by the same intervals (-infinity where unbounded below).
  double value_inf() const;
  // Whether phi (or phi') is finite and non-zero at some x, checked at fixed points; only for expressions without
  // N and d. Every operation of the language is continuous where finite (phi' may jump where a relu's argument
  // is 0, never at the points checked), so then it is non-zero on an interval.
  bool nonzero_somewhere(bool derivative) const;

  bool operator==(const PhiExpression& other) const { return text_ == other.text_; }

 private:
  static PhiProgram program_of(const ExpressionGraph& graph, int value, int derivative);
  std::shared_ptr<const ExpressionGraph> graph_;
  int value_root_ = -1, derivative_root_ = -1;
  std::string text_;
};

// The language, for --help and messages: "x, N, d, numbers, + - * / ^, abs, exp, ...".
std::string expression_language_help();

}  // namespace attncheck::theory
