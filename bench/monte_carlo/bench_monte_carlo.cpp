// CPU backend speed at the reference point: N = 1024, D = d = 64, F = (T/sqrt d)^3 elementwise,
// estimands value + dQ, double precision. Reports, in one run:
// - dgemm_*: the machine's DGEMM rate (1024^3, one thread) with OpenBLAS and with Eigen as built here;
// - score_phase: one sample's evaluation on drawn inputs (projections, score tiles, reductions), one thread,
//   counted as 2 N^2 d flops (the score GEMMs only), so its rate is comparable with DGEMM's;
// - draw: the Philox normals of one sample (on the process's Box-Muller path);
// - normal_pairs/0, /1: one sample's worth of normal pairs on the scalar and on the AVX2 (libmvec) path;
// - philox_words/0, /1: the Philox blocks under those pairs alone, scalar (Random123) and AVX2;
// - samples: whole samples per second through CpuBackend with all threads (what `attncheck mc` does);
//   /T/P/B: T threads (0: all), precision P (0 double, 1 mixed), B = 1: the BLAS score tiles and row reducer
//   (the double path before the fused kernel, and what a CPU without AVX-512 runs);
// - gemm_all_cores/0, /1: one 1024^3 DGEMM (0) or SGEMM (1) per thread on every thread at once, single-threaded
//   OpenBLAS each: the roofline the whole sample is measured against (2 N^2 d flops at this rate).
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <benchmark/benchmark.h>

#if defined(ATTNCHECK_BENCH_OPENBLAS)
#include <cblas.h>
#endif

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using namespace attncheck::streams;

namespace {

constexpr theory::Index kN = 1024, kD = 64, kd = 64;

SweepPoint reference_point() {
  SweepPoint pt;
  pt.N = kN;
  pt.D = kD;
  pt.d = kd;
  pt.map.activation = {theory::ActivationKind::pointwise, theory::Pointwise::poly, 3};
  pt.map.inner = 1 / std::sqrt(static_cast<double>(kd));
  pt.seed = 12345;
  return pt;
}

const std::vector<Estimand> kEstimands{Estimand::value, Estimand::dQ};

void set_gemm_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(ATTNCHECK_BENCH_OPENBLAS)
void dgemm_openblas(benchmark::State& state) {
  openblas_set_num_threads(1);
  const theory::Index n = state.range(0);
  const theory::Matrix A = theory::Matrix::Random(n, n), B = theory::Matrix::Random(n, n);
  theory::Matrix C(n, n);
  for (auto _ : state) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, A.data(), n, B.data(), n, 0.0, C.data(), n);
    benchmark::DoNotOptimize(C.data());
  }
  set_gemm_flops(state, 2.0 * n * n * n);
  state.SetLabel(openblas_get_corename());
}
BENCHMARK(dgemm_openblas)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

void dgemm_eigen(benchmark::State& state) {
  Eigen::setNbThreads(1);
  const theory::Index n = state.range(0);
  const theory::Matrix A = theory::Matrix::Random(n, n), B = theory::Matrix::Random(n, n);
  theory::Matrix C(n, n);
  for (auto _ : state) {
    C.noalias() = A * B;
    benchmark::DoNotOptimize(C.data());
  }
  set_gemm_flops(state, 2.0 * n * n * n);
}
BENCHMARK(dgemm_eigen)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void score_phase(benchmark::State& state) {
  CpuBackend configure(1);  // sets the GEMM libraries to one thread
  const SweepPoint pt = reference_point();
  SampleInputs in;
  draw_sample(pt, 0, in);
  const EvaluationOptions options{state.range(0), 1};
  for (auto _ : state) {
    benchmark::DoNotOptimize(evaluate_inputs(pt.map, in.X, in.Q, in.K, kEstimands, options));
  }
  set_gemm_flops(state, 2.0 * kN * kN * kd);
}
BENCHMARK(score_phase)->Arg(128)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

