#pragma once
// The results of examples/vit_digits.py (RUN/vit-results.json, docs/results-format.md): a small vision
// transformer trained with the papers' activations, as the papers' Figures 1-3 and Table 1 need them.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

inline constexpr const char* kVitResultsName = "vit-results.json";

struct VitTracePoint {
  long long step = 0, layer = 0;
  std::optional<double> attention_fro, jacobian_fro;  // mean over heads; null when not finite
};

struct VitRun {
  std::string experiment;       // "activations" | "scale-sweep"
  std::string activation;       // "softmax" | "poly3" | "poly3_scaled" | "identity" | "identity_scaled"
  std::optional<double> scale;  // c of c * S^p; none for softmax
  long long N = 0, patch = 0, seed = 0, steps = 0, test_size = 0;
  std::optional<long long> image_side;   // 8, or 16 for upsampled digits (absent in the first results)
  std::optional<double> accuracy;        // none when the run diverged
  std::optional<long long> diverged_at;  // the step whose loss was not finite
  std::vector<VitTracePoint> trace;
};

struct VitResults {
  std::string command, date;
  double wall_seconds = 0;
  std::string model = "small";  // "small" (the digits model) or "vit-tiny" (the papers' 12 x 3 x 192)
  // Where the example records them (absent in earlier results): the data's plain caption, the device and its
  // training precision, how the norms were measured, the run plan, and how many planned runs it skipped.
  std::optional<std::string> dataset, device, dtype, norms, plan;
  std::optional<long long> runs_planned, runs_skipped;
  std::vector<VitRun> runs;
};

// Throws theory::InputError naming the file and run for anything malformed or out of range.
VitResults parse_vit_results(const std::string& text, const std::string& name);
VitResults read_vit_results(const std::filesystem::path& path);

// One trained-attention map of `attncheck probe --attention-out` (or of the example's heat-map files): tensor
// `tensor` ([heads, N, N], F64 or F32) of a safetensors file, head `head`.
struct AttentionMatrix {
  long long N = 0;
  std::vector<double> values;  // row-major N x N
};
// Reads head `head` of tensor `tensor` of a safetensors file; a report given none lists the map files and draws
// none of them.
using AttentionMapReader =
    std::function<AttentionMatrix(const std::filesystem::path& path, const std::string& tensor, long long head)>;
// The reader of the probes' safetensors files.
AttentionMapReader safetensors_attention_maps();

}  // namespace attncheck::reports
