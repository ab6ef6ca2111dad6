#include "attncheck/reports/probe_log.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include "caption_axes.hpp"

#include <catch2/catch.hpp>

using namespace attncheck::reports;
using namespace attncheck::records;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

namespace {

json probe_line(const std::string& activation, std::optional<long long> step, int layer, int head, double softmax,
                double grad) {
  return {{"checkpoint", fmt::format("{}-{}.safetensors", activation, step ? *step : -1)},
          {"step", step ? json(*step) : json(nullptr)},
          {"layer", layer},
          {"head", head},
          {"N", 64},
          {"softmax_fro", softmax},
          {"grad_fro", grad},
          {"dWq_fro", 2 * grad},
          {"dWk_fro", 3 * grad},
          {"poly3_scaled_fro", 10 * softmax},
          {"poly3_fro", 80 * softmax},
          {"relu_n_fro", 0.5},
          {"poly3_scaled_grad_fro", 7 * grad},
          {"activation", activation}};
}

std::string lines(const std::vector<json>& objects) {
  std::string text;
  for (const json& o : objects) text += o.dump() + "\n";
  return text;
}

}  // namespace

TEST_CASE("probe lines are read with optional columns, and bad lines are named", "[probes]") {
  json minimal = probe_line("softmax", 100, 0, 0, 4, 1);
  minimal.erase("poly3_fro");
  minimal.erase("activation");
  minimal["relu_n_fro"] = nullptr;
  const auto records = parse_probe_log(lines({probe_line("softmax", std::nullopt, 1, 2, 4, 1), minimal}), "log.jsonl");
  REQUIRE(records.size() == 2);
  CHECK_FALSE(records[0].step.has_value());
  CHECK(records[0].metrics.layer == 1);
  CHECK(records[0].metrics.head == 2);
  CHECK(records[0].activation == "softmax");
  CHECK(*records[1].value(ProbeQuantity::dWk) == 3);
  CHECK_FALSE(records[1].value(ProbeQuantity::poly3).has_value());
  CHECK_FALSE(records[1].value(ProbeQuantity::relu_n).has_value());
  CHECK_FALSE(records[1].activation.has_value());

  // Lines measured on scores alone have no norms in W_Q and W_K.
  json scores_only = probe_line("softmax", 100, 0, 0, 4, 1);
  scores_only.erase("dWq_fro");
  scores_only.erase("dWk_fro");
  const auto without_weights = parse_probe_log(lines({scores_only}), "log.jsonl");
  CHECK_FALSE(without_weights[0].value(ProbeQuantity::dWq).has_value());
  CHECK(*without_weights[0].value(ProbeQuantity::grad) == 1);

  json no_grad = probe_line("softmax", 100, 0, 0, 4, 1);
  no_grad.erase("grad_fro");
  CHECK_THROWS_WITH(parse_probe_log(lines({minimal, no_grad}), "log.jsonl"),
                    Contains("log.jsonl line 2") && Contains("\"grad_fro\" is missing"));
  json negative = probe_line("softmax", 100, 0, 0, -4, 1);
  CHECK_THROWS_WITH(parse_probe_log(lines({negative}), "log.jsonl"),
                    Contains("log.jsonl line 1") && Contains("\"softmax_fro\" = -4 is negative"));
  CHECK_THROWS_WITH(parse_probe_log("{\"checkpoint\": \"a\",\n", "log.jsonl"), Contains("log.jsonl line 1"));
}

