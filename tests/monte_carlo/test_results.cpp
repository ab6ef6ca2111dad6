#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/results.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using nlohmann::json;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("attncheck-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// A small C4 sweep: records of three N values for p = 1, both readings.
std::vector<json> small_sweep(std::uint64_t run_seed, std::vector<SeriesSpec>& series) {
  SweepRequest rq;
  rq.claim = "C4";
  rq.p = {1};
  series = build_series(rq);
  CpuBackend backend(2, 16);
  SamplingPolicy policy;
  policy.fixed = 64;
  std::vector<json> records;
  for (const auto& s : series) {
    for (theory::Index n : {8, 16, 32, 64}) {
      const PointSpec ps = make_point(s, n, 4, 4, 1, 1, run_seed);
      const PointOutcome outcome = run_point(backend, ps.point, s.estimands, policy);
      for (auto e : s.estimands) records.push_back(point_record(ps, e, outcome, {run_seed, "cpu", 2}));
    }
  }
  return records;
}

}  // namespace

TEST_CASE("point records carry every field of the results format") {
  std::vector<SeriesSpec> series;
  const auto records = small_sweep(3, series);
  REQUIRE(records.size() == 8);
  for (const char* key : {"claim", "reading", "phi", "p", "alpha", "scale", "inner", "formula", "N", "D", "d", "estimand",
                          "samples", "mean", "se", "ci95", "mean_sq", "se_sq", "exact_sq", "z_exact_sq", "jensen_bound",
                          "se_reliable", "stopped_by", "sigma_x", "sigma_t", "seed", "run_seed", "backend", "threads",
                          "wall_seconds"}) {
    INFO(key);
    CHECK(records[0].contains(key));
  }
  CHECK(records[0]["samples"] == 64);
  CHECK(records[0]["stopped_by"] == "samples");
  CHECK(records[0]["scale"] == "1/sqrt(N)");
  CHECK(records[0]["ci95"].size() == 2);
  // p = 1 has an exact E||F||^2 = (N(N-1) D^2 + N(D^2 + 2D)) / N with the 1/sqrt(N) factor (fact 4).
  CHECK(records[0]["exact_sq"].get<double>() == Approx((8.0 * 7 * 16 + 8 * 24) / 8).epsilon(1e-12));
  CHECK(records[0]["jensen_bound"].get<double>() == Approx(std::sqrt(records[0]["exact_sq"].get<double>())));
  const double z = records[0]["z_exact_sq"].get<double>();
  CHECK(z == Approx((records[0]["mean_sq"].get<double>() - records[0]["exact_sq"].get<double>()) /
                    records[0]["se_sq"].get<double>()));
}

TEST_CASE("series are fitted per reading, and only the stated claim sets the exit code") {
  std::vector<SeriesSpec> series;
  const auto records = small_sweep(4, series);
  const json fitted = fit_series(records, 0.05);
  REQUIRE(fitted.size() == 2);
  CHECK(fitted[0]["reading"] == "elementwise");
  CHECK(fitted[1]["reading"] == "matrix");
  CHECK(fitted[0]["N"] == json({8, 16, 32, 64}));
  CHECK(fitted[0]["slope_ci"].size() == 2);
  CHECK(fitted[0]["claimed_exponent"] == 0.5);
  CHECK(fitted[0]["slope"].get<double>() == Approx(0.5).margin(0.15));
  json tampered = fitted;
  tampered[1]["verdict"] = "violated";  // the matrix reading does not count
  CHECK(exit_code_of(tampered) == 0);
  tampered[0]["verdict"] = "violated";
  CHECK(exit_code_of(tampered) == 1);
}

TEST_CASE("the results folder writes whole files and resumes from points.jsonl") {
  std::vector<SeriesSpec> series;
  const auto records = small_sweep(5, series);
  const auto dir = fresh_dir("folder");
  {
    ResultsFolder folder(dir, false);
    folder.append({records[0], records[1]});
    folder.append({records[2]});
    folder.write_fits({{"series", fit_series(folder.records(), 0.05)}});
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
  }
  std::ifstream csv(dir / "points.csv");
  std::string header, row;
  std::getline(csv, header);
  CHECK(header.rfind("claim,reading,phi,p,alpha,scale,inner,formula,N,D,d,estimand,samples,mean,se,ci95_lo,ci95_hi", 0) == 0);
  int rows = 0;
  while (std::getline(csv, row)) ++rows;
  CHECK(rows == 3);
  ResultsFolder resumed(dir, true);
  CHECK(resumed.records().size() == 3);
  CHECK(resumed.finished(records[2]["key"].get<std::string>()));
  CHECK_FALSE(resumed.finished(records[3]["key"].get<std::string>()));
  ResultsFolder restarted(dir, false);
  CHECK(restarted.records().empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("CSV cells with commas or quotes are quoted") {
  json r;
  r["claim"] = "custom";
  r["formula"] = "F = a, \"b\"";
  r["ci95"] = {1.5, 2.5};
  const std::string text = records_csv({r});
  CHECK(text.find("\"F = a, \"\"b\"\"\"") != std::string::npos);
  CHECK(text.find(",1.5,2.5,") != std::string::npos);
}

TEST_CASE("the sampling policy says what stopped it") {
  SweepPoint pt;
  pt.N = 12;
  pt.D = 3;
  pt.d = 2;
  pt.map.activation = {theory::ActivationKind::pointwise, theory::Pointwise::poly, 2};
  pt.seed = 9;
  CpuBackend backend(2, 8);
  const std::vector<Estimand> value{Estimand::value};
  SamplingPolicy fixed;
  fixed.fixed = 37;
  const PointOutcome a = run_point(backend, pt, value, fixed);
  CHECK(a.samples == 37);
  CHECK(a.stopped_by == "samples");

  SamplingPolicy loose;  // 50% relative standard error is met at the first check; the run goes on until that
  loose.rel_se = 0.5;    // standard error is also reliable (here the variance is known to 20% after a few hundred)
  const PointOutcome b = run_point(backend, pt, value, loose);
  CHECK(b.stopped_by == "rel-se");
  CHECK(b.samples > loose.min_samples);
  CHECK(b.samples < loose.max_samples);
  const MeanEstimate eb = b.norm[0].estimate();
  CHECK(eb.se <= 0.5 * eb.mean);
  CHECK(eb.se_reliable);

  SamplingPolicy strict;  // 1e-6 is out of reach within 200 samples
  strict.rel_se = 1e-6;
  strict.max_samples = 200;
  const PointOutcome c = run_point(backend, pt, value, strict);
  CHECK(c.stopped_by == "max-samples");
  CHECK(c.samples == 200);

  SamplingPolicy hurried = strict;
  hurried.max_samples = 1000000;
  hurried.max_seconds = 1e-9;
  const PointOutcome d = run_point(backend, pt, value, hurried);
  CHECK(d.stopped_by == "max-seconds");
  CHECK(d.samples == hurried.min_samples);

  // The same samples give the same statistics however the run was chunked.
  SamplingPolicy fixed_200;
  fixed_200.fixed = 200;
  const PointOutcome e = run_point(backend, pt, value, fixed_200);
  CHECK(e.norm[0].accumulator().mean() == c.norm[0].accumulator().mean());
}
