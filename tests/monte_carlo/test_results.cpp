#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/results.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <chrono>
#include <thread>
#include <unistd.h>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using nlohmann::json;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("attncheck-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// A small C4 sweep: records of three N values for p = 1, both readings.
std::vector<records::PointRecord> small_sweep(std::uint64_t run_seed, std::vector<SeriesSpec>& series) {
  SweepRequest rq;
  rq.claim = "C4";
  rq.p = {1};
  series = build_series(rq);
  CpuBackend backend(2, 16);
  SamplingPolicy policy;
  policy.fixed = 64;
  std::vector<records::PointRecord> records;
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
  const auto typed = small_sweep(3, series);
  REQUIRE(typed.size() == 8);
  const std::vector<json> records(typed.begin(), typed.end());
  for (const char* key :
       {"claim",   "reading", "phi",      "p",          "alpha",        "scale",       "inner",      "formula",
        "N",       "D",       "d",        "estimand",   "samples",      "mean",        "se",         "ci95",
        "mean_sq", "se_sq",   "exact_sq", "z_exact_sq", "jensen_bound", "se_reliable", "stopped_by", "sigma_x",
        "sigma_t", "seed",    "run_seed", "backend",    "threads",      "wall_seconds"}) {
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
  const auto verdict_of = [](const json& fits) {
    return run_verdict(fits.get<std::vector<attncheck::records::Series>>());
  };
  json tampered = fitted;
  tampered[0]["verdict"] = "holds";
  tampered[1]["verdict"] = "violated";  // the matrix reading does not count
  CHECK(verdict_of(tampered) == RunVerdict::holds);
  CHECK(exit_code_of(verdict_of(tampered)) == 0);
  tampered[0]["verdict"] = "consistent";  // not a proof: the run is not settled
  CHECK(verdict_of(tampered) == RunVerdict::unsettled);
  CHECK(exit_code_of(verdict_of(tampered)) == 5);
  tampered[0]["verdict"] = "inconclusive";
  CHECK(verdict_of(tampered) == RunVerdict::unsettled);
  tampered[0]["verdict"] = "violated";
  CHECK(verdict_of(tampered) == RunVerdict::violated);
  CHECK(exit_code_of(verdict_of(tampered)) == 1);
}

TEST_CASE("resume planning skips exactly the points whose every estimand is finished for this seed and precision") {
  SweepRequest rq;
  rq.claim = "C6";  // two estimands per point (dQ, dK): a point half finished must run again
  rq.p = {1};
  const std::vector<SeriesSpec> series = build_series(rq);
  REQUIRE(series.size() == 1);
  REQUIRE(series[0].estimands.size() >= 2);
  CpuBackend backend(1, 16);
  SamplingPolicy policy;
  policy.fixed = 8;
  std::vector<PointSpec> planned;
  std::vector<records::PointRecord> existing;
  for (theory::Index n : {8, 16, 32}) {
    planned.push_back(make_point(series[0], n, 4, 4, 1, 1, 9));
    const PointOutcome outcome = run_point(backend, planned.back().point, series[0].estimands, policy);
    for (auto e : series[0].estimands) existing.push_back(point_record(planned.back(), e, outcome, {9, "cpu", 1}));
  }
  const std::size_t per_point = series[0].estimands.size();
  existing.erase(existing.begin() + static_cast<std::ptrdiff_t>(per_point) + 1);  // N = 16 lacks one estimand
  existing.erase(existing.begin() + static_cast<std::ptrdiff_t>(2 * per_point) - 1, existing.end());  // N = 32: none
  const auto first = finished_records(existing, planned[0], 9, ScorePrecision::fp64);
  REQUIRE(first.has_value());
  REQUIRE(first->size() == per_point);
  for (std::size_t k = 0; k < per_point; ++k) {
    CHECK((*first)[k].resume_id == record_key(planned[0], series[0].estimands[k], 9));
    CHECK((*first)[k].key.estimand == series[0].estimands[k]);
  }
  CHECK_FALSE(finished_records(existing, planned[1], 9, ScorePrecision::fp64).has_value());
  CHECK_FALSE(finished_records(existing, planned[2], 9, ScorePrecision::fp64).has_value());
  // Another run seed or score precision is another point: never taken for this one.
  CHECK_FALSE(finished_records(existing, planned[0], 10, ScorePrecision::fp64).has_value());
  CHECK_FALSE(finished_records(existing, planned[0], 9, ScorePrecision::mixed).has_value());
  CHECK_FALSE(finished_records({}, planned[0], 9, ScorePrecision::fp64).has_value());
}

TEST_CASE("the results folder writes whole files and resumes from points.jsonl") {
  std::vector<SeriesSpec> series;
  const auto records = small_sweep(5, series);
  const auto dir = fresh_dir("folder");
  {
    ResultsWriter folder(dir, FolderStart::fresh);
    folder.append({records[0], records[1]});
    folder.append({records[2]});
    records::Provenance provenance;
    provenance.command = "test";
    folder.write_fits(provenance, 0.05);
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
  }
  std::ifstream csv(dir / "points.csv");
  std::string header, row;
  std::getline(csv, header);
  CHECK(header.rfind("claim,reading,phi,p,alpha,scale,inner,formula,N,D,d,estimand,samples,mean,se,ci95_lo,ci95_hi",
                     0) == 0);
  int rows = 0;
  while (std::getline(csv, row)) ++rows;
  CHECK(rows == 3);
  const json fits = json::parse(std::ifstream(dir / "fits.json"));
  CHECK(fits["provenance"]["command"] == "test");
  CHECK(fits["series"].size() == 1);  // three points of the first series
  ResultsWriter resumed(dir, FolderStart::resume);
  CHECK(resumed.records().size() == 3);
  CHECK(resumed.finished(records[2].resume_id));
  CHECK_FALSE(resumed.finished(records[3].resume_id));
  // A folder holding points is not silently overwritten: refused without --force, emptied with it.
  CHECK_THROWS_WITH(ResultsWriter(dir, FolderStart::fresh), Catch::Contains("already holds 3 finished points") &&
                                                                Catch::Contains("--resume") &&
                                                                Catch::Contains("--force"));
  CHECK(resumed.records().size() == 3);
  ResultsWriter forced(dir, FolderStart::overwrite);
  CHECK(forced.records().empty());
  CHECK_FALSE(std::filesystem::exists(dir / "points.jsonl"));
  CHECK_FALSE(std::filesystem::exists(dir / "fits.json"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("two writers of one folder keep every point of both, and a repeated point counts once") {
  std::vector<SeriesSpec> series;
  const auto records = small_sweep(6, series);
  REQUIRE(records.size() == 8);
  const auto dir = fresh_dir("two-writers");
  // Both open the folder before either writes, as two resumed processes do; their appends interleave.
  ResultsWriter first(dir, FolderStart::resume), second(dir, FolderStart::resume);
  first.append({records[0]});
  second.append({records[4]});
  first.append({records[1], records[2]});
  second.append({records[5], records[6]});
  first.append({records[3]});
  second.append({records[7]});
  // The same point finished by both (same key): one line, the later record.
  records::PointRecord again = records[0];
  again.wall_seconds = 123.0;
  second.append({again});
  records::Provenance provenance;
  provenance.command = "first";
  first.write_fits(provenance, 0.05);

  std::vector<std::string> keys;
  std::ifstream in(dir / "points.jsonl");
  for (std::string line; std::getline(in, line);) keys.push_back(json::parse(line)["key"].get<std::string>());
  REQUIRE(keys.size() == records.size());
  for (const records::PointRecord& r : records) CHECK(std::count(keys.begin(), keys.end(), r.resume_id) == 1);
  ResultsWriter reader(dir, FolderStart::resume);
  CHECK(reader.finished(records[0].resume_id)->wall_seconds == 123.0);
  // fits.json fits the merged file: both series with all four N.
  const json fits = json::parse(std::ifstream(dir / "fits.json"));
  REQUIRE(fits["series"].size() == 2);
  for (const json& s : fits["series"]) CHECK(s["N"] == json({8, 16, 32, 64}));
  std::filesystem::remove_all(dir);
}

TEST_CASE("concurrent writers from many threads lose no point", "[concurrency]") {
  std::vector<SeriesSpec> series;
  const auto records = small_sweep(7, series);
  const auto dir = fresh_dir("threads");
  constexpr int kWriters = 4, kEach = 25;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      ResultsWriter folder(dir, FolderStart::resume);  // each its own descriptor, as separate processes have
      for (int k = 0; k < kEach; ++k) {
        records::PointRecord record = records[static_cast<std::size_t>(k) % records.size()];
        record.resume_id = fmt::format("writer {} point {}", w, k);
        folder.append({record});
      }
    });
  }
  for (auto& t : writers) t.join();
  ResultsWriter reader(dir, FolderStart::resume);
  CHECK(reader.records().size() == kWriters * kEach);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the temporaries of a killed writer are removed when the folder is opened") {
  const auto dir = fresh_dir("stale");
  std::filesystem::create_directories(dir);
  for (const char* name : {"points.jsonl.tmp.4242", "points.csv.tmp.77", "fits.json.tmp.1", "notes.tmp.1"}) {
    std::ofstream(dir / name) << "half";
  }
  ResultsWriter folder(dir, FolderStart::fresh);
  CHECK_FALSE(std::filesystem::exists(dir / "points.jsonl.tmp.4242"));
  CHECK_FALSE(std::filesystem::exists(dir / "points.csv.tmp.77"));
  CHECK_FALSE(std::filesystem::exists(dir / "fits.json.tmp.1"));
  CHECK(std::filesystem::exists(dir / "notes.tmp.1"));  // not the folder's
  std::filesystem::remove_all(dir);
}

TEST_CASE("CSV cells with commas or quotes are quoted") {
  records::PointRecord r;
  r.key.claim = "custom";
  r.formula = "F = a, \"b\"";
  r.ci95_lo = 1.5;
  r.ci95_hi = 2.5;
  const std::string text = records_csv({r});
  CHECK(text.find("\"F = a, \"\"b\"\"\"") != std::string::npos);
  CHECK(text.find(",1.5,2.5,") != std::string::npos);
}

namespace {
// x^2 at N = 12, D = 3, d = 2: a point whose samples take microseconds.
SweepPoint small_poly_point() {
  theory::AttentionMap map;
  map.activation = {theory::ActivationKind::pointwise, theory::Pointwise::poly, 2};
  return make_sweep_point({12, 3, 2}, map, 9);
}

// A backend whose every sample takes at least `seconds` of wall time (the values are those of the CPU backend).
class SlowBackend final : public Backend {
 public:
  explicit SlowBackend(double seconds) : seconds_(seconds) {}
  std::string name() const override { return "slow"; }
  void evaluate(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t first,
                std::uint64_t count, std::vector<SampleValues>& out) override {
    calls.push_back(count);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds_ * static_cast<double>(count));
    cpu_.evaluate(point, estimands, first, count, out);
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_until(until);
  }
  std::vector<std::uint64_t> calls;

 private:
  double seconds_;
  CpuBackend cpu_{1, 8};
};
}  // namespace

