#include "attncheck/exact/bounds.hpp"

#include "attncheck/records/matrix_io.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/records/option_ranges.hpp"
#include "attncheck/streams/parallel.hpp"
#include "attncheck/theory/bound_check.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace attncheck::exact {

using nlohmann::json;
using theory::Index;
using theory::InputError;
using theory::within;

namespace {

json summary_json(const WorstMatrixSummary& s) {
  return {{"trial", s.trial},
          {"min_logit", s.min_logit},
          {"max_logit", s.max_logit},
          {"worst_row_top_probabilities", {s.worst_row_top1, s.worst_row_top2}},
          {"worst_row_jacobian_sq", s.worst_row_jacobian_sq}};
}

}  // namespace

int check_survey_options(int trials, int search_starts, int threads) {
  records::check_integer("--trials", trials, 1, kMaxBoundsTrials);
  records::check_integer("--search-starts", search_starts, 1, kMaxSearchStarts);
  if (threads != 0) records::check_integer("--threads", threads, 1, records::kMaxThreads);
  return streams::thread_count(threads);
}

BoundsReport run_bounds(const BoundsRequest& request) {
  if (request.n) records::check_integer("--N", *request.n, 1, INT64_MAX);
  const int threads = check_survey_options(request.trials, request.search_starts, request.threads);
  std::optional<theory::Matrix> input;
  if (!request.input.empty()) input = records::read_matrix(request.input, records::memory_budget_bytes());
  if (!input && !request.n) throw InputError("give the matrix size with --N, or a matrix with --input FILE");
  const Index n = input ? input->rows() : static_cast<Index>(*request.n);
  if (input && request.n && *request.n != n) {
    throw InputError(fmt::format("--N {} disagrees with --input {}, which has {} rows", *request.n, request.input, n));
  }

  std::vector<BoundsFamily> families = requested_families(request.families);
  if (request.families.empty() && !input) families = default_families();
  if (!families.empty()) {
    records::require_memory(survey_bytes(n, threads),
                            fmt::format("--N {}: {} x {} matrices held by {} threads", n, n, n, threads),
                            "; use a smaller N or fewer --threads");
  }

  const SurveyOptions survey{n, request.trials, request.seed, threads, request.search_starts};
  std::vector<FamilyResult> results;
  for (const auto family : families) results.push_back(survey_family(family, survey));
  if (input) {
    try {
      results.push_back(survey_matrix(*input));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", request.input, e.what()));
    }
  }

  BoundsReport report;
  report.n = n;
  report.bounds = theory::softmax_bounds(n);
  const theory::SoftmaxBounds& bounds = report.bounds;
  for (const FamilyResult& r : results) {
    BoundsFamilyReport& f = report.families.emplace_back();
    f.result = r;
    f.ratio_softmax = r.max_softmax_fro / bounds.softmax_paper;
    f.ratio_grad_paper = r.max_grad_fro / bounds.grad_paper;
    f.ratio_grad_tight = r.max_grad_fro / bounds.grad_tight;
    f.holds = within(r.max_softmax_fro, bounds.softmax_paper) && within(r.max_grad_fro, bounds.grad_paper);
    f.within_tight_bound = within(r.max_grad_fro, bounds.grad_tight);
    report.paper_bounds_hold = report.paper_bounds_hold && f.holds;
    report.tight_bound_holds = report.tight_bound_holds && f.within_tight_bound;
    report.max_ratio_softmax = std::max(report.max_ratio_softmax, f.ratio_softmax);
    report.max_ratio_grad_tight = std::max(report.max_ratio_grad_tight, f.ratio_grad_tight);
    report.max_ratio_grad_paper = std::max(report.max_ratio_grad_paper, f.ratio_grad_paper);
    report.softmax_bound_holds = report.softmax_bound_holds && within(r.max_softmax_fro, bounds.softmax_paper);
    report.grad_bound_holds = report.grad_bound_holds && within(r.max_grad_fro, bounds.grad_paper);
  }
  report.seed = request.seed;
  report.trials = request.trials;
  report.threads = threads;
  report.input = request.input;
  return report;
}

records::Verdict c1_verdict(const BoundsReport& report) {
  return records::bound_verdict(report.max_ratio_softmax, report.softmax_bound_holds);
}

records::Verdict c2_verdict(const BoundsReport& report) {
  return records::bound_verdict(report.max_ratio_grad_paper, report.grad_bound_holds);
}

json to_json(const BoundsReport& report) {
  json families = json::array();
  for (const BoundsFamilyReport& f : report.families) {
    families.push_back({{"family", family_name(f.result.family)},
                        {"trials", f.result.trials},
                        {"max_softmax_fro", f.result.max_softmax_fro},
                        {"max_grad_fro", f.result.max_grad_fro},
                        {"bound_softmax", report.bounds.softmax_paper},
                        {"bound_grad_paper", report.bounds.grad_paper},
                        {"bound_grad_tight", report.bounds.grad_tight},
                        {"ratio_softmax", f.ratio_softmax},
                        {"ratio_grad_paper", f.ratio_grad_paper},
                        {"ratio_grad_tight", f.ratio_grad_tight},
                        {"holds", f.holds},
                        {"within_tight_bound", f.within_tight_bound},
                        {"worst_softmax_matrix", summary_json(f.result.worst_softmax)},
                        {"worst_grad_matrix", summary_json(f.result.worst_grad)}});
  }
  return {{"N", report.n},
          {"holds", report.holds()},
          {"claims",
           {{"C1", "||softmax(A)||_F <= sqrt(N): v1 Thm 4.1 (4.1) / v2 Thm 4.1 (6)"},
            {"C2", "||grad softmax(A)||_F <= 2 sqrt(N): v1 Thm 4.1 (4.2) / v2 Thm 4.1 (7)"}}},
          {"verdicts",
           {{"C1", records::to_string(c1_verdict(report))}, {"C2", records::to_string(c2_verdict(report))}}},
          {"paper_bounds_hold", report.paper_bounds_hold},
          {"tight_bound_holds", report.tight_bound_holds},
          {"max_ratio_softmax", report.max_ratio_softmax},
          {"max_ratio_grad_tight", report.max_ratio_grad_tight},
          {"seed", report.seed},
          {"trials", report.trials},
          {"threads", report.threads},
          {"input", report.input.empty() ? json(nullptr) : json(report.input)},
          {"families", families}};
}

}  // namespace attncheck::exact
