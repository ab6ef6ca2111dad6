// attncheck bounds: Theorem 4.1 checked exactly (closed forms, no finite differences) on matrix families, and with
// --cross-norm claim C9's bounds (THEORY.md facts 10-11) the same way.

#include "number_options.hpp"
#include "subcommand.hpp"

#include "attncheck/exact/bounds.hpp"
#include "attncheck/exact/cross_norm_bounds.hpp"
#include "attncheck/records/json_output.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace attncheck::cli {
namespace {

using exact::CrossNormReport;

struct BoundsOptions {
  std::optional<long long> n;
  int trials = 8;
  int search_starts = 8;
  std::vector<std::string> families;
  std::string input;
  std::uint64_t seed = 1;
  int threads = 0;
  bool json = false;
  // --cross-norm (C9) and the options only it reads.
  bool cross_norm = false;
  std::optional<long long> dv;
  std::string values;
  std::optional<std::string> mix;
};

std::string summary_text(const exact::WorstMatrixSummary& s) {
  return fmt::format("trial {}, logits in [{:.3g}, {:.3g}], worst row top p = {:.4f}, {:.4f}", s.trial, s.min_logit,
                     s.max_logit, s.worst_row_top1, s.worst_row_top2);
}

void print_cross_norm(const CrossNormReport& report, const BoundsOptions& options) {
  const exact::CrossNormValues& b = report.bounds;
  fmt::print(
      "C9 (cross-normalization RFP): O = softmax(S) softmax_col(V), P = softmax_col(V) (each of V's d_v columns "
      "a probability vector over the tokens); facts 10-11 checked exactly (closed forms) for N = {}, d_v = {}, "
      "mix alpha = 1{}\n",
      report.n, report.dv,
      options.input.empty() && options.values.empty()
          ? ""
          : fmt::format(" (scores {}, values {})", options.input.empty() ? "uniform" : options.input,
                        options.values.empty() ? "uniform" : options.values));
  fmt::print(
      "  bounds: ||P||_F <= sqrt(d_v) = {:.6g}; ||dP/dV||_F <= sqrt(d_v)/2 = {:.6g}; ||O||_F <= sqrt(N d_v) = "
      "{:.6g}; ||dO/dV||_F <= sqrt(N d_v/8) = {:.6g}; ||dO/dS||_F <= sqrt(N d_v/8) = {:.6g}\n\n",
      b[0], b[1], b[2], b[3], b[4]);
  if (!report.families.empty()) {
    fmt::print("largest value over the family's trials, as a fraction of its bound:\n");
    fmt::print("{:<18} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  {}\n", "family", "trials", "||P||", "||dP/dV||",
               "||O||", "||dO/dV||", "||dO/dS||", "verdict");
    for (const exact::CrossNormFamilyReport& f : report.families) {
      const exact::CrossNormValues& r = f.ratio;
      fmt::print("{:<18} {:>6} {:>10.6f} {:>10.6f} {:>10.6f} {:>10.6f} {:>10.6f}  {}\n", exact::family_name(f.family),
                 f.trials, r[0], r[1], r[2], r[3], r[4], f.holds ? "holds" : "VIOLATED");
      if (f.search) {
        for (const auto& [term, norm] : {std::pair{&f.search->grad_values_term, "||dO/dV||^2"},
                                         std::pair{&f.search->grad_scores_term, "||dO/dS||^2"}}) {
          fmt::print("{:<18}   search for one {} term: best {:.9f} = {:.6f} of the sup 1/8 ({} starts){}\n", "", norm,
                     term->best, term->ratio, term->starts,
                     term->within_sup ? "" : " - ABOVE 1/8, which contradicts fact 11");
        }
      }
    }
    fmt::print("\n");
    for (std::size_t q = 0; q < exact::kCrossNormQuantities; ++q) {
      const exact::CrossNormVerdict& v = report.verdicts[q];
      fmt::print("C9 {}: {} (exact), largest {:.6f} of the bound ({}){}\n", exact::cross_norm_statement(q),
                 records::to_string(*v.verdict), v.largest_ratio, exact::family_name(*v.largest_in_family),
                 v.verdict == records::Verdict::tight   ? ": reached"
                 : v.verdict == records::Verdict::holds ? ": not reached by these families"
                                                        : "");
    }
  }
  for (const exact::MixReport& m : report.mix) {
    fmt::print(
        "\nmix alpha = {:g}: O = softmax(S) (alpha softmax_col(V) + (1 - alpha) V) along V = t V0 (S and V0 "
        "with i.i.d. N(0, 1) entries)\n",
        m.alpha);
    fmt::print("{:>8} {:>14} {:>14} {:>14}\n", "t", "||O||_F", "||dO/dV||_F", "||dO/dS||_F");
    for (const exact::MixGrowth& g : m.growth) {
      fmt::print("{:>8g} {:>14.6g} {:>14.6g} {:>14.6g}\n", g.t, g.output_fro, g.grad_values_fro, g.grad_scores_fro);
    }
    const exact::MixLastStep& step = m.last_step;
    if (!m.bounded) {
      fmt::print(
          "  ||O||_F and ||dO/dS||_F: unbounded in V (no bound for alpha < 1): x{:.2f} and x{:.2f} from "
          "t = {:g} to {:g}, growing like t\n",
          step.output, step.grad_scores, step.from_t, step.to_t);
    } else {
      fmt::print("  ||O||_F and ||dO/dS||_F: bounded (facts 10-11): x{:.2f} and x{:.2f} from t = {:g} to {:g}\n",
                 step.output, step.grad_scores, step.from_t, step.to_t);
    }
    fmt::print("  ||dO/dV||_F: bounded by {} = {:.6g}: {}, largest {:.6f} of it\n", exact::kMixGradValuesBoundFormula,
               m.grad_values_bound, m.holds ? "holds" : "VIOLATED", m.max_ratio_grad_values);
  }
}

void print_bounds(const exact::BoundsReport& report, const BoundsOptions& options) {
  const theory::SoftmaxBounds& bounds = report.bounds;
  fmt::print("Theorem 4.1 (v1 (4.1)-(4.2) / v2 (6)-(7)), checked exactly (closed forms) for N = {}{}\n", report.n,
             options.input.empty() ? "" : fmt::format(" (rows of {})", options.input));
  fmt::print(
      "  bounds: ||softmax(A)||_F <= sqrt(N) = {:.6g};  ||grad softmax(A)||_F <= 2 sqrt(N) = {:.6g} (papers), "
      "sup = sqrt(N)/2 = {:.6g} (exact)\n\n",
      bounds.softmax_paper, bounds.grad_paper, bounds.grad_tight);
  fmt::print("{:<18} {:>6} {:>16} {:>18} {:>20}  {:<8}  {}\n", "family", "trials", "max|A|/sqrt(N)",
             "max|dA|/(2sqrt N)", "max|dA|/(sqrt(N)/2)", "verdict", "worst matrix for |dA|");
  for (const exact::BoundsFamilyReport& f : report.families) {
    fmt::print("{:<18} {:>6} {:>16.6f} {:>18.6f} {:>20.6f}  {:<8}  {}\n", exact::family_name(f.result.family),
               f.result.trials, f.ratio_softmax, f.ratio_grad_paper, f.ratio_grad_tight, f.holds ? "holds" : "VIOLATED",
               summary_text(f.result.worst_grad));
  }
  const char* verdict = report.paper_bounds_hold ? "holds" : "VIOLATED";
  fmt::print("\nC1 ||softmax(A)||_F <= sqrt(N): {}, largest value {:.6f} sqrt(N) (the bound is tight: one-hot rows).\n",
             verdict, report.max_ratio_softmax);
  fmt::print(
      "C2 ||grad softmax(A)||_F <= 2 sqrt(N): {}; the exact sup is sqrt(N)/2, 4x lower; largest value found "
      "{:.6f} of sqrt(N)/2{}.\n",
      verdict, report.max_ratio_grad_tight,
      report.tight_bound_holds ? "" : " - ABOVE the exact sup, which contradicts fact 2");
}

// The report as one JSON object with --json, else as the table; the exit code of its verdict either way.
template <class Report, class Print>
int finish(const Report& report, bool holds, const BoundsOptions& options, Print print) {
  if (options.json) {
    fmt::print("{}\n", attncheck::records::json_text(exact::to_json(report), 2));
  } else {
    print(report, options);
  }
  return holds ? kExitHolds : kExitViolated;
}

int run(const BoundsOptions& options) {
  if (options.cross_norm) {
    const CrossNormReport report = exact::run_cross_norm_bounds(
        {options.n, options.dv, options.trials, options.search_starts, options.families, options.input, options.values,
         options.mix.value_or("1"), options.seed, options.threads});
    return finish(report, report.holds, options, print_cross_norm);
  }
  for (const auto& [given, name] :
       {std::pair{options.dv.has_value(), "--dv"}, std::pair{!options.values.empty(), "--values"},
        std::pair{options.mix.has_value(), "--mix"}}) {
    if (given) throw UsageError(fmt::format("{} is an option of --cross-norm (C9): add --cross-norm", name));
  }
  const exact::BoundsReport report =
      exact::run_bounds({options.n, options.trials, options.search_starts, options.families, options.input,
                         options.seed, options.threads});
  return finish(report, report.holds(), options, print_bounds);
}

const bool registered = register_subcommand(
    "bounds",
    "Check Theorem 4.1 exactly: ||softmax(A)||_F <= sqrt(N) and ||grad softmax(A)||_F <= 2 sqrt(N) (tight: sqrt(N)/2)",
    [](CLI::App& command) -> std::function<int()> {
      auto options = std::make_shared<BoundsOptions>();
      command.footer(
          "Families: gaussian-1e-3, gaussian-1, gaussian-10, gaussian-1e3 (i.i.d. logits with that standard "
          "deviation), near-one-hot, two-equal-top (the tight case), constant, worst-case-search (gradient ascent on "
          "the logits from --search-starts random starts, for each norm), and the --input matrix.\n"
          "Norms are exact closed forms (per row a of probabilities: sum a^2 - 2 sum a^3 + (sum a^2)^2); no Jacobian "
          "is "
          "formed.\n"
          "With --cross-norm (C9): families gaussian-1e-3 .. gaussian-1e3 (scores and values i.i.d.), uniform, "
          "one-hot, tight-values, tight-scores (fact 11's constructions), near-tight, worst-case-search (ascent on "
          "one row of scores and one column of values for each Jacobian term), and --input / --values.\n"
          "Exit: 0 every bound holds, 1 a bound is violated, 2 bad usage or input.");
      // N's real limit is the memory check (N x N doubles per thread), made before anything is allocated.
      command.add_option("--N", options->n, "matrix size N (N x N logits)")->check(integer_in(1, INT64_MAX));
      command.add_option("--trials", options->trials, "random matrices per family")
          ->capture_default_str()
          ->check(integer_in(1, exact::kMaxBoundsTrials));
      command.add_option("--search-starts", options->search_starts, "random starts of the worst-case search")
          ->capture_default_str()
          ->check(integer_in(1, exact::kMaxSearchStarts));
      command.add_option("--family", options->families, "families to evaluate (default: all)")->take_all();
      command.add_option("--input", options->input, "a matrix of logits: .npy (float32/float64) or CSV; N = rows");
      command.add_option("--seed", options->seed, "random seed")
          ->capture_default_str()
          ->check(unsigned_in(0, UINT64_MAX));
      command.add_option("--threads", options->threads, "threads (default: all cores)")
          ->check(integer_in(1, kMaxThreads));
      command.add_flag("--json", options->json, "one JSON object on stdout instead of the table");
      command.add_flag("--cross-norm", options->cross_norm,
                       "check C9 instead: O = softmax(S) softmax_col(V) (THEORY.md facts 10-11); --input is then the "
                       "N x N scores");
      command
          .add_option("--dv", options->dv, "with --cross-norm: value columns d_v (default 64, or --values' columns)")
          ->check(integer_in(1, exact::kMaxValueDim));
      command.add_option("--values", options->values, "with --cross-norm: a value matrix V, N x d_v (.npy or CSV)");
      command.add_option("--mix", options->mix,
                         "with --cross-norm: mix weights alpha in [0, 1], comma-separated, for alpha softmax_col(V) + "
                         "(1 - alpha) V (default 1)");
      return [options] { return run(*options); };
    });

}  // namespace
}  // namespace attncheck::cli
