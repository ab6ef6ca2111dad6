#pragma once
// Results folders made by the tests themselves, in the format of docs/results-format.md, with values chosen
// here so that the expected text of the report is known.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace attncheck::records::testing {

using nlohmann::json;
namespace fs = std::filesystem;

// A fresh folder, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / fmt::format("attncheck-test-{}-{}", static_cast<long>(::getpid()), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct FixtureSeries {
  std::string claim = "C3";
  std::optional<std::string> reading = "elementwise";
  std::string phi = "poly";
  int p = 1;
  std::string scale = "none";
  std::string formula = "F = (T/sqrt(4))^1 (elementwise)";
  std::string estimand = "value";
  int D = 6, d = 4;
  std::vector<long long> N = {16, 32, 64};
  std::vector<double> mean = {96.1, 191.5, 383.2};
  std::vector<double> se = {0.4, 0.7, 1.1};
  std::vector<std::optional<double>> exact_sq = {9408.0, 37248.0, 148224.0};
  double slope = 0.996, ci_lo = 0.985, ci_hi = 1.007, intercept = 1.80, claimed = 1, tolerance = 0.05;
  std::string verdict = "tight";
  unsigned long long first_seed = 9000;
};

inline json key_json(const FixtureSeries& s) {
  return {{"claim", s.claim},
          {"reading", s.reading ? json(*s.reading) : json(nullptr)},
          {"phi", s.phi},
          {"p", s.p},
          {"alpha", nullptr},
          {"scale", s.scale},
          {"formula", s.formula},
          {"D", s.D},
          {"d", s.d},
          {"estimand", s.estimand},
          {"sigma_x", 1.0},
          {"sigma_t", 1.0}};
}

inline json series_json(const FixtureSeries& s) {
  json j = key_json(s);
  json exact = json::array();
  for (const auto& e : s.exact_sq) exact.push_back(e ? json(*e) : json(nullptr));
  j.update({{"slope", s.slope},
            {"slope_ci", {s.ci_lo, s.ci_hi}},
            {"intercept", s.intercept},
            {"claimed_exponent", s.claimed},
            {"tolerance", s.tolerance},
            {"verdict", s.verdict},
            {"N", s.N},
            {"mean", s.mean},
            {"se", s.se},
            {"exact_sq", exact}});
  return j;
}

// One points.jsonl object per N of the series: 95% CI mean ± 1.96 SE, second moment consistent with the mean.
inline std::vector<json> point_jsons(const FixtureSeries& s) {
  std::vector<json> points;
  for (std::size_t i = 0; i < s.N.size(); ++i) {
    json j = key_json(s);
    const double mean_sq = s.exact_sq[i] ? *s.exact_sq[i] * 1.001 : s.mean[i] * s.mean[i] * 1.01;
    const double se_sq = 2 * std::abs(s.mean[i]) * s.se[i];  // delta method: se of mean^2 is 2 |mean| se
    j.update({{"inner", 0.5},
              {"N", s.N[i]},
              {"samples", 2000},
              {"mean", s.mean[i]},
              {"se", s.se[i]},
              {"ci95", {s.mean[i] - 1.96 * s.se[i], s.mean[i] + 1.96 * s.se[i]}},
              {"mean_sq", mean_sq},
              {"se_sq", se_sq},
              {"exact_sq", s.exact_sq[i] ? json(*s.exact_sq[i]) : json(nullptr)},
              {"z_exact_sq", s.exact_sq[i] ? json((mean_sq - *s.exact_sq[i]) / se_sq) : json(nullptr)},
              {"jensen_bound", s.exact_sq[i] ? json(std::sqrt(*s.exact_sq[i])) : json(nullptr)},
              {"se_reliable", true},
              {"stopped_by", "samples"},
              {"seed", s.first_seed + i},
              {"run_seed", 1234},
              {"backend", "cpu"},
              {"threads", 2},
              {"wall_seconds", 0.25}});
    points.push_back(std::move(j));
  }
  return points;
}

inline json provenance_json() {
  return {{"version", "0.1.0"},
          {"date", "2025-01-15T10:20:30Z"},
          {"machine", "testhost (Example CPU 3000)"},
          {"backend", "cpu"},
          {"threads", 2},
          {"run_seed", 1234},
          {"command", "attncheck mc --claim C3 --out results"},
          {"wall_seconds", 12.5}};
}

// The C3 p = 1 series above, the p = 2 elementwise and matrix-power readings, and C4 with 1/sqrt(N).
inline std::vector<FixtureSeries> standard_series() {
  FixtureSeries p1;
  FixtureSeries p2_elementwise;
  p2_elementwise.p = 2;
  p2_elementwise.formula = "F = (T/sqrt(4))^2 (elementwise)";
  p2_elementwise.mean = {1600, 3300, 6500};
  p2_elementwise.se = {40, 70, 120};
  p2_elementwise.exact_sq = {std::nullopt, std::nullopt, std::nullopt};
  p2_elementwise.slope = 1.012, p2_elementwise.ci_lo = 0.951, p2_elementwise.ci_hi = 1.073;
  p2_elementwise.intercept = 4.579;
  p2_elementwise.first_seed = 9100;
  FixtureSeries p2_matrix = p2_elementwise;
  p2_matrix.reading = "matrix";
  p2_matrix.phi = "matpow";
  p2_matrix.formula = "F = (T/sqrt(4))^2 (matrix power)";
  p2_matrix.mean = {15500, 62000, 249000};
  p2_matrix.se = {300, 1100, 4200};
  p2_matrix.slope = 2.003, p2_matrix.ci_lo = 1.962, p2_matrix.ci_hi = 2.044;
  p2_matrix.intercept = 4.094;
  p2_matrix.verdict = "violated";
  p2_matrix.first_seed = 9200;
  FixtureSeries c4 = p1;
  c4.claim = "C4";
  c4.scale = "1/sqrt(N)";
  c4.formula = "F = N^-0.5 * (T/sqrt(4))^1 (elementwise)";
  c4.mean = {24.0, 33.9, 47.9};
  c4.se = {0.1, 0.12, 0.14};
  c4.exact_sq = {588.0, 1164.0, 2316.0};
  c4.slope = 0.498, c4.ci_lo = 0.491, c4.ci_hi = 0.506, c4.claimed = 0.5;
  c4.verdict = "holds";
  c4.first_seed = 9300;
  return {p1, p2_elementwise, p2_matrix, c4};
}

inline std::string fits_text(const std::vector<FixtureSeries>& series) {
  json list = json::array();
  for (const auto& s : series) list.push_back(series_json(s));
  return json{{"provenance", provenance_json()}, {"series", list}}.dump(2);
}

inline std::string points_text(const std::vector<FixtureSeries>& series) {
  std::string text;
  for (const auto& s : series) {
    for (const json& point : point_jsons(s)) text += point.dump() + "\n";
  }
  return text;
}

inline void write_results_folder(const fs::path& folder, const std::vector<FixtureSeries>& series) {
  fs::create_directories(folder);
  write_text(folder / "fits.json", fits_text(series));
  write_text(folder / "points.jsonl", points_text(series));
}

inline std::size_t count_occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

}  // namespace attncheck::records::testing
