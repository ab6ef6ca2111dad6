#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/results.hpp"
#include "attncheck/probes/watch.hpp"
#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/claims.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/results_folder.hpp"
#include "attncheck/records/probe_record.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

using namespace attncheck;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// The engine's records of a small C4 sweep (p = 1, both readings, N = 8..32) and its fitted series.
struct SmallRun {
  std::vector<records::PointRecord> typed;
  std::vector<json> records;  // their JSON form, as points.jsonl holds it
  json series;
};

SmallRun small_run(std::uint64_t run_seed) {
  monte_carlo::SweepRequest request;
  request.claim = "C4";
  request.p = {1};
  monte_carlo::CpuBackend backend(1, 16);
  monte_carlo::SamplingPolicy policy;
  policy.fixed = 48;
  SmallRun run;
  for (const auto& series : monte_carlo::build_series(request)) {
    for (theory::Index n : {8, 16, 32}) {
      const monte_carlo::PointSpec spec = monte_carlo::make_point(series, n, 4, 4, 1, 1, run_seed);
      const monte_carlo::PointOutcome outcome = monte_carlo::run_point(backend, spec.point, series.estimands, policy);
      for (auto estimand : series.estimands) {
        run.typed.push_back(monte_carlo::point_record(spec, estimand, outcome, {run_seed, "cpu", 1}));
        run.records.push_back(run.typed.back());
      }
    }
  }
  run.series = monte_carlo::fit_series(run.typed, 0.05);
  return run;
}

std::string jsonl(const std::vector<json>& records) {
  std::string text;
  for (const json& r : records) text += r.dump() + "\n";
  return text;
}

// The message of the E that `run` throws; fails the test when it throws nothing or something else.
template <class E, class Run>
std::string message_of(Run&& run) {
  try {
    run();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("the expected exception was not thrown");
  return "";
}

double number_or_nan(const json& value) { return value.is_number() ? value.get<double>() : NAN; }

}  // namespace

TEST_CASE("every point record the engine writes reads back typed, field for field") {
  const SmallRun run = small_run(11);
  const std::vector<records::PointRecord> points = records::parse_points_jsonl(jsonl(run.records), "points.jsonl");
  REQUIRE(points.size() == run.records.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const json& written = run.records[i];
    const records::PointRecord& read = points[i];
    INFO("record " << i);
    CHECK(read.line == static_cast<int>(i + 1));
    CHECK(read.key.claim == written["claim"].get<std::string>());
    CHECK(read.key.reading() == written["reading"].get<std::string>());
    CHECK(theory::term_of(read.key.activation).word == written["phi"].get<std::string>());
    CHECK(read.key.scale == written["scale"].get<std::string>());
    CHECK(theory::term_of(read.key.estimand).word == written["estimand"].get<std::string>());
    CHECK(read.key.D == written["D"].get<long long>());
    CHECK(read.N == written["N"].get<long long>());
    CHECK(read.samples == written["samples"].get<long long>());
    // Doubles go through text with 17 significant digits: exact, not approximate.
    CHECK(read.mean == written["mean"].get<double>());
    CHECK(read.se == written["se"].get<double>());
    CHECK(read.mean_sq == written["mean_sq"].get<double>());
    CHECK(read.ci95_lo == written["ci95"][0].get<double>());
    CHECK(read.ci95_hi == written["ci95"][1].get<double>());
    REQUIRE(read.exact_sq.has_value());
    CHECK(*read.exact_sq == written["exact_sq"].get<double>());
    CHECK(std::to_string(read.seed) == written["seed"].dump());
    CHECK(read.run_seed == 11u);
    CHECK(read.backend == "cpu");
    CHECK(read.stopped_by == written["stopped_by"].get<std::string>());
  }
}