TEST_CASE("probe records are averaged over layers and heads per checkpoint, in step order", "[probes]") {
  const std::vector<json> log = {
      probe_line("poly3", 2000, 0, 0, 1, 10), probe_line("poly3", 2000, 0, 1, 3, 30),
      probe_line("softmax", 0, 0, 0, 5, 1),   probe_line("poly3", 1000, 0, 0, 2, 20),
      probe_line("poly3", 1000, 1, 0, 4, 40), probe_line("poly3", 2000, 0, 1, 5, 50),  // re-probed: replaces 3, 30
  };
  const auto models = summarize_probe_log(parse_probe_log(lines(log), "log.jsonl"));
  REQUIRE(models.size() == 2);
  CHECK(models[0].activation == "poly3");
  CHECK(models[0].steps_known);
  REQUIRE(models[0].steps.size() == 2);
  CHECK(models[0].steps[0].step == 1000);
  CHECK(models[0].steps[0].heads == 2);
  CHECK(models[0].steps[0].summary(ProbeQuantity::softmax)->mean == Approx(3));
  CHECK(models[0].steps[0].summary(ProbeQuantity::softmax)->min == 2);
  CHECK(models[0].steps[0].summary(ProbeQuantity::softmax)->max == 4);
  CHECK(models[0].steps[1].step == 2000);
  CHECK(models[0].steps[1].heads == 2);
  CHECK(models[0].steps[1].summary(ProbeQuantity::grad)->mean == Approx(30));  // (10 + 50) / 2
  CHECK(models[0].steps[1].summary(ProbeQuantity::dWk)->mean == Approx(90));
  CHECK(models[1].activation == "softmax");
  CHECK(models[1].steps.size() == 1);
}

TEST_CASE("checkpoints without steps are placed in the order of the log", "[probes]") {
  const auto models = summarize_probe_log(
      parse_probe_log(lines({probe_line("softmax", 500, 0, 0, 1, 1), probe_line("softmax", std::nullopt, 0, 0, 2, 1)}),
                      "log.jsonl"));
  REQUIRE(models.size() == 1);
  CHECK_FALSE(models[0].steps_known);
  CHECK(models[0].steps[0].position == 1);
  CHECK(models[0].steps[1].position == 2);
}

TEST_CASE("a probe log alone gives the training plots, one SVG each, and exact tables", "[probes][report]") {
  TempDir dir;
  const fs::path log = dir.path() / "watch" / kProbeLogName;
  fs::create_directories(log.parent_path());
  write_text(log, lines({probe_line("softmax", 0, 0, 0, 4, 1), probe_line("softmax", 0, 1, 0, 6, 3),
                         probe_line("softmax", 100, 0, 0, 5, 0.5), probe_line("poly3_scaled", 0, 0, 0, 4, 2)}));
  ReportOptions options;
  options.out = dir.path() / "report";
  for (const fs::path& input : {log.parent_path(), log}) {
    options.input = input;
    const ReportSummary summary = write_report(options);
    CHECK(summary.probe_records == 4);
    CHECK(summary.series == 0);
    // Three plots over all models (Figs. 2-3 and the ratios to the bounds), two per model and one of its layers,
    // and the layer x head maps of the first and last checkpoints (softmax: two checkpoints, poly3_scaled: one).
    CHECK(summary.plots == 3 + 2 * 2 + 2 + 2 + 1);
    const std::string html = read_text(options.out / "index.html");
    CHECK(count_occurrences(html, "<svg") == 12);
    CHECK_THAT(html, !Contains("http://") && !Contains("https://"));
    const std::string markdown = read_text(options.out / "report.md");
    CHECK_THAT(markdown, Contains("## Probes during training"));
    CHECK_THAT(markdown, !Contains("## Summary"));
    CHECK_THAT(markdown, Contains("### Model trained with softmax"));
    CHECK_THAT(markdown, Contains("### Model trained with poly3_scaled"));
    // Step 0 of the softmax model: ||A||_F mean of 4 and 6, gradient mean of 1 and 3.
    CHECK_THAT(
        markdown,
        Contains(
            "| 0 | softmax-0.safetensors | 2 | 5 [4, 6] | 50 [40, 60] | 400 [320, 480] | 0.5 [0.5, 0.5] | 2 [1, 3] |"));
    CHECK_THAT(markdown, Contains("| 100 | softmax-100.safetensors | 1 | 5 | 50 |"));
    // Fig. 3: each model with the Jacobian of its own activation: softmax's grad_fro (mean 2 at step 0), the
    // scaled cubic's poly3_scaled_grad_fro (7 x 2 = 14).
    const std::string script = read_text(options.out / "plots" / "plots.gp");
    const auto fig3 = script.find("# ||dA/dS||_F of each model's own activation");
    REQUIRE(fig3 != std::string::npos);
    const std::string fig3_script = script.substr(fig3, script.find("unset output", fig3) - fig3);
    CHECK_THAT(fig3_script, Contains("0 2\n100 0.5\nEOD") && Contains("0 14\nEOD"));
    CHECK_THAT(fig3_script, Contains("'trained with softmax'") && Contains("'trained with poly3_scaled'"));
    // Figs. 2-3 and both figures of each model say "log y axis" and are drawn on one.
    CHECK(attncheck::reports::testing::check_captions_match_axes(options.out) == 2 + 2 * 2);
  }
}

