// ||grad softmax(A)||_F three ways: the fact-1 closed form (O(N^2)), the explicit block-diagonal Jacobian
// built block by block (O(N^3)), and the explicit dense N^2 x N^2 matrix (O(N^4) memory, small N only).

#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/softmax.hpp"

#include <benchmark/benchmark.h>

using attncheck::theory::Index;
using attncheck::theory::Matrix;

namespace {

Matrix logits(Index n) {
  Matrix m(n, n);
  attncheck::streams::PhiloxStream(7, 0).fill_normal(m.data(), m.data() + m.size(), 2.0);
  return m;
}

void closed_form(benchmark::State& state) {
  const Matrix a = logits(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(attncheck::theory::softmax_norms(a).grad_fro);
  state.counters["N"] = static_cast<double>(state.range(0));
}

void explicit_blocks(benchmark::State& state) {
  const Matrix a = logits(state.range(0));
  for (auto _ : state) {
    const Matrix s = attncheck::theory::row_softmax(a);
    double sum_sq = 0;
    for (Index i = 0; i < s.rows(); ++i) {
      const Eigen::VectorXd row = s.row(i).transpose();
      const Matrix block = Matrix(row.asDiagonal()) - row * row.transpose();
      sum_sq += block.squaredNorm();
    }
    benchmark::DoNotOptimize(std::sqrt(sum_sq));
  }
  state.counters["N"] = static_cast<double>(state.range(0));
}

void explicit_dense(benchmark::State& state) {
  const Matrix a = logits(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(attncheck::theory::explicit_softmax_jacobian(a).norm());
  state.counters["N"] = static_cast<double>(state.range(0));
}

}  // namespace

BENCHMARK(closed_form)->Arg(32)->Arg(64)->Arg(128)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(explicit_blocks)->Arg(32)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond);
BENCHMARK(explicit_dense)->Arg(32)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