void draw(benchmark::State& state) {
  const SweepPoint pt = reference_point();
  SampleInputs in;
  std::uint64_t k = 0;
  for (auto _ : state) {
    draw_sample(pt, k++, in);
    benchmark::DoNotOptimize(in.X.data());
  }
}
BENCHMARK(draw)->Unit(benchmark::kMillisecond)->UseRealTime();

// Argument 0, 1, 2: the scalar, AVX2 and AVX-512 Box-Muller paths.
NormalMath normal_math_of(const benchmark::State& state) {
  constexpr NormalMath kByArgument[] = {NormalMath::scalar, NormalMath::avx2, NormalMath::avx512};
  return kByArgument[state.range(0)];
}

void normal_pairs(benchmark::State& state) {
  const NormalMath math = normal_math_of(state);
  if (!normal_math_supported(math)) {
    state.SkipWithError((std::string("no ") + streams::normal_math_name(math) + " normals here").c_str());
    return;
  }
  constexpr std::size_t kPairs = (kN * kD + 2 * kD * kd) / 2;
  std::vector<double> out(2 * kPairs);
  const PhiloxKey key{{12345, 0}};
  PhiloxCounter counter{{0, 0, 0, 0}};
  for (auto _ : state) {
    streams::normal_pairs(math, key, counter, kPairs, 1.0, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kPairs));
  state.SetLabel(streams::normal_math_name(math));
}
BENCHMARK(normal_pairs)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The Philox words alone, same count, same paths: what the vectorized Philox contributes.
void philox_words(benchmark::State& state) {
  const NormalMath math = normal_math_of(state);
  if (!normal_math_supported(math)) {
    state.SkipWithError((std::string("no ") + streams::normal_math_name(math) + " normals here").c_str());
    return;
  }
  constexpr std::size_t kBlocks = (kN * kD + 2 * kD * kd) / 2;
  std::vector<std::uint32_t> words(4 * kBlocks);
  const PhiloxKey key{{12345, 0}};
  PhiloxCounter counter{{0, 0, 0, 0}};
  for (auto _ : state) {
    philox_blocks(math, key, counter, kBlocks, words.data());
    benchmark::DoNotOptimize(words.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBlocks));
  state.SetLabel(streams::normal_math_name(math));
}
BENCHMARK(philox_words)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

#if defined(ATTNCHECK_BENCH_OPENBLAS)
template <class Real>
void gemm(const Real* A, const Real* B, Real* C, int n) {
  if constexpr (std::is_same_v<Real, double>) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, A, n, B, n, 0.0, C, n);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  }
}

template <class Real>
void gemm_all_cores_of(benchmark::State& state) {
  openblas_set_num_threads(1);
  const int threads = omp_get_max_threads(), n = 1024;
  using M = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<M> a(threads, M::Random(n, n)), b(threads, M::Random(n, n)), c(threads, M(n, n));
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; ++t) gemm(a[t].data(), b[t].data(), c[t].data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_gemm_flops(state, 2.0 * n * n * n * threads);
  state.counters["threads"] = threads;
  state.SetLabel(std::is_same_v<Real, double> ? "dgemm" : "sgemm");
}
void gemm_all_cores(benchmark::State& state) {
  if (state.range(0) == 0) {
    gemm_all_cores_of<double>(state);
  } else {
    gemm_all_cores_of<float>(state);
  }
}
BENCHMARK(gemm_all_cores)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
#endif

// The BLAS tiles are what runs where the fused kernel does not (no AVX-512): forced for this benchmark only.
struct ForceBlasTiles {
  explicit ForceBlasTiles(bool on) : on_(on) {
    if (on_) ::setenv("ATTNCHECK_NO_AVX512", "1", 1);
  }
  ~ForceBlasTiles() {
    if (on_) ::unsetenv("ATTNCHECK_NO_AVX512");
  }
  ForceBlasTiles(const ForceBlasTiles&) = delete;
  ForceBlasTiles& operator=(const ForceBlasTiles&) = delete;
  bool on_;
};