TEST_CASE("a results folder with a probe log gives both parts", "[probes][report]") {
  TempDir dir;
  const auto series = standard_series();
  write_results_folder(dir.path() / "results", series);
  write_text(dir.path() / "results" / kProbeLogName, lines({probe_line("softmax", 0, 0, 0, 4, 1)}));
  ReportOptions options;
  options.input = dir.path() / "results";
  options.out = dir.path() / "report";
  const ReportSummary summary = write_report(options);
  CHECK(summary.series == series.size());
  CHECK(summary.probe_records == 1);
  const std::string html = read_text(options.out / "index.html");
  CHECK(count_occurrences(html, "<svg") ==
        series.size() + 4 + 5 + 1 + 1);  // series, readings, a claim's ps and overlay, the estimand figure, probes
                                         // (with the ratios to the bounds), per layer, the head maps
  const std::string markdown = read_text(options.out / "report.md");
  CHECK(markdown.find("## Summary") < markdown.find("## Probes during training"));
}

TEST_CASE("a malformed probe log stops the report naming the file and line", "[probes][errors]") {
  TempDir dir;
  write_text(dir.path() / kProbeLogName, lines({probe_line("softmax", 0, 0, 0, 4, 1)}) + "{\"checkpoint\": 3}\n");
  ReportOptions options;
  options.input = dir.path();
  options.out = dir.path() / "report";
  CHECK_THROWS_WITH(write_report(options), Contains((dir.path() / kProbeLogName).string() + " line 2") &&
                                               Contains("\"checkpoint\" must be text"));
  CHECK_FALSE(fs::exists(options.out / "index.html"));
}

TEST_CASE("per layer, the largest head's ratios to the bounds are drawn over training, with the bounds at 1",
          "[probes][report]") {
  TempDir dir;
  const fs::path log = dir.path() / kProbeLogName;
  // N = 64: ||A||_F / 8 and ||dA/dS||_F / 4. Layer 0's heads 4 and 6 (grad 1 and 3), layer 1's 2 and 7.2 (grad 3.6
  // and 0.4) at step 0; at step 100 one head each.
  write_text(log, lines({probe_line("softmax", 0, 0, 0, 4, 1), probe_line("softmax", 0, 0, 1, 6, 3),
                         probe_line("softmax", 0, 1, 0, 2, 3.6), probe_line("softmax", 0, 1, 1, 7.2, 0.4),
                         probe_line("softmax", 100, 0, 0, 2, 2), probe_line("softmax", 100, 1, 0, 8, 4)}));
  ReportOptions options;
  options.input = log;
  options.out = dir.path() / "report";
  write_report(options);
  const std::string script = read_text(options.out / "plots" / "plots.gp");
  const auto figure = script.find("# trained with softmax: per layer, the largest head's ratio to its bound");
  REQUIRE(figure != std::string::npos);
  const std::string layers = script.substr(figure, script.find("unset multiplot", figure) - figure);
  // The attention panel: layer 0 max(4, 6)/8, then 2/8; layer 1 max(2, 7.2)/8, then 8/8; the bound's line at 1.
  CHECK_THAT(layers, Contains("0 0.75\n100 0.25\nEOD") && Contains("0 0.90000000000000002\n100 1\nEOD"));
  // The gradient panel: layer 0 max(1, 3)/4, then 2/4; layer 1 max(3.6, 0.4)/4, then 4/4.
  CHECK_THAT(layers, Contains("0 0.75\n100 0.5\nEOD") && Contains("0 0.90000000000000002\n100 1\nEOD"));
  CHECK_THAT(layers, Contains("0 1\n100 1\nEOD"));
  CHECK_THAT(layers, Contains("'layer 0'") && Contains("'layer 1'"));
  CHECK_THAT(layers, Contains("'bound: sqrt(N) (ratio 1)'") && Contains("'bound: sqrt(N)/2 (ratio 1)'"));
  const std::string html = read_text(options.out / "index.html");
  CHECK_THAT(html, Contains("layer 1") && Contains("bound: sqrt(N) (ratio 1)"));
}

