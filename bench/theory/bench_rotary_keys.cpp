// Softmax's ||dA/dW_K||_F under rotary keys, the O(N^3) of a rotary head, at SmolLM2's shapes (D = 576, d = 64),
// for a causal head: the rows' key terms a block of rows at a time (`causal`), and one row at a time
// (`per_row`: the same head through an all-causal mask, the path sliding windows take). `plain_keys` is the same
// head without rotary keys, whose dA/dW_K is O(N^2 D) (each row's keys' spread about their mean), the baseline.

#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/attention.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <benchmark/benchmark.h>

namespace {

using attncheck::theory::Index;
using attncheck::theory::Matrix;

struct Head {
  Matrix X, V, U, gram;
  attncheck::theory::Rotary rotary = attncheck::theory::Rotary::half_split(64, 10000.0);
  explicit Head(Index n) : X(n, 576), V(n, 64), U(n, 64) {
    attncheck::streams::PhiloxStream stream(11, 0);
    stream.fill_normal(X.data(), X.data() + X.size(), 1.0);
    // Scores of a few units, as a trained head has: rows neither uniform nor one-hot.
    stream.fill_normal(V.data(), V.data() + V.size(), 0.6);
    stream.fill_normal(U.data(), U.data() + U.size(), 0.6);
    gram = X * X.transpose();
  }
};

const attncheck::theory::AttentionMap& softmax() {
  static const attncheck::theory::AttentionMap map{
      {attncheck::theory::ActivationKind::softmax, attncheck::theory::Pointwise::identity, 1}, 0.125, {}};
  return map;
}

// One head's norms under rotary keys per iteration; `attended` is `true` (causal) or a mask.
template <class Attended>
void rotary_head(benchmark::State& state, const Head& head, const Attended& attended) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(attncheck::theory::attention_norms_from_projections(softmax(), head.X, head.V, head.U,
                                                                                 attended, &head.rotary, &head.gram)
                                 .dK_fro);
  }
}

void causal(benchmark::State& state) { rotary_head(state, Head(state.range(0)), true); }

void per_row(benchmark::State& state) {
  attncheck::theory::AttendedMask mask(state.range(0), state.range(0));
  for (Index i = 0; i < mask.rows(); ++i) {
    for (Index j = 0; j < mask.cols(); ++j) mask(i, j) = j <= i;
  }
  rotary_head(state, Head(state.range(0)), mask);
}

void plain_keys(benchmark::State& state) {
  const Head head(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        attncheck::theory::attention_norms_from_projections(softmax(), head.X, head.V, head.U, true).dK_fro);
  }
}

}  // namespace

BENCHMARK(causal)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(per_row)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(plain_keys)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
