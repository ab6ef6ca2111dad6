// Layer x head maps from `attncheck probe --json`, and runs compared in one report: the cells hold the right
// values, one activation has one colour everywhere, the band spans the true min and max over heads.

#include "attncheck/reports/head_maps.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/records/sha256.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

using namespace attncheck::reports;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

namespace {

// Distinct values, so that a value in a wrong cell (a transposed or shifted map) is caught.
double attention_ratio(int layer, int head) { return 0.1 + 0.2 * layer + 0.01 * head; }
double gradient_ratio(int layer, int head) { return 0.05 + 0.1 * layer + 0.003 * head; }

const std::string kConfigSha = std::string(64, 'a');

// A probe --json document of `layers` x `heads` heads, written in a scrambled order.
json probe_document(int layers, int heads, const std::string& model_path = "models/tiny",
                    const std::string& token = "hello") {
  json rows = json::array();
  for (int head = heads - 1; head >= 0; --head) {
    for (int layer = 0; layer < layers; ++layer) {
      const double n = 16;
      rows.push_back({{"layer", layer},
                      {"head", head},
                      {"N", n},
                      {"softmax_fro", attention_ratio(layer, head) * 4},
                      {"grad_fro", gradient_ratio(layer, head) * 2},
                      {"softmax_over_sqrt_N", attention_ratio(layer, head)},
                      {"grad_over_half_sqrt_N", gradient_ratio(layer, head)}});
    }
  }
  return {{"model",
           {{"path", model_path},
            {"architecture", "BERT"},
            {"config_file", model_path + "/config.json"},
            {"config_sha256", kConfigSha},
            {"layers", layers},
            {"heads", heads},
            {"head_dim", 8},
            {"hidden", 8 * heads},
            {"attention_activation", "softmax"}}},
          {"input",
           {{"kind", "text"},
            {"text", "hello world"},
            {"token_ids", {101, 7592, 102}},
            {"tokens", {"[CLS]", token, "[SEP]"}}}},
          {"tool", {{"name", "attncheck"}, {"version", "0.1.0"}}},
          {"verdict",
           {{"holds", true},
            {"basis", "exact"},
            {"statement", "every head within the bounds"},
            {"heads_above_a_bound", json::array()}}},
          {"heads", rows}};
}

// The rows of the data block `name` in a gnuplot script, each split into numbers.
std::vector<std::vector<double>> data_block(const std::string& script, const std::string& name) {
  const auto start = script.find(name + " << EOD\n");
  REQUIRE(start != std::string::npos);
  const auto body = start + name.size() + 8;
  std::istringstream lines(script.substr(body, script.find("EOD\n", body) - body));
  std::vector<std::vector<double>> rows;
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream cells(line);
    std::vector<double> row;
    std::string cell;
    while (cells >> cell) row.push_back(cell == "NaN" ? std::nan("") : std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

json probe_line(const std::string& activation, long long step, int layer, int head, double softmax, double grad) {
  return {{"checkpoint", fmt::format("{}-{}.safetensors", activation, step)},
          {"step", step},
          {"layer", layer},
          {"head", head},
          {"N", 64},
          {"softmax_fro", softmax},
          {"grad_fro", grad},
          {"dWq_fro", 1.0},
          {"dWk_fro", 1.0},
          {"poly3_scaled_fro", 3 * softmax},
          {"poly3_scaled_grad_fro", 3 * grad},
          {"activation", activation}};
}

void write_log(const fs::path& log, const std::vector<json>& lines) {
  fs::create_directories(log.parent_path());
  std::string text;
  for (const json& line : lines) text += line.dump() + "\n";
  write_text(log, text);
}

}  // namespace

TEST_CASE("a probe --json output gives both layer x head maps with each ratio in its cell", "[head_maps][report]") {
  TempDir dir;
  const fs::path file = dir.path() / "probe.json";
  const std::string text = probe_document(3, 4).dump(1);
  write_text(file, text);
  ReportOptions options;
  options.input = file;
  options.out = dir.path() / "report";
  const ReportSummary summary = write_report(options);
  CHECK(summary.probe_outputs == 1);
  CHECK(summary.plots == 1);
  const std::string script = read_text(options.out / "plots" / "plots.gp");
  // Left panel ||A||_F / sqrt(N), right panel ||dA/dS||_F / (sqrt(N)/2): row = layer, column = head.
  const auto attention = data_block(script, "$plot0_panel0_matrix");
  const auto gradient = data_block(script, "$plot0_panel1_matrix");
  REQUIRE(attention.size() == 3);
  REQUIRE(gradient.size() == 3);
  for (int layer = 0; layer < 3; ++layer) {
    REQUIRE(attention[layer].size() == 4);
    REQUIRE(gradient[layer].size() == 4);
    for (int head = 0; head < 4; ++head) {
      CHECK(attention[layer][head] == Approx(attention_ratio(layer, head)).epsilon(1e-15));
      CHECK(gradient[layer][head] == Approx(gradient_ratio(layer, head)).epsilon(1e-15));
    }
  }
  // One colour scale for both maps, from 0 to the bound at 1, which is marked and the bar labelled.
  CHECK(count_occurrences(script, "set cbrange [0:1]\n") == 4);  // two panels, SVG and PNG
  CHECK(count_occurrences(script, "set cbtics add ('1 = bound' 1)") == 4);
  CHECK_THAT(script, Contains("set cblabel 'ratio to the bound (1 = the bound)' noenhanced"));
  // The provenance is printed with the maps: on the figure and in the report.
  CHECK_THAT(script, Contains("config sha256 " + kConfigSha));
  const std::string markdown = read_text(options.out / "report.md");
  CHECK_THAT(markdown, Contains("- config sha256: `" + kConfigSha + "`"));
  CHECK_THAT(markdown, Contains("- probe output sha256: `" + attncheck::records::sha256_hex(text) + "`"));
  CHECK_THAT(markdown, Contains("- model: `models/tiny`"));
  CHECK_THAT(markdown, Contains("- tokens: `[CLS] hello [SEP]`"));
  // The tables hold the same values: layer 2, heads 0..3.
  CHECK_THAT(markdown, Contains("| 2 | 0.5 | 0.51 | 0.52 | 0.53 |"));
  CHECK_THAT(markdown, Contains("| 2 | 0.25 | 0.253 | 0.256 | 0.259 |"));
  CHECK(fs::file_size(options.out / "plots" / "head-map-1.png") > 0);
}

TEST_CASE("head maps leave unmeasured heads blank and refuse a head given twice", "[head_maps]") {
  const HeadMaps maps = head_maps({{3, 1, 0.5, 0.25}, {0, 2, 0.75, 0.125}}, "probe.json");
  CHECK(maps.layers == std::vector<long long>{0, 3});
  CHECK(maps.heads == std::vector<long long>{1, 2});
  CHECK(std::isnan(maps.attention[0]));  // layer 0 head 1
  CHECK(maps.attention[1] == 0.75);      // layer 0 head 2
  CHECK(maps.attention[2] == 0.5);       // layer 3 head 1
  CHECK(maps.gradient[2] == 0.25);
  CHECK(std::isnan(maps.attention[3]));
  CHECK_THROWS_WITH(head_maps({{1, 1, 0.5, 0.5}, {1, 1, 0.5, 0.5}}, "probe.json"),
                    Contains("probe.json: layer 1 head 1 comes twice"));
  // The rows are labelled by their layers, 0 and 3, not by their places.
  const PlotSpec figure = head_map_figure("f", "t", {}, maps);
  CHECK(figure.panels.at(0).heat_map->row_labels == std::vector<std::string>{"0", "3"});
  CHECK(figure.panels.at(0).heat_map->column_labels == std::vector<std::string>{"1", "2"});
}

TEST_CASE("hostile model paths and tokens in a probe --json output reach gnuplot and HTML only as text",
          "[head_maps][hostile]") {
  TempDir dir;
  const fs::path marker = dir.path() / "executed";
  const std::string payload = "x\nsystem('touch " + marker.string() + "')\n<script>alert(1)</script> E^{up}";
  const fs::path file = dir.path() / "probe.json";
  write_text(file, probe_document(2, 2, payload, payload).dump());
  ReportOptions options;
  options.input = file;
  options.out = dir.path() / "report";
  write_report(options);  // runs gnuplot
  CHECK_FALSE(fs::exists(marker));
  const std::string script = read_text(options.out / "plots" / "plots.gp");
  std::istringstream lines(script);
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.rfind("system", 0) == std::string::npos);
    if (line.rfind("#", 0) != 0 && line.find("touch") != std::string::npos) CHECK_THAT(line, Contains("noenhanced"));
  }
  const std::string html = read_text(options.out / "index.html");
  CHECK_THAT(html, !Contains("<script>"));
  CHECK_THAT(html, Contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
  const std::string markdown = read_text(options.out / "report.md");
  std::istringstream md(markdown);
  while (std::getline(md, line)) {
    INFO(line);
    // Raw markup only inside the code spans of "- name: `value`" lines.
    if (line.find("<script>") != std::string::npos) CHECK(line.find(": `") < line.find("<script>"));
  }
}

TEST_CASE("a probe --json output that is not one is refused naming the file and the key", "[head_maps][errors]") {
  json no_heads = probe_document(1, 1);
  no_heads.erase("heads");
  CHECK_THROWS_WITH(parse_probe_output(no_heads.dump(), "p.json"),
                    Contains("p.json") && Contains("\"heads\" is missing"));
  json empty = probe_document(1, 1);
  empty["heads"] = json::array();
  CHECK_THROWS_WITH(parse_probe_output(empty.dump(), "p.json"), Contains("p.json") && Contains("\"heads\" is empty"));
  json bad_ratio = probe_document(1, 2);
  bad_ratio["heads"][1]["softmax_over_sqrt_N"] = "high";
  CHECK_THROWS_WITH(parse_probe_output(bad_ratio.dump(), "p.json"),
                    Contains("p.json heads[1]") && Contains("\"softmax_over_sqrt_N\" must be a number"));
  CHECK_THROWS_WITH(parse_probe_output("{\"model\": ", "p.json"), Contains("p.json line 1 column 11: malformed JSON"));
  // Output of attncheck before the version key (version 1) and of this one read; a newer version does not.
  json versioned = probe_document(1, 1);
  CHECK_NOTHROW(parse_probe_output(versioned.dump(), "p.json"));
  versioned["format_version"] = attncheck::records::kProbeFormatVersion;
  CHECK(parse_probe_output(versioned.dump(), "p.json").heads.size() == 1);
  versioned["format_version"] = attncheck::records::kProbeFormatVersion + 1;
  CHECK_THROWS_WITH(parse_probe_output(versioned.dump(), "p.json"),
                    Contains("p.json") && Contains("\"format_version\" = 3") && Contains("newer attncheck"));
}

TEST_CASE("a probe log's first and last checkpoints are drawn as layer x head maps", "[head_maps][probes]") {
  TempDir dir;
  const fs::path log = dir.path() / "run" / kProbeLogName;
  // sqrt(N) = 8: softmax_fro 4 is a ratio of 0.5, grad_fro 2 a ratio of 2 / 4 = 0.5.
  write_log(log, {probe_line("softmax", 0, 0, 0, 4, 2), probe_line("softmax", 0, 0, 1, 2, 1),
                  probe_line("softmax", 50, 0, 0, 1, 1), probe_line("softmax", 50, 0, 1, 1, 1),
                  probe_line("softmax", 100, 0, 0, 8, 0.4), probe_line("softmax", 100, 0, 1, 6, 3.2)});
  ReportOptions options;
  options.input = log.parent_path();
  options.out = dir.path() / "report";
  write_report(options);
  const std::string script = read_text(options.out / "plots" / "plots.gp");
  CHECK_THAT(script, Contains("checkpoint softmax-0.safetensors (step 0)"));
  CHECK_THAT(script, Contains("checkpoint softmax-100.safetensors (step 100)"));
  CHECK_THAT(script, !Contains("softmax-50.safetensors (step 50)"));
  CHECK(fs::exists(options.out / "plots" / "probe-model1-heads-first.svg"));
  CHECK(fs::exists(options.out / "plots" / "probe-model1-heads-last.png"));
  // Each figure is one plot of the report; find the last one's panels by its name's position.
  const auto last = script.find("# trained with softmax: softmax norms per head", script.find("heads-first.svg"));
  REQUIRE(last != std::string::npos);
  const std::string last_script = script.substr(last);
  const auto matrix_name = [&](int panel) {
    const std::smatch found = [&] {
      std::smatch m;
      const std::regex pattern(fmt::format("(\\$plot[0-9]+_panel{}_matrix) << EOD", panel));
      REQUIRE(std::regex_search(last_script, m, pattern));
      return m;
    }();
    return found[1].str();
  };
  const auto attention = data_block(last_script, matrix_name(0));
  const auto gradient = data_block(last_script, matrix_name(1));
  REQUIRE(attention.size() == 1);
  CHECK(attention[0] == std::vector<double>{1.0, 0.75});
  CHECK(gradient[0] == std::vector<double>{0.1, 0.8});
}

TEST_CASE(
    "runs compared: each run one colour in the figures of all models, each activation one colour elsewhere, "
    "and the band is the min and max over heads",
    "[head_maps][probes][compare]") {
  TempDir dir;
  const fs::path a = dir.path() / "softmax-run" / kProbeLogName, b = dir.path() / "cubic-run" / kProbeLogName,
                 c = dir.path() / "softmax-again" / kProbeLogName;
  // Four heads per checkpoint; at step 10 of the first run ||A||_F is 1, 7, 3, 5: mean 4, min 1, max 7.
  write_log(a, {probe_line("softmax", 10, 0, 0, 1, 0.5), probe_line("softmax", 10, 0, 1, 7, 0.25),
                probe_line("softmax", 10, 1, 0, 3, 2), probe_line("softmax", 10, 1, 1, 5, 1.25),
                probe_line("softmax", 20, 0, 0, 2, 1), probe_line("softmax", 20, 0, 1, 2, 1),
                probe_line("softmax", 20, 1, 0, 2, 1), probe_line("softmax", 20, 1, 1, 6, 1)});
  write_log(b, {probe_line("poly3_scaled", 10, 0, 0, 4, 1), probe_line("poly3_scaled", 20, 0, 0, 3, 1)});
  write_log(c, {probe_line("softmax", 10, 0, 0, 2, 1), probe_line("softmax", 20, 0, 0, 3, 1)});
  ReportOptions options;
  options.input = a.parent_path();
  options.compare_with = {b.parent_path(), c};
  options.out = dir.path() / "report";
  const ReportSummary summary = write_report(options);
  CHECK(summary.probe_records == 12);
  const std::string script = read_text(options.out / "plots" / "plots.gp");

  // Every legend entry with the colour it was drawn in: a run's model ("RUN: trained with ...", the figures of all
  // models) or an activation evaluated on a model's scores (each model's own figures).
  std::map<std::string, std::set<std::string>> run_colours, activation_colours;
  std::map<std::string, int> run_entries;
  const std::regex clause("linecolor rgb '(#[0-9a-f]{6})' title '([^']*)'");
  for (auto it = std::sregex_iterator(script.begin(), script.end(), clause); it != std::sregex_iterator(); ++it) {
    const std::string title = (*it)[2];
    if (const auto colon = title.find(": trained with "); colon != std::string::npos) {
      run_colours[title.substr(0, colon)].insert((*it)[1]);
      ++run_entries[title.substr(0, colon)];
      continue;
    }
    const std::string activation =
        title.find("poly3_scaled") != std::string::npos || title.find("x^3/sqrt(N)") != std::string::npos
            ? "poly3_scaled"
        : title.find("softmax") != std::string::npos ? "softmax"
                                                     : "";
    if (!activation.empty()) activation_colours[activation].insert((*it)[1]);
  }
  REQUIRE(activation_colours.count("softmax"));
  REQUIRE(activation_colours.count("poly3_scaled"));
  CHECK(activation_colours["softmax"].size() == 1);
  CHECK(activation_colours["poly3_scaled"].size() == 1);
  CHECK(*activation_colours["softmax"].begin() != *activation_colours["poly3_scaled"].begin());
  // Each run in one colour in all of the figures of all models (own norm, own gradient, both ratio panels), and
  // no two runs in the same one.
  std::set<std::string> distinct;
  for (const std::string run : {"softmax-run", "cubic-run", "softmax-again"}) {
    REQUIRE(run_colours.count(run));
    CHECK(run_colours[run].size() == 1);
    CHECK(run_entries[run] >= 3);
    distinct.insert(*run_colours[run].begin());
  }
  CHECK(distinct.size() == 3);
  CHECK_THAT(script, Contains("title 'softmax-run: trained with softmax'") &&
                         Contains("title 'softmax-again: trained with softmax'") &&
                         Contains("title 'cubic-run: trained with poly3_scaled'"));
  // The figure of every model against the bounds: ratios on a linear axis, the bound a dashed line at 1.
  const auto ratios = script.find("# Softmax on every model's scores: ratio to its bound");
  REQUIRE(ratios != std::string::npos);
  const std::string ratio_figure = script.substr(ratios, script.find("\n# ", ratios + 1) - ratios);
  CHECK_THAT(ratio_figure, Contains("title 'bound: sqrt(N) (ratio 1)'") &&
                               Contains("title 'bound: sqrt(N)/2 (ratio 1)'") && Contains("unset logscale y"));
  // softmax-run at step 10: ||A||_F 1, 7, 3, 5 over its heads at N = 64 (probe_line), so ratios 1/8 to 7/8 around
  // their mean 1/2: the band of its first curve.
  CHECK(data_block(ratio_figure, "$plot2_panel0_curve0").front() == std::vector<double>{10, 0.5, 0.125, 0.875});

  // The runs' last checkpoints side by side: softmax-run at step 20 has ||A||_F 2, 2, 2, 6 over its heads.
  const std::string markdown = read_text(options.out / "report.md");
  CHECK_THAT(markdown, Contains("| softmax-run | softmax | 2 | 20 | 3 [2, 6] | 1 [1, 1] |"));
  CHECK_THAT(markdown, Contains("| cubic-run | poly3_scaled | 2 | 20 | 9 | 3 |"));

  // The band of the first run in Fig. 2: step, mean, min, max over the four heads.
  const auto fig2 = script.find("# ||A||_F of each model's own activation");
  REQUIRE(fig2 != std::string::npos);
  const auto band = data_block(script.substr(fig2), "$plot0_curve0");
  REQUIRE(band.size() == 2);
  CHECK(band[0] == std::vector<double>{10, 4, 1, 7});
  CHECK(band[1] == std::vector<double>{20, 3, 2, 6});
  // And in Fig. 3: gradients 0.5, 0.25, 2, 1.25 at step 10.
  const auto fig3 = script.find("# ||dA/dS||_F of each model's own activation");
  REQUIRE(fig3 != std::string::npos);
  const auto gradient_band = data_block(script.substr(fig3), "$plot1_curve0");
  REQUIRE(gradient_band.size() == 2);
  CHECK(gradient_band[0] == std::vector<double>{10, 1, 0.25, 2});
}

TEST_CASE("runs that cannot be compared are refused naming the odd one out", "[head_maps][compare][errors]") {
  TempDir dir;
  const fs::path log = dir.path() / "run" / kProbeLogName;
  write_log(log, {probe_line("softmax", 10, 0, 0, 1, 0.5)});
  const fs::path results = dir.path() / "results";
  write_results_folder(results, {FixtureSeries{}});
  const fs::path probe_json = dir.path() / "probe.json";
  write_text(probe_json, probe_document(1, 1).dump());
  ReportOptions options;
  options.out = dir.path() / "report";
  options.input = log;
  options.compare_with = {results};
  CHECK_THROWS_WITH(write_report(options),
                    Contains("cannot compare " + results.string() + " (results of `attncheck mc`)"));
  options.compare_with = {probe_json};
  CHECK_THROWS_WITH(write_report(options),
                    Contains("cannot compare " + probe_json.string() + " (a probe --json or --csv output)"));
  options.compare_with = {log.parent_path()};
  CHECK_THROWS_WITH(write_report(options), Contains("are both named run"));
  CHECK_FALSE(fs::exists(options.out));
  // Two probe --json outputs side by side: a map each.
  options.input = probe_json;
  options.compare_with = {probe_json};
  options.plots = false;
  const ReportSummary summary = write_report(options);
  CHECK(summary.probe_outputs == 2);
}

TEST_CASE("results folders of attncheck mc are compared run after run, their plots and links kept apart",
          "[compare][report]") {
  TempDir dir;
  write_results_folder(dir.path() / "a", {FixtureSeries{}});
  FixtureSeries other;
  other.p = 2;
  write_results_folder(dir.path() / "b", {FixtureSeries{}, other});
  ReportOptions options;
  options.input = dir.path() / "a";
  options.compare_with = {dir.path() / "b"};
  options.out = dir.path() / "report";
  const ReportSummary summary = write_report(options);
  CHECK(summary.series == 3);
  CHECK(fs::exists(options.out / "plots" / "run1-series01.svg"));
  CHECK(fs::exists(options.out / "plots" / "run2-series01.svg"));
  CHECK(fs::exists(options.out / "plots" / "run2-series02.png"));
  const std::string html = read_text(options.out / "index.html");
  // Every link target once, and every summary row links to its own run's series (and the table of contents).
  CHECK(count_occurrences(html, "id=\"run1-series-1\"") == 1);
  CHECK(count_occurrences(html, "id=\"run2-series-1\"") == 1);
  CHECK(count_occurrences(html, "href=\"#run2-series-2\"") == 2);
  CHECK(count_occurrences(html, "href=\"#series-") == 0);
  const std::string markdown = read_text(options.out / "report.md");
  CHECK(markdown.find("# Run 1: ") < markdown.find("# Run 2: "));
}

TEST_CASE("a folder of runs is read as those runs compared, in the order of their names", "[probes][compare]") {
  TempDir dir;
  const fs::path runs = dir.path() / "runs";
  write_log(runs / "b-cubic" / kProbeLogName,
            {probe_line("poly3_scaled", 10, 0, 0, 4, 1), probe_line("poly3_scaled", 20, 0, 0, 3, 1)});
  write_log(runs / "a-softmax" / kProbeLogName,
            {probe_line("softmax", 10, 0, 0, 2, 1), probe_line("softmax", 20, 0, 0, 3, 1)});
  fs::create_directories(runs / "notes");  // a subfolder without a run is not one
  ReportOptions options;
  options.input = runs;
  options.out = dir.path() / "report";
  options.plots = false;
  const ReportSummary summary = write_report(options);
  CHECK(summary.probe_records == 4);
  const std::string markdown = read_text(options.out / "report.md");
  CHECK_THAT(markdown, Catch::Contains("runs compared"));
  const auto a = markdown.find("a-softmax"), b = markdown.find("b-cubic");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK(a < b);
  // A folder with neither a run nor a subfolder holding one is refused, naming what is missing.
  options.input = runs / "notes";
  options.out = dir.path() / "report-2";
  CHECK_THROWS_WITH(write_report(options), Catch::Contains("and none of its subfolders does"));
}
