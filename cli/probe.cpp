// attncheck probe: live attention norms of a real checkpoint, per layer and head, against the theory.

#include "number_options.hpp"
#include "progress.hpp"
#include "subcommand.hpp"

#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/probes/live_metrics.hpp"
#include "attncheck/probes/probe_document.hpp"
#include "attncheck/theory/accumulator.hpp"
#include "attncheck/probes/watch.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_output.hpp"
#include "attncheck/theory/expression.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <unistd.h>

namespace attncheck::cli {
namespace {

struct ProbeOptions {
  std::string model;
  std::string text;
  std::string text_file;
  bool text_given = false;  // an empty --text is a mistake, not a request for the default random input
  std::string tokens;
  std::string pixels;
  std::string image;
  bool random = false;
  std::int64_t length = 128;
  bool length_given = false;
  std::string length_text;  // as given: one length, or a grid (32:8192:x2, 32,64,128) that sets `lengths`
  std::vector<std::int64_t> lengths;
  std::uint64_t seed = 0;
  std::vector<int> layers, heads;
  bool json = false, csv = false;
  bool cross_norm = false;
  std::vector<std::string> what_if;
  std::string attention_out;
  std::string watch;
  double interval = 5;
  std::optional<double> until_idle;
  std::string out;
  std::vector<std::string> columns;
  int threads = 0;
  std::string precision = "double";
};

// One length (any positive 64-bit count: the model refuses what exceeds its positions, naming both), or a grid of
// them in increasing order.
std::vector<std::int64_t> parse_lengths(const std::string& text) {
  if (text.find_first_of(":,") != std::string::npos) {
    std::vector<std::int64_t> lengths;
    for (theory::Index n : monte_carlo::parse_index_grid(text, "--length")) lengths.push_back(n);
    std::sort(lengths.begin(), lengths.end());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    return lengths;
  }
  std::int64_t length = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), length);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || length < 1) {
    throw UsageError(fmt::format("--length: '{}' is not a positive integer nor a grid (32:8192:x2, 32,64,128)",
                                 text.size() > 40 ? text.substr(0, 40) + "..." : text));
  }
  return {length};
}

probes::ProbeInput make_input(const ProbeOptions& o) {
  if (o.text_given && o.text.empty()) {
    throw UsageError("--text is empty: give the text to probe (--random for Gaussian input)");
  }
  const int chosen =
      !o.text.empty() + !o.text_file.empty() + !o.tokens.empty() + !o.pixels.empty() + !o.image.empty() + o.random;
  if (chosen > 1) throw UsageError("choose one input: --text, --text-file, --tokens, --pixels, --image or --random");
  if (o.length_given && (!o.pixels.empty() || !o.image.empty())) {
    throw UsageError("--length counts tokens or random positions; an image's positions are 1 + its patches");
  }
  probes::ProbeInput input;
  input.seed = o.seed;
  input.random_length = o.length;
  input.random_length_chosen = o.length_given;
  if (o.length_given && (!o.text.empty() || !o.tokens.empty())) {
    if (o.length <= 0) throw UsageError(fmt::format("--length {} is not a positive number of tokens", o.length));
    input.max_tokens = o.length;
  }
  if (!o.text.empty()) {
    input.kind = probes::ProbeInput::Kind::text;
    input.text = o.text;
  } else if (!o.tokens.empty()) {
    input.kind = probes::ProbeInput::Kind::tokens;
    input.tokens_file = o.tokens;
  } else if (!o.pixels.empty()) {
    input.kind = probes::ProbeInput::Kind::pixels;
    input.pixels_file = o.pixels;
  } else if (!o.image.empty()) {
    input.kind = probes::ProbeInput::Kind::image;
    input.image_file = o.image;
  } else {
    input.kind = probes::ProbeInput::Kind::random;
  }
  return input;
}

// A column value as printed: a non-finite one (x^3 of large scores overflows double precision) is never shown
// as a plain number but as the word with '!', and counted so that a note on stderr explains it.
class Cells {
 public:
  std::string operator()(double value, const char* format) {
    if (std::isfinite(value)) return fmt::format(fmt::runtime(format), value);
    ++non_finite_;
    return std::isnan(value) ? "nan!" : value > 0 ? "inf!" : "-inf!";
  }
  int non_finite() const { return non_finite_; }

 private:
  int non_finite_ = 0;
};

// A column of the table: its --columns key, a header that says what it is, and a line saying what it is
// measured against.
struct TableColumn {
  const char* key;
  const char* header;
  const char* format;
  double (*value)(const probes::HeadMetrics&);
  const char* meaning;
};