TEST_CASE("the what-if expressions a log records are drawn beside the activations, one line each", "[probes][report]") {
  TempDir dir;
  const fs::path log = dir.path() / kProbeLogName;
  std::vector<json> objects;
  for (const long long step : {0LL, 100LL}) {
    for (const int head : {0, 1}) {
      json line = probe_line("softmax", step, 0, head, 4, 1);
      // tanh(x): 2 and 4 at step 0 (mean 3), 5 and 7 at step 100 (mean 6); its gradient 1 throughout
      const double fro = (step == 0 ? 2.0 : 5.0) + 2 * head;
      line["what_if"] = json::array({{{"phi", "tanh( x )"}, {"fro", fro}, {"grad_fro", 1.0}},
                                     {{"phi", "x^3/sqrt(N)"}, {"fro", 40.0}, {"grad_fro", nullptr}}});
      objects.push_back(std::move(line));
    }
  }
  write_text(log, lines(objects));
  ReportOptions options;
  options.input = log;
  options.out = dir.path() / "report";
  write_report(options);
  const std::string script = read_text(options.out / "plots" / "plots.gp");
  const auto figure = script.find("trained with softmax: ||A||_F of each activation on its scores");
  REQUIRE(figure != std::string::npos);
  const std::string figure_script = script.substr(figure, script.find("unset output", figure) - figure);
  // The expression as its canonical text, never the file's spelling, and the mean over the heads per checkpoint.
  CHECK_THAT(figure_script, Contains("'what-if phi = tanh(x)'") && Contains("0 3\n100 6\nEOD"));
  CHECK_THAT(figure_script, Contains("'what-if phi = x^3/sqrt(N)'") && Contains("0 40\n100 40\nEOD"));
  // A line whose expression does not parse is refused, naming it.
  objects.front()["what_if"] = json::array({{{"phi", "system('ls')"}, {"fro", 1.0}, {"grad_fro", 1.0}}});
  write_text(log, lines(objects));
  options.out = dir.path() / "report-2";
  CHECK_THROWS_WITH(write_report(options), Contains("unknown name 'system'"));
}

TEST_CASE("the attention entropy and the largest logit are drawn over training, when the log records them",
          "[probes][report]") {
  TempDir dir;
  const fs::path log = dir.path() / kProbeLogName;
  std::vector<json> objects;
  for (const long long step : {0LL, 100LL}) {
    for (const int head : {0, 1}) {
      json line = probe_line("softmax", step, 0, head, 4, 1);
      // Entropy 3 and 1 at step 0 (mean 2), 1 and 0.5 at step 100; the largest logit 5 then 40.
      line["softmax_entropy"] = step == 0 ? (head == 0 ? 3.0 : 1.0) : (head == 0 ? 1.0 : 0.5);
      line["score_max_abs"] = (step == 0 ? 5.0 : 40.0) - head;
      objects.push_back(std::move(line));
    }
  }
  write_text(log, lines(objects));
  ReportOptions options;
  options.input = log;
  options.out = dir.path() / "report";
  write_report(options);
  const std::string script = read_text(options.out / "plots" / "plots.gp");
  const auto figure = script.find("trained with softmax: attention entropy and largest logit");
  REQUIRE(figure != std::string::npos);
  const std::string figure_script = script.substr(figure, script.find("unset multiplot", figure) - figure);
  CHECK_THAT(figure_script, Contains("0 2\n100 0.75\nEOD"));  // the mean entropy
  CHECK_THAT(figure_script, Contains("0 5\n100 40\nEOD"));    // the largest logit over the heads
  CHECK_THAT(read_text(options.out / "report.md"), Contains("entropy of A (nats), softmax mean [min, max]"));

  // A log written before the entropy was recorded has no such figure.
  for (json& line : objects) {
    line.erase("softmax_entropy");
    line.erase("score_max_abs");
  }
  write_text(log, lines(objects));
  options.out = dir.path() / "report-old";
  write_report(options);
  CHECK(read_text(options.out / "plots" / "plots.gp").find("attention entropy and largest logit") == std::string::npos);
}
