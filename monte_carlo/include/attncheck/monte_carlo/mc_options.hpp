#pragma once
// The options of `attncheck mc`, each once: its name, its help text, its range, the McRequest field it fills, and
// the parser of its text. The command line builds its options from this list, the Python package its
// attncheck.mc() (names with "_" for "-"), and their tests check both against it, so an option added here reaches
// every front end.

#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/monte_carlo/tensor_power.hpp"
#include "attncheck/records/option_ranges.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace attncheck::monte_carlo {

struct McOption {
  std::string_view name;  // on the command line, without "--"
  std::string help;
  using Field = std::variant<std::string McRequest::*, std::optional<std::string> McRequest::*, double McRequest::*,
                             std::optional<double> McRequest::*, std::uint64_t McRequest::*, int McRequest::*,
                             long long McRequest::*, bool McRequest::*>;
  Field field;
  // The checks on the option's text (the command line runs them before converting; run_mc repeats them on values).
  std::optional<records::RealRange> real_range;
  std::optional<std::pair<std::int64_t, std::int64_t>> integer_range;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> count_range;
  std::vector<std::string> choices;  // the words a text option takes, where the list is fixed

  // "max_samples" for "max-samples": the name in Python.
  std::string python_name() const;
};

// Every option of `attncheck mc`, in the order --help lists them.
const std::vector<McOption>& mc_options();

// --preset: the sizes and the time limit per point of a run that does not give --N, --D, --d or --max-seconds.
// quick (the default) finishes a first sweep of one claim in about a minute on two cores; paper has the papers'
// dimensions and lets each point run until --rel-se is met.
struct McPreset {
  std::string_view name, N, D, d;
  double max_seconds;
};
const std::vector<McPreset>& mc_presets();
// The preset named `name`; theory::InputError naming it and the choices otherwise.
const McPreset& mc_preset(const std::string& name);
// The request with every absent size and time limit taken from its preset.
struct McSizes {
  std::string N, D, d;
  double max_seconds;
};
McSizes sizes_of(const McRequest& request);

// The options' text as values. Each throws theory::InputError naming the option and the bad text.

// "16:4096:x2" (start:stop:xfactor, stop included when hit), "16,32,64", or one value; sizes up to 2^31.
std::vector<theory::Index> parse_index_grid(const std::string& text, const std::string& option);
// A comma list of estimand words (theory/vocabulary.hpp), duplicates dropped.
std::vector<Estimand> parse_estimands(const std::string& text);
// "none", "1/sqrt(N)", "1/k:K", "N^-a" (also the scale text of a record's series key).
OuterRule parse_outer_scale(const std::string& text);
// "1/sqrt(d)" or a non-zero number.
InnerRule parse_inner_scale(const std::string& text);
// The activation of a --phi word (theory/vocabulary.hpp) at exponent p, or of an expression (theory/expression.hpp),
// divided by its row sums when `normalize` is "rows" (expressions only).
theory::Activation parse_phi(const std::string& name, int p,
                             const std::optional<std::string>& normalize = std::nullopt);
// --path: the words of evaluation_path_name.
EvaluationPath parse_evaluation_path(const std::string& text);
// --precision: the words of precision_name.
ScorePrecision parse_score_precision(const std::string& text);

}  // namespace attncheck::monte_carlo
