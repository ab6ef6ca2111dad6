#include "attncheck/probes/safetensors.hpp"
#include "attncheck/reports/plots.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/reports/vit_results.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

using namespace attncheck::reports;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
namespace probes = attncheck::probes;
namespace theory = attncheck::theory;
using Catch::Matchers::Contains;

namespace {

json vit_run(const std::string& experiment, const std::string& activation, json scale, int n, int seed, json accuracy,
             json diverged_at = nullptr) {
  json trace = json::array();
  for (int step : {0, 10}) {
    for (int layer : {0, 1}) {
      const double base = activation == "poly3" ? 40.0 : activation == "poly3_scaled" ? 2.0 : 1.0;
      trace.push_back(
          {{"step", step}, {"layer", layer}, {"attention_fro", base * (1 + step)}, {"jacobian_fro", 2 * base}});
    }
  }
  return {{"experiment", experiment},
          {"activation", activation},
          {"scale", scale},
          {"N", n},
          {"patch", 2},
          {"seed", seed},
          {"steps", 10},
          {"accuracy", accuracy},
          {"test_size", 360},
          {"diverged_at", diverged_at},
          {"wall_seconds", 1.0},
          {"trace", trace}};
}

json vit_document(const std::vector<json>& runs) {
  return {{"format", "attncheck-vit-digits"},
          {"format_version", 1},
          {"provenance", {{"command", "vit_digits.py run"}, {"date", "2026-01-01T00:00:00Z"}, {"wall_seconds", 12.5}}},
          {"runs", runs}};
}

// What `attncheck report` passes in: the probes library's safetensors reader.
AttentionMatrix read_map(const fs::path& file, const std::string& tensor, long long head) {
  const theory::Matrix map = probes::read_attention_head(file, tensor, head);
  return AttentionMatrix{map.rows(), std::vector<double>(map.data(), map.data() + map.size())};
}

std::string render(const VitResults& results, const fs::path& folder, PendingFigures& pending) {
  Document document;
  add_vit_section(results, folder, true, document, pending, read_map);
  return render_markdown(document);
}

// A safetensors file with one F64 tensor [heads, n, n].
void write_maps(const fs::path& path, const std::string& name, int heads, int n, const std::vector<double>& values) {
  std::string header =
      json{{name, {{"dtype", "F64"}, {"shape", {heads, n, n}}, {"data_offsets", {0, values.size() * 8}}}}}.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((std::uint64_t(header.size()) >> (8 * i)) & 0xff);
  bytes += header;
  std::string data(values.size() * 8, '\0');
  std::memcpy(data.data(), values.data(), data.size());
  write_text(path, bytes + data);
}

}  // namespace

TEST_CASE("ViT results are read, and bad values are refused naming the file and run", "[vit]") {
  const json good = vit_document({vit_run("activations", "softmax", nullptr, 16, 0, 0.9),
                                  vit_run("activations", "poly3", 1.0, 16, 0, nullptr, 42)});
  const VitResults results = parse_vit_results(good.dump(), "vit-results.json");
  REQUIRE(results.runs.size() == 2);
  CHECK(results.runs[1].diverged_at == 42);
  CHECK_FALSE(results.runs[1].accuracy.has_value());
  CHECK(results.runs[0].trace.size() == 4);

  json bad_activation = good;
  bad_activation["runs"][1]["activation"] = "poly5";
  CHECK_THROWS_WITH(parse_vit_results(bad_activation.dump(), "vit-results.json"),
                    Contains("vit-results.json runs[1]") && Contains("poly5"));
  json bad_accuracy = good;
  bad_accuracy["runs"][0]["accuracy"] = 1.5;
  CHECK_THROWS_WITH(parse_vit_results(bad_accuracy.dump(), "vit-results.json"),
                    Contains("runs[0]") && Contains("\"accuracy\" = 1.5"));
  json no_scale = good;
  no_scale["runs"][1]["scale"] = nullptr;
  CHECK_THROWS_WITH(parse_vit_results(no_scale.dump(), "vit-results.json"), Contains("\"scale\" is null for poly3"));
  json negative_norm = good;
  negative_norm["runs"][0]["trace"][3]["attention_fro"] = -1;
  CHECK_THROWS_WITH(parse_vit_results(negative_norm.dump(), "vit-results.json"),
                    Contains("runs[0] trace[3]") && Contains("not a norm"));
  json other_format = good;
  other_format["format"] = "something else";
  CHECK_THROWS_AS(parse_vit_results(other_format.dump(), "vit-results.json"), InputError);
}

