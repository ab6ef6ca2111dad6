// attncheck mc: Monte Carlo sweeps of the expectation claims C3-C9, exact references, log-log fits, verdicts.

#include "number_options.hpp"
#include "progress.hpp"
#include "subcommand.hpp"

#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/monte_carlo/distributed.hpp"
#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/monte_carlo/results.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/records/json_output.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace attncheck::cli {
namespace {

namespace mc = attncheck::monte_carlo;
using nlohmann::json;

static_assert(mc::exit_code_of(mc::RunVerdict::holds) == kExitHolds);
static_assert(mc::exit_code_of(mc::RunVerdict::violated) == kExitViolated);
static_assert(mc::exit_code_of(mc::RunVerdict::unsettled) == kExitUnsettled);

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), out;
  for (char c : all) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Records hold null where a value was not finite; the table shows that as a word with '!', never as a number,
// and counts it for the note after the table.
struct Flags {
  int not_finite = 0, se_unknown = 0, jensen_overflow = 0;
};

std::string with_se(double mean, double se, Flags& flags) {
  if (!std::isfinite(mean)) {
    ++flags.not_finite;
    return "not finite!";
  }
  if (!std::isfinite(se)) {
    ++flags.se_unknown;
    return fmt::format("{:.5g} ± ?!", mean);
  }
  return fmt::format("{:.5g} ± {:.2g}", mean, se);
}

// E||F|| / sqrt(exact E||F||^2); not shown when the closed form exceeds double precision (it would read 0).
std::string jensen_cell(const records::PointRecord& record, Flags& flags) {
  if (record.exact_out_of_range || (record.jensen_ratio && *record.jensen_ratio == 0)) {
    ++flags.jensen_overflow;
    return "overflow!";
  }
  return record.jensen_ratio && std::isfinite(*record.jensen_ratio) ? fmt::format("{:.4f}", *record.jensen_ratio)
                                                                    : std::string("-");
}

std::string num(std::optional<double> v, const char* format = "{:.5g}") {
  return v && std::isfinite(*v) ? fmt::format(fmt::runtime(format), *v) : std::string("-");
}

// The reading column: C3/C4's reading of ^p, or C9's mix alpha.
std::string reading_cell(const records::SeriesKey& key) {
  if (key.mix) return fmt::format("mix alpha={:g} dv={}", *key.mix, key.dv.value_or(0));
  return std::string(key.reading().value_or("-"));
}

// The claims run and the model the points were drawn from.
void print_claims_and_model(const std::vector<records::PointRecord>& records, const records::Provenance& provenance,
                            const std::vector<std::string>& claims) {
  for (const std::string& id : claims) {
    const records::Claim info = mc::claim_info(id);
    fmt::print("{} ({}): {}\n", info.id, info.numbering(), info.statement);
    if (!info.constant_growth.empty()) {
      fmt::print("    O(.) holds for fixed D, d, sigma; its constant grows like {}\n", info.constant_growth);
    }
  }
  if (!records.empty()) {
    const records::PointRecord& r0 = records.front();
    fmt::print(
        "Model: X entries N(0, {:g}^2), Q and K entries N(0, {:g}^2) (the papers' sigma read as standard "
        "deviation); run seed {}; backend {}, {} threads{}.\n",
        r0.key.sigma_x, r0.key.sigma_t, provenance.run_seed, provenance.backend, provenance.threads,
        provenance.normals ? fmt::format(", {} normals", *provenance.normals) : std::string());
    for (const records::MixedPrecisionBound& b :
         provenance.mixed_precision_bounds.value_or(std::vector<records::MixedPrecisionBound>{})) {
      fmt::print(
          "Precision mixed: FP32 projections and scores, FP64 sums; p = {}, d = {}, D = {}: relative error "
          "of each sample's squared norms at most {:.2g} (of the norms, half that)\n",
          b.p, b.d, b.D ? std::to_string(*b.D) : std::string("not recorded"), b.relative_bound_sum_sq);
    }
    if (std::find(claims.begin(), claims.end(), "C9") != claims.end()) {
      fmt::print(
          "C9: W_V (D x dv) entries N(0, {:g}^2) as well; value = ||O||_F, dV = ||dO/dV||_F, dS = ||dO/dS||_F, "
          "dQ = ||dO/dW_Q||_F.\n",
          r0.key.sigma_t);
    }
  }
}