// Fresh samples every iteration (the stream moves on), `batch` per call; items are samples.
void evaluate_batches(benchmark::State& state, CpuBackend& backend, const SweepPoint& pt, std::uint64_t batch) {
  std::vector<SampleValues> out;
  std::uint64_t first = 0;
  for (auto _ : state) {
    out.clear();
    backend.evaluate(pt, kEstimands, first, batch, out);
    first += batch;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}

void samples(benchmark::State& state) {
  const ScorePrecision precision = state.range(1) == 1 ? ScorePrecision::mixed : ScorePrecision::fp64;
  const ForceBlasTiles blas(state.range(2) == 1);
  CpuBackend backend(static_cast<int>(state.range(0)), 256, EvaluationPath::automatic, precision);
  const SweepPoint pt = reference_point();
  constexpr std::uint64_t kBatch = 32;
  evaluate_batches(state, backend, pt, kBatch);
  state.counters["threads"] = static_cast<double>(backend.threads());
  state.SetLabel(std::string(precision_name(precision)) + (state.range(2) == 1 ? " blas-tiles" : " fused"));
}
// Process CPU time too: on a shared machine, samples per CPU-second is the figure other loads disturb least.
BENCHMARK(samples)
    ->Args({1, 0, 0})
    ->Args({0, 0, 0})
    ->Args({0, 0, 1})
    ->Args({0, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// --phi 'x^3' against --phi poly --p 3 (bench/monte_carlo/expression_ratio.sh): /M, all threads, value + dQ at the
// reference point; M = 0 the built-in (the fused kernel where AVX-512 is), 1 the built-in on BLAS tiles and the
// row reducer, 2 the expression 'x^3' (a monomial: the built-in's kernels), 3 'x*x*x', the same map as a program
// over BLAS score tiles (what every expression that is not c x^k runs).
void expression_samples(benchmark::State& state) {
  const ForceBlasTiles blas(state.range(0) == 1);
  CpuBackend backend(0, 256);
  SweepPoint pt = reference_point();
  const char* labels[] = {"poly 3", "poly 3, blas tiles", "x^3", "x*x*x"};
  if (state.range(0) >= 2) {
    pt.map.activation = theory::expression_activation(theory::PhiExpression::parse(labels[state.range(0)]), false);
  }
  evaluate_batches(state, backend, pt, 32);
  state.SetLabel(labels[state.range(0)]);
}
BENCHMARK(expression_samples)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

// The N-scaling table (bench/monte_carlo/scaling.sh): /N/P, all threads, D = d = 64, p = 3, value + dQ.
void scaling(benchmark::State& state) {
  const ScorePrecision precision = state.range(1) == 1 ? ScorePrecision::mixed : ScorePrecision::fp64;
  CpuBackend backend(0, 256, EvaluationPath::automatic, precision);
  SweepPoint pt = reference_point();
  pt.N = state.range(0);
  // Samples run in parallel as in `attncheck mc`; small N get larger batches (32 samples at N = 1024, as in
  // `samples`), so that the threads' start and join, which a loaded machine stretches, stay a small part.
  const std::uint64_t per_thread = std::max<std::uint64_t>(1, (4096 / pt.N) * (4096 / pt.N) / 2);
  const std::uint64_t batch = per_thread * static_cast<std::uint64_t>(backend.threads());
  evaluate_batches(state, backend, pt, batch);
  state.counters["N"] = static_cast<double>(pt.N);
  state.counters["score_flops"] = 2.0 * static_cast<double>(pt.N) * static_cast<double>(pt.N) * kd;
  state.SetLabel(precision_name(precision));
}
BENCHMARK(scaling)
    ->ArgsProduct({benchmark::CreateRange(256, 65536, 2), {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
