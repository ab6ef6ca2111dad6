// Probe records: every type survives its JSON form unchanged, a log of the previous format version still reads,
// a future version and broken lines are refused naming the file and the line.

#include "attncheck/records/probe_record.hpp"
#include "attncheck/theory/common.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
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

// Unknown without the weights: what a record measured on scores alone holds for them once read back.
void forget_weights(ProbeHeadRecord& r) {
  r.from_scores = true;
  r.D = r.d = r.kv_head = 0;
  r.softmax.dWq = r.softmax.dWk = r.poly3_scaled.dWq = r.poly3_scaled.dWk = r.poly3.dWq = r.poly3.dWk = NAN;
  r.inner = r.dWk_group = r.sigma_x = r.sigma_t = r.iid_scores_fro = r.iid_poly3_scaled_fro = r.iid_poly3_fro = NAN;
}

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
    forget_weights(r);
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

std::string text() { return *rc::gen::container<std::string>(rc::gen::inRange<char>(1, 127)); }
std::vector<std::int64_t> ids() {
  return *rc::gen::container<std::vector<std::int64_t>>(rc::gen::inRange<std::int64_t>(0, 200000));
}
std::optional<std::vector<std::string>> tokens() {
  if (*rc::gen::arbitrary<bool>()) return std::nullopt;
  return *rc::gen::container<std::vector<std::string>>(rc::gen::container<std::string>(rc::gen::inRange<char>(1, 127)));
}

