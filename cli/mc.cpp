// attncheck mc: Monte Carlo sweeps of the expectation claims C3-C8, exact references, log-log fits, verdicts.

#include "backend_select.hpp"
#include "subcommand.hpp"

#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/monte_carlo/sweep.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

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

struct Options {
  std::optional<std::string> claim, phi, inner_scale, outer_scale, estimand, out;
  std::string N = "16:1024:x2", D = "64", d = "64", p = "1,2,3", alpha = "1";
  std::string samples = "auto", backend = "auto";
  std::optional<double> claimed_exponent;
  double rel_se = 0.01, max_seconds = 600, sigma_x = 1, sigma_t = 1, tolerance = 0.05;
  std::uint64_t max_samples = 100000, seed = 1;
  int threads = 0;
  long long tile = 256;
  bool resume = false, as_json = false;
};

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), out;
  for (char c : all) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

class ProgressBar {
 public:
  ProgressBar() : enabled_(::isatty(::fileno(stderr)) == 1) {}
  void update(std::size_t point, std::size_t points, const std::string& label, std::uint64_t done,
              std::uint64_t planned) {
    if (!enabled_) return;
    points_ = points;
    const double fraction = (static_cast<double>(point) +
                             (planned ? static_cast<double>(done) / static_cast<double>(planned) : 0.0)) /
                            static_cast<double>(points_);
    const int width = 30, filled = static_cast<int>(fraction * width);
    fmt::print(stderr, "\r[{}{}] point {}/{} {} samples {}{}\x1b[K", std::string(filled, '#'),
               std::string(width - filled, ' '), point + 1, points_, label, done,
               planned ? fmt::format("/{}", planned) : std::string());
  }
  void finish() {
    if (enabled_) fmt::print(stderr, "\r\x1b[K");
  }

 private:
  std::size_t points_ = 1;
  bool enabled_;
};

std::string with_se(const json& mean, const json& se) {
  if (!mean.is_number()) return "-";
  return fmt::format("{:.5g} ± {:.2g}", mean.get<double>(), se.is_number() ? se.get<double>() : NAN);
}

std::string num(const json& v, const char* format = "{:.5g}") {
  return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string("-");
}

