#include "attncheck/monte_carlo/mc_options.hpp"

#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/records/claims.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace attncheck::monte_carlo {

std::string McOption::python_name() const {
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

namespace {

std::string phi_help() {
  std::string words;
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    words += (words.empty() ? "" : ", ") + std::string(term.word);
    if (!term.help.empty()) words += fmt::format(" ({})", term.help);
  }
  return "Activation without --claim (C7: the h): " + words;
}

std::string estimand_help() {
  std::string words;
  for (const theory::EstimandTerm& term : theory::all_estimands()) {
    words += fmt::format("{}{} ({})", words.empty() ? "" : ", ", term.word, term.help);
  }
  return "Comma list of " + words + "; default value. C9 fixes value, dV, dS and dQ";
}

std::vector<std::string> claim_choices() {
  std::vector<std::string> out;
  for (std::string_view id : records::sampled_claim_ids()) out.emplace_back(id);
  return out;
}

McOption text(std::string_view name, std::string help, std::string McRequest::*field) {
  return {name, std::move(help), field};
}
McOption optional_text(std::string_view name, std::string help, std::optional<std::string> McRequest::*field) {
  return {name, std::move(help), field};
}
McOption real(std::string_view name, std::string help, double McRequest::*field, records::RealRange range) {
  McOption option{name, std::move(help), field};
  option.real_range = range;
  return option;
}
McOption flag(std::string_view name, std::string help, bool McRequest::*field) {
  return {name, std::move(help), field};
}

std::vector<McOption> make_options() {
  std::vector<McOption> options;
  McOption claim = optional_text(
      "claim",
      "Preset exactly as the paper states it: C3 (E||(T/sqrt d)^p||_F = O(N), both readings of ^p), C4 (with "
      "1/sqrt(N): O(sqrt N)), C5 (E||d/dQ (T^p/sqrt d)||_F = O(N)), C6 (with 1/sqrt(N), Q and K: O(sqrt N)), C7 "
      "(relu paper: row sums of N^-alpha h(q.k/sqrt d) are O(1) at alpha = 1 and grow like N^(1-alpha) below, with and "
      "without qk-layernorm; the Frobenius norm as a secondary series), C8 (Var(q.k) = d_k over --d: i.i.d. entries, "
      "the literal zero-covariance hypothesis, the projected model), C9 (cross-normalization: O = softmax(S) (alpha "
      "softmax_col(V) + (1 - alpha) V), ||O||_F, ||dO/dV||_F, ||dO/dS||_F, ||dO/dW_Q||_F are O(sqrt N); at mix alpha "
      "= 1 a deterministic bound, checked on every sample)",
      &McRequest::claim);
  claim.choices = claim_choices();
  options.push_back(std::move(claim));
  options.push_back(text("N", "Sequence lengths: list (16,64,256) or start:stop:xfactor (16:4096:x2)", &McRequest::N));
  options.push_back(text("D", "Model dimensions (list or grid)", &McRequest::D));
  options.push_back(text("d", "Head dimensions (list or grid)", &McRequest::d));
  options.push_back(text("p", "Exponents of poly/matpow (list)", &McRequest::p));
  options.push_back(optional_text("phi", phi_help(), &McRequest::phi));
  options.push_back(
      optional_text("alpha", "C7's exponent in N^-alpha (list; default 0,0.5,1: the claim at 1, the growth without it)",
                    &McRequest::alpha));
  options.push_back(optional_text("mix",
                                  "C9's mix alpha of P = alpha softmax_col(V) + (1 - alpha) V (list of values in [0, "
                                  "1]; default 1, the RFP's softmax(S) softmax^T(V)); one series each",
                                  &McRequest::mix));
  options.push_back(optional_text("dv", "C9's value columns d_v of W_V (list or grid; default d)", &McRequest::dv));
  options.push_back(optional_text("inner-scale", "lambda in F = c(N) phi(lambda T): 1/sqrt(d) (default) or a number",
                                  &McRequest::inner_scale));
  options.push_back(optional_text("outer-scale",
                                  "c(N): none (default), 1/sqrt(N), 1/k:K (e.g. 1/k:8), N^-a (e.g. N^-1)",
                                  &McRequest::outer_scale));
  options.push_back(optional_text("estimand", estimand_help(), &McRequest::estimand));
  McOption claimed{"claimed-exponent", "Without --claim: the claimed exponent a of E||F|| = O(N^a)",
                   &McRequest::claimed_exponent};
  claimed.real_range = kClaimedExponentRange;
  options.push_back(std::move(claimed));
  options.push_back(text("samples",
                         "Samples per point: an integer, or auto (until --rel-se, --max-samples or --max-seconds)",
                         &McRequest::samples));
  options.push_back(real("rel-se",
                         "auto: stop when se/mean <= this for every estimand (C8: of the mean square), with a reliable "
                         "se unless proofs decide every verdict of the point",
                         &McRequest::rel_se, kRelativeErrorRange));
  McOption max_samples{"max-samples", "auto: at most this many samples per point", &McRequest::max_samples};
  max_samples.count_range = std::pair<std::uint64_t, std::uint64_t>{2, kMaxSamples};
  options.push_back(std::move(max_samples));
  options.push_back(real("max-seconds",
                         "auto: at most this much wall time per point (read after every sample from the second on)",
                         &McRequest::max_seconds, kSecondsRange));
  options.push_back(real("sigma-x", "Standard deviation of the entries of X", &McRequest::sigma_x, kSigmaRange));
  options.push_back(real("sigma-t", "Standard deviation of the entries of Q and K", &McRequest::sigma_t, kSigmaRange));
  McOption seed{"seed", "Run seed; each point's seed is derived from it and the point", &McRequest::seed};
  seed.count_range = std::pair<std::uint64_t, std::uint64_t>{0, std::numeric_limits<std::uint64_t>::max()};
  options.push_back(std::move(seed));
  McOption threads{"threads", "CPU threads (0: all cores); results do not depend on it", &McRequest::threads};
  threads.integer_range = std::pair<std::int64_t, std::int64_t>{0, records::kMaxThreads};
  options.push_back(std::move(threads));
  // The real limit of the tile is the memory check; its side must fit the BLAS integer type.
  McOption tile{"tile", "Score tile size (tile x tile entries per thread)", &McRequest::tile};
  tile.integer_range = std::pair<std::int64_t, std::int64_t>{1, std::numeric_limits<std::int32_t>::max()};
  options.push_back(std::move(tile));
  options.push_back(real("tolerance", "Slack on the claimed exponent in the asymptotic-fit verdict",
                         &McRequest::tolerance, kToleranceRange));
  options.push_back(text("backend", backend_names(), &McRequest::backend));
  options.push_back(text("precision",
                         "double, or mixed: FP32 score tiles of x^p (p = 2..6) with FP64 sums, CPU only; the relative "
                         "error bound per (p, d) is printed and kept in the provenance",
                         &McRequest::precision));
  options.push_back(text("path",
                         "How the CPU evaluates a sample: direct (score tiles, Gram matrices), tensor (x^p by "
                         "symmetric tensor powers, O(N C(d+2p, 2p)), exact), or auto (the cheaper by a flop estimate, "
                         "per point); recorded per point",
                         &McRequest::path));
  options.push_back(optional_text("out",
                                  "Folder for points.jsonl, points.csv (each point written when it finishes) and "
                                  "fits.json (the fits of every series in the folder)",
                                  &McRequest::out));
  options.push_back(flag("resume",
                         "Keep the points already in --out and skip those this run would repeat (same point, estimand "
                         "and --seed); runs of other claims accumulate in one folder, and several runs may write it "
                         "at once",
                         &McRequest::resume));
  options.push_back(flag("force",
                         "Remove the points already in --out first (without --resume or --force, a folder that holds "
                         "points is refused)",
                         &McRequest::force));
  return options;
}

}  // namespace

const std::vector<McOption>& mc_options() {
  // Built on first use: the backend names come from the registry, which other files fill at static initialization.
  static const std::vector<McOption> options = make_options();
  return options;
}

}  // namespace attncheck::monte_carlo
