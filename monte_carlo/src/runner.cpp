#include "attncheck/monte_carlo/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace attncheck::monte_carlo {

PointOutcome run_point(Backend& backend, const SweepPoint& point, const std::vector<Estimand>& estimands,
                       const SamplingPolicy& policy, const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  PointOutcome out;
  const std::uint64_t planned = policy.fixed ? *policy.fixed : 0;
  const std::uint64_t cap = policy.fixed ? *policy.fixed : std::max<std::uint64_t>(policy.max_samples, 1);
  std::vector<SampleValues> values;
  while (out.samples < cap) {
    // Chunks grow with the sample count (a fixed schedule, so auto runs are reproducible) and stay small
    // enough for the time limit and the progress bar to be checked often.
    std::uint64_t chunk = std::clamp<std::uint64_t>(out.samples / 2, 16, 1024);
    if (!policy.fixed && out.samples < policy.min_samples) chunk = policy.min_samples - out.samples;
    chunk = std::min(chunk, cap - out.samples);
    values.clear();
    backend.evaluate(point, estimands, out.samples, chunk, values);
    for (const SampleValues& v : values) {
      for (Estimand e : estimands) {
        const int k = static_cast<int>(e);
        const double norm = e == Estimand::score_var ? std::sqrt(v[k]) : v[k];
        out.norm[k].add(norm);
        out.norm_sq[k].add(e == Estimand::score_var ? v[k] : norm * norm);
      }
    }
    out.samples += chunk;
    if (progress) progress(out.samples, planned);
    if (policy.fixed) continue;
    if (out.samples >= policy.min_samples) {
      bool precise = true;
      for (Estimand e : estimands) {
        const int k = static_cast<int>(e);
        const MeanEstimate m = policy.judge_squares ? out.norm_sq[k].estimate() : out.norm[k].estimate();
        // A standard error that is itself unreliable (too few samples to judge it, heavy tails) is not yet
        // evidence of precision: keep sampling until it is, or until the limits.
        if (!(m.se <= policy.rel_se * std::abs(m.mean)) || !m.se_reliable) precise = false;
      }
      if (precise) {
        out.stopped_by = "rel-se";
        break;
      }
    }
    if (elapsed() >= policy.max_seconds) {
      out.stopped_by = "max-seconds";
      break;
    }
  }
  if (out.stopped_by.empty()) out.stopped_by = policy.fixed ? "samples" : "max-samples";
  out.wall_seconds = elapsed();
  return out;
}

}  // namespace attncheck::monte_carlo