const std::vector<TableColumn>& all_table_columns() {
  using M = probes::HeadMetrics;
  static const std::vector<TableColumn> columns = {
      {"A", "|A|_F", "{:.4f}", [](const M& m) { return m.softmax.value; }, "||softmax(S)||_F"},
      {"A_sqrtN", "|A|_F/sqrt(N)", "{:.4f}", [](const M& m) { return m.softmax.value / m.sqrt_n; },
       "against Theorem 4.1's bound sqrt(N): at most 1, 1 for one-hot rows"},
      {"grad", "|dA/dS|_F", "{:.4f}", [](const M& m) { return m.softmax.grad; }, "||grad softmax(S)||_F"},
      {"grad_tight", "|dA/dS|_F/(sqrt(N)/2)", "{:.4f}", [](const M& m) { return m.softmax.grad / m.grad_tight_bound; },
       "against the tight bound sqrt(N)/2 (the exit code's test): at most 1"},
      {"grad_paper", "|dA/dS|_F/(2sqrt(N))", "{:.4f}", [](const M& m) { return m.softmax.grad / m.grad_paper_bound; },
       "against the papers' bound 2 sqrt(N)"},
      {"dWq", "|dA/dWq|_F", "{:.4g}", [](const M& m) { return m.softmax.dWq; },
       "||dA/dW_Q||_F, the Jacobian in the query weights (no bound to compare with)"},
      {"dWk", "|dA/dWk|_F", "{:.4g}", [](const M& m) { return m.softmax.dWk; },
       "||dA/dW_K||_F, the Jacobian in the key weights (no bound to compare with)"},
      {"max_S", "max|S|", "{:.3f}", [](const M& m) { return m.score_max_abs; }, "largest scaled score"},
      {"H", "H(A)", "{:.3f}", [](const M& m) { return m.softmax_entropy; },
       "the softmax attention's entropy in nats, mean over rows: 0 for one-hot rows, log N for uniform ones"},
      {"S", "|S|_F", "{:.4g}", [](const M& m) { return m.scores_fro; }, "||S||_F of the scaled scores"},
      {"iid_S", "iid |S|_F", "{:.4g}", [](const M& m) { return m.iid_scores_fro; },
       "sqrt(E||S||_F^2) of the i.i.d. Gaussian model with this layer's sigma_x, sigma_t"},
      {"S3_sqrtN", "|S^3|_F/sqrt(N)", "{:.4g}", [](const M& m) { return m.poly3_scaled.value; },
       "what x^3/sqrt(N) attention would give on the same scores; compare with softmax's |A|_F (column A)"},
      {"iid_S3_sqrtN", "iid |S^3|_F/sqrt(N)", "{:.4g}", [](const M& m) { return m.iid_poly3_scaled_fro; },
       "the same for the i.i.d. Gaussian model with this layer's sigma_x, sigma_t"},
      {"relu_N", "|relu(S)|_F/N", "{:.4f}", [](const M& m) { return m.relu_n.value; },
       "what relu(x)/N attention would give on the same scores; compare with softmax's |A|_F (column A)"},
  };
  return columns;
}

const std::vector<std::string>& default_columns() {
  static const std::vector<std::string> keys = {"A_sqrtN", "grad_tight", "grad_paper", "S3_sqrtN", "relu_N"};
  return keys;
}

std::string column_keys() {
  std::vector<std::string> keys;
  for (const auto& column : all_table_columns()) keys.emplace_back(column.key);
  return fmt::format("{}", fmt::join(keys, ","));
}

const TableColumn& table_column(const std::string& key) {
  for (const auto& column : all_table_columns()) {
    if (key == column.key) return column;
  }
  throw UsageError(fmt::format("--columns: unknown column '{}' (known: {}, or all)", key, column_keys()));
}

// The --columns list as given (checked), every column for "all", the essential ratios when empty.
std::vector<std::string> table_columns(const std::vector<std::string>& requested) {
  if (requested.empty()) return default_columns();
  if (requested.size() == 1 && requested[0] == "all") {
    std::vector<std::string> keys;
    for (const auto& column : all_table_columns()) keys.emplace_back(column.key);
    return keys;
  }
  for (const auto& key : requested) table_column(key);
  return requested;
}

void note_non_finite(int count, const char* how) {
  if (count == 0) return;
  fmt::print(stderr,
             "attncheck probe: note: {} values are not finite ({}): an activation of scores this large overflows "
             "double precision; the softmax norms and bounds are unaffected\n",
             count, how);
}

// The heads of these results as CSV rows under one header line (`--csv`); a non-finite value is an empty cell,
// which CSV readers take as missing, never a plain "inf".
void print_csv(const std::vector<const probes::ProbeResult*>& results, bool cross_norm) {
  fmt::print("{}\n", fmt::join(probes::csv_columns(cross_norm), ","));
  int non_finite = 0;
  for (const probes::ProbeResult* result : results) {
    for (const auto& m : result->heads) {
      std::vector<std::string> cells;
      for (double v : probes::csv_values(m)) {
        non_finite += std::isfinite(v) ? 0 : 1;
        cells.push_back(std::isfinite(v) ? fmt::format("{}", v) : std::string());
      }
      fmt::print("{}\n", fmt::join(cells, ","));
    }
  }
  note_non_finite(non_finite, "left empty");
}

void print_model_line(const probes::ModelConfig& c) {
  fmt::print("{} model: {} layers, {} heads of dimension {}, D = {}; trained attention: {}; {} attention\n",
             probes::architecture_name(c), c.layers, c.heads, c.head_dim(), c.hidden, c.attention_activation,
             c.causal ? "causal" : "bidirectional");
}

// Right-aligned columns as wide as their widest cell or header.
void print_columns(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& cells) {
  std::vector<std::size_t> widths;
  for (std::size_t k = 0; k < headers.size(); ++k) {
    std::size_t width = headers[k].size();
    for (const auto& line : cells) width = std::max(width, line[k].size());
    widths.push_back(width);
  }
  const auto print_line = [&](const std::vector<std::string>& line) {
    std::string text;
    for (std::size_t k = 0; k < line.size(); ++k) text += fmt::format("{}{:>{}}", k ? "  " : "", line[k], widths[k]);
    fmt::print("{}\n", text);
  };
  print_line(headers);
  for (const auto& line : cells) print_line(line);
}

