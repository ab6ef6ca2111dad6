// attncheck bounds --cross-norm (claim C9) end to end: the printed and JSON norms against the theory routines, the
// tight families and the worst-case search reaching the bounds, the mix's growth, and exit code 2 naming the bad
// value for every bad input.

#include "bounds_json.hpp"
#include "npy_writer.hpp"
#include "run_command.hpp"

#include "attncheck/theory/cross_norm.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

using attncheck::testing::expect_refused;
using attncheck::testing::family;
using attncheck::testing::run_attncheck;
using attncheck::theory::Matrix;

namespace {

const std::filesystem::path kDir = std::filesystem::temp_directory_path() / "attncheck-cross-norm-cli-test";
std::filesystem::path fresh(const std::string& name) {
  std::filesystem::create_directories(kDir);
  return kDir / name;
}

// Row-major float64 .npy of an Eigen matrix (Eigen stores column-major).
void write_npy(const std::filesystem::path& path, const Matrix& m) {
  std::vector<double> data;
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    for (Eigen::Index j = 0; j < m.cols(); ++j) data.push_back(m(i, j));
  }
  attncheck::testing::write_npy_raw(path,
                                    "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(m.rows()) +
                                        ", " + std::to_string(m.cols()) + "), }",
                                    attncheck::testing::raw_bytes(data));
}

constexpr std::array<const char*, 5> kKeys{"column_softmax_fro", "column_grad_fro", "output_fro", "grad_values_fro",
                                           "grad_scores_fro"};

}  // namespace

TEST_CASE("bounds --cross-norm --json: every bound of facts 10-11 holds, and each is reached") {
  const auto result = run_attncheck("bounds --cross-norm --N 64 --dv 8 --trials 3 --json");
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  CHECK(report["claim"] == "C9");
  CHECK(report["basis"] == "exact");
  CHECK(report["N"] == 64);
  CHECK(report["d_v"] == 8);
  CHECK(report["holds"] == true);
  const auto bounds = attncheck::theory::cross_norm_bounds(64, 8);
  CHECK(report["bounds"]["column_softmax_fro"].get<double>() == bounds.column_softmax);
  CHECK(report["bounds"]["column_grad_fro"].get<double>() == bounds.column_grad);
  CHECK(report["bounds"]["output_fro"].get<double>() == bounds.output);
  CHECK(report["bounds"]["grad_values_fro"].get<double>() == bounds.grad_values);
  CHECK(report["bounds"]["grad_scores_fro"].get<double>() == bounds.grad_scores);
  REQUIRE(report["families"].size() == 10);
  for (const auto& f : report["families"]) {
    INFO(f["family"]);
    for (const char* key : kKeys) {
      CHECK(f["ratio"][key].get<double>() <= 1 + 1e-12);
      CHECK(f["ratio"][key].get<double>() == Approx(f["max"][key].get<double>() / report["bounds"][key].get<double>()));
    }
  }
  // Fact 11's constructions sit on the sups.
  CHECK(family(report, "one-hot")["ratio"]["output_fro"].get<double>() == Approx(1.0).epsilon(1e-14));
  CHECK(family(report, "one-hot")["ratio"]["column_softmax_fro"].get<double>() == Approx(1.0).epsilon(1e-14));
  CHECK(family(report, "tight-values")["ratio"]["grad_values_fro"].get<double>() == Approx(1.0).epsilon(1e-14));
  CHECK(family(report, "tight-values")["ratio"]["column_grad_fro"].get<double>() == Approx(1.0).epsilon(1e-14));
  CHECK(family(report, "tight-scores")["ratio"]["grad_scores_fro"].get<double>() == Approx(1.0).epsilon(1e-14));
  // Near-tight: close, from below.
  const auto& near = family(report, "near-tight");
  for (const char* key : {"output_fro", "grad_values_fro", "grad_scores_fro"}) {
    CHECK(near["ratio"][key].get<double>() > 0.99);
    CHECK(near["ratio"][key].get<double>() < 1.0);
  }
  // The worst-case search finds both terms' sup 1/8 from random starts and never passes it.
  const auto& search = family(report, "worst-case-search");
  for (const char* term : {"grad_values_term", "grad_scores_term"}) {
    CHECK(search["search"][term]["ratio"].get<double>() >= 0.999);
    CHECK(search["search"][term]["best"].get<double>() <= 0.125 * (1 + 1e-12));
  }
  CHECK(search["ratio"]["grad_values_fro"].get<double>() >= 0.999);
  CHECK(search["ratio"]["grad_scores_fro"].get<double>() >= 0.999);
  for (const auto& v : report["verdicts"]) {
    INFO(v["quantity"]);
    CHECK(v["verdict"] == "tight");
    CHECK(v["basis"] == "exact");
    CHECK(v["largest_ratio"].get<double>() >= 0.999);
  }
  // The uniform family is exactly computable: A and P uniform, so O = 1/N everywhere and dO/dS = 0.
  const auto& uniform = family(report, "uniform");
  CHECK(uniform["max"]["output_fro"].get<double>() == Approx(std::sqrt(64.0 * 8) / 64).epsilon(1e-12));
  CHECK(uniform["max"]["grad_scores_fro"].get<double>() == Approx(0.0).margin(1e-12));
}