void print_human(const std::vector<json>& records, const json& series, const json& provenance,
                 const std::vector<std::string>& claims) {
  for (const std::string& id : claims) {
    const mc::ClaimInfo info = mc::claim_info(id);
    fmt::print("{}: {} (v1) / {} (v2): {}\n", info.id, info.v1, info.v2, info.statement);
  }
  if (!records.empty()) {
    const json& r0 = records.front();
    fmt::print("Model: X entries N(0, {:g}^2), Q and K entries N(0, {:g}^2) (the papers' sigma read as standard "
               "deviation); run seed {}; backend {}, {} threads.\n",
               r0["sigma_x"].get<double>(), r0["sigma_t"].get<double>(), provenance["run_seed"].get<std::uint64_t>(),
               provenance["backend"].get<std::string>(), provenance["threads"].get<int>());
  }
  fmt::print(
      "\nEstimates per sweep point. E||F|| = expected Frobenius norm of the estimand (dimensionless), ± one standard "
      "error;\n95% CI is Student t. E||F||^2 is compared with its exact value where one is known (z = (estimate - "
      "exact)/se);\nE||F|| <= sqrt(exact) is Jensen's bound. '!' marks a standard error that is itself unreliable "
      "(heavy tails).\n\n");
  fmt::print("{:<6} {:<11} {:<8} {:>2} {:<9} {:>6} {:>4} {:>4} {:>7}  {:<22} {:<21}  {:<24} {:<13} {:>7} {:>7}  {}\n",
             "claim", "reading", "phi", "p", "estimand", "N", "D", "d", "samples", "E||F||_F ± se", "95% CI",
             "E||F||_F^2 ± se", "exact E||F||^2", "z", "/Jensen", "stopped by");
  for (const json& r : records) {
    const bool reliable = r.value("se_reliable", false);
    fmt::print("{:<6} {:<11} {:<8} {:>2} {:<9} {:>6} {:>4} {:>4} {:>7}  {:<22} {:<21}  {:<24} {:<13} {:>7} {:>7}  {}\n",
               r["claim"].get<std::string>(), r["reading"].is_string() ? r["reading"].get<std::string>() : "-",
               r["phi"].get<std::string>(), r["p"].get<int>(), r["estimand"].get<std::string>(), r["N"].get<long long>(),
               r["D"].get<long long>(), r["d"].get<long long>(), r["samples"].get<long long>(),
               with_se(r["mean"], r["se"]) + (reliable ? "" : " !"),
               fmt::format("[{}, {}]", num(r["ci95"][0]), num(r["ci95"][1])), with_se(r["mean_sq"], r["se_sq"]),
               num(r["exact_sq"]), num(r["z_exact_sq"], "{:+.2f}"), num(r["jensen_ratio"], "{:.4f}"),
               r["stopped_by"].get<std::string>());
  }
  fmt::print("\nFits: least-squares slope of log E||F||_F against log N (C8: log E[s_ij^2] against log d), 95% CI; "
             "verdict as in THEORY.md with tolerance {:g}.\n\n",
             series.empty() ? 0.05 : series.front().value("tolerance", 0.05));
  fmt::print("{:<6} {:<11} {:<8} {:>2} {:<9} {:<10} {:>4} {:>4} {:>6}  {:<18} {:>7}  {:<12} {}\n", "claim", "reading",
             "phi", "p", "estimand", "scale", "D", "d", "slope", "95% CI", "claimed", "verdict", "counts");
  for (const json& s : series) {
    fmt::print("{:<6} {:<11} {:<8} {:>2} {:<9} {:<10} {:>4} {:>4} {:>6}  {:<18} {:>7}  {:<12} {}\n",
               s["claim"].get<std::string>(), s["reading"].is_string() ? s["reading"].get<std::string>() : "-",
               s["phi"].get<std::string>(), s["p"].get<int>(), s["estimand"].get<std::string>(),
               s["scale"].get<std::string>(), s["D"].get<long long>(),
               s["fit_variable"] == "d" ? std::string("swept") : std::to_string(s["d"].get<long long>()),
               num(s["slope"], "{:.3f}"),
               s["slope_ci"].is_array() ? fmt::format("[{:.3f}, {:.3f}]", s["slope_ci"][0].get<double>(), s["slope_ci"][1].get<double>()) : "-",
               num(s["claimed_exponent"], "{:g}"), s["verdict"].is_string() ? s["verdict"].get<std::string>() : "-",
               !s["verdict"].is_string() ? "- (no claimed exponent)"
               : s.value("counts_for_exit", false) ? "yes" : "no (reported only)");
  }
}