// The table's answer in three lines: the largest ratios to Theorem 4.1's bounds and where, how many heads are at a
// bound, and whether every head is within them (the exit code's test).
void print_summary(const probes::ProbeResult& result) {
  if (result.heads.empty()) return;
  struct Largest {
    double ratio = -1;
    int layer = 0, head = 0;
  };
  Largest value, gradient;
  int at_bound = 0, beyond = 0;
  for (const auto& m : result.heads) {
    const double a = m.softmax.value / m.sqrt_n, g = m.softmax.grad / (m.sqrt_n / 2);
    if (a > value.ratio) value = {a, m.layer, m.head};
    if (g > gradient.ratio) gradient = {g, m.layer, m.head};
    // within a thousandth of a bound: rows (nearly) one-hot, or a Jacobian as large as a row allows
    if (a >= 0.999 || g >= 0.999) ++at_bound;
    if (!probes::within_theorem_bounds(m)) ++beyond;
  }
  fmt::print(
      "summary over {} heads: largest |A|_F/sqrt(N) {:.4f} (layer {}, head {}); largest "
      "|dA/dS|_F/(sqrt(N)/2) {:.4f} (layer {}, head {}); {} head{} within 0.1% of a bound\n",
      result.heads.size(), value.ratio, value.layer, value.head, gradient.ratio, gradient.layer, gradient.head,
      at_bound, at_bound == 1 ? "" : "s");
  if (beyond == 0) {
    fmt::print("verdict: Theorem 4.1's bounds hold on every head measured (exit 0)\n");
  } else {
    fmt::print("verdict: a bound is exceeded on {} head{} (exit 1; they are named on stderr)\n", beyond,
               beyond == 1 ? "" : "s");
  }
}

void print_table(const probes::ProbeResult& result, const probes::ProbeInput& input,
                 const std::vector<std::string>& columns, bool cross_norm) {
  const auto& c = result.config;
  const bool vision = probes::is_vision(c);
  print_model_line(c);
  fmt::print("{}", probes::describe_family(c));
  if (result.float32_products) {
    fmt::print(
        "precision: mixed (the forward pass in float32 where its time goes, on the {} kernels; every norm in double: "
        "within about 1e-5 relative of double precision, docs/usage.md; --precision compare measures it)\n",
        result.float_kernels);
  }
  if (input.kind == probes::ProbeInput::Kind::random) {
    fmt::print("input: {} Gaussian embeddings, sigma = {:.4g} (RMS of the {} embeddings), seed {}\n",
               result.random_length, result.random_sigma, vision ? "position" : "token", input.seed);
  } else if (input.kind == probes::ProbeInput::Kind::pixels || input.kind == probes::ProbeInput::Kind::image) {
    const std::int64_t P = c.patch_size;
    fmt::print(
        "input: {} x {} pixels from {}: {} x {} patches, N = {} positions (CLS first, then the patches row by "
        "row)\n",
        result.image_height, result.image_width,
        input.kind == probes::ProbeInput::Kind::pixels ? input.pixels_file.string() : input.image_file.string(),
        result.image_height / P, result.image_width / P, 1 + (result.image_height / P) * (result.image_width / P));
    if (!result.preprocessing.empty()) fmt::print("image preprocessing: {}\n", result.preprocessing);
  } else {
    fmt::print("input: {} tokens: {}\n", result.ids.size(), fmt::join(result.ids, " "));
    if (!result.token_strings.empty()) {
      std::vector<std::string> shown;
      // A vocabulary must not send escape sequences to the terminal, nor break the line.
      for (const auto& token : result.token_strings) shown.push_back(attncheck::theory::printable(token, true));
      fmt::print("tokens: {}\n", fmt::join(shown, " "));
    }
  }
  fmt::print(
      "Norms are Frobenius norms of one head's map for this input; derivatives are in the weights W_Q, "
      "W_K (biases included in the scores). A = softmax(S), S the scaled scores.\n");
  std::vector<const TableColumn*> shown;
  for (const auto& key : columns) shown.push_back(&table_column(key));
  std::vector<std::vector<std::string>> cells;
  Cells cell;
  for (const auto& m : result.heads) {
    std::vector<std::string> line = {fmt::format("{}", m.layer), fmt::format("{}", m.head), fmt::format("{}", m.N)};
    for (const auto* column : shown) line.push_back(cell(column->value(m), column->format));
    if (cross_norm) {
      line.push_back(fmt::format("{}", m.d_v));
      for (const auto& what_if : m.cross_norm) {
        line.push_back(cell(what_if.output_fro, "{:.4g}"));
        if (what_if.mix == 1.0) line.push_back(cell(what_if.output_fro / m.cross_norm_output_bound, "{:.4f}"));
        line.push_back(cell(what_if.grad_values_fro, "{:.4g}"));
        if (what_if.mix == 1.0) {
          line.push_back(cell(what_if.grad_values_fro / m.cross_norm_grad_values_bound, "{:.4f}"));
        }
      }
    }
    cells.push_back(std::move(line));
  }
  std::vector<std::string> headers = {"layer", "head", "N"};
  for (const auto* column : shown) headers.push_back(column->header);
  if (cross_norm && !result.heads.empty()) {
    headers.push_back("d_v");
    for (const auto& what_if : result.heads.front().cross_norm) {
      headers.push_back(fmt::format("|O|_F a={:g}", what_if.mix));
      if (what_if.mix == 1.0) headers.push_back("|O|_F/sqrt(N d_v)");
      headers.push_back(fmt::format("|dO/dV|_F a={:g}", what_if.mix));
      if (what_if.mix == 1.0) headers.push_back("|dO/dV|_F/sqrt(N d_v/8)");
    }
  }
  print_columns(headers, cells);
  for (const auto* column : shown) fmt::print("  {}: {}\n", column->header, column->meaning);
  if (cross_norm) {
    fmt::print(
        "  cross-normalization what-if (C9): O = A P with A = softmax(S) and P = a softmax_col(V) + (1 - a) V, "
        "V = X W_V + b_V the head's values (d_v columns), at mix a (0: standard attention); "
        "|O|_F/sqrt(N d_v) and |dO/dV|_F/sqrt(N d_v/8) against their tight bounds at a = 1: at most 1\n");
  }
  if (columns == default_columns()) fmt::print("  more columns: --columns all, or a comma list of {}\n", column_keys());
  note_non_finite(cell.non_finite(), "marked inf! or nan!");
}