TEST_CASE("a time limit bounds a point's wall time: the clock is read after every slow sample") {
  const SweepPoint pt = small_poly_point();
  SlowBackend slow(0.03);  // each sample >= 30 ms: the 64 samples once drawn before any check take >= 1.9 s
  SamplingPolicy policy;
  policy.rel_se = 1e-9;  // never met
  policy.max_seconds = 0.2;
  const PointOutcome outcome = run_point(slow, pt, {Estimand::value}, policy);
  CHECK(outcome.stopped_by == "max-seconds");
  // Samples of >= 30 ms, the clock read after each: the first to end past 0.2 s is the last, so at most 7.
  CHECK(outcome.samples >= 2);
  CHECK(outcome.samples <= 7);
  CHECK(outcome.wall_seconds >= 0.2);
  for (std::uint64_t count : slow.calls) CHECK(count == 1);  // a sample takes longer than the 50 ms slice
  // The values are those of the same samples drawn without a time limit.
  CpuBackend cpu(1, 8);
  SamplingPolicy fixed;
  fixed.fixed = outcome.samples;
  CHECK(run_point(cpu, pt, {Estimand::value}, fixed).norm[0].accumulator().mean() ==
        outcome.norm[0].accumulator().mean());
}

TEST_CASE("the sampling policy says what stopped it") {
  const SweepPoint pt = small_poly_point();
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
  CHECK(d.samples == 2);  // the clock is read after each sample once a standard error is possible

  // The same samples give the same statistics however the run was chunked.
  SamplingPolicy fixed_200;
  fixed_200.fixed = 200;
  const PointOutcome e = run_point(backend, pt, value, fixed_200);
  CHECK(e.norm[0].accumulator().mean() == c.norm[0].accumulator().mean());
}