TEST_CASE("every fitted series reads back with its slope, verdict and basis") {
  const SmallRun run = small_run(12);
  const json fits = {{"format_version", records::kResultsFormatVersion},
                     {"provenance",
                      {{"version", "test"},
                       {"date", "2026-01-01T00:00:00Z"},
                       {"machine", "here"},
                       {"backend", "cpu"},
                       {"threads", 1},
                       {"run_seed", 12},
                       {"command", "attncheck mc --claim C4"}}},
                     {"series", run.series}};
  const auto [runs, series] = records::parse_fits_json(fits.dump(2), "fits.json");
  // A folder written before "runs" existed names its one run in "provenance".
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].run_seed == 12u);
  REQUIRE(series.size() == run.series.size());
  REQUIRE(series.size() == 2);  // elementwise and matrix readings
  for (std::size_t i = 0; i < series.size(); ++i) {
    const json& written = run.series[i];
    INFO("series " << i);
    CHECK(series[i].key.claim == "C4");
    REQUIRE(series[i].slope.has_value());
    CHECK(*series[i].slope == written["slope"].get<double>());
    REQUIRE(series[i].verdict.has_value());
    CHECK(records::to_string(*series[i].verdict) == written["verdict"].get<std::string>());
    REQUIRE(series[i].basis.has_value());
    CHECK(records::to_string(*series[i].basis) == written["basis"].get<std::string>());
    CHECK(series[i].counts_for_exit == written["counts_for_exit"].get<bool>());
    REQUIRE(series[i].N.size() == 3);
    CHECK(series[i].N == std::vector<long long>{8, 16, 32});
    for (std::size_t k = 0; k < series[i].mean.size(); ++k) {
      CHECK(series[i].mean[k] == number_or_nan(written["mean"][k]));
    }
  }
}

TEST_CASE("a results folder written by `attncheck mc` at format version 2 still reads") {
  // tests/records/data/format-v2-c4: `attncheck mc --claim C4 --p 1 --N 8,16,32 --D 4 --d 4 --samples 40
  // --seed 5 --out ...`, committed as written.
  const records::ResultsFolder folder = records::read_results_folder(ATTNCHECK_RECORDS_DATA "/format-v2-c4");
  CHECK(folder.has_points_file);
  CHECK(folder.provenance.run_seed == 5u);
  CHECK(folder.provenance.backend == "cpu");
  REQUIRE(folder.series.size() == 2);
  for (const records::Series& series : folder.series) {
    INFO(series.key.label());
    CHECK(series.key.claim == "C4");
    CHECK(series.N == std::vector<long long>{8, 16, 32});
    CHECK(series.claimed_exponent == records::find_claim("C4")->claimed_exponent);
    REQUIRE(series.verdict.has_value());
    CHECK(series.basis.has_value());
    // Every point of the series was joined to its points.jsonl record.
    REQUIRE(series.points.size() == 3);
    for (const auto& point : series.points) {
      REQUIRE(point.has_value());
      CHECK(point->samples == 40);
    }
  }
  // The elementwise reading is the claim (exact basis: the closed form of E||F||^2 grows like N^(1/2)).
  CHECK(folder.series[0].key.reading() == "elementwise");
  CHECK(folder.series[0].verdict == records::Verdict::tight);
  CHECK(folder.series[0].basis == records::Basis::exact);
}

TEST_CASE("a truncated, broken or mistyped line is refused naming the file and the line") {
  const SmallRun run = small_run(13);
  const std::string first = run.records[0].dump();
  const std::string second = run.records[1].dump();
  // A writer killed mid-line (which the atomic rename prevents, but a copy by hand may not).
  CHECK_THAT(message_of<theory::InputError>([&] {
               records::parse_points_jsonl(first + "\n" + second.substr(0, second.size() / 2) + "\n", "p.jsonl");
             }),
             Contains("p.jsonl line 2"));
  CHECK_THAT(message_of<theory::InputError>([&] { records::parse_points_jsonl(first + "\nnot json\n", "p.jsonl"); }),
             Contains("p.jsonl line 2"));
  json mistyped = run.records[0];
  mistyped["N"] = "sixteen";
  CHECK_THAT(message_of<theory::InputError>(
                 [&] { records::parse_points_jsonl(first + "\n" + first + "\n" + mistyped.dump() + "\n", "p.jsonl"); }),
             Contains("line 3") && Contains("\"N\""));
  json missing = run.records[0];
  missing.erase("mean");
  CHECK_THAT(message_of<theory::InputError>([&] { records::parse_points_jsonl(missing.dump(), "p.jsonl"); }),
             Contains("line 1") && Contains("\"mean\""));
}