// The --what-if expressions beside softmax, head by head: their norms on the same scores, and the ratio to softmax's.
void print_what_if(const probes::ProbeResult& result) {
  if (result.heads.empty() || result.heads.front().what_if.empty()) return;
  for (std::size_t k = 0; k < result.heads.front().what_if.size(); ++k) {
    fmt::print("\nwhat-if phi(x) = {} on each head's own scores (x = lambda q.k, F = phi(S) elementwise):\n",
               result.heads.front().what_if[k].first);
    std::vector<std::vector<std::string>> cells;
    for (const auto& m : result.heads) {
      const probes::NormSet& w = m.what_if[k].second;
      cells.push_back({fmt::format("{}", m.layer), fmt::format("{}", m.head), fmt::format("{}", m.N),
                       fmt::format("{:.6g}", w.value), fmt::format("{:.4g}", w.value / m.softmax.value),
                       fmt::format("{:.6g}", w.grad), fmt::format("{:.4g}", w.grad / m.softmax.grad)});
    }
    print_columns({"layer", "head", "N", "|phi(S)|_F", "/ |A|_F", "|dphi/dS|_F", "/ |grad softmax|_F"}, cells);
  }
}

// Theorem 4.1's bounds are deterministic: a live value above them is a violation (exit 1).
bool bounds_hold(const probes::ProbeResult& result) {
  bool hold = true;
  for (const auto& m : result.heads) {
    if (!probes::within_theorem_bounds(m)) {
      fmt::print(stderr, "layer {} head {}: a softmax bound is exceeded\n", m.layer, m.head);
      hold = false;
    }
    if (!probes::within_cross_norm_bounds(m)) {
      fmt::print(stderr, "layer {} head {}: a cross-normalization bound (mix alpha 1) is exceeded\n", m.layer, m.head);
      hold = false;
    }
  }
  return hold;
}

// The sentences of a --text-file, one per line (a final newline ends the last one); an empty line is an
// error naming it, as an empty --text is.
std::vector<std::string> read_sentences(const std::string& path) {
  const std::string text = records::read_text_file(path);
  std::vector<std::string> sentences;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      throw UsageError(
          fmt::format("--text-file {}: line {} is empty (one sentence per line)", path, sentences.size() + 1));
    }
    sentences.push_back(std::move(line));
    begin = end + 1;
  }
  if (sentences.size() < 2) {
    throw UsageError(fmt::format("--text-file {}: {} sentence(s); a standard error over sentences needs at least 2",
                                 path, sentences.size()));
  }
  return sentences;
}

int run_text_file(const ProbeOptions& o, probes::ProbeProgress progress) {
  const probes::SentencesProbe probe =
      probes::probe_sentences(o.model, read_sentences(o.text_file),
                              o.length_given ? std::optional<std::int64_t>(o.length) : std::nullopt, o.layers, o.heads,
                              o.cross_norm, progress, o.threads);
  for (const records::ProbeHeadAbove& above : probe.above) {
    fmt::print(stderr, "sentence {} layer {} head {}: a softmax bound is exceeded\n", *above.sentence, above.layer,
               above.head);
  }
  const bool hold = probe.above.empty();
  if (o.json) {
    std::cout << records::json_text(records::to_json(
                                        probes::sentences_document(o.model, o.text_file, probe, o.cross_norm)),
                                    1)
              << "\n";
    return hold ? kExitHolds : kExitViolated;
  }
  const auto& sentences = probe.sentences;
  const auto& results = probe.results;
  const auto& first = results.front();
  const auto& c = first.config;
  fmt::print("{} model: {} layers, {} heads of dimension {}, D = {}; trained attention: {}\n",
             probes::architecture_name(c), c.layers, c.heads, c.head_dim(), c.hidden, c.attention_activation);
  std::int64_t fewest = INT64_MAX, most = 0;
  for (const auto& r : results) {
    fewest = std::min<std::int64_t>(fewest, static_cast<std::int64_t>(r.ids.size()));
    most = std::max<std::int64_t>(most, static_cast<std::int64_t>(r.ids.size()));
  }
  fmt::print("input: {} sentences from {}, {} to {} tokens each, one forward pass per sentence\n", sentences.size(),
             o.text_file, fewest, most);
  fmt::print("Each cell: mean over the sentences +- its standard error (sample standard deviation / sqrt({})).\n",
             sentences.size());
  const auto columns = table_columns(o.columns);
  std::vector<std::string> headers = {"layer", "head", "mean N"};
  for (const auto& key : columns) headers.push_back(table_column(key).header);
  std::vector<std::vector<std::string>> cells;
  Cells cell;
  const std::vector<std::string> keys = probes::csv_columns(o.cross_norm);
  const auto n_index = static_cast<std::size_t>(std::find(keys.begin(), keys.end(), "N") - keys.begin());
  for (std::size_t h = 0; h < probe.per_head.size(); ++h) {
    std::vector<std::string> line = {fmt::format("{}", first.heads[h].layer), fmt::format("{}", first.heads[h].head),
                                     fmt::format("{:.1f}", probe.per_head[h][n_index].mean())};
    for (const auto& key : columns) {
      const auto& column = table_column(key);
      theory::Accumulator values;
      for (const auto& r : results) values.add(column.value(r.heads[h]));
      line.push_back(cell(values.mean(), column.format) + " +- " + cell(values.standard_error(), column.format));
    }
    cells.push_back(std::move(line));
  }
  print_columns(headers, cells);
  for (const auto& key : columns) fmt::print("  {}: {}\n", table_column(key).header, table_column(key).meaning);
  note_non_finite(cell.non_finite(), "marked inf! or nan!");
  return hold ? kExitHolds : kExitViolated;
}

