#pragma once
// A probe's result as the document `attncheck probe --json` prints (records/probe_record.hpp): what was probed,
// on what input, with which version, the verdict on the deterministic bounds and one row per head; and the same
// over the sentences of a text file, each head's values as means with their standard errors.

#include "attncheck/probes/live_metrics.hpp"
#include "attncheck/records/probe_record.hpp"
#include "attncheck/theory/accumulator.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::probes {

// Theorem 4.1's bounds on the head and, where the what-if was measured, the cross-normalization bounds at mix 1.
bool within_every_bound(const HeadMetrics& metrics);

// The document of one probe of MODEL on `input`.
records::ProbeOutput probe_document(const std::filesystem::path& model, const ProbeInput& input,
                                    const ProbeResult& result, bool cross_norm);

// Every sentence probed alone: one forward pass each, so no padding mask can leak between sentences of different
// lengths.
struct SentencesProbe {
  std::vector<std::string> sentences;
  std::vector<ProbeResult> results;  // one per sentence
  // Per head row (layer, head order) and per value of csv_columns(cross_norm): its mean over the sentences.
  std::vector<std::vector<theory::Accumulator>> per_head;
  std::vector<records::ProbeHeadAbove> above;  // the sentence (from 1), layer and head of each value above a bound
};
// `max_tokens` keeps the first tokens of each sentence (an error when one has fewer); progress counts the heads of
// every sentence.
SentencesProbe probe_sentences(const std::filesystem::path& model, const std::vector<std::string>& sentences,
                               std::optional<std::int64_t> max_tokens, const std::vector<int>& layers,
                               const std::vector<int>& heads, bool cross_norm, const ProbeProgress& progress = {},
                               int threads = 1);
// The document of a probe over the sentences of `text_file`: each head's row the means over the sentences, with
// their standard errors beside them.
records::ProbeOutput sentences_document(const std::filesystem::path& model, const std::filesystem::path& text_file,
                                        const SentencesProbe& probe, bool cross_norm);

}  // namespace attncheck::probes