int run(const Options& o) {
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
  request.resume = o.resume;
  request.command = command_line();
  ProgressBar bar;
  mc::McHooks hooks;
  hooks.make_backend = [&](const mc::McRequest& r) {
    return select_backend(o.backend, r.threads, static_cast<theory::Index>(r.tile));
  };
  hooks.note = [](const std::string& note) { fmt::print(stderr, "attncheck mc: note: {}\n", note); };
  hooks.progress = [&](std::size_t point, std::size_t points, const std::string& label, std::uint64_t done,
                       std::uint64_t planned) { bar.update(point, points, label, done, planned); };
  const mc::McOutcome outcome = mc::run_mc(request, hooks);
  bar.finish();
  if (outcome.skipped) {
    fmt::print(stderr, "attncheck mc: --resume: {} of {} points were already in {}\n", outcome.skipped, outcome.points,
               *o.out);
  }
  if (o.as_json) {
    std::cout << outcome.to_json().dump(2) << "\n";
  } else {
    print_human(outcome.records, outcome.series, outcome.provenance, outcome.claims);
  }
  if (outcome.inconclusive) {
    fmt::print(stderr,
               "attncheck mc: {} series inconclusive (slope interval too wide or straddling claimed + tolerance): "
               "not counted as violated; widen the N range or lower --rel-se\n",
               outcome.inconclusive);
  }
  return outcome.exit_code == 1 ? kExitViolated : kExitHolds;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--claim", o->claim,
                 "Preset exactly as the paper states it: C3 (E||(T/sqrt d)^p||_F = O(N), both readings of ^p), "
                 "C4 (with 1/sqrt(N): O(sqrt N)), C5 (E||d/dQ (T^p/sqrt d)||_F = O(N)), C6 (with 1/sqrt(N), Q and K: "
                 "O(sqrt N)), C7 (relu paper: N^-alpha h(T/sqrt d), O(N^(1-alpha))), C8 (Var(q.k) = d_k, swept over d)")
      ->check(CLI::IsMember({"C3", "C4", "C5", "C6", "C7", "C8"}));
  app.add_option("--N", o->N, "Sequence lengths: list (16,64,256) or start:stop:xfactor (16:4096:x2)")->capture_default_str();
  app.add_option("--D", o->D, "Model dimensions (list or grid)")->capture_default_str();
  app.add_option("--d", o->d, "Head dimensions (list or grid)")->capture_default_str();
  app.add_option("--p", o->p, "Exponents of poly/matpow (list)")->capture_default_str();
  app.add_option("--phi", o->phi,
                 "Activation without --claim (C7: the h): poly (elementwise x^p), matpow (matrix power, value only), "
                 "softmax (row-wise), relu, relu2, gelu, softplus, identity, relu6, sigmoid");
  app.add_option("--alpha", o->alpha, "C7's exponent in N^-alpha (list)")->capture_default_str();
  app.add_option("--inner-scale", o->inner_scale, "lambda in F = c(N) phi(lambda T): 1/sqrt(d) (default) or a number");
  app.add_option("--outer-scale", o->outer_scale, "c(N): none (default), 1/sqrt(N), 1/k:K (e.g. 1/k:8), N^-a (e.g. N^-1)");
  app.add_option("--estimand", o->estimand,
                 "Comma list of value (||F||_F), dQ, dK (||dF/dQ||_F, ||dF/dK||_F, full Jacobians), dS (||dF/dS||_F), "
                 "score-var (Var(s_ij), i != j); default value");
  app.add_option("--claimed-exponent", o->claimed_exponent, "Without --claim: the exponent to check the fitted slope against");
  app.add_option("--samples", o->samples, "Samples per point: an integer, or auto (until --rel-se, --max-samples or --max-seconds)")
      ->capture_default_str();
  app.add_option("--rel-se", o->rel_se, "auto: stop when se/mean <= this for every estimand (C8: of the mean square)")->capture_default_str();
  app.add_option("--max-samples", o->max_samples, "auto: at most this many samples per point")->capture_default_str();
  app.add_option("--max-seconds", o->max_seconds, "auto: at most this much wall time per point")->capture_default_str();
  app.add_option("--sigma-x", o->sigma_x, "Standard deviation of the entries of X")->capture_default_str();
  app.add_option("--sigma-t", o->sigma_t, "Standard deviation of the entries of Q and K")->capture_default_str();
  app.add_option("--seed", o->seed, "Run seed; each point's seed is derived from it and the point")->capture_default_str();
  app.add_option("--threads", o->threads, "CPU threads (0: all cores); results do not depend on it")->capture_default_str();
  app.add_option("--tile", o->tile, "Score tile size (tile x tile entries per thread)")->capture_default_str();
  app.add_option("--tolerance", o->tolerance, "Slack on the claimed exponent in the verdict")->capture_default_str();
  app.add_option("--backend", o->backend, "auto, cpu or cuda")->capture_default_str();
  app.add_option("--out", o->out, "Folder for points.jsonl, points.csv (each point written when it finishes) and fits.json (the fits of every series in the folder)");
  app.add_flag("--resume", o->resume, "Keep the points already in --out and skip those this run would repeat (same point, estimand and --seed); runs of other claims accumulate in one folder");
  app.add_flag("--json", o->as_json, "One JSON object on stdout (provenance, points, series) instead of tables");
  app.footer(
      "Exit codes: 0 every fitted series of the claims as the papers state them holds or is tight (inconclusive ones "
      "are reported on stderr and do not fail the run; the matrix-power reading of C3/C4 is reported but does not "
      "count); 1 a stated claim is violated; 2 bad usage or input.\n"
      "Sampling: X, Q, K have i.i.d. N(0, sigma^2) entries (sigma = standard deviation); sample k of a point draws X "
      "(row-major), then Q, then K from Philox4x32-10 (point seed, subsequence k), as cuRAND's curand_init(seed, k, 0). "
      "The matrix-power reading uses S^p = lambda^p V (U^T V)^(p-1) U^T (V = XQ, U = XK): O(N d^2), any N, value only.\n"
      "Example: attncheck mc --claim C3 --N 16:4096:x2 --D 64 --d 64 --p 1,2,3 --out results/");
  return [o] { return run(*o); };
}

const bool registered = register_subcommand(
    "mc", "Monte Carlo scaling of the expectation claims C3-C8: estimates, exact references, slopes and verdicts", setup);

}  // namespace
}  // namespace attncheck::cli
