// attncheck mc: Monte Carlo sweeps of the expectation claims C3-C9, exact references, log-log fits, verdicts.

#include "number_options.hpp"
#include "progress.hpp"
#include "subcommand.hpp"

#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/monte_carlo/distributed.hpp"
#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/monte_carlo/results.hpp"
#include "attncheck/monte_carlo/sweep.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::cli {
namespace {

namespace mc = attncheck::monte_carlo;
using nlohmann::json;

static_assert(mc::exit_code_of(mc::RunVerdict::holds) == kExitHolds);
static_assert(mc::exit_code_of(mc::RunVerdict::violated) == kExitViolated);
static_assert(mc::exit_code_of(mc::RunVerdict::unsettled) == kExitUnsettled);

struct Options {
  std::optional<std::string> claim, phi, inner_scale, outer_scale, estimand, out;
  std::string N = "16:1024:x2", D = "64", d = "64", p = "1,2,3";
  std::optional<std::string> alpha, mix, dv;
  std::string samples = "auto", backend = "auto";
  std::optional<double> claimed_exponent;
  double rel_se = 0.01, max_seconds = 600, sigma_x = 1, sigma_t = 1, tolerance = 0.05;
  std::uint64_t max_samples = 100000, seed = 1;
  int threads = 0;
  long long tile = 256;
  std::string precision = "double";
  std::string path = "auto";
  bool resume = false, force = false, as_json = false;
};

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

void print_human(const std::vector<records::PointRecord>& records, const std::vector<records::Series>& series,
                 const records::Provenance& provenance, const std::vector<std::string>& claims) {
  Flags flags;
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
        r.key.claim, reading_cell(r.key), theory::term_of(r.key.activation).word, r.key.activation.p,
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
               reading_cell(s.key), theory::term_of(s.key.activation).word, s.key.activation.p,
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
    if (s.verdict_reason) fmt::print("    evidence: {}\n", *s.verdict_reason);
    if (s.finding) fmt::print("    finding: {}\n", *s.finding);
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
      fmt::print("    deterministic bounds on every sample: {} over {} points{}\n", ratios,
                 s.exact->bound_checked_points,
                 beyond ? " - A SAMPLE IS BEYOND ONE: a failure of the tool, not of the claim" : "");
    }
    std::string jensen;
    if (s.jensen_first && std::isfinite(*s.jensen_first)) {
      jensen = fmt::format("; Jensen ratio {:.3f} -> {:.3f} ({})", *s.jensen_first, s.jensen_last.value_or(NAN),
                           s.jensen_source.empty() ? "-" : s.jensen_source);
    }
    fmt::print("    finite-N fit (diagnostic): slope {} {}{}\n", num(s.slope, "{:.3f}"),
               s.slope_ci ? fmt::format("[{:.3f}, {:.3f}]", s.slope_ci->first, s.slope_ci->second) : "-", jensen);
  }
}

// The request as the command line gives it; run_mc checks it, so that the Python package gets the same checks.
mc::McRequest request_of(const Options& o) {
  mc::McRequest request;
  request.claim = o.claim;
  request.phi = o.phi;
  request.inner_scale = o.inner_scale;
  request.outer_scale = o.outer_scale;
  request.estimand = o.estimand;
  request.out = o.out;
  request.N = o.N;
  request.D = o.D;
  request.d = o.d;
  request.p = o.p;
  request.alpha = o.alpha;
  request.mix = o.mix;
  request.dv = o.dv;
  request.samples = o.samples;
  request.claimed_exponent = o.claimed_exponent;
  request.rel_se = o.rel_se;
  request.max_seconds = o.max_seconds;
  request.sigma_x = o.sigma_x;
  request.sigma_t = o.sigma_t;
  request.tolerance = o.tolerance;
  request.max_samples = o.max_samples;
  request.seed = o.seed;
  request.threads = o.threads;
  request.tile = o.tile;
  request.precision = o.precision;
  request.path = o.path;
  request.resume = o.resume;
  request.force = o.force;
  request.command = command_line();
  return request;
}

// Backend selection by --backend, notes on stderr, and the sweep's progress on the progress line.
mc::McHooks terminal_hooks(const Options& o, ProgressLine& line) {
  mc::McHooks hooks;
  hooks.make_backend = [backend = o.backend](const mc::BackendRequest& request) {
    // Rank 0 says which backend, for the whole run.
    return mc::select_backend(backend, request, [](const std::string& text) {
      if (mc::distributed::is_root()) fmt::print(stderr, "attncheck: {}\n", text);
    });
  };
  hooks.note = [](const std::string& note) {
    if (mc::distributed::is_root()) fmt::print(stderr, "attncheck mc: note: {}\n", note);
  };
  hooks.progress = [&line](std::size_t point, std::size_t points, const std::string& label, std::uint64_t done,
                           std::uint64_t planned) {
    const double fraction =
        (static_cast<double>(point) + (planned ? static_cast<double>(done) / static_cast<double>(planned) : 0.0)) /
        static_cast<double>(points);
    line.update(fmt::format("{} point {}/{} {} samples {}{}", progress_bar(fraction), point + 1, points, label, done,
                            planned ? fmt::format("/{}", planned) : std::string()));
  };
  return hooks;
}