// One row per sweep point, and notes on stderr for what did not fit in double precision.
void print_points(const std::vector<records::PointRecord>& records) {
  Flags flags;
  fmt::print(
      "\nEstimates per sweep point: the estimand's expectation (E||F||_F for norms, dimensionless; E[row sum] or "
      "E[row mean] for row sums; for score-var E[sqrt(m)], m = the mean over i != j of s_ij^2, a sample's "
      "root-mean-square score), ± one standard error, 95% CI (Student t); its second moment (E||F||_F^2; for "
      "score-var E[m] = Var(s_ij)); the exact value where one is known (E||F||^2, the expectation itself for row "
      "sums, Var(s) for score-var) with z = (estimate - exact)/se; the Jensen ratio E||F|| / sqrt(exact E||F||^2) "
      "(<= 1). '!' marks a standard error that is itself unreliable (heavy tails), so its z is not judged.\n\n");
  fmt::print(
      "{:<6} {:<11} {:<8} {:>2} {:<9} {:<12} {:>6} {:>4} {:>4} {:>7}  {:<22} {:<21}  {:<24} {:<13} {:>7} {:>7}  {}\n",
      "claim", "reading", "phi", "p", "estimand", "scores", "N", "D", "d", "samples", "estimate ± se", "95% CI",
      "second moment ± se", "exact", "z", "Jensen", "stopped by  path");
  for (const records::PointRecord& r : records) {
    const bool row = !theory::term_of(r.key.estimand).norm && r.key.estimand != theory::Estimand::score_var;
    const bool reliable = row ? r.mean_reliable() : r.sq_reliable();
    fmt::print(
        "{:<6} {:<11} {:<8} {:>2} {:<9} {:<12} {:>6} {:>4} {:>4} {:>7}  {:<22} {:<21}  {:<24} {:<13} {:>7} {:>7}  {}\n",
        r.key.claim, reading_cell(r.key), theory::phi_label(r.key.activation), r.key.activation.p,
        theory::term_of(r.key.estimand).word, theory::term_of(r.key.scores).word, r.N, r.key.D, r.key.d, r.samples,
        with_se(r.mean, r.se, flags) + (r.se_mean_reliable.value_or(true) ? "" : " !"),
        fmt::format("[{}, {}]", num(std::optional(r.ci95_lo)), num(std::optional(r.ci95_hi))),
        with_se(r.mean_sq, r.se_sq, flags) + (r.se_sq_reliable.value_or(true) ? "" : " !"),
        num(row ? r.exact_mean : r.exact_sq),
        num(row ? r.z_exact_mean : r.z_exact_sq, reliable ? "{:+.2f}" : "({:+.2f})"), jensen_cell(r, flags),
        fmt::format("{:<11} {}", r.stopped_by, r.path.value_or("-")));
  }
  if (flags.not_finite > 0) {
    fmt::print(stderr,
               "attncheck mc: note: {} estimates are not finite (marked not finite!): the map's values "
               "overflow double precision at these sizes\n",
               flags.not_finite);
  }
  if (flags.se_unknown > 0) {
    fmt::print(stderr,
               "attncheck mc: note: {} standard errors are not finite (marked ?!): the squares of the "
               "samples overflow double precision, so the spread is unknown\n",
               flags.se_unknown);
  }
  if (flags.jensen_overflow > 0) {
    fmt::print(stderr,
               "attncheck mc: note: {} Jensen ratios are not shown (marked overflow!): the exact E||F||^2 "
               "overflows double precision, so the ratio would print as 0\n",
               flags.jensen_overflow);
  }
}