// A document as `probe --json` writes it: the keys of its input are those of its kind.
ProbeOutput probe_output() {
  using Kind = ProbeInputInfo::Kind;
  ProbeOutput out;
  out.model.path = text();
  out.model.architecture = *rc::gen::element<std::string>("BERT", "GPT-2", "Llama", "ViT", "DINOv2");
  if (*rc::gen::arbitrary<bool>()) {
    out.model.config_file = text();
    out.model.config_sha256 = text();
  }
  out.model.layers = *rc::gen::inRange(1, 100);
  out.model.heads = *rc::gen::inRange(1, 100);
  out.model.head_dim = *rc::gen::inRange(1, 256);
  out.model.hidden = *rc::gen::inRange(1, 8192);
  out.model.attention_activation = text();
  ProbeInputInfo& in = out.input;
  in.kind = static_cast<Kind>(*rc::gen::inRange(0, 6));
  switch (in.kind) {
    case Kind::text: in.text = text(); break;
    case Kind::random:
      in.seed = *rc::gen::arbitrary<std::uint64_t>();  // every 64-bit seed, beyond 2^53 too
      in.length = *rc::gen::inRange(1, 4096);
      in.sigma = norm();
      break;
    default: in.file = text(); break;
  }
  if (in.kind == Kind::text || in.kind == Kind::tokens) {
    in.token_ids = ids();
    in.tokens = tokens();
  }
  if (in.kind == Kind::pixels || in.kind == Kind::image) {
    in.height = *rc::gen::inRange(1, 1024);
    in.width = *rc::gen::inRange(1, 1024);
    if (*rc::gen::arbitrary<bool>()) in.preprocessing = text();
  }
  if (in.kind == Kind::text_file) {
    const int count = *rc::gen::inRange(2, 5);
    for (int k = 0; k < count; ++k) in.sentences.push_back({text(), ids(), tokens()});
  }
  out.tool_version = text();
  out.precision = *rc::gen::element<std::string>("double", "mixed");
  if (out.precision == "mixed") out.float_kernels = *rc::gen::element<std::string>("avx512", "portable");
  if (out.precision == "double" && *rc::gen::arbitrary<bool>()) {
    // A number finite in one precision only makes the difference infinite (null in JSON).
    const auto difference = [] { return *rc::gen::arbitrary<bool>() ? norm() : HUGE_VAL; };
    out.mixed_against_double =
        ProbePrecisionCheck{.largest = difference(),
                            .field = text(),
                            .layer = *rc::gen::inRange(0, 100),
                            .head = *rc::gen::inRange(0, 100),
                            .largest_norm = difference(),
                            .float_kernels = *rc::gen::element<std::string>("avx512", "portable")};
  }
  out.verdict.holds = *rc::gen::arbitrary<bool>();
  out.verdict.statement = text();
  const int above = *rc::gen::inRange(0, 3);
  for (int k = 0; k < above; ++k) {
    out.verdict.heads_above_a_bound.push_back(
        {in.kind == Kind::text_file ? std::optional<std::int64_t>(k + 1) : std::nullopt, *rc::gen::inRange(0, 100),
         *rc::gen::inRange(0, 100)});
  }
  const int rows = *rc::gen::inRange(1, 4);
  for (int k = 0; k < rows; ++k) {
    ProbeOutputRow row{head_record(), std::nullopt};
    if (in.kind == Kind::text_file) {
      // Means of N over sentences of different lengths, and the standard errors of every number.
      ProbeHeadRecord errors = head_record();
      if (row.metrics.from_scores) forget_weights(errors);
      errors.from_scores = row.metrics.from_scores;
      errors.cross_norm.reset();
      if (row.metrics.cross_norm) {
        ProbeCrossNorm cross{row.metrics.cross_norm->d_v, norm(), norm(), {}};
        for (double mix : kCrossNormMixes) cross.mixes.push_back({mix, norm(), norm()});
        errors.cross_norm = cross;
      }
      row.metrics.N = *rc::gen::inRange(2, 1000);
      row.over_sentences = ProbeSentenceMeans{static_cast<std::int64_t>(in.sentences.size()),
                                              static_cast<double>(row.metrics.N) + 0.25, norm(), errors};
    }
    out.heads.push_back(row);
  }
  return out;
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

// The numbers a standard-error object holds: every number of the head but its shapes.
bool same_numbers(const ProbeHeadRecord& a, const ProbeHeadRecord& b) {
  ProbeHeadRecord x = a, y = b;
  x.layer = y.layer = x.head = y.head = x.N = y.N = x.D = y.D = x.d = y.d = x.kv_head = y.kv_head = 0;
  x.causal = y.causal = std::nullopt;
  return same(x, y);
}

bool same(const ProbeOutput& a, const ProbeOutput& b) {
  const auto &m = a.model, &n = b.model;
  if (m.path != n.path || m.architecture != n.architecture || m.config_file != n.config_file ||
      m.config_sha256 != n.config_sha256 || m.layers != n.layers || m.heads != n.heads || m.head_dim != n.head_dim ||
      m.hidden != n.hidden || m.attention_activation != n.attention_activation) {
    return false;
  }
  const auto &i = a.input, &j = b.input;
  if (i.kind != j.kind || i.text != j.text || i.file != j.file || i.seed != j.seed || i.length != j.length ||
      i.sigma != j.sigma || i.token_ids != j.token_ids || i.tokens != j.tokens || i.height != j.height ||
      i.width != j.width || i.preprocessing != j.preprocessing || i.sentences.size() != j.sentences.size()) {
    return false;
  }
  for (std::size_t k = 0; k < i.sentences.size(); ++k) {
    if (i.sentences[k].text != j.sentences[k].text || i.sentences[k].token_ids != j.sentences[k].token_ids ||
        i.sentences[k].tokens != j.sentences[k].tokens) {
      return false;
    }
  }
  const auto same_check = [](const std::optional<ProbePrecisionCheck>& x, const std::optional<ProbePrecisionCheck>& y) {
    if (!x || !y) return x.has_value() == y.has_value();
    return x->largest == y->largest && x->field == y->field && x->layer == y->layer && x->head == y->head &&
           x->largest_norm == y->largest_norm && x->float_kernels == y->float_kernels;
  };
  if (a.precision != b.precision || a.float_kernels != b.float_kernels ||
      !same_check(a.mixed_against_double, b.mixed_against_double)) {
    return false;
  }
  if (a.tool_version != b.tool_version || a.verdict.holds != b.verdict.holds ||
      a.verdict.statement != b.verdict.statement ||
      a.verdict.heads_above_a_bound.size() != b.verdict.heads_above_a_bound.size() ||
      a.heads.size() != b.heads.size()) {
    return false;
  }
  for (std::size_t k = 0; k < a.verdict.heads_above_a_bound.size(); ++k) {
    const auto &x = a.verdict.heads_above_a_bound[k], &y = b.verdict.heads_above_a_bound[k];
    if (x.sentence != y.sentence || x.layer != y.layer || x.head != y.head) return false;
  }
  for (std::size_t k = 0; k < a.heads.size(); ++k) {
    const auto &x = a.heads[k], &y = b.heads[k];
    if (!same(x.metrics, y.metrics) || x.over_sentences.has_value() != y.over_sentences.has_value()) return false;
    if (x.over_sentences) {
      const auto &s = *x.over_sentences, &t = *y.over_sentences;
      if (s.sentences != t.sentences || !same(s.N, t.N) || !same(s.N_standard_error, t.N_standard_error) ||
          !same_numbers(s.standard_error, t.standard_error)) {
        return false;
      }
    }
  }
  return true;
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
    if (*rc::gen::arbitrary<bool>())
      r.activation = *rc::gen::element<std::string>("softmax", "poly3_scaled", "poly3", "relu_n");
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

TEST_CASE("a probe --json document survives its JSON text unchanged, for every kind of input", "[records][probes]") {
  rc::prop("probe_output_from_json(to_json(d)) == d", [] {
    const ProbeOutput document = probe_output();
    const json text = json::parse(to_json(document).dump(1));
    RC_ASSERT(text["format_version"] == kProbeFormatVersion);
    RC_ASSERT(text["verdict"]["basis"] == "exact");
    RC_ASSERT(same(probe_output_from_json(text, "probe.json"), document));
  });
}

TEST_CASE("a --text-file row keeps its fractional mean N, shapes exact and the standard errors beside",
          "[records][probes]") {
  std::vector<double> means = probe_head_values(ProbeHeadRecord{});
  const auto columns = probe_head_columns(false);
  const auto at = [&](const char* key) {
    return static_cast<std::size_t>(std::find(columns.begin(), columns.end(), key) - columns.begin());
  };
  means[at("N")] = 6.5;
  means[at("D")] = 64;
  means[at("softmax_fro")] = 1.75;
  means[at("grad_fro")] = 0.5;
  means[at("causal")] = 1;
  ProbeOutput document;
  document.model.architecture = "BERT";
  document.input.kind = ProbeInputInfo::Kind::text_file;
  document.input.sentences = {{"a b", {1, 2}, std::nullopt}, {"c", {3}, std::nullopt}};
  ProbeHeadRecord errors;
  errors.softmax.value = 0.125;
  document.heads.push_back({probe_head_from_values(means, false), ProbeSentenceMeans{2, 6.5, 0.5, errors}});
  const json written = to_json(document);
  const json& row = written["heads"][0];
  CHECK(row["N"] == 6.5);
  CHECK(row["D"] == 64);
  CHECK(row["causal"] == true);
  CHECK(row["sentences"] == 2);
  CHECK(row["standard_error"]["softmax_fro"] == 0.125);
  CHECK(row["standard_error"]["N"] == 0.5);
  CHECK_FALSE(row["standard_error"].contains("D"));  // a shape, the same in every sentence
  const ProbeOutput back = probe_output_from_json(written, "probe.json");
  CHECK(back.heads[0].over_sentences->N == 6.5);
  CHECK(back.heads[0].metrics.N == 7);  // the nearest whole number of positions
  CHECK(back.heads[0].metrics.softmax.value == 1.75);
  json no_errors = written;
  no_errors["heads"][0].erase("standard_error");
  CHECK_THROWS_WITH(probe_output_from_json(no_errors, "probe.json"),
                    Contains("probe.json heads[0]") && Contains("\"standard_error\" is missing"));
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
  const ProbeOutput document = probe_output_from_json(output, "probe-output.json");
  CHECK(document.model.architecture == "BERT");
  CHECK(document.input.kind == ProbeInputInfo::Kind::random);
  CHECK(document.input.length == 5);
  CHECK(document.verdict.holds);
  REQUIRE(document.heads.size() == 2);
  CHECK(
      same(document.heads[0].metrics, read[0].metrics));  // the same checkpoint, input and head as the log's first line
  CHECK(same(document.heads[1].metrics, read[1].metrics));
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

TEST_CASE("a truncated or corrupt probe-log line is refused, naming the file and the line",
          "[records][probes][hostile]") {
  const std::string good = sample_line();
  SECTION("cut short, as by a crash during a write") {
    const ScratchFile file(good + good + good.substr(0, good.size() / 2));
    CHECK_THROWS_AS(read_probe_log(file.path), InputError);
    CHECK_THROWS_WITH(read_probe_log(file.path),
                      Contains(file.path.string() + " line 3") && Contains("malformed JSON"));
    // A reader that can warn skips that last line, and says so.
    std::vector<std::string> warnings;
    const auto read = read_probe_log(file.path, [&](const std::string& text) { warnings.push_back(text); });
    CHECK(read.size() == 2);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Contains(file.path.string() + " line 3") && Contains("skipped"));
    // Only the last line, and only without its newline: anywhere else a malformed line is refused.
    const auto warn = [](const std::string&) {};
    CHECK_THROWS_WITH(parse_probe_log(good + good.substr(0, 20) + "\n" + good, "log.jsonl", warn),
                      Contains("log.jsonl line 2"));
    CHECK_THROWS_WITH(parse_probe_log(good + good.substr(0, 20) + "\n", "log.jsonl", warn),
                      Contains("log.jsonl line 2"));
  }
  SECTION("bytes that are not JSON") {
    const ScratchFile file(good + "\x01\xff garbage\n" + good);
    CHECK_THROWS_WITH(read_probe_log(file.path),
                      Contains(file.path.string() + " line 2") && Contains("malformed JSON"));
  }
  SECTION("JSON that is not a record") {
    CHECK_THROWS_WITH(parse_probe_log(good + "[1, 2]\n", "log.jsonl"),
                      Contains("log.jsonl line 2") && Contains("expected a JSON object"));
    json wrong = json::parse(good);
    wrong["N"] = 0;
    CHECK_THROWS_WITH(parse_probe_log(wrong.dump(), "log.jsonl"),
                      Contains("log.jsonl line 1") && Contains("\"N\" = 0"));
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
