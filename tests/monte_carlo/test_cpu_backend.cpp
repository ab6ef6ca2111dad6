#include "attncheck/theory/vocabulary.hpp"
#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/attention.hpp"
#include "check_relative.hpp"
#include "normal_math_guard.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using namespace attncheck::streams;
using theory::ActivationKind;
using theory::Matrix;
using theory::Pointwise;

namespace {

SweepPoint make(theory::Index N, theory::Index D, theory::Index d, theory::Activation act, double inner,
                std::uint64_t seed, double sigma_x = 1, double sigma_t = 1) {
  theory::AttentionMap map;
  map.activation = act;
  map.inner = inner;
  map.outer = {0.7, 0.5};
  return make_sweep_point({N, D, d, sigma_x, sigma_t}, map, seed);
}

using testing::check_relative;

std::vector<theory::Activation> every_activation() {
  std::vector<theory::Activation> out;
  out.push_back({ActivationKind::softmax, Pointwise::identity, 1});
  for (int p = 1; p <= 7; ++p) out.push_back({ActivationKind::pointwise, Pointwise::poly, p});
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    if (term.kind == ActivationKind::pointwise && !term.takes_p) out.push_back({term.kind, term.h, 1});
  }
  for (int p = 1; p <= 3; ++p) out.push_back({ActivationKind::matpow, Pointwise::identity, p});
  return out;
}

}  // namespace

TEST_CASE("sample k draws X, then Q, then K from Philox subsequence k") {
  const SweepPoint pt = make(5, 3, 2, {ActivationKind::softmax, Pointwise::identity, 1}, 1, 99, 2.0, 0.5);
  SampleInputs in;
  draw_sample(pt, 4, in);
  // X takes 15 draws, i.e. 8 whole pairs (draw 15 is discarded), then Q and K take 6 each.
  PhiloxStream again(99, 4);
  std::vector<double> raw(2 * 14);
  for (std::size_t k = 0; k < raw.size(); k += 2) {
    const auto pair = again.next_normal_pair();
    raw[k] = pair[0];
    raw[k + 1] = pair[1];
  }
  CHECK(in.X(0, 0) == 2.0 * raw[0]);
  CHECK(in.X(4, 2) == 2.0 * raw[14]);
  CHECK(in.Q(0, 0) == 0.5 * raw[16]);
  CHECK(in.Q(2, 1) == 0.5 * raw[21]);
  CHECK(in.K(0, 0) == 0.5 * raw[22]);
  CHECK(in.K(2, 1) == 0.5 * raw[27]);
}

TEST_CASE("per-sample values equal the dense closed forms of theory::attention_norms for every activation") {
  // N = 37 with tile 8 leaves a ragged last tile in both directions; the large inner scale makes softmax rows
  // nearly one-hot, the regime where expanding the squares would lose every digit.
  for (const theory::Activation& act : every_activation()) {
    for (double inner : {0.3, 4.0}) {
      const SweepPoint pt = make(37, 5, 3, act, inner, 2024);
      SampleInputs in;
      draw_sample(pt, 3, in);
      const bool matpow = act.kind == ActivationKind::matpow;
      const std::vector<Estimand> estimands =
          matpow ? std::vector<Estimand>{Estimand::value}
                 : std::vector<Estimand>{Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS};
      const SampleValues got = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, {8, 1});
      const theory::AttentionNorms want = theory::attention_norms(pt.map, in.X, in.Q, in.K);
      const std::string name = theory::describe(pt.map, pt.d);
      check_relative(got[0], want.value_fro, 1e-10, name + " value");
      if (matpow) continue;
      check_relative(got[static_cast<int>(Estimand::dQ)], *want.dQ_fro, 1e-10, name + " dQ");
      check_relative(got[static_cast<int>(Estimand::dK)], *want.dK_fro, 1e-10, name + " dK");
      check_relative(got[static_cast<int>(Estimand::dS)], *want.dS_fro, 1e-10, name + " dS");
      CHECK(std::isnan(got[static_cast<int>(Estimand::score_var)]));
    }
  }
}