// How a series' samples were checked: against a closed form by z, and against deterministic bounds sample by sample.
void print_exact_checks(const records::Series& s) {
  if (s.exact && s.exact->max_abs_z && std::isfinite(*s.exact->max_abs_z)) {
    const int unjudged = s.exact->unjudged_points;
    fmt::print(
        "    Monte Carlo vs closed form: max |z| = {:.2f} over {} points with a reliable SE{} (alarm at |z| > "
        "{:.2f}: "
        "family-wise error {:g} over the folder's {} judged points, Bonferroni){}\n",
        *s.exact->max_abs_z, s.exact->judged_points,
        unjudged ? fmt::format(" ({} not judged: heavy tails)", unjudged) : std::string(),
        s.exact->alarm_abs_z.value_or(NAN), s.exact->family_level.value_or(NAN), s.exact->family_points.value_or(0),
        s.exact->confirmed ? "" : " - DISAGREES: a failure of the tool, not of the claim");
  }
  if (s.exact && s.exact->bound_checked_points > 0) {
    std::string ratios;
    if (s.exact->max_sample_over_bound)
      ratios += fmt::format("largest sample / upper bound = {}", num(s.exact->max_sample_over_bound, "{:.4f}"));
    if (s.exact->min_sample_over_lower_bound) {
      ratios += fmt::format("{}smallest sample / lower bound = {}", ratios.empty() ? "" : ", ",
                            num(s.exact->min_sample_over_lower_bound, "{:.4f}"));
    }
    const bool beyond = !s.exact->bound_exceeded_at.empty() || !s.exact->lower_bound_undercut_at.empty();
    fmt::print("    deterministic bounds on every sample: {} over {} points{}\n", ratios, s.exact->bound_checked_points,
               beyond ? " - A SAMPLE IS BEYOND ONE: a failure of the tool, not of the claim" : "");
  }
}

void print_series(const std::vector<records::Series>& series) {
  fmt::print(
      "\nVerdicts (docs/THEORY.md, \"What a verdict is\"; tolerance {:g}). Proofs first: basis `bound`, a "
      "deterministic bound in N on every input (every sample checked against it); `exact`, a proved bound on the "
      "expectation or a closed form (\"Bounds in N\"). Where no proof decides, `asymptotic-fit`: `violated` by a "
      "test valid under heavy tails (order statistics), or `consistent` with the claim up to the largest N (NOT a "
      "proof), else `inconclusive`. The finite-N fit over all N (C8: over d) is a diagnostic only.\n\n",
      series.empty() ? 0.05 : series.front().tolerance.value_or(0.05));
  fmt::print("{:<6} {:<11} {:<8} {:>2} {:<9} {:<12} {:<10} {:>4} {:>4} {:>7}  {:<12} {:<14} {}\n", "claim", "reading",
             "phi", "p", "estimand", "scores", "scale", "D", "d", "claimed", "verdict", "basis", "counts");
  for (const records::Series& s : series) {
    const std::string verdict = s.verdict ? std::string(records::to_string(*s.verdict)) : "-";
    fmt::print("{:<6} {:<11} {:<8} {:>2} {:<9} {:<12} {:<10} {:>4} {:>4} {:>7}  {:<12} {:<14} {}\n", s.key.claim,
               reading_cell(s.key), theory::phi_label(s.key.activation), s.key.activation.p,
               theory::term_of(s.key.estimand).word, theory::term_of(s.key.scores).word, s.key.scale, s.key.D,
               s.x_variable == "d" ? std::string("swept") : std::to_string(s.key.d),
               s.claims_value ? std::string("= d_k") : num(s.claimed_exponent, "{:g}"), verdict,
               s.basis ? std::string(records::to_string(*s.basis)) : "-",
               !s.verdict          ? "- (no claimed exponent)"
               : s.counts_for_exit ? "yes"
                                   : "no (reported only)");
    if (s.verdict == records::Verdict::consistent) {
      fmt::print("    consistent with the claim up to {} = {} - not a proof: the claim is not settled\n", s.x_variable,
                 s.x.empty() ? 0 : s.x.back());
    }
    // What would settle an inconclusive claim first, in one line; the evidence, long, after it.
    if (s.verdict == records::Verdict::inconclusive && s.to_settle) fmt::print("    to settle it: {}\n", *s.to_settle);
    if (s.verdict_reason) fmt::print("    evidence: {}\n", *s.verdict_reason);
    if (s.finding) fmt::print("    finding: {}\n", *s.finding);
    print_exact_checks(s);
    std::string jensen;
    if (s.jensen_first && std::isfinite(*s.jensen_first)) {
      jensen = fmt::format("; Jensen ratio {:.3f} -> {:.3f} ({})", *s.jensen_first, s.jensen_last.value_or(NAN),
                           s.jensen_source.empty() ? "-" : s.jensen_source);
    }
    fmt::print("    finite-N fit (diagnostic): slope {} {}{}\n", num(s.slope, "{:.3f}"),
               s.slope_ci ? fmt::format("[{:.3f}, {:.3f}]", s.slope_ci->first, s.slope_ci->second) : "-", jensen);
  }
}