// Heads measured so far, on the progress line.
probes::ProbeProgress terminal_progress(std::string what) {
  auto line = std::make_shared<ProgressLine>();
  if (!line->shown()) return {};
  return [line, what = std::move(what), time_left = TimeLeft()](std::int64_t done, std::int64_t total) {
    if (done < total) {
      const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
      line->update(fmt::format("{}: {}/{} heads measured ({})", what, done, total, time_left.text(fraction)));
    } else {
      line->finish();
    }
  };
}

// The least-squares slope of log y on log N, or NaN where a value is not positive (a head whose norm is 0).
double growth_exponent(const std::vector<double>& lengths, const std::vector<double>& values) {
  if (std::any_of(values.begin(), values.end(), [](double v) { return !(v > 0) || !std::isfinite(v); })) return NAN;
  // Equal relative errors: the weighted fit is then the ordinary one; a measurement has no standard error.
  const auto fit = monte_carlo::fit_log_log(lengths, values, values);
  return fit ? fit->slope : NAN;
}

struct HeadGrowth {
  int layer = 0, head = 0;
  double value_exponent = NAN, grad_exponent = NAN;
};

// Median and extremes of the heads' exponents, in words.
std::string growth_text(const std::vector<HeadGrowth>& growth, bool gradient) {
  std::vector<std::pair<double, const HeadGrowth*>> exponents;
  for (const HeadGrowth& g : growth) {
    const double e = gradient ? g.grad_exponent : g.value_exponent;
    if (std::isfinite(e)) exponents.emplace_back(e, &g);
  }
  if (exponents.empty()) return "no head with a positive norm at every length";
  std::sort(exponents.begin(), exponents.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::size_t n = exponents.size();
  const double median = n % 2 ? exponents[n / 2].first : (exponents[n / 2 - 1].first + exponents[n / 2].first) / 2;
  return fmt::format("median {:.3f}, from {:.3f} (layer {}, head {}) to {:.3f} (layer {}, head {}) over {} heads",
                     median, exponents.front().first, exponents.front().second->layer, exponents.front().second->head,
                     exponents.back().first, exponents.back().second->layer, exponents.back().second->head, n);
}

// --length as a grid: the model measured at each length on the same input (the first N tokens of the text, or N
// Gaussian positions), one forward pass each, and each head's growth in N: the least-squares slope of its
// log ||A||_F and log ||dA/dS||_F on log N. Every length must fit the input, as one --length must.
int run_length_grid(const ProbeOptions& o, const std::vector<theory::PhiExpression>& what_if) {
  if (o.precision != "double") throw UsageError("--precision mixed or compare takes one --length, not a grid");
  if (!o.attention_out.empty()) throw UsageError("--attention-out takes one --length, not a grid");
  std::vector<probes::ProbeResult> results;
  std::vector<probes::ProbeInput> inputs;
  std::vector<double> measured;
  for (std::int64_t requested : o.lengths) {
    ProbeOptions at = o;
    at.length = requested;
    inputs.push_back(make_input(at));
    auto result =
        probes::probe_model(o.model, inputs.back(), o.layers, o.heads, false, o.cross_norm,
                            terminal_progress(fmt::format("attncheck probe {} at N = {}", o.model, requested)),
                            o.threads, false, what_if);
    if (result.heads.empty()) throw UsageError("--layers/--heads select no head of the model");
    const auto n = static_cast<double>(result.heads.front().N);
    if (!measured.empty() && n <= measured.back()) {
      throw UsageError(
          fmt::format("--length {}: the model attends to {} positions there, no more than at the length "
                      "before; a grid needs inputs whose positions grow with it",
                      requested, result.heads.front().N));
    }
    measured.push_back(n);
    results.push_back(std::move(result));
  }
  std::vector<HeadGrowth> growth;
  for (std::size_t h = 0; h < results.front().heads.size(); ++h) {
    std::vector<double> values, gradients;
    for (const auto& result : results) {
      const auto& m = result.heads[h];
      values.push_back(m.softmax.value);
      gradients.push_back(m.softmax.grad);
    }
    const auto& first = results.front().heads[h];
    growth.push_back(
        {first.layer, first.head, growth_exponent(measured, values), growth_exponent(measured, gradients)});
  }
  bool hold = true;
  for (std::size_t k = 0; k < results.size(); ++k) {
    for (const auto& m : results[k].heads) {
      if (probes::within_theorem_bounds(m)) continue;
      hold = false;
      fmt::print(stderr, "attncheck probe: N = {}: layer {} head {} exceeds a softmax bound\n", measured[k], m.layer,
                 m.head);
    }
  }
  if (o.json) {
    nlohmann::json document = nlohmann::json::object();
    document["lengths"] = nlohmann::json::array();
    for (double n : measured) document["lengths"].push_back(static_cast<std::int64_t>(n));
    document["probes"] = nlohmann::json::array();
    for (std::size_t k = 0; k < results.size(); ++k) {
      document["probes"].push_back(
          records::to_json(probes::probe_document(o.model, inputs[k], results[k], o.cross_norm)));
    }
    document["growth"] = nlohmann::json::array();
    for (const HeadGrowth& g : growth) {
      const auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
      document["growth"].push_back({{"layer", g.layer},
                                    {"head", g.head},
                                    {"softmax_fro_exponent", number(g.value_exponent)},
                                    {"grad_fro_exponent", number(g.grad_exponent)}});
    }
    std::cout << records::json_text(document, 1) << "\n";
    return hold ? kExitHolds : kExitViolated;
  }
  if (o.csv) {
    std::vector<const probes::ProbeResult*> each;
    for (const auto& result : results) each.push_back(&result);
    print_csv(each, o.cross_norm);
    return hold ? kExitHolds : kExitViolated;
  }
  print_model_line(results.front().config);
  fmt::print("input: {}, measured at N = {} (one forward pass each)\n",
             inputs.front().kind == probes::ProbeInput::Kind::random
                 ? fmt::format("Gaussian embeddings, seed {}", inputs.front().seed)
                 : std::string("the first N tokens of the same input"),
             fmt::join(measured, ", "));
  std::vector<std::vector<std::string>> cells;
  for (std::size_t h = 0; h < growth.size(); ++h) {
    const auto& first = results.front().heads[h];
    const auto& last = results.back().heads[h];
    cells.push_back({fmt::format("{}", growth[h].layer), fmt::format("{}", growth[h].head),
                     fmt::format("{:.4f}", first.softmax.value / first.sqrt_n),
                     fmt::format("{:.4f}", last.softmax.value / last.sqrt_n),
                     fmt::format("{:.3f}", growth[h].value_exponent), fmt::format("{:.3f}", growth[h].grad_exponent)});
  }
  print_columns({"layer", "head", fmt::format("|A|_F/sqrt(N) at {}", measured.front()),
                 fmt::format("at {}", measured.back()), "growth |A|_F", "growth |dA/dS|_F"},
                cells);
  fmt::print(
      "  growth: the least-squares slope of log norm on log N over the lengths measured: how the head's norm grew "
      "on this input, a measurement, not a verdict (softmax's bounds sqrt(N) and sqrt(N)/2 grow with exponent 1/2, "
      "and a fit never proves an exponent)\n");
  fmt::print("summary: growth of ||A||_F in N: {}\n", growth_text(growth, false));
  fmt::print("         growth of ||dA/dS||_F in N: {}\n", growth_text(growth, true));
  fmt::print("verdict: {}\n", hold ? "Theorem 4.1's bounds hold on every head at every length (exit 0)"
                                   : "a bound is exceeded at some length (exit 1)");
  return hold ? kExitHolds : kExitViolated;
}

std::atomic<bool> stop_requested{false};

int run(const ProbeOptions& o) {
  if (o.json && o.csv) throw UsageError("choose one of --json and --csv");
  if (!o.columns.empty()) {
    if (o.json || o.csv || !o.watch.empty()) {
      throw UsageError("--columns chooses the table's columns; --json, --csv and --watch write every column");
    }
    table_columns(o.columns);  // an unknown name is refused before the model is read
  }
  const probes::ProbeInput input = make_input(o);
  if (o.precision != "double" && (!o.watch.empty() || !o.text_file.empty())) {
    throw UsageError(
        fmt::format("--precision {} applies to one MODEL and one input, not to --watch or --text-file", o.precision));
  }
  if (!o.what_if.empty() && (!o.watch.empty() || !o.text_file.empty())) {
    throw UsageError("--what-if applies to one MODEL and one input, not (yet) to --watch or --text-file");
  }
  if (!o.watch.empty()) {
    if (!o.model.empty()) throw UsageError("--watch DIR takes the folder instead of MODEL; give one of them");
    if (!o.text_file.empty())
      throw UsageError("--watch takes one input: --text, --tokens, --image, --pixels or --random");
    if (o.lengths.size() > 1) throw UsageError("--watch takes one --length, not a grid");
    if (o.json || o.csv || !o.attention_out.empty() || o.cross_norm) {
      throw UsageError(
          "--json, --csv, --attention-out and --cross-norm describe one MODEL; --watch writes JSON "
          "lines to --out");
    }
    probes::WatchOptions watch;
    watch.folder = o.watch;
    watch.output =
        o.out.empty() ? std::filesystem::path(o.watch) / "attncheck-probe.jsonl" : std::filesystem::path(o.out);
    watch.interval_seconds = o.interval;
    watch.until_idle_seconds = o.until_idle.value_or(-1);
    watch.input = input;
    watch.layers = o.layers;
    watch.heads = o.heads;
    watch.threads = o.threads;
    watch.progress = terminal_progress("attncheck probe --watch: a checkpoint");
    std::signal(SIGINT, [](int) { stop_requested = true; });
    std::signal(SIGTERM, [](int) { stop_requested = true; });
    const auto summary = probes::watch_folder(watch, stop_requested, [](const std::string& line) {
      // Lines name the checkpoints: file names, which may hold escape sequences.
      fmt::print(stderr, "{}\n", attncheck::theory::printable(line));
    });
    fmt::print(stderr, "watched {}: {} checkpoints measured ({} above a bound), {} refused; lines in {}\n", o.watch,
               summary.measured, summary.exceeded, summary.refused, watch.output.string());
    return summary.exit_code();
  }
  if (!o.text_file.empty()) {
    if (o.model.empty()) throw UsageError("--text-file needs MODEL");
    if (o.csv || !o.attention_out.empty()) {
      throw UsageError(
          "--text-file prints the table or --json of means over its sentences; --csv and "
          "--attention-out take one input");
    }
    if (o.lengths.size() > 1) throw UsageError("--text-file takes one --length, not a grid");
    return run_text_file(o, terminal_progress("attncheck probe " + o.model));
  }
  if (o.model.empty()) throw UsageError("give MODEL (a folder, a .safetensors or a .gguf file) or --watch DIR");
  std::vector<theory::PhiExpression> what_if;
  for (const std::string& text : o.what_if) what_if.push_back(theory::PhiExpression::parse(text, "--what-if"));
  if (!what_if.empty() && o.csv) throw UsageError("--what-if: its norms are in the table and in --json, not in --csv");
  if (o.lengths.size() > 1) return run_length_grid(o, what_if);
  const auto timed_probe = [&](bool mixed, bool keep_layers, std::string what, double& seconds) {
    const auto start = std::chrono::steady_clock::now();
    auto result = probes::probe_model(o.model, input, o.layers, o.heads, keep_layers, o.cross_norm,
                                      terminal_progress(std::move(what)), o.threads, mixed, what_if);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  };
  double seconds = 0, mixed_seconds = 0;
  auto result = timed_probe(o.precision == "mixed", !o.attention_out.empty(), "attncheck probe " + o.model, seconds);
  if (o.precision == "compare") {
    const auto mixed = timed_probe(true, false, "attncheck probe " + o.model + " (again, mixed)", mixed_seconds);
    result.mixed_against_double = probes::precision_difference(result, mixed);
  }
  // What --precision compare measured, said where the output's reader looks: under the table, or on stderr beside
  // --csv (the JSON holds it in tool.mixed_against_double).
  const auto print_comparison = [&](std::FILE* stream) {
    if (!result.mixed_against_double) return;
    const records::ProbePrecisionCheck& check = *result.mixed_against_double;
    fmt::print(stream,
               "precision: the numbers are double's; the same probe with --precision mixed ({} kernels) gave Frobenius "
               "norms within {:.2g} relative of them, and every number within {:.2g} (largest: {} of layer {} head "
               "{}); it took {:.3g} s against double's {:.3g} s\n",
               check.float_kernels, check.largest_norm, check.largest, check.field, check.layer, check.head,
               mixed_seconds, seconds);
  };
  if (!o.attention_out.empty()) probes::write_attention(o.attention_out, result);
  const bool hold = bounds_hold(result);
  if (o.json) {
    // JSON has no infinities: a non-finite value is written as null (and noted).
    int non_finite = 0;
    for (const auto& m : result.heads) {
      for (double v : probes::csv_values(m)) non_finite += std::isfinite(v) ? 0 : 1;
    }
    std::cout << records::json_text(records::to_json(probes::probe_document(o.model, input, result, o.cross_norm)), 1)
              << "\n";
    note_non_finite(non_finite, "written as null");
  } else if (o.csv) {
    print_comparison(stderr);
    if (result.float32_products) {
      fmt::print(
          stderr,
          "attncheck probe: --precision mixed: the forward pass ran in float32 where its time goes ({} kernels)\n",
          result.float_kernels);
    }
    print_csv({&result}, o.cross_norm);
  } else {
    print_table(result, input, table_columns(o.columns), o.cross_norm);
    print_what_if(result);
    print_summary(result);
    print_comparison(stdout);
  }
  return hold ? kExitHolds : kExitViolated;
}

const bool registered = register_subcommand(
    "probe",
    "live per-layer, per-head attention norms of a checkpoint (BERT, RoBERTa, DistilBERT, GPT-2, Llama, Mistral, "
    "Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3, Phi-3, GPT-NeoX (Pythia), ViT, DINOv2, CLIP's vision and text towers; "
    "safetensors, or GGUF for "
    "BERT, RoBERTa, DistilBERT, Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3, Phi-3, GPT-NeoX and CLIP's "
    "vision tower) "
    "against the theory",
    [](CLI::App& command) -> std::function<int()> {
      auto o = std::make_shared<ProbeOptions>();
      command.add_option("MODEL", o->model, "model folder (config.json + safetensors), a .safetensors or a .gguf file")
          ->type_name("");
      auto* text_option = command.add_option(
          "--text", o->text,
          "input text: a GGUF file's own byte-level BPE, or beside the checkpoint vocab.txt (WordPiece), "
          "vocab.json + merges.txt (byte-level BPE) or tokenizer.json");
      command
          .add_option("--text-file", o->text_file,
                      "one sentence per line, each probed with the model's tokenizer (one forward pass each); the "
                      "table and --json give per layer and head the mean over the sentences and its standard error")
          ->type_name("FILE");
      command.add_option("--tokens", o->tokens, "file of whitespace-separated token ids")->type_name("FILE");
      command.add_option(
          "--pixels", o->pixels,
          "ViT, DINOv2, CLIP: the model's pixel_values for one image, a channels x height x width float32 or "
          "float64 .npy file, already normalized");
      command.add_option("--image", o->image,
                         "ViT, DINOv2, CLIP: an image file (PNG, JPEG, PPM, BMP), preprocessed as the checkpoint's "
                         "preprocessor_config.json says (ImageNet defaults when absent)");
      command.add_flag("--random", o->random,
                       "Gaussian embeddings (the default input), sigma = RMS of the model's token embeddings (ViT, "
                       "DINOv2, CLIP's vision tower: of its position embeddings)");
      command
          .add_option(
              "--length", o->length_text,
              "number of positions for --random (at most the model's; default 128, shortened to them); with --text, "
              "--text-file or --tokens, keep the first LENGTH tokens. A grid (32:8192:x2, or 32,64,128) measures the "
              "model at each length on the same input and gives each head's growth in N (the slope of log ||A||_F "
              "and log ||dA/dS||_F on log N); every length must fit the text and the model")
          ->type_name("LENGTH|GRID")
          ->each([o](const std::string&) { o->length_given = true; });
      command.add_option("--seed", o->seed, "seed of the random input")
          ->capture_default_str()
          ->check(unsigned_in(0, UINT64_MAX));
      command
          .add_option(
              "--threads", o->threads,
              "threads the heads are measured on (default: all cores): one layer's heads in parallel, or each head's "
              "rows when they are more (--heads 0); a layer of a short input on one thread, where threads would cost "
              "more than they save; the numbers do not depend on it beyond the "
              "last bit of OpenBLAS's sums, whose threads differ (OPENBLAS_NUM_THREADS=1: the same bits, in double "
              "and mixed precision, docs/usage.md)")
          ->check(integer_in(1, kMaxThreads));
      command
          .add_option("--precision", o->precision,
                      "the forward pass's precision: double (the default); mixed: its matrix products "
                      "(projections, scores, attention times values, the MLP), GELU and the softmax that weights the "
                      "values in float32 (AVX-512 kernels where the CPU has them), normalizations and every measured "
                      "norm in double, faster, with norms within about 1e-5 relative of double's (docs/usage.md), "
                      "or exit 2 where float32 cannot hold a value: beyond its range, or below its normal range "
                      "(1.2e-38) where it would keep fewer bits; compare: the probe in double, then again in mixed, "
                      "printing double's numbers and how far mixed's fell from them on this model and input")
          ->check(CLI::IsMember({"double", "mixed", "compare"}));
      command.add_option("--layers", o->layers, "0-based layers to measure (default all)")
          ->delimiter(',')
          ->check(integer_in(0, INT32_MAX));
      command.add_option("--heads", o->heads, "0-based heads to measure (default all)")
          ->delimiter(',')
          ->check(integer_in(0, INT32_MAX));
      command.add_flag(
          "--json", o->json,
          "one JSON object on stdout: model (with config.json's SHA-256), input, tool version, verdict and the "
          "per-head rows under heads (docs/probe-output.schema.json)");
      command.add_flag("--csv", o->csv, "CSV with a header line on stdout");
      command
          .add_option("--columns", o->columns,
                      "table columns, a comma list of " + column_keys() +
                          ", or all (default: the ratios to the "
                          "bounds, " +
                          fmt::format("{}", fmt::join(default_columns(), ",")) + ")")
          ->delimiter(',');
      command.add_flag("--cross-norm", o->cross_norm,
                       "add the cross-normalization what-if (claim C9): ||O||_F and ||dO/dV||_F of softmax(S) P with "
                       "P = mix alpha softmax_col(V) + (1 - mix alpha) V on the head's values, at mix alpha 0, 0.5, 1");
      command
          .add_option("--what-if", o->what_if,
                      "an activation to measure beside softmax on each head's own scores (repeatable): an expression "
                      "in x (the score lambda q.k) with N (the positions) and d, as `attncheck mc --phi` takes it, "
                      "applied elementwise, e.g. 'x^3/sqrt(N)', 'relu(x)/N', 'sigmoid(x - log(N))'; its ||phi(S)||_F "
                      "and ||dphi/dS||_F in the table and --json (with its Jacobians in W_Q, W_K)")
          ->expected(1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      command.add_option("--attention-out", o->attention_out,
                         "write the attention matrices of every layer up to the last measured one (tensor layer.L, "
                         "[heads, N, N], F64) and the input ids to this safetensors file");
      command.add_option("--watch", o->watch,
                         "measure every checkpoint in this training folder and each new one as it appears");
      command.add_option("--interval", o->interval, "seconds between scans of the --watch folder")
          ->capture_default_str()
          ->check(real_in({0, 86400, true}));
      command
          .add_option("--until-idle", o->until_idle,
                      "stop watching after this many seconds without a new checkpoint (default: until Ctrl-C)")
          ->check(real_in({0, 1e9}));
      command.add_option("--out", o->out, "JSON-lines file for --watch (default DIR/attncheck-probe.jsonl)");
      return [o, text_option] {
        o->text_given = text_option->count() > 0;
        if (o->length_given) o->lengths = parse_lengths(o->length_text);
        if (!o->lengths.empty()) o->length = o->lengths.front();
        return run(*o);
      };
    });

}  // namespace
}  // namespace attncheck::cli