TEST_CASE("the Gram path of fact 6 equals the direct sum of squared scores") {
  for (std::uint64_t k = 0; k < 5; ++k) {
    const SweepPoint pt = make(50 + 7 * k, 6, 4, {ActivationKind::pointwise, Pointwise::poly, 1}, 0.5, 11, 1.5, 0.8);
    SampleInputs in;
    draw_sample(pt, k, in);
    const Matrix V = in.X * in.Q, U = in.X * in.K;
    const Matrix S = 0.5 * (V * U.transpose());
    double direct = 0;
    for (theory::Index i = 0; i < S.rows(); ++i) {
      for (theory::Index j = 0; j < S.cols(); ++j) direct += S(i, j) * S(i, j);
    }
    check_relative(gram_frobenius_sq(V, U, 0.5), direct, 1e-12, "Gram vs direct");
    // score-var is the mean of the off-diagonal squares.
    double off = direct;
    for (theory::Index i = 0; i < S.rows(); ++i) off -= S(i, i) * S(i, i);
    off /= static_cast<double>(S.rows()) * (S.rows() - 1);
    const SampleValues v = evaluate_inputs(pt.map, in.X, in.Q, in.K, {Estimand::score_var});
    check_relative(v[static_cast<int>(Estimand::score_var)], off, 1e-12, "score-var");
  }
}

TEST_CASE("values do not depend on the thread count or on how samples are batched, on every Box-Muller path") {
  for (NormalMath math : attncheck::streams::kNormalMaths) {
    if (!normal_math_supported(math)) continue;
    const NormalMathGuard guard(math);
    INFO("Box-Muller path " << attncheck::streams::normal_math_name(math));
    for (const theory::Activation& act : {theory::Activation{ActivationKind::softmax, Pointwise::identity, 1},
                                          theory::Activation{ActivationKind::pointwise, Pointwise::poly, 3},
                                          theory::Activation{ActivationKind::pointwise, Pointwise::gelu, 1}}) {
      const SweepPoint pt = make(70, 4, 3, act, 0.5, 5);
      const std::vector<Estimand> estimands{Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS};
      std::vector<SampleValues> reference;
      CpuBackend(1, 16).evaluate(pt, estimands, 10, 6, reference);
      for (int threads : {2, 3, 8}) {
        CpuBackend backend(threads, 16);
        std::vector<SampleValues> all, one_by_one;
        backend.evaluate(pt, estimands, 10, 6, all);  // samples in parallel
        for (std::uint64_t k = 10; k < 16; ++k) backend.evaluate(pt, estimands, k, 1, one_by_one);  // tiles in parallel
        for (std::size_t k = 0; k < reference.size(); ++k) {
          for (int e = 0; e < 4; ++e) {
            INFO("threads " << threads << ", sample " << k << ", estimand " << e);
            CHECK(all[k][e] == reference[k][e]);
            CHECK(one_by_one[k][e] == reference[k][e]);
          }
        }
      }
    }
  }
}

TEST_CASE("machines with other vector units get the same values up to the last bits of the normals") {
  const SweepPoint pt = make(64, 8, 5, {ActivationKind::pointwise, Pointwise::poly, 3}, 0.5, 31);
  const std::vector<Estimand> estimands{Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS};
  std::vector<SampleValues> ref;
  SampleInputs ref_in;
  {
    const NormalMathGuard guard(NormalMath::scalar);
    CpuBackend(2, 16).evaluate(pt, estimands, 0, 4, ref);
    draw_sample(pt, 3, ref_in);
  }
  for (const NormalMath math : vector_normal_maths()) {
    INFO("Box-Muller path " << attncheck::streams::normal_math_name(math));
    std::vector<SampleValues> vec;
    SampleInputs vec_in;
    {
      const NormalMathGuard guard(math);
      CpuBackend(2, 16).evaluate(pt, estimands, 0, 4, vec);
      draw_sample(pt, 3, vec_in);
    }
    CHECK(vec_in.X != ref_in.X);  // the paths do differ in the last bits, so the comparison below is not vacuous
    CHECK((vec_in.X - ref_in.X).cwiseAbs().maxCoeff() <= 1e-14 * ref_in.X.cwiseAbs().maxCoeff());
    for (std::size_t k = 0; k < ref.size(); ++k) {
      for (int e = 0; e < 4; ++e) check_relative(vec[k][e], ref[k][e], 1e-12, "sample " + std::to_string(k));
    }
  }
}

