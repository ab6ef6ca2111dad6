#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/results_folder.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>

using namespace attncheck::records;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

TEST_CASE("a results folder is read and its points are joined to their series", "[results]") {
  TempDir dir;
  write_results_folder(dir.path(), standard_series());
  const ResultsFolder results = read_results_folder(dir.path());
  CHECK(results.has_points_file);
  CHECK(results.provenance.version == "0.1.0");
  CHECK(results.provenance.run_seed == 1234u);
  CHECK(results.provenance.threads == 2);
  REQUIRE(results.series.size() == 4);
  const Series& matrix = results.series[2];
  CHECK(matrix.key.reading() == "matrix");
  CHECK(matrix.key.activation.kind == attncheck::theory::ActivationKind::matpow);
  CHECK(matrix.verdict == Verdict::violated);
  REQUIRE(matrix.slope_ci.has_value());
  CHECK(matrix.slope_ci->second == Approx(2.044));
  REQUIRE(matrix.points.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    REQUIRE(matrix.points[i].has_value());
    CHECK(matrix.points[i]->N == matrix.N[i]);
    CHECK(matrix.points[i]->seed == 9200 + i);  // the matrix reading's own points, not p = 2 elementwise
  }
  CHECK(results.series[0].exact_sq[1] == Approx(37248));
  CHECK_FALSE(results.series[1].exact_sq[0].has_value());
}

TEST_CASE("a resumed sweep's repeated point counts once, with its last line", "[results]") {
  TempDir dir;
  FixtureSeries series;
  write_results_folder(dir.path(), {series});
  json repeated = point_jsons(series)[0];
  repeated["seed"] = 4242;
  write_text(dir.path() / "points.jsonl", points_text({series}) + repeated.dump() + "\n");
  const ResultsFolder results = read_results_folder(dir.path());
  REQUIRE(results.series[0].points[0].has_value());
  CHECK(results.series[0].points[0]->seed == 4242u);
  CHECK(results.series[0].points[0]->line == 4);
}

TEST_CASE("points.jsonl is optional: fits.json is not", "[results][errors]") {
  TempDir dir;
  write_results_folder(dir.path(), {FixtureSeries{}});
  fs::remove(dir.path() / "points.jsonl");
  const ResultsFolder results = read_results_folder(dir.path());
  CHECK_FALSE(results.has_points_file);
  CHECK_FALSE(results.series[0].points[0].has_value());

  fs::remove(dir.path() / "fits.json");
  CHECK_THROWS_WITH(read_results_folder(dir.path()), Contains("fits.json is missing"));
  CHECK_THROWS_WITH(read_results_folder(dir.path() / "nowhere"), Contains("nowhere does not exist"));
}