// What stderr says beside the tables: series that count but are not settled (exit code 5), and closed forms or
// bounds Monte Carlo disagrees with (a failure of the tool).
void print_series_notes(const std::vector<records::Series>& series) {
  for (const records::Series& s : series) {
    const std::string name =
        fmt::format("{} {} p={}{} {}{}", s.key.claim, theory::term_of(s.key.activation).word, s.key.activation.p,
                    s.key.mix ? " " + reading_cell(s.key) : std::string(), theory::term_of(s.key.estimand).word,
                    s.key.scores == theory::ScoreModel::projected
                        ? std::string()
                        : fmt::format(" {}", theory::term_of(s.key.scores).word));
    if (s.counts_for_exit && s.verdict == records::Verdict::inconclusive) {
      fmt::print(stderr, "attncheck mc: not settled (inconclusive): {}: {}\n", name, s.verdict_reason.value_or("-"));
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

int run(const Options& o) {
  ProgressLine line;
  mc::McOutcome outcome;
  try {
    outcome = mc::run_mc(request_of(o), terminal_hooks(o, line));
  } catch (...) {
    line.finish();  // the error message starts on a clean line
    throw;
  }
  line.finish();
  // Under mpirun every rank holds the same points; rank 0 alone speaks.
  if (!mc::distributed::is_root()) return outcome.exit_code;
  if (outcome.skipped) {
    fmt::print(stderr, "attncheck mc: --resume: {} of {} points were already in {}\n", outcome.skipped, outcome.points,
               *o.out);
  }
  if (o.as_json) {
    std::cout << outcome.to_json().dump(2) << "\n";
  } else {
    print_human(outcome.records, outcome.series, outcome.provenance, outcome.claims);
  }
  print_series_notes(outcome.series);
  return outcome.exit_code;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--claim", o->claim,
                 "Preset exactly as the paper states it: C3 (E||(T/sqrt d)^p||_F = O(N), both readings of ^p), "
                 "C4 (with 1/sqrt(N): O(sqrt N)), C5 (E||d/dQ (T^p/sqrt d)||_F = O(N)), C6 (with 1/sqrt(N), Q and K: "
                 "O(sqrt N)), C7 (relu paper: row sums of N^-alpha h(q.k/sqrt d) are O(1) at alpha = 1 and grow like "
                 "N^(1-alpha) below, with and without qk-layernorm; the Frobenius norm as a secondary series), C8 "
                 "(Var(q.k) = d_k over --d: i.i.d. entries, the literal zero-covariance hypothesis, the projected "
                 "model), C9 (cross-normalization: O = softmax(S) (alpha softmax_col(V) + (1 - alpha) V), ||O||_F, "
                 "||dO/dV||_F, ||dO/dS||_F, ||dO/dW_Q||_F are O(sqrt N); at mix alpha = 1 a deterministic bound, "
                 "checked on every sample)")
      ->check(CLI::IsMember({"C3", "C4", "C5", "C6", "C7", "C8", "C9"}));
  app.add_option("--N", o->N, "Sequence lengths: list (16,64,256) or start:stop:xfactor (16:4096:x2)")
      ->capture_default_str();
  app.add_option("--D", o->D, "Model dimensions (list or grid)")->capture_default_str();
  app.add_option("--d", o->d, "Head dimensions (list or grid)")->capture_default_str();
  app.add_option("--p", o->p, "Exponents of poly/matpow (list)")->capture_default_str();
  app.add_option("--phi", o->phi,
                 "Activation without --claim (C7: the h): poly (elementwise x^p), matpow (matrix power, value only), "
                 "softmax (row-wise), relu, relu2, gelu, softplus, identity, relu6, sigmoid");
  app.add_option("--alpha", o->alpha,
                 "C7's exponent in N^-alpha (list; default 0,0.5,1: the claim at 1, the growth without it)");
  app.add_option("--mix", o->mix,
                 "C9's mix alpha of P = alpha softmax_col(V) + (1 - alpha) V (list of values in [0, 1]; default 1, the "
                 "RFP's softmax(S) softmax^T(V)); one series each");
  app.add_option("--dv", o->dv, "C9's value columns d_v of W_V (list or grid; default d)");
  app.add_option("--inner-scale", o->inner_scale, "lambda in F = c(N) phi(lambda T): 1/sqrt(d) (default) or a number");
  app.add_option("--outer-scale", o->outer_scale,
                 "c(N): none (default), 1/sqrt(N), 1/k:K (e.g. 1/k:8), N^-a (e.g. N^-1)");
  app.add_option("--estimand", o->estimand,
                 "Comma list of value (||F||_F), dQ, dK (||dF/dQ||_F, ||dF/dK||_F, full Jacobians), dS (||dF/dS||_F), "
                 "score-var (Var(s_ij), i != j), row-sum (mean over rows of sum_j F_ij), row-mean (row-sum / N); "
                 "default value. C9 fixes value, dV (||dO/dV||_F), dS and dQ");
  app.add_option("--claimed-exponent", o->claimed_exponent,
                 "Without --claim: the claimed exponent a of E||F|| = O(N^a)")
      ->check(real_in(mc::kClaimedExponentRange));
  app.add_option("--samples", o->samples,
                 "Samples per point: an integer, or auto (until --rel-se, --max-samples or --max-seconds)")
      ->capture_default_str();
  app.add_option(
         "--rel-se", o->rel_se,
         "auto: stop when se/mean <= this for every estimand (C8: of the mean square), with a reliable se unless "
         "proofs decide every verdict of the point")
      ->capture_default_str()
      ->check(real_in(mc::kRelativeErrorRange));
  app.add_option("--max-samples", o->max_samples, "auto: at most this many samples per point")
      ->capture_default_str()
      ->check(unsigned_in(2, mc::kMaxSamples));
  app.add_option("--max-seconds", o->max_seconds,
                 "auto: at most this much wall time per point (read after every sample from the second on)")
      ->capture_default_str()
      ->check(real_in(mc::kSecondsRange));
  app.add_option("--sigma-x", o->sigma_x, "Standard deviation of the entries of X")
      ->capture_default_str()
      ->check(real_in(mc::kSigmaRange));
  app.add_option("--sigma-t", o->sigma_t, "Standard deviation of the entries of Q and K")
      ->capture_default_str()
      ->check(real_in(mc::kSigmaRange));
  app.add_option("--seed", o->seed, "Run seed; each point's seed is derived from it and the point")
      ->capture_default_str()
      ->check(unsigned_in(0, UINT64_MAX));
  app.add_option("--threads", o->threads, "CPU threads (0: all cores); results do not depend on it")
      ->capture_default_str()
      ->check(integer_in(0, kMaxThreads));
  // The real limit of the tile is the memory check; its side must fit the BLAS integer type.
  app.add_option("--tile", o->tile, "Score tile size (tile x tile entries per thread)")
      ->capture_default_str()
      ->check(integer_in(1, INT32_MAX));
  app.add_option("--tolerance", o->tolerance, "Slack on the claimed exponent in the asymptotic-fit verdict")
      ->capture_default_str()
      ->check(real_in(mc::kToleranceRange));
  app.add_option("--backend", o->backend, mc::backend_names())->capture_default_str();
  app.add_option("--precision", o->precision,
                 "double, or mixed: FP32 score tiles of x^p (p = 2..6) with FP64 sums, CPU only; the relative error "
                 "bound per (p, d) is printed and kept in the provenance")
      ->capture_default_str();
  app.add_option("--path", o->path,
                 "How the CPU evaluates a sample: direct (score tiles, Gram matrices), tensor (x^p by symmetric tensor "
                 "powers, O(N C(d+2p, 2p)), exact), or auto (the cheaper by a flop estimate, per point); recorded "
                 "per point")
      ->capture_default_str();
  app.add_option("--out", o->out,
                 "Folder for points.jsonl, points.csv (each point written when it finishes) and fits.json (the fits of "
                 "every series in the folder)");
  app.add_flag("--resume", o->resume,
               "Keep the points already in --out and skip those this run would repeat (same point, estimand and "
               "--seed); runs of other claims accumulate in one folder, and several runs may write it at once");
  app.add_flag("--force", o->force,
               "Remove the points already in --out first (without --resume or --force, a folder "
               "that holds points is refused)");
  app.add_flag("--json", o->as_json, "One JSON object on stdout (provenance, points, series) instead of tables");
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
  return [o] { return run(*o); };
}

const bool registered = register_subcommand(
    "mc", "Monte Carlo scaling of the expectation claims C3-C9: estimates, exact references, slopes and verdicts",
    setup);

}  // namespace
}  // namespace attncheck::cli