TEST_CASE("the matrix-power reading refuses derivative estimands, naming the reason") {
  const SweepPoint pt = make(8, 3, 2, {ActivationKind::matpow, Pointwise::identity, 2}, 1, 1);
  SampleInputs in;
  draw_sample(pt, 0, in);
  CHECK_THROWS_WITH(evaluate_inputs(pt.map, in.X, in.Q, in.K, {Estimand::dQ}), Catch::Contains("value estimand only"));
}

TEST_CASE("a NaN input is reported with its place, not averaged") {
  const SweepPoint pt = make(20, 3, 2, {ActivationKind::pointwise, Pointwise::poly, 2}, 1, 1);
  SampleInputs in;
  draw_sample(pt, 0, in);
  in.X(13, 1) = std::nan("");  // row 13 and column 13 of S; row 0 meets it first
  CHECK_THROWS_WITH(evaluate_inputs(pt.map, in.X, in.Q, in.K, {Estimand::value}, {8, 1}), Catch::Contains("column 13"));
  SweepPoint soft = pt;
  soft.map.activation = {ActivationKind::softmax, Pointwise::identity, 1};
  CHECK_THROWS_WITH(evaluate_inputs(soft.map, in.X, in.Q, in.K, {Estimand::dQ}, {8, 1}), Catch::Contains("column 13"));
}

TEST_CASE("the backend's memory estimate grows with the point and saturates instead of wrapping") {
  CpuBackend backend(2, 64);
  const SweepPoint small = make_sweep_point({1024, 64, 64}, {}, 0);
  SweepPoint large = small;
  large.N = 4096;
  const std::uint64_t bytes = backend.host_bytes_needed(small);
  // At least each thread's X, V, U and one 64 x 64 tile; the 4x longer point needs more.
  CHECK(bytes >= 2 * 8 * (1024 * (64 + 2 * 64) + 64 * 64));
  CHECK(backend.host_bytes_needed(large) > bytes);
  SweepPoint absurd = small;
  absurd.N = std::int64_t{1} << 61;
  absurd.d = std::int64_t{1} << 40;
  CHECK(backend.host_bytes_needed(absurd) == UINT64_MAX);
}

