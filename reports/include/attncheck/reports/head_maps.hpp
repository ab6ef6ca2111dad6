#pragma once
// Layer x head maps of each head's softmax norms relative to Theorem 4.1's exact bounds: ||A||_F / sqrt(N) and
// ||dA/dS||_F / (sqrt(N)/2), both at most 1 (docs/THEORY.md). Read from one `attncheck probe --json` output,
// or from chosen checkpoints of a probe log.

#include "attncheck/reports/document.hpp"
#include "attncheck/reports/plots.hpp"
#include "attncheck/reports/probe_log.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::reports {

struct PendingFigures;

struct HeadRatios {
  long long layer = 0, head = 0;
  double attention = 0;  // ||A||_F / sqrt(N)
  double gradient = 0;   // ||dA/dS||_F / (sqrt(N)/2)
};

struct HeadMaps {
  std::vector<long long> layers, heads;     // the indices measured, ascending: the rows and the columns
  std::vector<double> attention, gradient;  // row-major [layer][head]; NaN where a head was not measured
};

// Throws theory::InputError when one layer and head comes twice.
HeadMaps head_maps(const std::vector<HeadRatios>& heads, const std::string& source);

// One `attncheck probe --json` document (docs/probe-output.schema.json): what identifies the run, and the ratios.
struct ProbeOutput {
  std::filesystem::path file;
  std::string file_sha256;
  std::string model_path, architecture, attention_activation;
  std::optional<std::string> config_file, config_sha256;
  std::vector<std::pair<std::string, std::string>> input;  // what the input was, as name: value facts
  std::string tool_version;
  bool holds = false;
  std::string statement;
  std::vector<HeadRatios> heads;
};

// Throws theory::InputError naming `name` and the key when the text is not such a document.
ProbeOutput parse_probe_output(const std::string& text, const std::string& name);
// `attncheck probe --csv` output: the heads' norms without the model's provenance, which the CSV does not hold.
ProbeOutput parse_probe_csv(const std::string& text, const std::string& name);
// By its extension: a .csv file is read as probe --csv output, anything else as probe --json output.
ProbeOutput read_probe_output(const std::filesystem::path& path);

// The ratios of one checkpoint of a probe log, for the model trained with `activation`.
std::vector<HeadRatios> checkpoint_ratios(const std::vector<ProbeRecord>& records, const std::string& activation,
                                          const std::string& checkpoint);

// The figure of two heat maps side by side, on one colour scale from 0 to max(1, the largest ratio) with the
// bound at 1 marked on the colour bar; `notes` (the provenance) are written under the title.
PlotSpec head_map_figure(const std::string& name, const std::string& title, std::vector<std::string> notes,
                         const HeadMaps& maps);

// A section per probe output: its provenance, both heat maps and both tables.
void add_head_map_section(const std::vector<ProbeOutput>& outputs, bool with_plots, Document& document,
                          PendingFigures& pending);

}  // namespace attncheck::reports
