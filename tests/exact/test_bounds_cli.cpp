// attncheck bounds end to end: verdicts, JSON fields, thread invariance, and exit code 2 for every bad input.

#include "bounds_json.hpp"
#include "npy_writer.hpp"
#include "run_command.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include <sys/stat.h>

using attncheck::testing::expect_refused;
using attncheck::testing::family;
using attncheck::testing::run_attncheck;

namespace {
const std::filesystem::path kDir = std::filesystem::temp_directory_path() / "attncheck-bounds-cli-test";
std::filesystem::path fresh(const std::string& name) {
  std::filesystem::create_directories(kDir);
  return kDir / name;
}
}  // namespace

TEST_CASE("bounds --N 256 --json: every bound holds and the tight constants are reached") {
  const auto result = run_attncheck("bounds --N 256 --json");
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  CHECK(report["N"] == 256);
  CHECK(report["holds"] == true);
  REQUIRE(report["families"].size() == 8);
  for (const auto& f : report["families"]) {
    for (const char* key : {"family", "max_softmax_fro", "max_grad_fro", "bound_softmax", "bound_grad_paper",
                            "bound_grad_tight", "holds"}) {
      CHECK(f.contains(key));
    }
    CHECK(f["bound_softmax"] == 16.0);
    CHECK(f["bound_grad_paper"] == 32.0);
    CHECK(f["bound_grad_tight"] == 8.0);
    CHECK(f["max_grad_fro"].get<double>() <= 8.0 * (1 + 1e-12));
  }
  const auto& search = family(report, "worst-case-search");
  CHECK(search["max_grad_fro"].get<double>() / 8.0 >= 0.99);
  CHECK(search["max_softmax_fro"].get<double>() / 16.0 >= 0.99);
  CHECK(family(report, "two-equal-top")["max_grad_fro"].get<double>() == Approx(8.0).epsilon(1e-12));
  CHECK(family(report, "constant")["max_grad_fro"].get<double>() == Approx(std::sqrt(1 - 1.0 / 256)).epsilon(1e-12));
}

TEST_CASE("results do not depend on the thread count") {
  const auto one = nlohmann::json::parse(run_attncheck("bounds --N 64 --trials 5 --json --threads 1").out);
  const auto two = nlohmann::json::parse(run_attncheck("bounds --N 64 --trials 5 --json --threads 2").out);
  CHECK(one["families"] == two["families"]);
}

TEST_CASE("the human table names the claims and verdicts") {
  const auto result = run_attncheck("bounds --N 16 --family two-equal-top constant");
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("two-equal-top") && Catch::Contains("holds") && Catch::Contains("sqrt(N)/2") &&
                             Catch::Contains("v2"));
}

TEST_CASE("input matrices: the user's matrix, N from the file, same answer from CSV and npy") {
  const auto csv = fresh("logits.csv");
  std::ofstream(csv) << "0,0,-50\n1,2,3\n-inf,5,-inf\n";
  const auto npy = fresh("logits.npy");
  attncheck::testing::write_npy_raw(npy, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }",
                                    attncheck::testing::raw_bytes(
                                        std::vector<double>{0, 0, -50, 1, 2, 3, -INFINITY, 5, -INFINITY}));
  const auto from_csv = run_attncheck("bounds --json --input " + csv.string());
  const auto from_npy = run_attncheck("bounds --json --input " + npy.string());
  REQUIRE(from_csv.exit_code == 0);
  const auto a = nlohmann::json::parse(from_csv.out), b = nlohmann::json::parse(from_npy.out);
  CHECK(a["N"] == 3);
  CHECK(a["families"][0]["family"] == "input");
  CHECK(a["families"][0]["max_grad_fro"] == b["families"][0]["max_grad_fro"]);
  CHECK(a["families"][0]["max_softmax_fro"].get<double>() > 1.0);
}

TEST_CASE("bad usage and bad input exit 2 with a message naming the problem") {
  expect_refused("bounds --N 0", "--N: 0 is out of range");
  expect_refused("bounds --N -4", "--N: -4 is out of range");
  expect_refused("bounds --N abc", "'abc'");
  expect_refused("bounds", "--N");
  expect_refused("bounds --N 3000000", "--N 3000000");  // 7e13 bytes per matrix: refused before allocating
  // N^2 would wrap a 64-bit byte count: still refused by the memory check, not aborted by bad_alloc.
  expect_refused("bounds --N 2305843009213693952", "--N 2305843009213693952");
  expect_refused("bounds --N 1.5", "--N: '1.5' is not a whole number");
  expect_refused("bounds --N 8 --seed -1", "--seed: -1 is out of range");
  expect_refused("bounds --N 8 --threads 100000", "--threads: 100000 is out of range");
  expect_refused("bounds --N 8 --family nope", "unknown --family 'nope'");
  expect_refused("bounds --N 8 --trials 0", "--trials");
  expect_refused("bounds --input " + (kDir / "absent.npy").string(), "absent.npy: no such file");
  const auto nan_csv = fresh("nan.csv");
  std::ofstream(nan_csv) << "1,2\n3,nan\n";
  expect_refused("bounds --input " + nan_csv.string(), "NaN logit at row 1, column 1");
  const auto nan_npy = fresh("nan.npy");
  attncheck::testing::write_npy_raw(nan_npy, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
                                    attncheck::testing::raw_bytes(std::vector<float>{1, NAN, 0, 0}));
  expect_refused("bounds --input " + nan_npy.string(), "NaN logit at row 0, column 1");
  const auto truncated = fresh("truncated.npy");
  attncheck::testing::write_npy_raw(truncated, "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 4), }",
                                    std::string(100, '\0'));
  expect_refused("bounds --input " + truncated.string(), "truncated.npy");
  expect_refused("bounds --N 5 --input " + nan_csv.string(), "--N 5 disagrees");
  // Not a regular file: refused at once (a FIFO is not waited on), naming it.
  const auto fifo = fresh("logits.fifo");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_refused("bounds --input " + fifo.string(), "logits.fifo: is a FIFO");
  expect_refused("bounds --input " + kDir.string(), "is a folder");
  expect_refused("bounds --input /dev/zero", "/dev/zero: is a character device");
  const auto all_masked = fresh("masked.csv");
  std::ofstream(all_masked) << "-inf,-inf\n0,1\n";
  expect_refused("bounds --input " + all_masked.string(), "every logit of row 0");
}

TEST_CASE("help explains the families and exit codes") {
  const auto result = run_attncheck("bounds --help");
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("worst-case-search") && Catch::Contains("Exit: 0"));
}