TEST_CASE("mixed precision agrees with double within its derived bound, and the fused kernels agree with BLAS tiles") {
  // Fixed seeds; N = 203 with tile 64 leaves ragged row panels (12) and column panels (16 double, 32 float).
  for (int p : {2, 3, 5}) {
    for (theory::Index d : {8, 64}) {
      const SweepPoint pt =
          make(203, 16, d, {ActivationKind::pointwise, Pointwise::poly, p}, 1 / std::sqrt(static_cast<double>(d)), 77);
      const std::vector<Estimand> estimands{Estimand::value, Estimand::dS, Estimand::dQ, Estimand::dK};
      REQUIRE(uses_fp32_scores(pt, estimands));
      // The bound is on the squared norms; the estimands are norms, so half of it applies to them.
      const double bound = mixed_precision_relative_bound(p, d, 16) / 2;
      // With a row sum asked, the projections stay FP64 (rounded to FP32 for the scores): the other branch.
      std::vector<Estimand> with_row_sum = estimands;
      with_row_sum.push_back(Estimand::row_sum);
      for (std::uint64_t k = 0; k < 3; ++k) {
        SampleInputs in;
        draw_sample(pt, k, in);
        const SampleValues fp64 = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, {64, 1});
        const SampleValues mixed = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands,
                                                   {64, 2, theory::ScoreModel::projected, ScorePrecision::mixed});
        const theory::AttentionNorms want = theory::attention_norms(pt.map, in.X, in.Q, in.K);
        INFO("p " << p << ", d " << d << ", sample " << k);
        check_relative(fp64[static_cast<int>(Estimand::value)], want.value_fro, 1e-12, "double value vs dense");
        check_relative(fp64[static_cast<int>(Estimand::dQ)], *want.dQ_fro, 1e-12, "double dQ vs dense");
        const SampleValues mixed_fp64_projections =
            evaluate_inputs(pt.map, in.X, in.Q, in.K, with_row_sum,
                            {64, 2, theory::ScoreModel::projected, ScorePrecision::mixed});
        int differing = 0, differing_projections = 0;
        for (int e = 0; e < 4; ++e) {
          const int i = static_cast<int>(estimands[static_cast<std::size_t>(e)]);
          check_relative(mixed[i], fp64[i], bound, "mixed vs double");
          check_relative(mixed_fp64_projections[i], fp64[i], bound, "mixed (FP64 projections) vs double");
          differing += mixed[i] != fp64[i];
          differing_projections += mixed[i] != mixed_fp64_projections[i];
        }
        CHECK(differing > 0);              // the FP32 scores were taken: their rounding shows
        CHECK(differing_projections > 0);  // and the FP32 projections, when only norms are asked
      }
    }
  }
}

TEST_CASE("the portable fused kernel gives the AVX-512 kernel's values bit for bit, at every thread count") {
  const SweepPoint pt = make(150, 8, 24, {ActivationKind::pointwise, Pointwise::poly, 3}, 0.2, 9);
  const std::vector<Estimand> estimands{Estimand::value, Estimand::dS, Estimand::dQ, Estimand::dK};
  SampleInputs in;
  draw_sample(pt, 1, in);
  for (ScorePrecision precision : {ScorePrecision::fp64, ScorePrecision::mixed}) {
    const EvaluationOptions one{32, 1, theory::ScoreModel::projected, precision};
    const SampleValues reference = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, one);
    for (int threads : {2, 5}) {
      const EvaluationOptions many{32, threads, theory::ScoreModel::projected, precision};
      const SampleValues again = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, many);
      for (int e = 0; e < 4; ++e) CHECK(again[e] == reference[e]);
    }
    if (precision == ScorePrecision::fp64) {
      // Without AVX-512 (forced here) double runs BLAS tiles and the row reducer: another summation order.
      ::setenv("ATTNCHECK_NO_AVX512", "1", 1);
      const SampleValues blas = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, one);
      ::unsetenv("ATTNCHECK_NO_AVX512");
      for (int e = 0; e < 4; ++e) check_relative(blas[e], reference[e], 1e-12, "BLAS tiles vs fused");
    }
    if (precision == ScorePrecision::mixed) {
      // Without AVX-512 (forced here) mixed runs the portable kernel: same arithmetic, same order.
      ::setenv("ATTNCHECK_NO_AVX512", "1", 1);
      const SampleValues portable = evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, one);
      ::unsetenv("ATTNCHECK_NO_AVX512");
      for (int e = 0; e < 4; ++e) {
        INFO("estimand " << e);
        CHECK(portable[e] == reference[e]);
      }
    }
  }
}

