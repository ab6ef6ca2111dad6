#include "attncheck/monte_carlo/commands.hpp"

#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/distributed.hpp"
#include "attncheck/monte_carlo/proved_bounds.hpp"
#include "attncheck/monte_carlo/results.hpp"
#include "attncheck/monte_carlo/runner.hpp"
#include "attncheck/monte_carlo/sample_norms.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/records/option_ranges.hpp"
#include "attncheck/streams/random_stream.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>

namespace attncheck::monte_carlo {

using nlohmann::json;
using records::check_integer;
using records::check_real;
using records::kMaxThreads;
using records::parse_integer;
using records::parse_integer_list;
using records::parse_real_list;
using theory::Index;
using theory::InputError;

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

// The distinct hosts of the ranks, in rank order of first appearance. Collective: every rank calls it.
std::vector<std::string> distributed_hosts() {
  std::vector<std::string> hosts;
  for (const std::string& host : distributed::allgather_text(distributed::host_name())) {
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  return hosts;
}

// Per rank, the GPU it ran on; nullopt for a rank on the CPU (device < 0). Collective.
std::vector<std::optional<int>> distributed_devices(int device) {
  std::vector<std::optional<int>> devices;
  for (double d : distributed::allgather({static_cast<double>(device)})) {
    devices.push_back(d < 0 ? std::nullopt : std::optional<int>(static_cast<int>(d)));
  }
  return devices;
}

SamplingPolicy sampling_policy(const McRequest& o) {
  SamplingPolicy policy;
  if (o.samples != "auto")
    policy.fixed = static_cast<std::uint64_t>(parse_integer(o.samples, "--samples (or auto)", 2, kMaxSamples));
  check_real("--rel-se", o.rel_se, kRelativeErrorRange);
  const double max_seconds = sizes_of(o).max_seconds;
  check_real("--max-seconds", max_seconds, kSecondsRange);
  if (o.max_samples < 2 || o.max_samples > static_cast<std::uint64_t>(kMaxSamples)) {
    throw InputError(
        fmt::format("--max-samples: {} is out of range: give a whole number from 2 to {}", o.max_samples, kMaxSamples));
  }
  policy.rel_se = o.rel_se;
  policy.max_samples = o.max_samples;
  policy.min_samples = std::min<std::uint64_t>(64, o.max_samples);
  policy.max_seconds = max_seconds;
  return policy;
}

// The claim's part of the request: which series, with which activation, scales and estimands.
SweepRequest sweep_request_of(const McRequest& o) {
  SweepRequest request;
  request.claim = o.claim;
  request.phi = o.phi;
  request.normalize = o.normalize;
  request.inner_scale = o.inner_scale;
  request.outer_scale = o.outer_scale;
  request.estimands = o.estimand;
  request.claimed_exponent = o.claimed_exponent;
  request.p.clear();
  for (std::int64_t p : parse_integer_list(o.p, "--p", 1, 64)) request.p.push_back(static_cast<int>(p));
  if (o.alpha) {
    request.alpha = parse_real_list(*o.alpha, "--alpha");
    for (double alpha : *request.alpha) {
      // N^-alpha under- or overflows long before; C7 is about alpha near 1.
      if (std::fabs(alpha) > 8)
        throw InputError(fmt::format("--alpha: {} is out of range: give values from -8 to 8", alpha));
    }
  }
  if (o.mix) request.mix = parse_real_list(*o.mix, "--mix");
  if (o.dv && o.claim != std::optional<std::string>("C9")) {
    throw InputError(fmt::format("--dv {}: value columns exist for C9's cross-normalized output only", *o.dv));
  }
  return request;
}

// The command line's validators check these ranges on the text; callers of the library get the same answer.
void check_run_options(const McRequest& o) {
  check_real("--sigma-x", o.sigma_x, kSigmaRange);
  check_real("--sigma-t", o.sigma_t, kSigmaRange);
  check_real("--tolerance", o.tolerance, kToleranceRange);
  if (o.claimed_exponent) check_real("--claimed-exponent", *o.claimed_exponent, kClaimedExponentRange);
  check_integer("--threads", o.threads, 0, kMaxThreads);
  check_integer("--tile", o.tile, 1, INT32_MAX);
  if (o.resume && !o.out) throw InputError("--resume needs --out DIR (the folder to resume)");
  if (o.force && !o.out) throw InputError("--force needs --out DIR (the folder to overwrite)");
  if (o.resume && o.force) throw InputError("--resume keeps the points in --out, --force removes them: choose one");
}

// The sweep a request describes: its series, and every point of series x D x d x dv x N (points point into
// series, so the two travel together).
struct SweepPlan {
  std::vector<SeriesSpec> series;
  std::vector<PointSpec> points;
};

struct SweepGrids {
  std::vector<Index> N, D, d, dv;
};

SweepGrids sweep_grids(const McRequest& o) {
  const McSizes sizes = sizes_of(o);
  SweepGrids grids{parse_index_grid(sizes.N, "--N"),
                   parse_index_grid(sizes.D, "--D"),
                   parse_index_grid(sizes.d, "--d"),
                   {}};
  // 0 stands for "d": C9's default, and the only value the other claims have.
  grids.dv = o.dv ? parse_index_grid(*o.dv, "--dv") : std::vector<Index>{0};
  return grids;
}

// Sizes a series cannot take, and sweeps that miss what a claim is about.
void check_grids(const std::vector<SeriesSpec>& series, const SweepGrids& grids,
                 const std::function<void(const std::string&)>& note) {
  bool noted_over_N = false;
  for (const auto& s : series) {
    if (s.activation.kind == theory::ActivationKind::expression && &s == &series.front()) {
      // What the engine will evaluate, so that a reader sees how the text was read and differentiated.
      note(fmt::format("phi(x) = {}, phi'(x) = {} (formed symbolically){}", s.activation.expression->text(),
                       s.activation.expression->derivative_text(),
                       s.activation.normalize_rows ? "; each row of phi(S) divided by its sum" : ""));
    }
    if (s.fit_over_d && grids.N.size() > 1 && grids.d.size() == 1 && !noted_over_N) {
      note("C8 is a statement about d: sweep --d (e.g. --d 4:256:x2)");
      noted_over_N = true;
    }
    if (std::find(s.estimands.begin(), s.estimands.end(), Estimand::score_var) == s.estimands.end()) continue;
    for (auto n : grids.N) {
      if (n < 2) throw InputError(fmt::format("--N {}: score-var needs N >= 2", n));
    }
  }
}

std::vector<PointSpec> sweep_points(const std::vector<SeriesSpec>& series, const SweepGrids& grids,
                                    const McRequest& o) {
  const std::uint64_t point_count =
      records::saturating_product({series.size(), grids.D.size(), grids.d.size(), grids.dv.size(), grids.N.size()});
  if (point_count > kMaxPoints) {
    throw InputError(fmt::format("the sweep has {} series x {} D x {} d x {} dv x {} N = {} points, more than {}",
                                 series.size(), grids.D.size(), grids.d.size(), grids.dv.size(), grids.N.size(),
                                 point_count, kMaxPoints));
  }
  std::vector<PointSpec> points;
  for (const auto& s : series) {
    for (auto D : grids.D) {
      for (auto d : grids.d) {
        for (auto dv : grids.dv) {
          for (auto N : grids.N) points.push_back(make_point(s, N, D, d, o.sigma_x, o.sigma_t, o.seed, dv));
        }
      }
    }
  }
  return points;
}

// Every point is checked before the first one runs: a size this machine cannot hold is a usage error now,
// not bad_alloc or the OOM killer hours into a sweep.
void require_sweep_memory(const std::vector<PointSpec>& points, const Backend& backend, std::int64_t tile) {
  for (const PointSpec& ps : points) {
    const std::uint64_t bytes = backend.host_bytes_needed(ps.point, ps.series->estimands);
    if (bytes == 0) continue;
    records::require_memory(bytes,
                            fmt::format("N = {}, D = {}, d = {} with --tile {} on {} threads", ps.point.N, ps.point.D,
                                        ps.point.d, tile, backend.threads()),
                            "; use smaller sizes, a smaller --tile or fewer --threads");
  }
}

std::string point_label(const PointSpec& ps) {
  if (ps.point.mix) {
    return fmt::format("C9 mix alpha={:g} N={} D={} d={} dv={}", *ps.point.mix, ps.point.N, ps.point.D, ps.point.d,
                       ps.point.dv);
  }
  return fmt::format("{} {} p={} N={} D={} d={}", ps.series->claim, theory::phi_label(ps.series->activation),
                     ps.series->activation.p, ps.point.N, ps.point.D, ps.point.d);
}

// How long one point samples: C8 judges E[s^2] itself, and a point whose every estimand a proof decides needs
// no reliable standard error to stop.
SamplingPolicy point_policy(const SamplingPolicy& policy, const PointSpec& ps) {
  SamplingPolicy result = policy;
  result.judge_squares = ps.series->fit_over_d;
  result.require_reliable = !std::all_of(ps.series->estimands.begin(), ps.series->estimands.end(),
                                         [&](Estimand e) { return proof_decides(ps, e); });
  return result;
}

// The backends a sweep runs on: the one chosen, and the CPU for the points it does not evaluate (made when the
// first such point comes, and noted once with the reason).
class SweepBackends {
 public:
  SweepBackends(std::unique_ptr<Backend> chosen, const BackendRequest& request, std::uint64_t run_seed,
                std::function<void(const std::string&)> note)
      : chosen_(std::move(chosen)), request_(request), run_seed_(run_seed), note_(std::move(note)) {}

  const Backend& chosen() const { return *chosen_; }
  bool fell_back() const { return cpu_fallback_ != nullptr; }

  std::pair<Backend*, RunContext> for_point(const PointSpec& ps) {
    const std::string reason = chosen_->unsupported(ps.point, ps.series->estimands);
    if (reason.empty()) return {chosen_.get(), context_of(*chosen_)};
    if (!cpu_fallback_) {
      cpu_fallback_ = std::make_unique<CpuBackend>(request_.threads, request_.tile, request_.path, request_.precision);
      note_(
          fmt::format("points the {} backend does not evaluate run on the CPU backend ({})", chosen_->name(), reason));
    }
    return {cpu_fallback_.get(), context_of(*cpu_fallback_)};
  }

 private:
  RunContext context_of(const Backend& backend) const {
    return {run_seed_, backend.name(), backend.threads(), request_.precision};
  }

  std::unique_ptr<Backend> chosen_;
  BackendRequest request_;
  std::uint64_t run_seed_;
  std::function<void(const std::string&)> note_;
  std::unique_ptr<CpuBackend> cpu_fallback_;
};

// The machine, the run and the bound of every (p, d) whose scores were FP32. The distributed parts are
// collective: every rank calls this.
records::Provenance run_provenance(const McRequest& o, const SweepBackends& backends,
                                   const std::vector<PointSpec>& points, ScorePrecision precision, double wall) {
  records::Provenance provenance;
  const Backend& backend = backends.chosen();
  provenance.version = ATTNCHECK_VERSION;
  provenance.date = utc_now();
  provenance.hostname = distributed::host_name();
  provenance.cpu = cpu_model();
  provenance.machine = fmt::format("cpu: {}, hostname: {}", provenance.cpu, provenance.hostname);
  provenance.backend = backend.name();
  provenance.threads = backend.threads();
  provenance.run_seed = o.seed;
  provenance.precision = precision_name(precision);
  // Points the device handed to the CPU (row sums, qk-layernorm, --path tensor) drew their normals there too.
  if (provenance.backend == "cpu" || backends.fell_back())
    provenance.normals = streams::normal_math_name(streams::normal_math());
  provenance.command = o.command;
  provenance.wall_seconds = wall;
  provenance.ranks = distributed::size();
  provenance.hosts = distributed_hosts();
  provenance.rank_devices = distributed_devices(backend.device());
  if (precision == ScorePrecision::mixed) {
    // The bound against which the points' standard errors can be read.
    auto& bounds = provenance.mixed_precision_bounds.emplace();
    for (const PointSpec& ps : points) {
      if (!uses_fp32_scores(ps.point, ps.series->estimands)) continue;
      const records::MixedPrecisionBound bound{ps.point.map.activation.p, ps.point.d, ps.point.D,
                                               mixed_precision_relative_bound(ps.point.map.activation.p, ps.point.d,
                                                                              ps.point.D)};
      if (std::find(bounds.begin(), bounds.end(), bound) == bounds.end()) bounds.push_back(bound);
    }
  }
  return provenance;
}

}  // namespace

json McOutcome::to_json() const {
  return {{"provenance", provenance}, {"points", records}, {"series", series}, {"exit_code", exit_code}};
}

McOutcome run_mc(const McRequest& o, const McHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  const auto note = [&](const std::string& text) {
    if (hooks.note) hooks.note(text);
  };
  const std::vector<SeriesSpec> series = build_series(sweep_request_of(o));
  const SweepGrids grids = sweep_grids(o);
  check_run_options(o);
  check_grids(series, grids, note);
  const SamplingPolicy policy = sampling_policy(o);
  const EvaluationPath path = parse_evaluation_path(o.path);
  const ScorePrecision precision = parse_score_precision(o.precision);
  const BackendRequest backend_request{o.threads, static_cast<Index>(o.tile), path, precision};
  const bool gpu_could_help = !grids.N.empty() && *std::max_element(grids.N.begin(), grids.N.end()) >= kGpuHelpsFromN;
  SweepBackends backends(hooks.make_backend
                             ? hooks.make_backend(backend_request)
                             : select_backend(o.backend, backend_request,
                                              hooks.backend_chosen ? hooks.backend_chosen : note, gpu_could_help),
                         backend_request, o.seed, note);
  const std::vector<PointSpec> points = sweep_points(series, grids, o);
  require_sweep_memory(points, backends.chosen(), o.tile);

  McOutcome outcome;
  outcome.points = points.size();
  std::optional<ResultsWriter> folder;
  // Rank 0 alone reads and writes the folder (the ranks need not share a disk); it tells the others what to skip.
  if (o.out && distributed::is_root()) {
    folder.emplace(*o.out, o.resume ? FolderStart::resume : o.force ? FolderStart::overwrite : FolderStart::fresh);
  }
  for (std::size_t k = 0; k < points.size(); ++k) {
    const PointSpec& ps = points[k];
    if (o.resume) {
      // Read now, not at the start: another process resumed into the folder may have finished it meanwhile.
      // Only rank 0 holds the folder; every rank skips what it found.
      std::optional<std::vector<records::PointRecord>> finished;
      if (folder) finished = finished_records(folder->current_records(), ps, o.seed, precision);
      if (distributed::broadcast_flag(finished.has_value())) {
        if (finished) outcome.records.insert(outcome.records.end(), finished->begin(), finished->end());
        ++outcome.skipped;
        continue;
      }
    }
    const std::string label = point_label(ps);
    const auto [backend, context] = backends.for_point(ps);
    PointOutcome point_outcome;
    try {
      point_outcome = run_point(*backend, ps.point, ps.series->estimands, point_policy(policy, ps),
                                [&](std::uint64_t done, std::uint64_t planned) {
                                  if (hooks.progress) hooks.progress(k, points.size(), label, done, planned);
                                });
    } catch (const InputError& e) {
      throw InputError(fmt::format("point {}: {}", label, e.what()));
    }
    std::vector<records::PointRecord> fresh;
    const char* point_path = backend->evaluation_path(ps.point, ps.series->estimands);
    for (auto e : ps.series->estimands) {
      fresh.push_back(point_record(ps, e, point_outcome, context));
      fresh.back().path = point_path;
    }
    if (folder) folder->append(fresh);
    outcome.records.insert(outcome.records.end(), fresh.begin(), fresh.end());
  }

  // Verdicts of this run's series, with the alarm's family that of the whole folder fits.json describes.
  outcome.series = fit_series(outcome.records, o.tolerance,
                              folder ? std::optional<int>(judged_points(folder->current_records())) : std::nullopt);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.provenance = run_provenance(o, backends, points, precision, wall);
  // fits.json describes the whole folder: with --resume a folder can gather several claims' runs, and a
  // report of it must see all of their series.
  if (folder) folder->write_fits(outcome.provenance, o.tolerance, note);
  // Only rank 0 holds the points --resume kept, so its verdicts are the run's.
  outcome.exit_code = static_cast<int>(
      distributed::broadcast_count(static_cast<std::uint64_t>(exit_code_of(run_verdict(outcome.series)))));
  for (const records::Series& s : outcome.series) {
    outcome.unsettled += s.verdict && !records::settles(*s.verdict) && s.counts_for_exit ? 1 : 0;
  }
  for (const auto& s : series) {
    if (s.claim != "custom" && (outcome.claims.empty() || outcome.claims.back() != s.claim)) {
      outcome.claims.push_back(s.claim);
    }
  }
  return outcome;
}

}  // namespace attncheck::monte_carlo