TEST_CASE("bounds --cross-norm with the user's scores and values: the theory routines' norms of those matrices") {
  const Matrix scores = (Matrix(4, 4) << 0, 1, 2, -3, 0.5, 0.5, 9, 1, -2, 4, 0, 0, 3, 3, 3, 3).finished();
  const Matrix values = (Matrix(4, 3) << 1, -1, 0, 2, 0.3, 5, -7, 1, 1, 0, 0, 2).finished();
  const auto s_path = fresh("scores.npy"), v_path = fresh("values.npy");
  write_npy(s_path, scores);
  write_npy(v_path, values);
  const auto result =
      run_attncheck("bounds --cross-norm --json --input " + s_path.string() + " --values " + v_path.string());
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  CHECK(report["N"] == 4);
  CHECK(report["d_v"] == 3);
  REQUIRE(report["families"].size() == 1);
  const auto& input = report["families"][0];
  CHECK(input["family"] == "input");
  const auto column = attncheck::theory::column_softmax_norms(values);
  const auto cross = attncheck::theory::cross_norm_norms_from_scores(scores, values);
  CHECK(input["max"]["column_softmax_fro"].get<double>() == Approx(column.softmax_fro).epsilon(1e-15));
  CHECK(input["max"]["column_grad_fro"].get<double>() == Approx(column.grad_fro).epsilon(1e-15));
  CHECK(input["max"]["output_fro"].get<double>() == Approx(cross.output_fro).epsilon(1e-15));
  CHECK(input["max"]["grad_values_fro"].get<double>() == Approx(cross.grad_values_fro).epsilon(1e-15));
  CHECK(input["max"]["grad_scores_fro"].get<double>() == Approx(cross.grad_scores_fro).epsilon(1e-15));
  // Only --values: the scores are taken as zero (uniform attention), and the human table says so.
  const auto values_only = run_attncheck("bounds --cross-norm --json --values " + v_path.string());
  REQUIRE(values_only.exit_code == 0);
  const auto uniform = attncheck::theory::cross_norm_norms_from_scores(Matrix::Zero(4, 4), values);
  CHECK(nlohmann::json::parse(values_only.out)["families"][0]["max"]["grad_values_fro"].get<double>() ==
        Approx(uniform.grad_values_fro).epsilon(1e-15));
  CHECK_THAT(run_attncheck("bounds --cross-norm --values " + v_path.string()).out, Catch::Contains("scores uniform"));
}