TEST_CASE("mixed precision refuses an overflowing FP32 score instead of returning infinity") {
  const SweepPoint pt = make(20, 3, 2, {ActivationKind::pointwise, Pointwise::poly, 3}, 1, 1);
  SampleInputs in;
  draw_sample(pt, 0, in);
  in.X *= 1e4;  // scores ~1e8: s^6 ~ 1e48 overflows FP32, not FP64
  const EvaluationOptions mixed{8, 1, theory::ScoreModel::projected, ScorePrecision::mixed};
  CHECK_THROWS_WITH(evaluate_inputs(pt.map, in.X, in.Q, in.K, {Estimand::value}, mixed),
                    Catch::Contains("overflowed FP32"));
  CHECK(std::isfinite(evaluate_inputs(pt.map, in.X, in.Q, in.K, {Estimand::value}, {8, 1})[0]));
}

TEST_CASE("the CPU backend registers itself and says how many threads it uses, with no cast needed") {
  const BackendEntry* cpu = find_backend("cpu");
  REQUIRE(cpu != nullptr);
  CHECK(cpu->unavailable_reason().empty());
  const std::unique_ptr<Backend> backend = cpu->make({3, 64});
  CHECK(backend->name() == "cpu");
  CHECK(backend->threads() == 3);
  CHECK(backend->describe() == "cpu: 3 OpenMP threads, score tiles of 64 x 64");
  // The memory check reaches the CPU's estimate through the interface.
  const SweepPoint point = make_sweep_point({1024, 64, 64}, {}, 0);
  CHECK(backend->host_bytes_needed(point, {Estimand::value}) == CpuBackend(3, 64).host_bytes_needed(point));
  CHECK(find_backend("no-such-backend") == nullptr);
  const std::vector<const BackendEntry*> all = registered_backends();
  CHECK(std::is_sorted(all.begin(), all.end(), [](const auto* a, const auto* b) { return a->name < b->name; }));
}

TEST_CASE("the registry selects a backend by name or by preference, and refuses what cannot run here by name") {
  std::vector<std::string> notes;
  const auto note = [&](const std::string& text) { notes.push_back(text); };
  // The CPU is here always (this test links no other backend; the command line's tests see CUDA refused by name).
  const std::unique_ptr<Backend> chosen = select_backend("auto", {2, 32}, note);
  CHECK(chosen->name() == "cpu");
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::StartsWith("backend auto: ") && Catch::Contains("cpu: 2 OpenMP threads"));
  CHECK(select_backend("cpu", {1, 16})->describe() == "cpu: 1 OpenMP thread, score tiles of 16 x 16");
  CHECK_THAT(backend_names(), Catch::StartsWith("auto, cpu"));
  CHECK_THROWS_WITH(select_backend("tpu", {}), Catch::Contains("--backend tpu: not one of " + backend_names()));
  // The CPU evaluates every point the sweep makes.
  const SweepPoint layernorm = make_sweep_point({16, 4, 4}, {}, 0, theory::ScoreModel::projected_layernorm);
  CHECK(chosen->unsupported(layernorm, {Estimand::row_sum, Estimand::value}).empty());
}

TEST_CASE("make_sweep_point sets every field, and C9's dv defaults to d") {
  theory::AttentionMap map;
  map.activation = {ActivationKind::softmax, Pointwise::identity, 1};
  map.inner = 0.25;
  const SweepPoint plain = make_sweep_point({7, 5, 3, 1.5, 0.5}, map, 42, theory::ScoreModel::projected_layernorm);
  CHECK((plain.N == 7 && plain.D == 5 && plain.d == 3));
  CHECK((plain.sigma_x == 1.5 && plain.sigma_t == 0.5 && plain.seed == 42));
  CHECK(plain.map.inner == 0.25);
  CHECK(plain.scores == theory::ScoreModel::projected_layernorm);
  CHECK_FALSE(plain.mix.has_value());
  CHECK(plain.dv == 0);
  const SweepPoint cross = make_sweep_point({7, 5, 3}, map, 42, theory::ScoreModel::projected, 0.5);
  CHECK(cross.mix == 0.5);
  CHECK(cross.dv == 3);
  CHECK(make_sweep_point({7, 5, 3}, map, 42, theory::ScoreModel::projected, 1.0, 11).dv == 11);
}
