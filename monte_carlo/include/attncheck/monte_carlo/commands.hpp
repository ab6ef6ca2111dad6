#pragma once
// `attncheck mc` as a function: the command line and the Python package both call it, so their JSON is the
// same. Bad requests are theory::InputErrors with the command line's messages, which name options as the command
// line spells them. (`attncheck bounds` is in exact/bounds.hpp.)

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/records/option_ranges.hpp"
#include "attncheck/records/results_folder.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// Ranges of `mc` options, shared by the command line's validators and the checks here.
// More samples than any point needs; the range keeps counts exact in the doubles of the statistics.
inline constexpr std::int64_t kMaxSamples = std::int64_t{1} << 40;
// The real-valued options' ranges.
inline constexpr records::RealRange kSigmaRange{0, 1e100, true};
inline constexpr records::RealRange kToleranceRange{0, 1, true};
inline constexpr records::RealRange kRelativeErrorRange{0, 1, true};
inline constexpr records::RealRange kSecondsRange{0, 1e9, true};
inline constexpr records::RealRange kClaimedExponentRange{-64, 64};
// A grid is a product: bounded before its points are built, or a few long lists would exhaust memory.
inline constexpr std::uint64_t kMaxPoints = 100000;

// What `attncheck mc` is asked, option by option as the command line spells them; presets fill the rest.
struct McRequest {
  std::optional<std::string> claim, phi, normalize, inner_scale, outer_scale, estimand, out;
  // Sizes and the time limit per point; the --preset's when absent (mc_options.hpp).
  std::optional<std::string> N, D, d;
  std::optional<double> max_seconds;
  std::string preset = "quick";
  std::string p = "1,2,3";
  std::optional<std::string> alpha;  // C7's exponents; the preset's when absent
  std::optional<std::string> mix;    // C9's mix alphas (list in [0, 1]); 1 when absent
  std::optional<std::string> dv;     // C9's value columns (list or grid); d when absent
  std::string samples = "auto";
  std::optional<double> claimed_exponent;
  double rel_se = 0.01, sigma_x = 1, sigma_t = 1, tolerance = 0.05;
  std::uint64_t max_samples = 100000, seed = 1;
  int threads = 0;
  long long tile = 256;
  std::string precision = "double";    // --precision: double, or mixed (FP32 score tiles, CPU backend only)
  std::string path = "auto";           // --path: auto, direct or tensor (tensor_power.hpp)
  std::string backend = "auto";        // --backend: a registered backend's name, or auto (backend_registry.hpp)
  bool resume = false, force = false;  // keep the points already in `out`, or remove them
  std::string command;                 // how the run was started, for the provenance
};

struct McHooks {
  // Makes the backend once the request has been checked and parsed (threads, tile, path and precision as
  // requested); without it, the registry's backend that `backend` names (select_backend).
  std::function<std::unique_ptr<Backend>(const BackendRequest&)> make_backend;
  // Remarks on the request that do not stop it (C8 swept over N only, points moved to the CPU backend).
  std::function<void(const std::string&)> note;
  // Which backend --backend auto chose, and why others were passed; given to `note` when absent.
  std::function<void(const std::string&)> backend_chosen;
  // After each chunk of samples: point index, number of points, the point's label, samples done and planned
  // (0 when open-ended). May throw to abandon the run; finished points are already in the folder.
  std::function<void(std::size_t, std::size_t, const std::string&, std::uint64_t, std::uint64_t)> progress;
};

struct McOutcome {
  records::Provenance provenance;
  std::vector<records::PointRecord> records;  // this run's points, in sweep order (resumed ones included)
  std::vector<records::Series> series;        // the fits of this run's points, with verdicts
  int exit_code = 0;                          // exit_code_of(run_verdict(series)): 0 holds, 1 violated, 5 unsettled
  std::size_t points = 0, skipped = 0;        // sweep points, and those --resume found finished
  int unsettled = 0;                          // series that count for the exit code but are not settled
  std::vector<std::string> claims;            // the claims run, in order ("custom" runs name none)

  // {"provenance", "points", "series", "exit_code"}: what `attncheck mc --json` prints.
  nlohmann::json to_json() const;
};

McOutcome run_mc(const McRequest& request, const McHooks& hooks);

}  // namespace attncheck::monte_carlo