TEST_CASE("the ViT section computes Table 1, Fig. 1's best scales and states agreement from the numbers", "[vit]") {
  TempDir dir;
  // softmax and x^3/sqrt(N) within their errors; x^3 diverges once and is far worse; the best c shrinks with N.
  std::vector<json> runs;
  const double softmax_acc[] = {0.90, 0.92, 0.94};
  const double scaled_acc[] = {0.91, 0.93, 0.92};
  for (int seed = 0; seed < 3; ++seed) {
    runs.push_back(vit_run("activations", "softmax", nullptr, 16, seed, softmax_acc[seed]));
    runs.push_back(vit_run("activations", "poly3_scaled", 0.25, 16, seed, scaled_acc[seed]));
    runs.push_back(seed == 0 ? vit_run("activations", "poly3", 1.0, 16, seed, nullptr, 7)
                             : vit_run("activations", "poly3", 1.0, 16, seed, 0.5 + 0.01 * seed));
  }
  for (int n : {4, 64}) {
    for (double c : {0.125, 0.5}) {
      const bool best = (n == 4) == (c == 0.5);
      runs.push_back(vit_run("scale-sweep", "poly3", c, n, 0, best ? 0.9 : 0.5));
    }
  }
  // Upsampled 16 x 16 digits at N = 256: named by their image size beside the 8 x 8 ones.
  for (double c : {0.0625, 0.5}) {
    json run = vit_run("scale-sweep", "poly3", c, 256, 0, c < 0.1 ? 0.8 : 0.3);
    run["image_side"] = 16;
    runs.push_back(run);
  }
  const VitResults results = parse_vit_results(vit_document(runs).dump(), "vit-results.json");
  PendingFigures pending;
  const std::string markdown = render(results, dir.path(), pending);
  // Table 1: mean 0.92, SE 0.02 / sqrt(3) = 0.011547 -> two significant digits.
  CHECK_THAT(markdown, Contains("| softmax | 16 | 3 | 0 | 0.920 ± 0.012 |"));
  CHECK_THAT(markdown, Contains("| x^3 | 16 | 3 | 1 | 0.5150 ± 0.0050 |"));
  CHECK_THAT(markdown, Contains("x^3/sqrt(N) trains like softmax: agrees (no difference detected)"));
  CHECK_THAT(markdown, Contains("x^3 without a scale diverges or loses accuracy: agrees. 1 of 3 runs diverged"));
  // ||A||_F at step 10: 40 * 11 against 2 * 11 in every layer.
  CHECK_THAT(markdown, Contains("Layer 1, ||A||\\_F at the last recorded step (mean over heads and seeds): x^3 440, "
                                "x^3/sqrt(N) 22, softmax 11 (steps 10, 10, 10). The papers find x^3's far larger and "
                                "the scale bringing it toward softmax's: agrees."));
  CHECK_THAT(markdown, Contains("Layer 0, ||dA/dS||\\_F at the last recorded step (mean over heads and seeds): x^3 80, "
                                "x^3/sqrt(N) 4, softmax 2"));
  CHECK_THAT(markdown, Contains("| 64 | 0.125 | 0.125 | 1 |"));  // best c at N = 64 is 1/sqrt(64)
  CHECK_THAT(markdown, Contains("| 256 (16x16 images) | 0.0625 | 0.0625 | 1 |"));
  CHECK_THAT(markdown, Contains("The best scale c shrinks as N grows (Fig. 1): agrees"));
  // Figs. 2-3: a panel per layer and quantity, then Fig. 1.
  REQUIRE(pending.plots.size() == 5);
  CHECK(pending.plots[0].name == "vit-attention-layer0");
  CHECK(pending.plots[3].name == "vit-jacobian-layer1");
  CHECK(pending.plots[0].curves.size() == 3);
  CHECK(pending.plots[4].log_x);

  // The opposite data say "does not agree" / "not reproduced": a true finding is never reported otherwise.
  std::vector<json> against;
  for (int seed = 0; seed < 3; ++seed) {
    against.push_back(vit_run("activations", "softmax", nullptr, 16, seed, softmax_acc[seed]));
    against.push_back(vit_run("activations", "poly3_scaled", 0.25, 16, seed, 0.5 + 0.01 * seed));
    against.push_back(vit_run("activations", "poly3", 1.0, 16, seed, scaled_acc[seed]));
  }
  PendingFigures unused;
  const std::string opposite = render(parse_vit_results(vit_document(against).dump(), "v.json"), dir.path(), unused);
  CHECK_THAT(opposite, Contains("x^3/sqrt(N) trains like softmax: does not agree"));
  CHECK_THAT(opposite, Contains("x^3 without a scale diverges or loses accuracy: not reproduced at this scale"));
  // Norms ordered against the papers: x^3/sqrt(N) farther from softmax than x^3.
  std::vector<json> reversed;
  for (const char* activation : {"softmax", "poly3", "poly3_scaled"}) {
    json run = vit_run("activations", activation, std::string(activation) == "softmax" ? json(nullptr) : json(1.0), 16,
                       0, 0.9);
    for (auto& point : run["trace"]) {
      point["attention_fro"] = std::string(activation) == "poly3_scaled" ? 100.0
                               : std::string(activation) == "poly3"      ? 10.0
                                                                         : 1.0;
    }
    reversed.push_back(run);
  }
  const std::string flipped = render(parse_vit_results(vit_document(reversed).dump(), "v.json"), dir.path(), unused);
  CHECK_THAT(flipped, Contains("x^3 10, x^3/sqrt(N) 100, softmax 1 (steps 10, 10, 10). The papers find x^3's far "
                               "larger and the scale bringing it toward softmax's: does not agree."));
}

