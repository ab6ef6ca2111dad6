// Probe records: every type survives its JSON form unchanged, a log of the previous format version still reads,
// a future version and broken lines are refused naming the file and the line.

#include "attncheck/records/probe_record.hpp"
#include "attncheck/theory/common.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace attncheck::records;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kData = ATTNCHECK_RECORDS_DATA;

// A norm as a probe measures it: non-negative, over many orders of magnitude (x^3 of large scores is huge).
double norm() { return *rc::gen::inRange(0, 1000000) / 1000.0 * std::pow(10.0, *rc::gen::inRange(-6, 7)); }
double signed_number() { return *rc::gen::inRange(-1000000, 1000000) / 997.0; }

ProbeNorms norms() { return {norm(), norm(), norm(), norm()}; }

ProbeHeadRecord head_record() {
  ProbeHeadRecord r;
  r.layer = *rc::gen::inRange(0, 200);
  r.head = *rc::gen::inRange(0, 128);
  r.N = *rc::gen::inRange(1, 1 << 20);
  r.causal = *rc::gen::arbitrary<bool>();
  r.from_scores = *rc::gen::arbitrary<bool>();
  r.softmax = norms();
  r.sqrt_n = norm();
  r.softmax_over_sqrt_n = norm();
  r.grad_over_2sqrt_n = norm();
  r.grad_over_half_sqrt_n = norm();
  r.score_mean = signed_number();
  r.score_std = norm();
  r.score_max_abs = norm();
  r.scores_fro = norm();
  r.linear_scaled = {norm(), norm(), 0, 0};  // no weight Jacobians recorded for these two
  r.relu_n = {norm(), norm(), 0, 0};
  r.poly3_scaled = norms();
  r.poly3 = norms();
  if (r.from_scores) {
    // Unknown without the weights: what a record read back holds for them.
    r.softmax.dWq = r.softmax.dWk = r.poly3_scaled.dWq = r.poly3_scaled.dWk = r.poly3.dWq = r.poly3.dWk = NAN;
    r.inner = r.dWk_group = r.sigma_x = r.sigma_t = r.iid_scores_fro = r.iid_poly3_scaled_fro = r.iid_poly3_fro = NAN;
  } else {
    r.D = *rc::gen::inRange(1, 8192);
    r.d = *rc::gen::inRange(1, 512);
    r.kv_head = *rc::gen::inRange(0, 128);
    r.inner = norm();
    r.dWk_group = norm();
    r.sigma_x = norm();
    r.sigma_t = norm();
    r.iid_scores_fro = norm();
    r.iid_poly3_scaled_fro = norm();
    r.iid_poly3_fro = norm();
  }
  if (*rc::gen::arbitrary<bool>()) {
    ProbeCrossNorm cross{*rc::gen::inRange(1, 512), norm(), norm(), {}};
    for (double mix : kCrossNormMixes) cross.mixes.push_back({mix, norm(), norm()});
    r.cross_norm = cross;
  }
  return r;
}

// Equal, with NaN ("not recorded") equal to NaN.
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
bool same(const ProbeNorms& a, const ProbeNorms& b) {
  return same(a.value, b.value) && same(a.grad, b.grad) && same(a.dWq, b.dWq) && same(a.dWk, b.dWk);
}
bool same(const ProbeHeadRecord& a, const ProbeHeadRecord& b) {
  bool cross = a.cross_norm.has_value() == b.cross_norm.has_value();
  if (cross && a.cross_norm) {
    cross = a.cross_norm->d_v == b.cross_norm->d_v && same(a.cross_norm->output_bound, b.cross_norm->output_bound) &&
            same(a.cross_norm->grad_values_bound, b.cross_norm->grad_values_bound) &&
            a.cross_norm->mixes.size() == b.cross_norm->mixes.size();
    for (std::size_t i = 0; cross && i < a.cross_norm->mixes.size(); ++i) {
      const auto &x = a.cross_norm->mixes[i], &y = b.cross_norm->mixes[i];
      cross = x.mix == y.mix && same(x.output_fro, y.output_fro) && same(x.grad_values_fro, y.grad_values_fro);
    }
  }
  return cross && a.layer == b.layer && a.head == b.head && a.N == b.N && a.causal == b.causal &&
         a.from_scores == b.from_scores && a.D == b.D && a.d == b.d && a.kv_head == b.kv_head &&
         same(a.inner, b.inner) && same(a.dWk_group, b.dWk_group) && same(a.sigma_x, b.sigma_x) &&
         same(a.sigma_t, b.sigma_t) && same(a.iid_scores_fro, b.iid_scores_fro) &&
         same(a.iid_poly3_scaled_fro, b.iid_poly3_scaled_fro) && same(a.iid_poly3_fro, b.iid_poly3_fro) &&
         same(a.softmax, b.softmax) && same(a.sqrt_n, b.sqrt_n) && same(a.softmax_over_sqrt_n, b.softmax_over_sqrt_n) &&
         same(a.grad_over_2sqrt_n, b.grad_over_2sqrt_n) && same(a.grad_over_half_sqrt_n, b.grad_over_half_sqrt_n) &&
         same(a.score_mean, b.score_mean) && same(a.score_std, b.score_std) && same(a.score_max_abs, b.score_max_abs) &&
         same(a.scores_fro, b.scores_fro) && same(a.linear_scaled, b.linear_scaled) &&
         same(a.poly3_scaled, b.poly3_scaled) && same(a.poly3, b.poly3) && same(a.relu_n, b.relu_n);
}

