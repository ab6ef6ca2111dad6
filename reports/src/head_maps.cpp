#include "attncheck/reports/head_maps.hpp"

#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/reports/numbers.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/records/sha256.hpp"
#include "attncheck/theory/bound_check.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>

namespace attncheck::reports {

using records::read_text_file;
using records::sha256_hex;
using theory::InputError;

namespace {

constexpr std::size_t kMaxMapCells = 1 << 20;

// Position of `value` in the ascending `axis`.
std::size_t index_in(const std::vector<long long>& axis, long long value) {
  return static_cast<std::size_t>(std::lower_bound(axis.begin(), axis.end(), value) - axis.begin());
}

double largest_ratio(const HeadMaps& maps) {
  double largest = 0;
  for (const auto* values : {&maps.attention, &maps.gradient}) {
    for (double v : *values) {
      if (std::isfinite(v)) largest = std::max(largest, v);
    }
  }
  return largest;
}

std::vector<std::string> axis_labels(const std::vector<long long>& axis) {
  // Indices 0, 1, 2, ... need no labels of their own: the cell positions are the indices.
  bool plain = true;
  for (std::size_t i = 0; i < axis.size(); ++i) plain = plain && axis[i] == static_cast<long long>(i);
  std::vector<std::string> labels;
  if (!plain) {
    for (long long v : axis) labels.push_back(fmt::format("{}", v));
  }
  return labels;
}

HeatMap heat_map_of(const HeadMaps& maps, const std::vector<double>& values, double top) {
  HeatMap map;
  map.rows = static_cast<long long>(maps.layers.size());
  map.columns = static_cast<long long>(maps.heads.size());
  map.values = values;
  map.scale_range = std::pair{0.0, top};
  map.scale_label = "ratio to the bound (1 = the bound)";
  map.scale_marks = {{1.0, "1 = bound"}};
  map.show_values = map.rows * map.columns <= 160;
  map.missing_allowed = true;
  map.row_labels = axis_labels(maps.layers);
  map.column_labels = axis_labels(maps.heads);
  return map;
}

// A layer x head table of one ratio, three significant digits, "-" where not measured.
Table ratio_table(const HeadMaps& maps, const std::vector<double>& values) {
  Table table;
  table.header.push_back("layer \\ head");
  for (long long h : maps.heads) table.header.push_back(fmt::format("{}", h));
  for (std::size_t i = 0; i < maps.layers.size(); ++i) {
    std::vector<std::string> row{fmt::format("{}", maps.layers[i])};
    for (std::size_t j = 0; j < maps.heads.size(); ++j) {
      const double v = values[i * maps.heads.size() + j];
      row.push_back(std::isnan(v) ? "-" : format_number(v, 3));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::string shortened(const std::string& text, std::size_t limit) {
  return text.size() <= limit ? text : text.substr(0, limit) + " ...";
}

std::string token_list(const std::vector<std::string>& tokens) {
  std::string out;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (k == 64) return out + " ...";
    out += (out.empty() ? "" : " ") + tokens[k];
  }
  return out;
}

}  // namespace

HeadMaps head_maps(const std::vector<HeadRatios>& heads, const std::string& source) {
  HeadMaps maps;
  for (const HeadRatios& h : heads) {
    maps.layers.push_back(h.layer);
    maps.heads.push_back(h.head);
  }
  for (auto* axis : {&maps.layers, &maps.heads}) {
    std::sort(axis->begin(), axis->end());
    axis->erase(std::unique(axis->begin(), axis->end()), axis->end());
  }
  const std::size_t cells = maps.layers.size() * maps.heads.size();
  // Every model has a few hundred heads at most; a file naming thousands of layers and heads is no probe's.
  if (cells > kMaxMapCells) {
    throw InputError(fmt::format("{}: {} layers x {} heads: a map of more than {} cells is no model's", source,
                                 maps.layers.size(), maps.heads.size(), kMaxMapCells));
  }
  maps.attention.assign(cells, std::nan(""));
  maps.gradient.assign(cells, std::nan(""));
  for (const HeadRatios& h : heads) {
    const std::size_t cell = index_in(maps.layers, h.layer) * maps.heads.size() + index_in(maps.heads, h.head);
    if (!std::isnan(maps.attention[cell])) {
      throw InputError(fmt::format("{}: layer {} head {} comes twice", source, h.layer, h.head));
    }
    maps.attention[cell] = h.attention;
    maps.gradient[cell] = h.gradient;
  }
  return maps;
}

ProbeOutput parse_probe_output(const std::string& text, const std::string& name) {
  const nlohmann::json document = records::parse_json(text, name);
  const records::ProbeOutput record = records::probe_output_from_json(document, name);
  ProbeOutput out;
  out.file = name;
  out.file_sha256 = sha256_hex(text);
  out.model_path = record.model.path;
  out.architecture = record.model.architecture;
  out.attention_activation = record.model.attention_activation;
  out.config_file = record.model.config_file;
  out.config_sha256 = record.model.config_sha256;
  const records::ProbeInputInfo& input = record.input;
  using Kind = records::ProbeInputInfo::Kind;
  out.input.emplace_back("input", std::string(records::input_kind_name(input.kind)));
  if (input.kind == Kind::text) out.input.emplace_back("text", shortened(input.text, 400));
  if (!input.file.empty()) out.input.emplace_back("input file", input.file);
  if (input.kind == Kind::random) {
    out.input.emplace_back("random scores", fmt::format("seed {}, length N = {}, sigma = {}", input.seed, input.length,
                                                        format_number(input.sigma)));
  }
  if (input.tokens && !input.tokens->empty()) out.input.emplace_back("tokens", token_list(*input.tokens));
  if (input.kind == Kind::text || input.kind == Kind::tokens) {
    out.input.emplace_back("token count", fmt::format("{}", input.token_ids.size()));
  }
  if (input.kind == Kind::text_file) {
    out.input.emplace_back("sentences (heads: mean over them)", fmt::format("{}", input.sentences.size()));
  }
  out.tool_version = record.tool_version;
  out.holds = record.verdict.holds;
  out.statement = record.verdict.statement;
  for (std::size_t row = 0; row < record.heads.size(); ++row) {
    const records::ProbeHeadRecord& head = record.heads[row].metrics;
    const auto fail = [&](const std::string& why) {
      throw InputError(fmt::format("{} heads[{}]: {}", name, row, why));
    };
    HeadRatios r{head.layer, head.head, head.softmax_over_sqrt_n, head.grad_over_half_sqrt_n};
    if (std::isnan(r.attention)) fail("\"softmax_over_sqrt_N\" is missing or null");
    if (std::isnan(r.gradient)) fail("\"grad_over_half_sqrt_N\" is missing or null");
    if (r.attention < 0 || r.gradient < 0) fail("a ratio of norms is negative");
    out.heads.push_back(r);
  }
  if (out.heads.empty()) throw InputError(fmt::format("{}: \"heads\" is empty: nothing was measured", name));
  head_maps(out.heads, name);  // refuses a head that comes twice before anything is drawn
  return out;
}

ProbeOutput parse_probe_csv(const std::string& text, const std::string& name) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> line_of;  // each row's line in the file, blank lines counted
  std::size_t start = 0, line_number = 0;
  while (start < text.size()) {
    ++line_number;
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string> cells;
    for (std::size_t from = 0;;) {
      const std::size_t comma = line.find(',', from);
      cells.emplace_back(line.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
    if (!line.empty()) {
      rows.push_back(std::move(cells));
      line_of.push_back(line_number);
    }
    start = end + 1;
  }
  if (rows.empty()) throw InputError(fmt::format("{}: empty: no header line of `attncheck probe --csv`", name));
  const std::vector<std::string>& header = rows.front();
  const auto column = [&](std::string_view key) -> std::optional<std::size_t> {
    const auto at = std::find(header.begin(), header.end(), key);
    if (at == header.end()) return std::nullopt;
    return static_cast<std::size_t>(at - header.begin());
  };
  const auto required = [&](std::string_view key) {
    const auto at = column(key);
    if (!at) {
      throw InputError(
          fmt::format("{}: the header line has no column \"{}\": not the output of `attncheck probe --csv` "
                      "(its header starts layer,head,N,...)",
                      name, key));
    }
    return *at;
  };
  const std::size_t layer = required("layer"), head = required("head"), length = required("N"),
                    softmax = required("softmax_fro"), grad = required("grad_fro");
  ProbeOutput out;
  out.file = name;
  out.file_sha256 = sha256_hex(text);
  const std::string unknown = "not in a probe --csv output";
  out.model_path = fmt::format("the model of {}", name);
  out.architecture = out.attention_activation = out.tool_version = unknown;
  out.config_file = out.config_sha256 = unknown;
  out.input.emplace_back("input", unknown);
  out.holds = true;
  out.statement =
      "every head of the CSV within Theorem 4.1's deterministic bounds: ||A||_F <= sqrt(N) and ||grad softmax(S)||_F "
      "<= sqrt(N)/2 (the tight form of the papers' 2 sqrt(N))";
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const std::vector<std::string>& cells = rows[r];
    const auto fail = [&](const std::string& why) {
      throw InputError(fmt::format("{} line {}: {}", name, line_of[r], why));
    };
    if (cells.size() != header.size()) {
      fail(fmt::format("{} cells, but the header line has {}", cells.size(), header.size()));
    }
    const auto number = [&](std::size_t c) {
      const std::string& cell = cells[c];
      double value = 0;
      const auto [end, error] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
      if (cell.empty() || error != std::errc() || end != cell.data() + cell.size() || !std::isfinite(value)) {
        fail(fmt::format("\"{}\" is {}: not a finite number", header[c],
                         cell.empty() ? "empty" : "'" + shortened(cell, 40) + "'"));
      }
      return value;
    };
    const auto integer = [&](std::size_t c, double least) {
      const double value = number(c);
      if (value != std::floor(value) || value < least || value > 1e15) {
        fail(fmt::format("\"{}\" is {}: not an integer >= {}", header[c], shortened(cells[c], 40), least));
      }
      return static_cast<long long>(value);
    };
    const long long n = integer(length, 1);
    const double sqrt_n = std::sqrt(static_cast<double>(n)), norm = number(softmax), jacobian = number(grad);
    if (norm < 0 || jacobian < 0) fail("a norm is negative");
    out.heads.push_back(HeadRatios{integer(layer, 0), integer(head, 0), norm / sqrt_n, jacobian / (sqrt_n / 2)});
    out.holds = out.holds && theory::within(norm, sqrt_n) && theory::within(jacobian, sqrt_n / 2);
  }
  if (out.heads.empty()) throw InputError(fmt::format("{}: a header line and no head: nothing was measured", name));
  head_maps(out.heads, name);  // refuses a head that comes twice before anything is drawn
  return out;
}

ProbeOutput read_probe_output(const std::filesystem::path& path) {
  if (path.extension() == ".csv") return parse_probe_csv(read_text_file(path), path.string());
  return parse_probe_output(read_text_file(path), path.string());
}

std::vector<HeadRatios> checkpoint_ratios(const std::vector<ProbeRecord>& records, const std::string& activation,
                                          const std::string& checkpoint) {
  // A later line for the same head replaces an earlier one, as in summarize_probe_log.
  std::map<std::pair<long long, long long>, HeadRatios> latest;
  for (const ProbeRecord& r : records) {
    if (r.checkpoint != checkpoint || r.activation.value_or("unknown") != activation) continue;
    const auto& m = r.metrics;
    const double sqrt_n = std::sqrt(static_cast<double>(m.N));
    latest[{m.layer, m.head}] = HeadRatios{m.layer, m.head, m.softmax.value / sqrt_n, m.softmax.grad / (sqrt_n / 2)};
  }
  std::vector<HeadRatios> out;
  for (const auto& [key, ratios] : latest) out.push_back(ratios);
  return out;
}

PlotSpec head_map_figure(const std::string& name, const std::string& title, std::vector<std::string> notes,
                         const HeadMaps& maps) {
  // One scale for both maps (and, the ratios being at most 1, for every map of a report): 0 to the bound.
  const double top = std::max(1.0, largest_ratio(maps));
  PlotSpec figure;
  figure.name = name;
  figure.title = title;
  figure.notes = std::move(notes);
  figure.columns = 2;
  PlotSpec attention;
  attention.title = "||A||_F / sqrt(N)";
  attention.x_label = "head";
  attention.y_label = "layer";
  attention.heat_map = heat_map_of(maps, maps.attention, top);
  PlotSpec gradient = attention;
  gradient.title = "||dA/dS||_F / (sqrt(N)/2)";
  gradient.heat_map = heat_map_of(maps, maps.gradient, top);
  attention.heat_map->colour_box = false;  // the one scale is drawn once, beside the right map
  attention.heat_map->scale_label.clear();
  figure.panels = {std::move(attention), std::move(gradient)};
  return figure;
}

void add_head_map_section(const std::vector<ProbeOutput>& outputs, bool with_plots, Document& document,
                          PendingFigures& pending) {
  auto& blocks = document.blocks;
  blocks.push_back(
      Heading{2, outputs.size() == 1 ? "Layer x head map of one probe run" : "Layer x head maps of probe runs",
              "head-maps"});
  blocks.push_back(Paragraph{
      "Each cell is one head's softmax attention on the input: ||A||_F / sqrt(N) and ||dA/dS||_F / (sqrt(N)/2), its "
      "norms divided by Theorem 4.1's deterministic bounds (exact, docs/THEORY.md), so 1 is the bound and no head "
      "can exceed it. Both maps share one colour scale. These are measurements of one model on one input, not "
      "estimates: they carry no standard error."});
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const ProbeOutput& run = outputs[k];
    const HeadMaps maps = head_maps(run.heads, run.file.string());
    blocks.push_back(Heading{3, run.model_path, fmt::format("head-map-{}", k + 1)});
    Facts facts{{{"probe output", run.file.string()},
                 {"probe output sha256", run.file_sha256},
                 {"model", run.model_path},
                 {"architecture", run.architecture},
                 {"trained activation", run.attention_activation},
                 {"config file", run.config_file.value_or("none (GGUF metadata)")},
                 {"config sha256", run.config_sha256.value_or("none")}}};
    for (const auto& item : run.input) facts.items.push_back(item);
    facts.items.emplace_back("attncheck version", run.tool_version);
    facts.items.emplace_back("verdict (exact)", fmt::format("{}: {}", run.holds ? "holds" : "violated", run.statement));
    facts.items.emplace_back("layers x heads", fmt::format("{} x {}", maps.layers.size(), maps.heads.size()));
    blocks.push_back(std::move(facts));
    if (with_plots) {
      // One fact a line, the path cut from the left: a figure does not wrap its lines.
      const std::string path =
          run.model_path.size() <= 70 ? run.model_path : "..." + run.model_path.substr(run.model_path.size() - 67);
      std::vector<std::string> notes{fmt::format("model {} ({}, trained with {})", path, run.architecture,
                                                 run.attention_activation),
                                     fmt::format("config sha256 {}", run.config_sha256.value_or("none")),
                                     fmt::format("probe output sha256 {}", run.file_sha256)};
      pending.add(head_map_figure(fmt::format("head-map-{}", k + 1),
                                  "Softmax norms per head relative to "
                                  "their bounds",
                                  std::move(notes), maps),
                  "Layer x head heat maps of ||A||_F / sqrt(N) (left) and ||dA/dS||_F / "
                  "(sqrt(N)/2) (right), one colour scale; the bound is 1.",
                  blocks);
    }
    blocks.push_back(Paragraph{"||A||_F / sqrt(N) per layer (rows) and head (columns):"});
    blocks.push_back(ratio_table(maps, maps.attention));
    blocks.push_back(Paragraph{"||dA/dS||_F / (sqrt(N)/2) per layer (rows) and head (columns):"});
    blocks.push_back(ratio_table(maps, maps.gradient));
  }
}

}  // namespace attncheck::reports
