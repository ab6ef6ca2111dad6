// One call into each installed library, each checked against a value known without attncheck, so that a
// library missing from the package or a dependency its config file does not find fails to link or to agree.
#include <attncheck/exact/bounds_survey.hpp>
#include <attncheck/monte_carlo/statistics.hpp>
#include <attncheck/probes/live_metrics.hpp>
#include <attncheck/records/sha256.hpp>
#include <attncheck/streams/random_stream.hpp>
#ifdef ATTNCHECK_HAVE_CUDA
#include <attncheck/gpu/cuda_backend.hpp>
#endif

#include <cmath>
#include <cstdio>
#include <numbers>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  // FIPS 180-4's first example.
  expect(attncheck::records::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
         "reports: sha256 of \"abc\"");
  // Student's t with one degree of freedom is Cauchy: t_{1, 0.975} = tan(0.475 pi).
  expect(std::abs(attncheck::monte_carlo::student_t_quantile(1, 0.95) - std::tan(0.475 * std::numbers::pi)) <= 1e-9,
         "monte_carlo: Student-t quantile");
  // Equal scores: every row of softmax is uniform 1/N, so ||A||_F = 1 and ||dA/dS||_F = sqrt(N (1/N - 1/N^2)).
  const attncheck::probes::HeadMetrics head =
      attncheck::probes::measure_scores(attncheck::theory::Matrix::Constant(4, 4, 0.25), 0, 0, false);
  expect(std::abs(head.softmax.value - 1) <= 1e-14 && std::abs(head.softmax.grad - std::sqrt(3.0) / 2) <= 1e-14,
         "probes: softmax norms of equal scores");
  // cuRAND's host Philox4x32-10 generator, seed 1234: its first word (docs/design.md, "Random streams").
  expect(attncheck::streams::PhiloxStream(1234, 0).next_block()[0] == 546353992u, "streams: Philox first word");
  // The constant family: uniform rows again, ||softmax||_F = 1 and ||grad softmax||_F = sqrt(N (1/N - 1/N^2)).
  attncheck::exact::SurveyOptions survey;
  survey.n = 4;
  const attncheck::exact::FamilyResult constant =
      attncheck::exact::survey_family(attncheck::exact::BoundsFamily::constant, survey);
  expect(std::abs(constant.max_softmax_fro - 1) <= 1e-14 &&
             std::abs(constant.max_grad_fro - std::sqrt(3.0) / 2) <= 1e-14,
         "exact: the constant family's norms");
#ifdef ATTNCHECK_HAVE_CUDA
  expect(attncheck::gpu::cuda_device_count() >= 0, "gpu: device count");
#endif
  return failures == 0 ? 0 : 1;
}