// A file of `text` that is removed with the object.
struct ScratchFile {
  fs::path path;
  explicit ScratchFile(const std::string& text)
      : path(fs::temp_directory_path() / fmt::format("attncheck-probe-record-{}.jsonl", ::getpid())) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~ScratchFile() { fs::remove(path); }
};

std::string sample_line() {
  ProbeRecord record;
  record.checkpoint = "step-100.safetensors";
  record.step = 100;
  record.activation = "softmax";
  record.metrics.N = 8;
  record.metrics.softmax = {2.0, 0.5, 1.0, 1.0};
  return probe_log_line(record);
}

}  // namespace

TEST_CASE("a head record survives its JSON text unchanged", "[records][probes]") {
  rc::prop("probe_head_from_json(to_json(r)) == r", [] {
    const ProbeHeadRecord r = head_record();
    const json text = json::parse(to_json(r).dump());
    RC_ASSERT(text.contains("D") == !r.from_scores);
    RC_ASSERT(same(probe_head_from_json(text, "row"), r));
  });
}

TEST_CASE("a probe-log record survives its line unchanged, with the format version", "[records][probes]") {
  rc::prop("parse_probe_log(probe_log_line(r)) == r", [] {
    ProbeRecord r;
    // Any text, control characters and quotes included (a file name that is not UTF-8 is refused, below).
    r.checkpoint = *rc::gen::container<std::string>(rc::gen::inRange<char>(1, 127));
    if (*rc::gen::arbitrary<bool>()) r.step = *rc::gen::inRange<std::int64_t>(0, std::int64_t{1} << 62);
    if (*rc::gen::arbitrary<bool>()) r.activation = *rc::gen::element<std::string>("softmax", "poly3_scaled", "poly3", "relu_n");
    if (*rc::gen::arbitrary<bool>()) r.fingerprint = *rc::gen::container<std::string>(rc::gen::inRange<char>(1, 127));
    r.metrics = head_record();
    const std::string line = probe_log_line(r);
    RC_ASSERT(line.back() == '\n');
    RC_ASSERT(line.find('\n') == line.size() - 1);  // one line, whatever the checkpoint's name holds
    RC_ASSERT(json::parse(line)["format_version"] == kProbeFormatVersion);
    const std::vector<ProbeRecord> read = parse_probe_log(line + line, "log.jsonl");
    RC_ASSERT(read.size() == 2u);
    const ProbeRecord& back = read[1];
    RC_ASSERT(back.line == 2);
    RC_ASSERT(back.checkpoint == r.checkpoint);
    RC_ASSERT(back.step == r.step);
    RC_ASSERT(back.activation == r.activation);
    RC_ASSERT(back.fingerprint == r.fingerprint);
    RC_ASSERT(same(back.metrics, r.metrics));
  });
}

TEST_CASE("a checkpoint whose name is not UTF-8 is refused by name, not written as broken JSON", "[records][probes]") {
  ProbeRecord r;
  r.checkpoint = "step-\xff.safetensors";
  r.metrics.N = 4;
  CHECK_THROWS_AS(probe_log_line(r), InputError);
  CHECK_THROWS_WITH(probe_log_line(r), Contains("step-") && Contains("not UTF-8"));
}

TEST_CASE("a value that is not finite is written null and reads back as not recorded", "[records][probes]") {
  ProbeHeadRecord r;
  r.N = 4;
  r.softmax = {1.5, 0.25, 1, 1};
  r.poly3.value = INFINITY;
  r.poly3_scaled.grad = NAN;
  const json j = to_json(r);
  CHECK(j["poly3_fro"].is_null());
  CHECK(j["poly3_scaled_grad_fro"].is_null());
  const ProbeHeadRecord back = probe_head_from_json(json::parse(j.dump()), "row");
  CHECK(std::isnan(back.poly3.value));
  CHECK_FALSE(back.value(ProbeQuantity::poly3).has_value());
  CHECK_FALSE(back.value(ProbeQuantity::poly3_scaled_grad).has_value());
  CHECK(back.value(ProbeQuantity::softmax) == 1.5);
  // The CSV columns and values line up, the what-if columns last.
  CHECK(probe_head_columns(false).size() == probe_head_values(back).size());
  r.cross_norm = ProbeCrossNorm{2, 1, 0.5, {{0, 1, 1}, {0.5, 1, 1}, {1, 1, 1}}};
  CHECK(probe_head_columns(true).size() == probe_head_values(r).size());
  CHECK(probe_head_columns(true).back() == "dV_fro_mix1");
}