TEST_CASE("attention heat maps are read from safetensors and drawn on a signed scale centred at 0", "[vit]") {
  TempDir dir;
  const std::vector<double> maps = {0.5, -2.0, 1.0, 0.25,  // head 0
                                    9.0, 9.0,  9.0, 9.0};  // head 1
  write_maps(dir.path() / "attention-poly3_scaled.safetensors", "layer.0", 2, 2, maps);
  const AttentionMatrix head1 = read_map(dir.path() / "attention-poly3_scaled.safetensors", "layer.0", 1);
  CHECK(head1.N == 2);
  CHECK(head1.values == std::vector<double>{9, 9, 9, 9});
  CHECK_THROWS_WITH(read_map(dir.path() / "attention-poly3_scaled.safetensors", "layer.3", 0),
                    Contains("no tensor \"layer.3\""));
  CHECK_THROWS_WITH(read_map(dir.path() / "attention-poly3_scaled.safetensors", "layer.0", 2),
                    Contains("head 2 is not among its 2 heads"));
  write_text(dir.path() / "short.safetensors", std::string("\xff\xff\xff\xff\0\0\0\0{}", 10));
  CHECK_THROWS_WITH(read_map(dir.path() / "short.safetensors", "layer.0", 0), Contains("header length 4294967295"));

  PendingFigures pending;
  const VitResults results = parse_vit_results(vit_document({}).dump(), "vit-results.json");
  render(results, dir.path(), pending);
  REQUIRE(pending.plots.size() == 1);
  REQUIRE(pending.plots[0].heat_map.has_value());
  CHECK(pending.plots[0].heat_map->signed_scale);
  const std::string script = gnuplot_script(pending.plots, "");
  CHECK_THAT(script, Contains("set cbrange [-2:2]"));  // symmetric about 0, reaching max |A| of head 0
  CHECK_THAT(script, Contains("0.5 -2\n1 0.25\n"));
  CHECK_THAT(script, Contains("matrix with image"));
}

TEST_CASE("ViT-Tiny results name the model, the data, the device and the runs a time limit skipped", "[vit]") {
  TempDir dir;
  json document = vit_document({vit_run("activations", "softmax", nullptr, 256, 0, 0.5)});
  document["model"] = {{"name", "vit-tiny"}, {"layers", 12}, {"heads", 3}, {"hidden", 192}};
  document["dataset"] = {{"name", "digits"}, {"caption", "scikit-learn's 8 x 8 digits enlarged to 64 x 64"}};
  document["provenance"]["device"] = "NVIDIA H200";
  document["provenance"]["dtype"] = "bfloat16 autocast (float32 weights)";
  document["provenance"]["plan"] = "papers";
  document["provenance"]["runs_planned"] = 66;
  document["provenance"]["runs_skipped"] = 20;
  const VitResults results = parse_vit_results(document.dump(), "vit-results.json");
  CHECK(results.model == "vit-tiny");
  PendingFigures pending;
  const std::string md = render(results, dir.path(), pending);
  CHECK(md.find("ViT-Tiny (12 layers, 3 heads, width 192)") != std::string::npos);
  CHECK(md.find("8 x 8 digits enlarged to 64 x 64") != std::string::npos);
  CHECK(md.find("NVIDIA H200") != std::string::npos);
  CHECK(md.find("20 of the plan's 66 runs were not started") != std::string::npos);
  CHECK(md.find("a small model, few seeds") == std::string::npos);
  // Earlier results (no model name, no dataset) read as the digits model, as before.
  const VitResults earlier = parse_vit_results(vit_document({}).dump(), "old.json");
  CHECK(earlier.model == "small");
  CHECK_FALSE(earlier.dataset);
  document["model"]["name"] = "vit-huge";
  CHECK_THROWS_WITH(parse_vit_results(document.dump(), "vit-results.json"), Catch::Contains("vit-huge"));
}