void print_human(const std::vector<records::PointRecord>& records, const std::vector<records::Series>& series,
                 const records::Provenance& provenance, const std::vector<std::string>& claims) {
  print_claims_and_model(records, provenance, claims);
  print_points(records);
  print_series(series);
}

// Notes on stderr (rank 0 alone speaks for the run), and the sweep's progress on the progress line.
mc::McHooks terminal_hooks(ProgressLine& line) {
  mc::McHooks hooks;
  hooks.note = [](const std::string& note) {
    if (mc::distributed::is_root()) fmt::print(stderr, "attncheck mc: note: {}\n", note);
  };
  hooks.backend_chosen = [](const std::string& text) {
    if (mc::distributed::is_root()) fmt::print(stderr, "attncheck: {}\n", text);
  };
  hooks.progress = [&line, time_left = TimeLeft()](std::size_t point, std::size_t points, const std::string& label,
                                                   std::uint64_t done, std::uint64_t planned) {
    const double fraction =
        (static_cast<double>(point) + (planned ? static_cast<double>(done) / static_cast<double>(planned) : 0.0)) /
        static_cast<double>(points);
    line.update(fmt::format("{} point {}/{} {} samples {}{} ({})", progress_bar(fraction), point + 1, points, label,
                            done, planned ? fmt::format("/{}", planned) : std::string(), time_left.text(fraction)));
  };
  return hooks;
}

// What stderr says beside the tables: series that count but are not settled (exit code 5), and closed forms or
// bounds Monte Carlo disagrees with (a failure of the tool).
void print_series_notes(const std::vector<records::Series>& series) {
  for (const records::Series& s : series) {
    const std::string name =
        fmt::format("{} {} p={}{} {}{}", s.key.claim, theory::phi_label(s.key.activation), s.key.activation.p,
                    s.key.mix ? " " + reading_cell(s.key) : std::string(), theory::term_of(s.key.estimand).word,
                    s.key.scores == theory::ScoreModel::projected
                        ? std::string()
                        : fmt::format(" {}", theory::term_of(s.key.scores).word));
    if (s.counts_for_exit && s.verdict == records::Verdict::inconclusive) {
      fmt::print(stderr, "attncheck mc: not settled (inconclusive): {}: {}\n", name,
                 s.to_settle ? *s.to_settle + " (the evidence is under Verdicts)" : s.verdict_reason.value_or("-"));
    }
    if (s.counts_for_exit && s.verdict == records::Verdict::consistent) {
      fmt::print(stderr,
                 "attncheck mc: not settled (consistent with the claim up to {} = {}, which is not a proof): {}\n",
                 s.x_variable, s.x.empty() ? 0 : s.x.back(), name);
    }
    if (s.exact && !s.exact->confirmed) {
      fmt::print(stderr,
                 "attncheck mc: Monte Carlo DISAGREES with the closed form or bound of {} (|z| > {:.2f}, or a sample "
                 "beyond a deterministic bound): a failure of the tool, not of the claim\n",
                 name, s.exact->alarm_abs_z.value_or(NAN));
    }
  }
}

int run(mc::McRequest request, bool as_json) {
  request.command = command_line();
  ProgressLine line;
  mc::McOutcome outcome;
  try {
    outcome = mc::run_mc(request, terminal_hooks(line));
  } catch (...) {
    line.finish();  // the error message starts on a clean line
    throw;
  }
  line.finish();
  // Under mpirun every rank holds the same points; rank 0 alone speaks.
  if (!mc::distributed::is_root()) return outcome.exit_code;
  if (outcome.skipped) {
    fmt::print(stderr, "attncheck mc: --resume: {} of {} points were already in {}\n", outcome.skipped, outcome.points,
               *request.out);
  }
  if (as_json) {
    std::cout << attncheck::records::json_text(outcome.to_json(), 2) << "\n";
  } else {
    print_human(outcome.records, outcome.series, outcome.provenance, outcome.claims);
  }
  print_series_notes(outcome.series);
  return outcome.exit_code;
}

