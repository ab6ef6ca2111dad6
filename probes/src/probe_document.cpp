#include "attncheck/probes/probe_document.hpp"

#include <algorithm>

namespace attncheck::probes {

namespace {

records::ProbeInputInfo::Kind input_kind(ProbeInput::Kind kind) {
  using Kind = records::ProbeInputInfo::Kind;
  switch (kind) {
    case ProbeInput::Kind::text: return Kind::text;
    case ProbeInput::Kind::tokens: return Kind::tokens;
    case ProbeInput::Kind::random: return Kind::random;
    case ProbeInput::Kind::pixels: return Kind::pixels;
    case ProbeInput::Kind::image: return Kind::image;
  }
  return Kind::random;
}

std::optional<std::vector<std::string>> token_strings(const ProbeResult& result) {
  if (result.token_strings.empty()) return std::nullopt;
  return result.token_strings;
}

records::ProbeModelInfo model_info(const std::filesystem::path& model, const ProbeResult& result) {
  const auto& c = result.config;
  records::ProbeModelInfo info;
  info.path = model.string();
  info.architecture = std::string(architecture_name(c));
  info.layers = c.layers;
  info.heads = c.heads;
  info.head_dim = c.head_dim();
  info.hidden = c.hidden;
  info.attention_activation = c.attention_activation;
  if (!result.config_file.empty()) {
    info.config_file = result.config_file.string();
    info.config_sha256 = result.config_sha256;
  }
  return info;
}

}  // namespace

bool within_every_bound(const HeadMetrics& metrics) {
  return within_theorem_bounds(metrics) && within_cross_norm_bounds(metrics);
}

records::ProbeOutput probe_document(const std::filesystem::path& model, const ProbeInput& input,
                                    const ProbeResult& result, bool cross_norm) {
  records::ProbeOutput out;
  out.model = model_info(model, result);
  records::ProbeInputInfo& in = out.input;
  in.kind = input_kind(input.kind);
  switch (input.kind) {
    case ProbeInput::Kind::text: in.text = input.text; break;
    case ProbeInput::Kind::tokens: in.file = input.tokens_file.string(); break;
    case ProbeInput::Kind::pixels: in.file = input.pixels_file.string(); break;
    case ProbeInput::Kind::image: in.file = input.image_file.string(); break;
    case ProbeInput::Kind::random:
      in.seed = input.seed;
      in.length = result.random_length;
      in.sigma = result.random_sigma;
      break;
  }
  in.token_ids = result.ids;
  in.tokens = token_strings(result);
  in.height = result.image_height;
  in.width = result.image_width;
  if (!result.preprocessing.empty()) in.preprocessing = result.preprocessing;
  out.tool_version = ATTNCHECK_VERSION;
  out.precision = result.float32_products ? "mixed" : "double";
  out.float_kernels = result.float_kernels;
  out.mixed_against_double = result.mixed_against_double;
  out.verdict.statement = std::string(
                              "every measured head within Theorem 4.1's deterministic bounds: ||A||_F <= "
                              "sqrt(N) and ||grad softmax(S)||_F <= sqrt(N)/2 (the tight form of the "
                              "papers' 2 sqrt(N))") +
                          (cross_norm ? "; and the cross-normalization bounds at mix alpha 1: ||O||_F <= "
                                        "sqrt(N d_v), ||dO/dV||_F <= sqrt(N d_v / 8)"
                                      : "");
  for (const auto& m : result.heads) {
    if (!within_every_bound(m)) out.verdict.heads_above_a_bound.push_back({std::nullopt, m.layer, m.head});
    out.heads.push_back({head_record(m), std::nullopt});
  }
  out.verdict.holds = out.verdict.heads_above_a_bound.empty();
  return out;
}

SentencesProbe probe_sentences(const std::filesystem::path& model, const std::vector<std::string>& sentences,
                               std::optional<std::int64_t> max_tokens, const std::vector<int>& layers,
                               const std::vector<int>& heads, bool cross_norm, const ProbeProgress& progress,
                               int threads) {
  SentencesProbe probe;
  probe.sentences = sentences;
  const std::size_t columns = csv_columns(cross_norm).size();
  for (std::size_t k = 0; k < sentences.size(); ++k) {
    ProbeInput input;
    input.kind = ProbeInput::Kind::text;
    input.text = sentences[k];
    if (max_tokens) input.max_tokens = *max_tokens;
    const auto sentence_progress = [&, k](std::int64_t done, std::int64_t total) {
      progress(static_cast<std::int64_t>(k) * total + done, static_cast<std::int64_t>(sentences.size()) * total);
    };
    ProbeResult result = probe_model(model, input, layers, heads, false, cross_norm,
                                     progress ? ProbeProgress(sentence_progress) : ProbeProgress{}, threads);
    if (probe.per_head.empty()) probe.per_head.assign(result.heads.size(), std::vector<theory::Accumulator>(columns));
    for (std::size_t h = 0; h < result.heads.size(); ++h) {
      const auto values = csv_values(result.heads[h]);
      for (std::size_t v = 0; v < values.size(); ++v) probe.per_head[h][v].add(values[v]);
      if (!within_every_bound(result.heads[h])) {
        probe.above.push_back({static_cast<std::int64_t>(k + 1), result.heads[h].layer, result.heads[h].head});
      }
    }
    probe.results.push_back(std::move(result));
  }
  return probe;
}

records::ProbeOutput sentences_document(const std::filesystem::path& model, const std::filesystem::path& text_file,
                                        const SentencesProbe& probe, bool cross_norm) {
  const ProbeResult& first = probe.results.front();
  records::ProbeOutput document;
  document.model = model_info(model, first);
  document.input.kind = records::ProbeInputInfo::Kind::text_file;
  document.input.file = text_file.string();
  for (std::size_t k = 0; k < probe.sentences.size(); ++k) {
    document.input.sentences.push_back({probe.sentences[k], probe.results[k].ids, token_strings(probe.results[k])});
  }
  document.tool_version = ATTNCHECK_VERSION;
  document.verdict.holds = probe.above.empty();
  document.verdict.heads_above_a_bound = probe.above;
  document.verdict.statement =
      "every measured head, on every sentence, within Theorem 4.1's deterministic "
      "bounds: ||A||_F <= sqrt(N) and ||grad softmax(S)||_F <= sqrt(N)/2";
  const std::vector<std::string> keys = csv_columns(cross_norm);
  const auto n_index = static_cast<std::size_t>(std::find(keys.begin(), keys.end(), "N") - keys.begin());
  for (std::size_t h = 0; h < probe.per_head.size(); ++h) {
    // Each value the mean over the sentences; layer, head and the shapes are the same in every sentence.
    std::vector<double> means, errors;
    for (const auto& accumulator : probe.per_head[h]) {
      means.push_back(accumulator.mean());
      errors.push_back(accumulator.standard_error());
    }
    records::ProbeSentenceMeans over{static_cast<std::int64_t>(probe.sentences.size()), means[n_index], errors[n_index],
                                     records::probe_head_from_values(errors, cross_norm)};
    document.heads.push_back({records::probe_head_from_values(means, cross_norm), std::move(over)});
  }
  return document;
}

}  // namespace attncheck::probes
