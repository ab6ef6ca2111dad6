#include "attncheck/monte_carlo/runner.hpp"

#include "attncheck/monte_carlo/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace attncheck::monte_carlo {

namespace {

// The time limit is checked between evaluations of at most this much expected work, so that a point overruns
// --max-seconds by at most one evaluation: this long, or one sample when a single sample takes longer.
constexpr double kTimeCheckSeconds = 0.05;

// Samples a standard error needs: an auto run stopped by the clock still draws this many.
constexpr std::uint64_t kMinimumSamples = 2;

// Samples [first, first + count) over the ranks of the run: each evaluates its contiguous share, and every rank
// receives all values in sample order, so each adds them as a single process would.
void evaluate_on_all_ranks(Backend& backend, const SweepPoint& point, const std::vector<Estimand>& estimands,
                           std::uint64_t first, std::uint64_t count, std::vector<SampleValues>& out) {
  const int ranks = distributed::size();
  if (ranks == 1) {
    backend.evaluate(point, estimands, first, count, out);
    return;
  }
  const distributed::SampleRange share = distributed::rank_share(first, count, distributed::rank(), ranks);
  std::vector<SampleValues> mine;
  if (share.count > 0) backend.evaluate(point, estimands, share.first, share.count, mine);
  std::vector<double> flat;
  flat.reserve(mine.size() * kEstimandCount);
  for (const SampleValues& v : mine) flat.insert(flat.end(), v.begin(), v.end());
  const std::vector<double> all = distributed::allgather(flat);
  if (all.size() != count * kEstimandCount) {
    throw std::logic_error("the ranks returned a different number of samples than they were given");
  }
  for (std::size_t at = 0; at < all.size(); at += kEstimandCount) {
    SampleValues v;
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(at), kEstimandCount, v.begin());
    out.push_back(v);
  }
}

}  // namespace

PointOutcome run_point(Backend& backend, const SweepPoint& point, const std::vector<Estimand>& estimands,
                       const SamplingPolicy& policy,
                       const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  PointOutcome out;
  const std::uint64_t planned = policy.fixed ? *policy.fixed : 0;
  const std::uint64_t cap = policy.fixed ? *policy.fixed : std::max<std::uint64_t>(policy.max_samples, 1);
  for (Estimand e : estimands) out.top[static_cast<int>(e)] = LargestValues(cap);
  const bool timed = !policy.fixed && std::isfinite(policy.max_seconds);
  std::vector<SampleValues> values;
  const auto add = [&](const std::vector<SampleValues>& drawn) {
    for (const SampleValues& v : drawn) {
      for (Estimand e : estimands) {
        const int k = static_cast<int>(e);
        const double norm = e == Estimand::score_var ? std::sqrt(v[k]) : v[k];
        out.norm[k].add(norm);
        out.norm_sq[k].add(e == Estimand::score_var ? v[k] : norm * norm);
        // A NaN sample must not hide behind max or min: it makes both NaN, so no bound check passes it.
        const bool first = out.norm[k].accumulator().count() == 1;
        const auto extreme = [&](double kept, double better) {
          return first || std::isnan(v[k]) ? v[k] : std::isnan(kept) ? kept : better;
        };
        out.largest[k] = extreme(out.largest[k], std::max(out.largest[k], v[k]));
        out.smallest[k] = extreme(out.smallest[k], std::min(out.smallest[k], v[k]));
        out.top[k].add(norm);
      }
    }
  };
  double seconds_per_sample = 0;  // measured; 0 until the first evaluation
  bool out_of_time = false;
  while (out.samples < cap && !out_of_time) {
    // The precision is judged after chunks of a fixed schedule (growing with the sample count), so that an auto
    // run stops at the same sample count on any machine and with any thread count.
    std::uint64_t chunk = std::clamp<std::uint64_t>(out.samples / 2, 16, 1024);
    if (!policy.fixed && out.samples < policy.min_samples) chunk = policy.min_samples - out.samples;
    chunk = std::min(chunk, cap - out.samples);
    // Within a chunk the time limit is checked after every evaluation of as many samples as fit in
    // kTimeCheckSeconds (one at first); the values do not depend on how a chunk is split.
    const std::uint64_t chunk_end = out.samples + chunk;
    while (out.samples < chunk_end) {
      std::uint64_t count = chunk_end - out.samples;
      if (timed) {
        const double budget = std::min(kTimeCheckSeconds, std::max(policy.max_seconds - elapsed(), 0.0));
        const double fit = seconds_per_sample > 0 ? budget / seconds_per_sample : 1;
        count = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(std::min(fit, 1e18)), 1, count);
        count = distributed::broadcast_count(count);  // rank 0's clock decides for all
      }
      const double before = elapsed();
      values.clear();
      evaluate_on_all_ranks(backend, point, estimands, out.samples, count, values);
      add(values);
      out.samples += count;
      seconds_per_sample = (elapsed() - before) / static_cast<double>(count);
      if (progress) progress(out.samples, planned);
      if (timed && out.samples >= kMinimumSamples && out.samples < cap &&
          distributed::broadcast_flag(elapsed() >= policy.max_seconds)) {
        out_of_time = true;
        break;
      }
    }
    // A chunk completed just as the time ran out is still judged: if it is precise enough, that stopped it.
    if (policy.fixed || out.samples < chunk_end || out.samples < policy.min_samples) continue;
    bool precise = true;
    for (Estimand e : estimands) {
      const int k = static_cast<int>(e);
      const MeanEstimate m = policy.judge_squares ? out.norm_sq[k].estimate() : out.norm[k].estimate();
      // A standard error that is itself unreliable (too few samples to judge it, heavy tails) is not yet
      // evidence of precision: keep sampling until it is, or until the limits.
      if (!(m.se <= policy.rel_se * std::abs(m.mean)) || (policy.require_reliable && !m.se_reliable)) precise = false;
    }
    if (precise) {
      out.stopped_by = "rel-se";
      break;
    }
  }
  if (out.stopped_by.empty()) {
    out.stopped_by = policy.fixed ? "samples" : out_of_time ? "max-seconds" : "max-samples";
  }
  out.wall_seconds = elapsed();
  return out;
}

}  // namespace attncheck::monte_carlo