TEST_CASE("bounds --cross-norm --mix: unbounded for alpha < 1 along V = t V0, bounded at alpha = 1") {
  const auto result = run_attncheck("bounds --cross-norm --N 16 --dv 4 --family tight-scores --mix 0,0.5,1 --json");
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  REQUIRE(report["mix"].size() == 3);
  const auto bounds = attncheck::theory::cross_norm_bounds(16, 4);
  for (const auto& m : report["mix"]) {
    const double alpha = m["alpha"].get<double>();
    INFO("alpha " << alpha);
    CHECK(m["holds"] == true);
    CHECK(m["grad_values"] == "bounded");
    CHECK(m["grad_values_bound"].get<double>() ==
          Approx(alpha * bounds.grad_values + (1 - alpha) * bounds.output).epsilon(1e-15));
    REQUIRE(m["growth"].size() == 4);
    for (const auto& g : m["growth"]) CHECK(g["grad_values_fro"].get<double>() <= m["grad_values_bound"].get<double>());
    const auto& step = m["growth_last_step"];
    if (alpha < 1) {
      CHECK(m["output"] == "unbounded");
      CHECK(m["grad_scores"] == "unbounded");
      // Linear growth: t from 100 to 1000 multiplies both norms by nearly 10.
      CHECK(step["output"].get<double>() == Approx(10).epsilon(0.05));
      CHECK(step["grad_scores"].get<double>() == Approx(10).epsilon(0.05));
      CHECK(step["grad_values"].get<double>() == Approx(1).epsilon(0.05));
    } else {
      CHECK(m["output"] == "bounded");
      for (const auto& g : m["growth"]) {
        CHECK(g["output_fro"].get<double>() <= bounds.output);
        CHECK(g["grad_scores_fro"].get<double>() <= bounds.grad_scores);
      }
    }
  }
  const auto table = run_attncheck("bounds --cross-norm --N 16 --dv 4 --mix 0.5,1");
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("C9") && Catch::Contains("tight (exact)") &&
                            Catch::Contains("mix alpha = 0.5") && Catch::Contains("unbounded in V") &&
                            Catch::Contains("sqrt(N d_v/8)"));
}

TEST_CASE("bounds --cross-norm: results do not depend on the thread count") {
  const std::string arguments = "bounds --cross-norm --N 24 --dv 3 --trials 4 --json";
  const auto one = nlohmann::json::parse(run_attncheck(arguments + " --threads 1").out);
  const auto two = nlohmann::json::parse(run_attncheck(arguments + " --threads 2").out);
  CHECK(one["families"] == two["families"]);
  CHECK(one["mix"] == two["mix"]);
}

TEST_CASE("bounds --cross-norm: bad usage and bad input exit 2 naming the bad value") {
  expect_refused("bounds --cross-norm --N 8 --dv 0", "--dv: 0 is out of range");
  expect_refused("bounds --cross-norm --N 8 --dv 2.5", "--dv: '2.5' is not a whole number");
  expect_refused("bounds --cross-norm --N 8 --dv nan", "--dv");
  expect_refused("bounds --cross-norm --N 8 --mix 1.5", "--mix: 1.5 is out of range");
  expect_refused("bounds --cross-norm --N 8 --mix 0.5,x", "--mix");
  expect_refused("bounds --cross-norm --N 8 --mix nan", "--mix");
  expect_refused("bounds --cross-norm --N 8 --family nope", "unknown --family 'nope'");
  expect_refused("bounds --cross-norm", "--N");
  expect_refused("bounds --N 8 --dv 4", "--dv is an option of --cross-norm");
  expect_refused("bounds --N 8 --mix 0.5", "--mix is an option of --cross-norm");
  const auto values = fresh("v3x2.csv");
  std::ofstream(values) << "1,2\n3,4\n5,6\n";
  expect_refused("bounds --cross-norm --N 4 --values " + values.string(),
                 "shape mismatch: --values " + values.string() + " has 3 rows");
  expect_refused("bounds --cross-norm --dv 5 --values " + values.string(), "--dv 5 disagrees with --values");
  const auto square = fresh("s4x4.csv");
  std::ofstream(square) << "0,0,0,0\n0,0,0,0\n0,0,0,0\n0,0,0,0\n";
  expect_refused("bounds --cross-norm --input " + square.string() + " --values " + values.string(),
                 "has 3 rows (tokens), but N = 4");
  const auto wide = fresh("s2x3.csv");
  std::ofstream(wide) << "0,0,0\n0,0,0\n";
  expect_refused("bounds --cross-norm --input " + wide.string(), "must be square");
  const auto nan_values = fresh("vnan.csv");
  std::ofstream(nan_values) << "1,2\nnan,4\n";
  expect_refused("bounds --cross-norm --values " + nan_values.string(), "entry [1][0] (0-based) is nan");
  const auto inf_values = fresh("vinf.csv");
  std::ofstream(inf_values) << "1,inf\n3,4\n";
  expect_refused("bounds --cross-norm --values " + inf_values.string(), "entry [0][1] (0-based) is inf");
  const auto nan_scores = fresh("snan.csv");
  std::ofstream(nan_scores) << "0,nan\n0,0\n";
  expect_refused("bounds --cross-norm --input " + nan_scores.string(), "NaN logit at row 0, column 1");
  expect_refused("bounds --cross-norm --values " + (kDir / "absent.npy").string(), "absent.npy: no such file");
}
