#include "attncheck/reports/report.hpp"
#include "attncheck/reports/training_curves.hpp"
#include "attncheck/theory/common.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace attncheck::reports;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::string header_lines(const std::string& headline = "accuracy") {
  std::string text;
  for (const json& line : {json{{"record", "curves"}, {"format", 1}, {"title", "t"}, {"headline", headline}},
                           json{{"record", "variant"}, {"name", "a"}, {"label", "variant A"}},
                           json{{"record", "variant"}, {"name", "b"}, {"label", "variant B"}},
                           json{{"record", "metric"},
                                {"name", "accuracy"},
                                {"label", "accuracy"},
                                {"higher_is_better", true},
                                {"reference", {{"value", 0.1}, {"label", "chance"}}}},
                           json{{"record", "metric"}, {"name", "loss"}, {"label", "loss"}, {"log_y", true}}}) {
    text += line.dump() + "\n";
  }
  return text;
}

std::string point(const std::string& variant, long long seed, long long step, double accuracy) {
  return json{{"record", "point"},
              {"variant", variant},
              {"seed", seed},
              {"step", step},
              {"values", {{"accuracy", accuracy}, {"loss", nullptr}}}}
             .dump() +
         "\n";
}

}  // namespace

TEST_CASE("training curves: mean and standard error over seeds per step, the last common step, the statement",
          "[training_curves]") {
  std::string text = header_lines();
  // Variant a: 0.8, 0.9, 1.0 at step 100 (mean 0.9, SE 0.1/sqrt(3)); b: 0.5, 0.6, 0.7; b alone reaches step 200.
  for (int seed = 0; seed < 3; ++seed) {
    text += point("a", seed, 0, 0.1) + point("a", seed, 100, 0.8 + 0.1 * seed);
    text += point("b", seed, 0, 0.1) + point("b", seed, 100, 0.5 + 0.1 * seed) + point("b", seed, 200, 0.99);
  }
  const TrainingCurves curves = parse_training_curves(text, "curves.jsonl");
  REQUIRE(curves.points.size() == 15);
  CHECK_FALSE(curves.points[0].values.count("loss"));  // null: not recorded
  const auto a = summarize_seeds(curves, "a", "accuracy");
  REQUIRE(a.size() == 2);
  CHECK(a[1].step == 100);
  CHECK(a[1].mean == Approx(0.9));
  CHECK(a[1].standard_error == Approx(0.1 / std::sqrt(3.0)));
  CHECK(a[1].seeds == 3);
  CHECK(last_common_step(curves, "accuracy") == 100);
  CHECK_FALSE(last_common_step(curves, "loss").has_value());
  // The gap 0.3 over sqrt(2) 0.1/sqrt(3) = 0.0816...: 3.7 standard errors.
  const std::string statement = headline_statement(curves);
  CHECK_THAT(statement, Contains("At step 100, variant A ends highest in accuracy") &&
                            Contains("variant B ends at 0.600 ± 0.058 over 3 seeds, 3.7 standard errors of the "
                                     "difference lower"));

  // A smaller gap is called what it is.
  std::string close = header_lines();
  for (int seed = 0; seed < 3; ++seed)
    close += point("a", seed, 10, 0.5 + 0.1 * seed) + point("b", seed, 10, 0.45 + 0.1 * seed);
  CHECK_THAT(headline_statement(parse_training_curves(close, "c")), Contains("not a clear difference"));
  // Lower is better: the lowest ends best.
  std::string lower = header_lines();
  lower.replace(lower.find("\"higher_is_better\":true"), 23, "\"higher_is_better\":false");
  for (int seed = 0; seed < 2; ++seed)
    lower += point("a", seed, 10, 0.5 + 0.1 * seed) + point("b", seed, 10, 0.2 + 0.1 * seed);
  CHECK_THAT(headline_statement(parse_training_curves(lower, "l")), Contains("variant B ends lowest in accuracy"));
}

TEST_CASE("training curves: malformed files are refused with the file, line and key named", "[training_curves]") {
  const auto refused = [](const std::string& text, const std::string& message) {
    INFO(text);
    CHECK_THROWS_WITH(parse_training_curves(text, "curves.jsonl"), Contains("curves.jsonl") && Contains(message));
  };
  refused("", "no \"curves\" record");
  refused(point("a", 0, 0, 0.5), "line 1: the first line must be the \"curves\" record");
  refused(header_lines() + header_lines(), "line 6: a second \"curves\" record");
  refused(header_lines("nothing"), "the headline metric \"nothing\" is not declared");
  refused(header_lines() + point("c", 0, 0, 0.5), "line 6: variant \"c\" is not declared");
  refused(header_lines() + point("a", 0, 0, 0.5) + point("a", 0, 0, 0.6),
          "line 7: variant \"a\" seed 0 step 0 is recorded twice");
  refused(header_lines() + point("a", 0, -5, 0.5), "\"step\" = -5 is negative");
  refused(header_lines() + R"({"record":"point","variant":"a","seed":0,"step":1,"values":{"speed":1}})" + "\n",
          "metric \"speed\" is not declared");
  refused(header_lines() + R"({"record":"point","variant":"a","seed":0,"step":1,"values":{"accuracy":"high"}})" + "\n",
          "\"accuracy\" must be a number");
  refused(header_lines() + R"j({"record":"variant","name":"x\n'; system('id')","label":"x"})j" + "\n",
          "\"name\" must be 1-64 letters");
  refused(header_lines() + R"({"record":"variant","name":"a","label":"again"})" + "\n",
          "variant \"a\" is declared twice");
  refused(R"({"record":"curves","format":2,"title":"t","headline":"x"})", "\"format\" = 2 is not 1");
  refused(header_lines() + "{not json\n", "line 6 column");
}

TEST_CASE("training curves: the report draws a band and a line per variant and a reference line, labels escaped",
          "[training_curves]") {
  std::string text = header_lines();
  // A label that would break out of a gnuplot string or an HTML element if it were not escaped.
  text.replace(text.find("variant A"), 9, "A' <b>x</b>\\nsystem('id')");
  for (int seed = 0; seed < 2; ++seed) {
    text += point("a", seed, 0, 0.1 + 0.01 * seed) + point("a", seed, 50, 0.7 + 0.05 * seed);
    text += point("b", seed, 0, 0.1) + point("b", seed, 50, 0.3 + 0.05 * seed);
  }
  Document document;
  PendingFigures pending;
  add_training_curves_section(parse_training_curves(text, "curves.jsonl"), "curves.jsonl", true, document, pending);
  REQUIRE(pending.plots.size() == 1);  // loss has no value at all: no plot
  const PlotSpec& plot = pending.plots[0];
  REQUIRE(plot.curves.size() == 5);  // per variant a band and a line, then the reference
  CHECK(plot.curves[0].style == CurveStyle::band);
  CHECK(plot.curves[0].y_lo[1] == Approx(0.725 - 0.025));
  CHECK(plot.curves[1].style == CurveStyle::line_with_points);
  CHECK(plot.curves[4].y == std::vector<double>{0.1, 0.1});
  const std::string script = gnuplot_script(pending.plots, "");
  // The newline became a space, the quotes are doubled: the label stays inside its gnuplot string.
  CHECK_THAT(script, Contains("title 'A'' <b>x</b> system(''id'')'") && Contains("with filledcurves"));
  CHECK_THAT(render_html(document), Contains("A&#39; &lt;b&gt;x&lt;/b&gt;"));
  CHECK_THAT(render_html(document), !Contains("<b>x</b>"));
}
