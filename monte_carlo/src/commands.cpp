#include "attncheck/monte_carlo/commands.hpp"

#include "attncheck/monte_carlo/bounds_survey.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/results.hpp"
#include "attncheck/monte_carlo/runner.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/reports/matrix_io.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>

namespace attncheck::monte_carlo {

using nlohmann::json;
using theory::Index;
using theory::InputError;

namespace {

// What the kernel says can still be allocated without swapping; falls back to physical memory.
std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

json summary_json(const WorstMatrixSummary& s) {
  return {{"trial", s.trial},
          {"min_logit", s.min_logit},
          {"max_logit", s.max_logit},
          {"worst_row_top_probabilities", {s.worst_row_top1, s.worst_row_top2}},
          {"worst_row_jacobian_sq", s.worst_row_jacobian_sq}};
}

void check_range(const char* option, long long value, long long low, long long high) {
  if (value < low || value > high) {
    throw InputError(fmt::format("{}: Value {} not in range {} to {}", option, value, low, high));
  }
}

}  // namespace

json run_bounds(const BoundsRequest& request) {
  if (request.n && *request.n < 1) throw InputError(fmt::format("--N: '{}' is not a positive integer", *request.n));
  check_range("--trials", request.trials, 1, kMaxBoundsTrials);
  check_range("--search-starts", request.search_starts, 1, kMaxSearchStarts);
  if (request.threads != 0) check_range("--threads", request.threads, 1, kMaxThreads);
  const int threads = request.threads > 0 ? request.threads : omp_get_max_threads();
  const std::uint64_t budget = available_memory_bytes() / 10 * 8;
  std::optional<theory::Matrix> input;
  if (!request.input.empty()) input = reports::read_matrix(request.input, budget);
  if (!input && !request.n) throw InputError("give the matrix size with --N, or a matrix with --input FILE");
  const Index n = input ? input->rows() : static_cast<Index>(*request.n);
  if (input && request.n && *request.n != n) {
    throw InputError(fmt::format("--N {} disagrees with --input {}, which has {} rows", *request.n, request.input, n));
  }

  std::vector<BoundsFamily> families;
  for (const std::string& name : request.families) {
    const auto family = parse_family(name);
    if (!family || *family == BoundsFamily::input) {
      std::string known;
      for (auto f : default_families()) known += (known.empty() ? "" : ", ") + family_name(f);
      throw InputError(fmt::format("unknown --family '{}' (known: {})", name, known));
    }
    families.push_back(*family);
  }
  if (request.families.empty() && !input) families = default_families();
  if (!families.empty()) {
    const std::uint64_t needed = survey_bytes(n, threads);
    if (needed > budget) {
      throw InputError(fmt::format("--N {}: {} threads would hold {:.3g} GiB of {} x {} matrices, more than the "
                                   "{:.3g} GiB of memory available; use a smaller N or fewer --threads",
                                   n, threads, static_cast<double>(needed) / (1 << 30), n, n,
                                   static_cast<double>(budget) / (1 << 30)));
    }
  }

  SurveyOptions survey{n, request.trials, request.seed, threads, request.search_starts};
  std::vector<FamilyResult> results;
  for (const auto family : families) results.push_back(survey_family(family, survey));
  if (input) {
    try {
      results.push_back(survey_matrix(*input));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", request.input, e.what()));
    }
  }

  const theory::SoftmaxBounds bounds = theory::softmax_bounds(n);
  bool all_hold = true, tight_holds = true;
  double max_softmax_ratio = 0, max_grad_tight_ratio = 0;
  json family_list = json::array();
  for (const auto& r : results) {
    const bool holds = within(r.max_softmax_fro, bounds.softmax_paper) && within(r.max_grad_fro, bounds.grad_paper);
    const bool within_tight = within(r.max_grad_fro, bounds.grad_tight);
    all_hold = all_hold && holds;
    tight_holds = tight_holds && within_tight;
    max_softmax_ratio = std::max(max_softmax_ratio, r.max_softmax_fro / bounds.softmax_paper);
    max_grad_tight_ratio = std::max(max_grad_tight_ratio, r.max_grad_fro / bounds.grad_tight);
    family_list.push_back({{"family", family_name(r.family)},
                           {"trials", r.trials},
                           {"max_softmax_fro", r.max_softmax_fro},
                           {"max_grad_fro", r.max_grad_fro},
                           {"bound_softmax", bounds.softmax_paper},
                           {"bound_grad_paper", bounds.grad_paper},
                           {"bound_grad_tight", bounds.grad_tight},
                           {"ratio_softmax", r.max_softmax_fro / bounds.softmax_paper},
                           {"ratio_grad_paper", r.max_grad_fro / bounds.grad_paper},
                           {"ratio_grad_tight", r.max_grad_fro / bounds.grad_tight},
                           {"holds", holds},
                           {"within_tight_bound", within_tight},
                           {"worst_softmax_matrix", summary_json(r.worst_softmax)},
                           {"worst_grad_matrix", summary_json(r.worst_grad)}});
  }
  return {{"N", n},
          {"holds", all_hold && tight_holds},
          {"claims",
           {{"C1", "||softmax(A)||_F <= sqrt(N): v1 Thm 4.1 (4.1) / v2 Thm 4.1 (6)"},
            {"C2", "||grad softmax(A)||_F <= 2 sqrt(N): v1 Thm 4.1 (4.2) / v2 Thm 4.1 (7)"}}},
          {"paper_bounds_hold", all_hold},
          {"tight_bound_holds", tight_holds},
          {"max_ratio_softmax", max_softmax_ratio},
          {"max_ratio_grad_tight", max_grad_tight_ratio},
          {"seed", request.seed},
          {"trials", request.trials},
          {"threads", threads},
          {"input", request.input.empty() ? json(nullptr) : json(request.input)},
          {"families", family_list}};
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

SamplingPolicy sampling_policy(const McRequest& o) {
  SamplingPolicy policy;
  if (o.samples != "auto") {
    std::size_t used = 0;
    long long m = 0;
    try {
      m = std::stoll(o.samples, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != o.samples.size() || m < 2) {
      throw InputError(fmt::format("--samples {}: give an integer >= 2 or 'auto'", o.samples));
    }
    policy.fixed = static_cast<std::uint64_t>(m);
  }
  if (!(o.rel_se > 0)) throw InputError(fmt::format("--rel-se {}: must be > 0", o.rel_se));
  if (!(o.max_seconds > 0)) throw InputError(fmt::format("--max-seconds {}: must be > 0", o.max_seconds));
  if (o.max_samples < 2) throw InputError(fmt::format("--max-samples {}: must be >= 2", o.max_samples));
  policy.rel_se = o.rel_se;
  policy.max_samples = o.max_samples;
  policy.min_samples = std::min<std::uint64_t>(64, o.max_samples);
  policy.max_seconds = o.max_seconds;
  return policy;
}

}  // namespace

json McOutcome::to_json() const {
  return {{"provenance", provenance}, {"points", records}, {"series", series}, {"exit_code", exit_code}};
}

McOutcome run_mc(const McRequest& o, const McHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  SweepRequest request;
  request.claim = o.claim;
  request.phi = o.phi;
  request.inner_scale = o.inner_scale;
  request.outer_scale = o.outer_scale;
  request.estimands = o.estimand;
  request.claimed_exponent = o.claimed_exponent;
  request.p.clear();
  for (double p : parse_real_list(o.p, "--p")) {
    if (p != std::floor(p)) throw InputError(fmt::format("--p {}: exponents must be integers", p));
    request.p.push_back(static_cast<int>(p));
  }
  request.alpha = parse_real_list(o.alpha, "--alpha");
  const std::vector<SeriesSpec> series = build_series(request);
  const auto Ns = parse_index_grid(o.N, "--N"), Ds = parse_index_grid(o.D, "--D"), ds = parse_index_grid(o.d, "--d");
  if (!(o.sigma_x > 0)) throw InputError(fmt::format("--sigma-x {}: must be > 0", o.sigma_x));
  if (!(o.sigma_t > 0)) throw InputError(fmt::format("--sigma-t {}: must be > 0", o.sigma_t));
  if (!(o.tolerance > 0)) throw InputError(fmt::format("--tolerance {}: must be > 0", o.tolerance));
  if (o.threads < 0) throw InputError(fmt::format("--threads {}: must be >= 0 (0: all cores)", o.threads));
  if (o.tile < 1) throw InputError(fmt::format("--tile {}: must be >= 1", o.tile));
  if (o.resume && !o.out) throw InputError("--resume needs --out DIR (the folder to resume)");
  for (const auto& s : series) {
    if (s.fit_over_d && Ns.size() > 1 && ds.size() == 1 && hooks.note) {
      hooks.note("C8 is a statement about d: sweep --d (e.g. --d 4:256:x2)");
    }
    for (auto e : s.estimands) {
      if (e == Estimand::score_var) {
        for (auto n : Ns) {
          if (n < 2) throw InputError(fmt::format("--N {}: score-var needs N >= 2", n));
        }
      }
    }
  }
  const SamplingPolicy policy = sampling_policy(o);
  const std::unique_ptr<Backend> backend =
      hooks.make_backend ? hooks.make_backend(o) : std::make_unique<CpuBackend>(o.threads, static_cast<Index>(o.tile));
  const auto* cpu = dynamic_cast<const CpuBackend*>(backend.get());
  const int threads = cpu ? cpu->threads() : o.threads;
  const RunContext context{o.seed, backend->name(), threads};

  std::vector<PointSpec> points;
  for (const auto& s : series) {
    for (auto D : Ds) {
      for (auto d : ds) {
        for (auto N : Ns) points.push_back(make_point(s, N, D, d, o.sigma_x, o.sigma_t, o.seed));
      }
    }
  }
  McOutcome outcome;
  outcome.points = points.size();
  std::optional<ResultsFolder> folder;
  if (o.out) folder.emplace(*o.out, o.resume);
  for (std::size_t k = 0; k < points.size(); ++k) {
    const PointSpec& ps = points[k];
    std::vector<json> finished;
    if (folder) {
      for (auto e : ps.series->estimands) {
        const std::string key = fmt::format("{};estimand={};run_seed={}", ps.key, estimand_name(e), o.seed);
        for (const json& r : folder->records()) {
          if (r.value("key", "") == key) {
            finished.push_back(r);
            break;
          }
        }
      }
    }
    if (o.resume && finished.size() == ps.series->estimands.size()) {
      outcome.records.insert(outcome.records.end(), finished.begin(), finished.end());
      ++outcome.skipped;
      continue;
    }
    const std::string label = fmt::format("{} {} p={} N={} D={} d={}", ps.series->claim, phi_name(ps.series->activation),
                                          ps.series->activation.p, ps.point.N, ps.point.D, ps.point.d);
    SamplingPolicy point_policy = policy;
    point_policy.judge_squares = ps.series->fit_over_d;  // C8 fits E[s^2] itself
    const PointOutcome point_outcome =
        run_point(*backend, ps.point, ps.series->estimands, point_policy, [&](std::uint64_t done, std::uint64_t planned) {
          if (hooks.progress) hooks.progress(k, points.size(), label, done, planned);
        });
    std::vector<json> fresh;
    for (auto e : ps.series->estimands) fresh.push_back(point_record(ps, e, point_outcome, context));
    if (folder) folder->append(fresh);
    outcome.records.insert(outcome.records.end(), fresh.begin(), fresh.end());
  }

  outcome.series = fit_series(outcome.records, o.tolerance);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.provenance = {{"version", std::string(ATTNCHECK_VERSION)},
                        {"date", utc_now()},
                        {"machine", {{"hostname", hostname()}, {"cpu", cpu_model()}}},
                        {"backend", backend->name()},
                        {"threads", threads},
                        {"run_seed", o.seed},
                        {"command", o.command},
                        {"wall_seconds", wall}};
  // fits.json describes the whole folder: with --resume a folder can gather several claims' runs, and a
  // report of it must see all of their series.
  if (folder) folder->write_fits({{"provenance", outcome.provenance}, {"series", fit_series(folder->records(), o.tolerance)}});
  outcome.exit_code = exit_code_of(outcome.series);
  for (const json& s : outcome.series) {
    outcome.inconclusive += s["verdict"] == "inconclusive" && s.value("counts_for_exit", false) ? 1 : 0;
  }
  for (const auto& s : series) {
    if (s.claim != "custom" && (outcome.claims.empty() || outcome.claims.back() != s.claim)) {
      outcome.claims.push_back(s.claim);
    }
  }
  return outcome;
}

}  // namespace attncheck::monte_carlo