// Binds one option of the table to its request field, with the checks CLI11 runs on the text before converting it.
void bind(CLI::App& app, const mc::McOption& option, mc::McRequest& request) {
  const std::string name = "--" + std::string(option.name);
  std::visit(
      [&](auto field) {
        auto& value = request.*field;
        using Value = std::remove_reference_t<decltype(value)>;
        if constexpr (std::is_same_v<Value, bool>) {
          app.add_flag(name, value, option.help);
        } else {
          CLI::Option* added = app.add_option(name, value, option.help);
          if constexpr (!std::is_same_v<Value, std::optional<std::string>> &&
                        !std::is_same_v<Value, std::optional<double>>) {
            added->capture_default_str();
          }
          if (option.real_range) added->check(real_in(*option.real_range));
          if (option.integer_range) added->check(integer_in(option.integer_range->first, option.integer_range->second));
          if (option.count_range) added->check(unsigned_in(option.count_range->first, option.count_range->second));
          if (!option.choices.empty()) added->check(CLI::IsMember(option.choices));
        }
      },
      option.field);
}

std::function<int()> setup(CLI::App& app) {
  auto request = std::make_shared<mc::McRequest>();
  auto as_json = std::make_shared<bool>(false);
  for (const mc::McOption& option : mc::mc_options()) bind(app, option, *request);
  app.add_flag("--json", *as_json, "One JSON object on stdout (provenance, points, series) instead of tables");
  app.footer(
      "Verdicts (docs/THEORY.md, \"What a verdict is\"): proofs first. Basis bound: a deterministic bound in N on "
      "every input decides (every sample is checked against it); exact: a proved bound on the expectation or a closed "
      "form decides (docs/THEORY.md, \"Bounds in N\"; Monte Carlo confirms closed forms by z-scores, the alarm's "
      "family-wise error 0.001 over the folder's points); asymptotic-fit, where no proof decides: violated when a "
      "test valid under heavy tails (order-statistics lower bound at the largest N against upper bounds at smaller "
      "N, 99% confidence) shows growth faster than N^(a + tolerance), consistent when the local exponent's interval "
      "(widened by its trend and the cross-check's disagreement, never by an assumed rate) ends at or below "
      "a + tolerance and is not still rising - consistent is not a proof - else inconclusive. The fit over all N is "
      "a finite-N diagnostic.\n"
      "Exit codes: 0 every counted series holds or is tight (proved); 1 a counted series is violated (C8: the "
      "proposition as stated, with zero covariances only, is); 5 none is violated, but a counted series is only "
      "consistent or inconclusive (not settled: stderr names what would settle it); 2 bad usage or input; 3 the "
      "results folder could not be written; 4 the compute device failed. The matrix-power reading of C3/C4, C7's "
      "Frobenius norm and C8's projected model are reported but not counted.\n"
      "Sampling: X, Q, K have i.i.d. N(0, sigma^2) entries (sigma = standard deviation); sample k of a point draws X "
      "(row-major), then Q, then K from Philox4x32-10 (point seed, subsequence k), as cuRAND's curand_init(seed, k, "
      "0). "
      "The matrix-power reading uses S^p = lambda^p V (U^T V)^(p-1) U^T (V = XQ, U = XK): O(N d^2), any N, value "
      "only.\n"
      "Example: attncheck mc --claim C3 --N 16:4096:x2 --D 64 --d 64 --p 1,2,3 --out results/\n" +
      mc::backend_list());
  return [request, as_json] { return run(*request, *as_json); };
}

const bool registered = register_subcommand(
    "mc", "Monte Carlo scaling of the expectation claims C3-C9: estimates, exact references, slopes and verdicts",
    setup);

}  // namespace
}  // namespace attncheck::cli