namespace {
// The message of the error that reading `folder` throws, or "" when it reads fine.
std::string error_of(const fs::path& folder) {
  try {
    read_results_folder(folder);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a malformed points.jsonl is refused naming the file and the line", "[results][errors]") {
  TempDir dir;
  const std::vector<FixtureSeries> series = {FixtureSeries{}};
  write_results_folder(dir.path(), series);
  const std::vector<json> points = point_jsons(series[0]);
  const fs::path file = dir.path() / "points.jsonl";

  SECTION("broken JSON") {
    write_text(file, points[0].dump() + "\n" + points[1].dump() + "\n{\"claim\": \"C3\", \"N\": \n");
    const std::string message = error_of(dir.path());
    CHECK_THAT(message, Contains(file.string() + " line 3"));
    CHECK_THAT(message, Contains("malformed JSON"));
  }
  SECTION("a required key is missing") {
    json broken = points[1];
    broken.erase("mean");
    write_text(file, points[0].dump() + "\n" + broken.dump() + "\n");
    const std::string message = error_of(dir.path());
    CHECK_THAT(message, Contains(file.string() + " line 2"));
    CHECK_THAT(message, Contains("\"mean\" is missing"));
  }
  SECTION("a value of the wrong type") {
    json broken = points[0];
    broken["samples"] = "many";
    write_text(file, "\n" + broken.dump() + "\n");  // blank lines still count
    const std::string message = error_of(dir.path());
    CHECK_THAT(message, Contains(file.string() + " line 2"));
    CHECK_THAT(message, Contains("\"samples\" must be a whole number, got \"many\""));
  }
  SECTION("an impossible value") {
    json broken = points[0];
    broken["ci95"] = {3.0, 1.0};
    write_text(file, broken.dump() + "\n");
    CHECK_THAT(error_of(dir.path()), Contains("line 1") && Contains("\"ci95\" = [3, 1] has lo > hi"));
  }
  SECTION("a line that is not an object") {
    write_text(file, points[0].dump() + "\n[1, 2]\n");
    CHECK_THAT(error_of(dir.path()), Contains("line 2") && Contains("expected a JSON object"));
  }
}

TEST_CASE("a malformed fits.json is refused naming the file and the place", "[results][errors]") {
  TempDir dir;
  std::vector<FixtureSeries> series = standard_series();
  write_results_folder(dir.path(), series);
  const fs::path file = dir.path() / "fits.json";

  SECTION("broken JSON: the line and column") {
    std::string text = fits_text(series);
    text.insert(text.find("\"series\""), "oops ");
    write_text(file, text);
    const std::string message = error_of(dir.path());
    CHECK_THAT(message, Contains(file.string() + " line "));
    CHECK_THAT(message, Contains("column"));
  }
  SECTION("an entry of the series list is named by its line and index") {
    json document = json::parse(fits_text(series));
    document["series"][1].erase("formula");
    document["series"][0]["formula"] = "a \"quoted\" [tricky] {formula},\nover two lines";
    const std::string text = document.dump(2);
    write_text(file, text);
    // dump(2) opens each entry of the list on its own line, indented by four spaces.
    std::size_t at = text.find("\"series\"");
    for (int entry = 0; entry < 2; ++entry) at = text.find("\n    {", at + 1);
    const auto line = 2 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    CHECK_THAT(error_of(dir.path()), Contains(fmt::format("{} line {} (series[1])", file.string(), line)) &&
                                         Contains("\"formula\" is missing"));
    // Compact JSON: every entry on line 1.
    write_text(file, document.dump());
    CHECK_THAT(error_of(dir.path()), Contains(file.string() + " line 1 (series[1])"));
  }
  SECTION("lists of different lengths") {
    json document = json::parse(fits_text(series));
    document["series"][0]["mean"] = {1.0, 2.0};
    write_text(file, document.dump(2));
    CHECK_THAT(error_of(dir.path()), Contains("series[0]") && Contains("one entry per point"));
  }
  SECTION("an unknown verdict") {
    json document = json::parse(fits_text(series));
    document["series"][3]["verdict"] = "fine";
    write_text(file, document.dump(2));
    CHECK_THAT(error_of(dir.path()), Contains("series[3]") && Contains("got \"fine\""));
  }
  SECTION("N must grow") {
    json document = json::parse(fits_text(series));
    document["series"][2]["N"] = {16, 64, 32};
    write_text(file, document.dump(2));
    CHECK_THAT(error_of(dir.path()), Contains("series[2]") && Contains("N[2] = 32 follows 64"));
  }
  SECTION("no provenance") {
    json document = json::parse(fits_text(series));
    document.erase("provenance");
    write_text(file, document.dump(2));
    CHECK_THAT(error_of(dir.path()), Contains(file.string()) && Contains("\"provenance\" is missing"));
  }
  SECTION("an empty file") {
    write_text(file, "");
    CHECK_THAT(error_of(dir.path()), Contains(file.string()) && Contains("malformed JSON"));
  }
}

TEST_CASE("unknown keys are ignored, as the format allows", "[results]") {
  TempDir dir;
  json document = json::parse(fits_text({FixtureSeries{}}));
  document["extra"] = {{"anything", 1}};
  document["series"][0]["future_key"] = "x";
  write_text(dir.path() / "fits.json", document.dump());
  CHECK(read_results_folder(dir.path()).series.size() == 1);
}

TEST_CASE("the local exponent a verdict reads is kept with its window and interval, or marked missing", "[results]") {
  TempDir dir;
  json document = json::parse(fits_text({FixtureSeries{}, FixtureSeries{}}));
  document["series"][0]["local_exponent"] = {{"window", {16, 32, 64}},      {"exponent", 0.98},
                                             {"sampling_half_width", 0.02}, {"systematic", 0.01},
                                             {"interval", {0.95, 1.01}},    {"missing", nullptr}};
  document["series"][0]["cross_check"] = nullptr;
  // Too few points: the writer gives the window and why there is no interval.
  document["series"][1]["local_exponent"] = {{"window", {64}}, {"missing", "one point in the window"}};
  write_text(dir.path() / "fits.json", document.dump());
  const auto series = read_results_folder(dir.path()).series;
  REQUIRE(series.size() == 2);
  REQUIRE(series[0].local_exponent);
  CHECK(series[0].local_exponent->window == std::vector<double>{16, 32, 64});
  CHECK(series[0].local_exponent->exponent == 0.98);
  REQUIRE(series[0].local_exponent->interval);
  CHECK(series[0].local_exponent->interval->first == 0.95);
  CHECK(series[0].local_exponent->interval->second == 1.01);
  CHECK_FALSE(series[0].cross_check);
  REQUIRE(series[1].local_exponent);
  CHECK_FALSE(series[1].local_exponent->exponent);
  CHECK_FALSE(series[1].local_exponent->interval);

  document["series"][0]["local_exponent"]["interval"] = {1.2, 0.9};
  write_text(dir.path() / "fits.json", document.dump());
  CHECK_THROWS_WITH(read_results_folder(dir.path()), Contains("local_exponent") && Contains("lo > hi"));
}

TEST_CASE("an atomic write leaves the whole file and no temporary", "[atomic]") {
  TempDir dir;
  const fs::path target = dir.path() / "out.txt";
  write_text(target, "old content that is longer");
  write_file_atomically(target, "new");
  CHECK(read_text(target) == "new");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
  // The file system refuses it (the folder is missing): an I/O failure, not bad input.
  CHECK_THROWS_AS(write_file_atomically(dir.path() / "missing-folder" / "x.txt", "x"), attncheck::records::IoError);
  CHECK_FALSE(fs::exists(dir.path() / "missing-folder"));
}

TEST_CASE("an atomic write never replaces a FIFO, a device or a folder with a file", "[atomic]") {
  // The rename would: as root, an output path of /dev/null once turned /dev/null into a regular file. The
  // test uses a FIFO of its own, never a real device.
  TempDir dir;
  const fs::path fifo = dir.path() / "attention.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(write_file_atomically(fifo, "x"), Catch::Contains(fifo.string() + ": is a FIFO"));
  struct stat status {};
  REQUIRE(::stat(fifo.c_str(), &status) == 0);
  CHECK(S_ISFIFO(status.st_mode));
  fs::create_directories(dir.path() / "folder");
  CHECK_THROWS_WITH(write_file_atomically(dir.path() / "folder", "x"), Catch::Contains("is a folder"));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  CHECK(files == 2);  // no temporary left
}