TEST_CASE("a probe log of format version 1 (no version key) from a run of the previous release reads",
          "[records][probes]") {
  // tests/records/data/probe-log-v1: `attncheck probe --watch RUN --random --length 5 --layers 0,1 --heads 0,1`
  // over two copies of the tiny BERT as step-100 and step-200, and `probe step-100 ... --layers 0 --json`.
  const fs::path log = kData / "probe-log-v1" / "attncheck-probe.jsonl";
  const std::vector<ProbeRecord> read = read_probe_log(log);
  REQUIRE(read.size() == 8);
  for (const ProbeRecord& r : read) {
    CHECK(r.activation == "softmax");
    CHECK(r.fingerprint.has_value());
    CHECK(r.metrics.N == 5);
    CHECK(r.metrics.causal == false);
    CHECK_FALSE(r.metrics.from_scores);
    CHECK(r.metrics.D == 16);
    // Theorem 4.1 holds on every head, and the ratios written agree with the norms.
    CHECK(r.metrics.softmax.value <= std::sqrt(5.0));
    CHECK(r.metrics.softmax_over_sqrt_n == Approx(r.metrics.softmax.value / std::sqrt(5.0)).epsilon(1e-12));
    CHECK(r.metrics.grad_over_half_sqrt_n == Approx(r.metrics.softmax.grad / (std::sqrt(5.0) / 2)).epsilon(1e-12));
  }
  CHECK(read.front().step == 100);
  CHECK(read.back().step == 200);
  CHECK(read.back().metrics.layer == 1);
  CHECK(read.back().metrics.head == 1);
  // The same record written now carries the version and reads back the same.
  const ProbeRecord again = parse_probe_log(probe_log_line(read[3]), "again.jsonl").front();
  CHECK(same(again.metrics, read[3].metrics));
  CHECK(again.fingerprint == read[3].fingerprint);

  const json output = json::parse(std::ifstream(kData / "probe-log-v1" / "probe-output.json"));
  CHECK(probe_format_version(output, "probe-output.json") == 1);
  const ProbeHeadRecord first_head = probe_head_from_json(output["heads"][0], "probe-output.json heads[0]");
  CHECK(same(first_head, read[0].metrics));  // the same checkpoint, input and head as the log's first line
}

TEST_CASE("a probe record of a newer format version is refused, naming the file, the line and the version",
          "[records][probes][hostile]") {
  json future = json::parse(sample_line());
  future["format_version"] = kProbeFormatVersion + 1;
  const ScratchFile file(sample_line() + future.dump() + "\n");
  CHECK_THROWS_WITH(read_probe_log(file.path),
                    Contains(file.path.string() + " line 2") &&
                        Contains(fmt::format("\"format_version\" = {}", kProbeFormatVersion + 1)) &&
                        Contains("newer attncheck"));
  future["format_version"] = 0;
  CHECK_THROWS_WITH(parse_probe_log(future.dump(), "log.jsonl"), Contains("log.jsonl line 1") && Contains("= 0"));
  CHECK_THROWS_WITH(probe_format_version(json{{"format_version", "2"}}, "out.json"),
                    Contains("out.json") && Contains("\"format_version\" must be a whole number"));
}

TEST_CASE("a truncated or corrupt probe-log line is refused, naming the file and the line", "[records][probes][hostile]") {
  const std::string good = sample_line();
  SECTION("cut short, as by a crash during a write") {
    const ScratchFile file(good + good + good.substr(0, good.size() / 2));
    CHECK_THROWS_AS(read_probe_log(file.path), InputError);
    CHECK_THROWS_WITH(read_probe_log(file.path), Contains(file.path.string() + " line 3") && Contains("malformed JSON"));
  }
  SECTION("bytes that are not JSON") {
    const ScratchFile file(good + "\x01\xff garbage\n" + good);
    CHECK_THROWS_WITH(read_probe_log(file.path), Contains(file.path.string() + " line 2") && Contains("malformed JSON"));
  }
  SECTION("JSON that is not a record") {
    CHECK_THROWS_WITH(parse_probe_log(good + "[1, 2]\n", "log.jsonl"),
                      Contains("log.jsonl line 2") && Contains("expected a JSON object"));
    json wrong = json::parse(good);
    wrong["N"] = 0;
    CHECK_THROWS_WITH(parse_probe_log(wrong.dump(), "log.jsonl"), Contains("log.jsonl line 1") && Contains("\"N\" = 0"));
    wrong = json::parse(good);
    wrong["layer"] = 1.5;
    CHECK_THROWS_WITH(parse_probe_log(wrong.dump(), "log.jsonl"),
                      Contains("log.jsonl line 1") && Contains("\"layer\" must be a whole number"));
    wrong = json::parse(good);
    wrong["out_fro_mixhalf"] = 1.0;
    wrong["d_v"] = 2;
    wrong["cross_norm_out_bound"] = 2.0;
    wrong["cross_norm_dV_bound"] = 0.5;
    CHECK_THROWS_WITH(parse_probe_log(wrong.dump(), "log.jsonl"), Contains("\"out_fro_mixhalf\" names no mix alpha"));
  }
}
