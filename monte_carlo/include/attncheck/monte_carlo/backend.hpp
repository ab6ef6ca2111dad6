#pragma once
// The one interface every Monte Carlo backend (CPU, CUDA) implements: a sweep point and a range of sample
// indices in, one row of per-sample estimand values out, in sample order. Sample k always draws from the stream
// (point seed, subsequence k): its inputs never depend on threads or batching (CUDA's last bits may: docs/gpu.md).

#include "attncheck/theory/attention.hpp"
#include "attncheck/theory/moments.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// The estimands are words of the vocabulary (theory/vocabulary.hpp).
using theory::Estimand;
using theory::kEstimandCount;

struct SweepPoint {
  theory::Index N = 0, D = 0, d = 0;
  double sigma_x = 1, sigma_t = 1;  // standard deviations
  theory::AttentionMap map;
  theory::ScoreModel scores = theory::ScoreModel::projected;
  std::uint64_t seed = 0;  // the point's own seed (derive_point_seed of the run seed)
  // C9 (THEORY.md facts 10-11): set, the point is O = softmax(S) P_mix with P_mix = mix softmax_col(V) +
  // (1 - mix) V and V = X W_V (N x dv): estimand value is ||O||_F, dV ||dO/dV||_F, dS ||dO/dS||_F and dQ
  // ||dO/dW_Q||_F. Sample k then draws W_V (D x dv, sigma_t) after K.
  std::optional<double> mix;
  theory::Index dv = 0;
};

// Sizes and standard deviations of a point.
struct PointShape {
  theory::Index N = 0, D = 0, d = 0;
  double sigma_x = 1, sigma_t = 1;
};

// Every SweepPoint is made here (the sweep's points, the GPU self-test's cases, the tests' points), so that a
// field SweepPoint gains is set in one place. C9 points pass `mix`, and dv (0: d).
inline SweepPoint make_sweep_point(const PointShape& shape, const theory::AttentionMap& map, std::uint64_t seed,
                                   theory::ScoreModel scores = theory::ScoreModel::projected,
                                   std::optional<double> mix = std::nullopt, theory::Index dv = 0) {
  SweepPoint point;
  point.N = shape.N;
  point.D = shape.D;
  point.d = shape.d;
  point.sigma_x = shape.sigma_x;
  point.sigma_t = shape.sigma_t;
  point.map = map;
  point.scores = scores;
  point.seed = seed;
  if (mix) {
    point.mix = mix;
    point.dv = dv > 0 ? dv : shape.d;
  }
  return point;
}

// How the score tiles of the elementwise powers x^p (p = 2..6) are formed. double: in FP64 throughout.
// mixed: V and U in FP32 (projected in FP32 when only norms are asked, else rounded), the scores and per-entry
// terms (phi^2, phi'^2) in FP32, every term then accumulated in FP64; relative error on each sum at most
// mixed_precision_relative_bound(p, d, D) (cpu_backend.hpp, docs/THEORY.md
// "Mixed precision"). The other maps and paths are FP64 in both.
enum class ScorePrecision { fp64, mixed };

// "double" or "mixed", as --precision spells them.
const char* precision_name(ScorePrecision precision);

// NaN where an estimand was not requested.
using SampleValues = std::array<double, kEstimandCount>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One line on where it runs, for the user ("cpu: 2 OpenMP threads, score tiles of 256 x 256").
  virtual std::string describe() const { return name(); }
  // Host threads that evaluate samples (recorded in the results' provenance).
  virtual int threads() const { return 1; }
  // The GPU it evaluates on (a rank's, under MPI: distributed.hpp), or -1 on the host CPU.
  virtual int device() const { return -1; }
  // Host memory that one evaluate() call for these estimands of the point may hold, checked before a sweep
  // starts (0: the backend's large buffers are not in host memory).
  virtual std::uint64_t host_bytes_needed(const SweepPoint& point, const std::vector<Estimand>& estimands) const {
    (void)point;
    (void)estimands;
    return 0;
  }
  // How evaluate() forms these estimands of the point, as points.jsonl's "path" spells it: "direct" (the scores
  // themselves) unless the backend has another way.
  virtual const char* evaluation_path(const SweepPoint& point, const std::vector<Estimand>& estimands) const {
    (void)point;
    (void)estimands;
    return "direct";
  }
  // Why this backend cannot evaluate these estimands of the point, or empty when it can (the sweep hands such
  // points to the CPU backend, which evaluates everything).
  virtual std::string unsupported(const SweepPoint& point, const std::vector<Estimand>& estimands) const {
    (void)point;
    (void)estimands;
    return {};
  }
  // Appends the values of samples first, first + 1, ..., first + count - 1 to `out`, in that order.
  virtual void evaluate(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t first,
                        std::uint64_t count, std::vector<SampleValues>& out) = 0;
};

}  // namespace attncheck::monte_carlo