TEST_CASE("the resume key is the one points.jsonl carries, and differs by estimand and run seed") {
  const SmallRun run = small_run(14);
  monte_carlo::SweepRequest request;
  request.claim = "C4";
  request.p = {1};
  const auto series = monte_carlo::build_series(request);
  const monte_carlo::PointSpec spec = monte_carlo::make_point(series[0], 8, 4, 4, 1, 1, 14);
  CHECK(run.records[0]["key"] == records::resume_key(spec.key, "value", 14));
  CHECK(records::resume_key(spec.key, "value", 14) != records::resume_key(spec.key, "value", 15));
  CHECK(records::resume_key(spec.key, "value", 14) != records::resume_key(spec.key, "dQ", 14));
}

TEST_CASE("the claims table is THEORY.md's, and the sweep's presets claim its exponents") {
  const std::string notes = records::read_text_file(ATTNCHECK_THEORY_NOTES);
  REQUIRE(records::all_claims().size() == 9);
  int number = 1;
  for (const records::Claim& claim : records::all_claims()) {
    INFO(claim.id);
    CHECK(claim.id == fmt::format("C{}", number++));
    const std::string row = claim.v1 == claim.v2 ? fmt::format("| {} | {} |", claim.id, claim.v1)
                                                 : fmt::format("| {} | {} / {} |", claim.id, claim.v1, claim.v2);
    CHECK(notes.find(row) != std::string::npos);
  }
  CHECK_FALSE(records::find_claim("custom").has_value());
  CHECK(records::find_claim("C3")->numbering() == "v1: Thm 4.2 (4.3) / v2: Thm 4.2 (8)");
  CHECK(records::find_claim("C7")->numbering() == "relu paper, Sec. 3");
  for (const char* id : {"C3", "C4", "C5", "C6", "C8", "C9"}) {
    monte_carlo::SweepRequest request;
    request.claim = id;
    request.p = {1};
    for (const auto& series : monte_carlo::build_series(request)) {
      INFO(id);
      CHECK(series.claimed_exponent == records::find_claim(id)->claimed_exponent);
    }
  }
  CHECK_THROWS_AS(monte_carlo::claim_info("C1"), theory::InputError);  // exact: attncheck bounds, not a sweep
}

TEST_CASE("a write the file system refuses is an I/O error naming the path, not an input error") {
  const std::filesystem::path nowhere = "/proc/attncheck-no-such-folder/fits.json";
  CHECK_THAT(message_of<records::IoError>([&] { records::write_file_atomically(nowhere, "{}"); }),
             Contains("/proc/attncheck-no-such-folder/fits.json"));
  // Bad input stays InputError: a folder where a file is expected.
  CHECK_THROWS_AS(records::write_file_atomically("/proc", "{}"), theory::InputError);
}

TEST_CASE("a probe-log line the watcher writes reads back with every norm the report plots") {
  probes::HeadMetrics m;
  m.layer = 2;
  m.head = 5;
  m.N = 37;
  m.D = 64;
  m.d = 16;
  m.softmax = {3.25, 0.125, 7.5, 8.5};
  m.poly3_scaled = {11.0, 12.0, 13.0, 14.0};
  m.poly3 = {21.0, 22.0, 23.0, 24.0};
  m.relu_n = {0.5, 0.25, 0.0, 0.0};
  const std::string line = probes::probe_log_line(m, "step-300", 300, "poly3_scaled");
  const std::vector<records::ProbeRecord> read = records::parse_probe_log(line + line, "attncheck-probe.jsonl");
  REQUIRE(read.size() == 2);
  const records::ProbeRecord& r = read[1];
  CHECK(r.line == 2);
  CHECK(r.checkpoint == "step-300");
  CHECK(r.step == 300);
  CHECK(r.activation == "poly3_scaled");
  CHECK(r.metrics.layer == 2);
  CHECK(r.metrics.head == 5);
  CHECK(r.metrics.N == 37);
  CHECK(r.metrics.D == 64);
  using Q = records::ProbeQuantity;
  CHECK(r.value(Q::softmax) == 3.25);
  CHECK(r.value(Q::grad) == 0.125);
  CHECK(r.value(Q::dWq) == 7.5);
  CHECK(r.value(Q::dWk) == 8.5);
  CHECK(r.value(Q::poly3_scaled) == 11.0);
  CHECK(r.value(Q::poly3_scaled_grad) == 12.0);
  CHECK(r.value(Q::poly3) == 21.0);
  CHECK(r.value(Q::poly3_grad) == 22.0);
  CHECK(r.value(Q::relu_n) == 0.5);
  CHECK(r.value(Q::relu_n_grad) == 0.25);
}
