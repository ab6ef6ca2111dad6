// The CUDA backend's host side: validation, batching, cuBLAS calls and the final norms. Compiled by the host
// compiler; every kernel sits behind the plain launchers of kernels.hpp.
//
// Per batch of samples (all on one stream, so nothing waits for the host until the results are copied):
//   draw X, Q, K (cuRAND Philox, the CPU's order)  ->  V = X Q, U = X K (strided-batched DGEMM)
//   -> row norms  ->  one of
//      Gram path (score-var, identity and x^1, the matrix power): d x d Gram and cross matrices by DGEMM;
//      strip path (every other map): for each strip of score rows, the strip by DGEMM into a buffer of about
//        half the L2 cache, then one kernel reducing it with the per-entry terms (softmax: a kernel turning
//        the strip into probabilities, u_bar = A U and x_bar = A X by DGEMM, then the reducing kernel)
//   -> per-sample totals summed over rows in a fixed order -> copied back once per batch.

#include "attncheck/gpu/cuda_backend.hpp"

#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/monte_carlo/distributed.hpp"

#include "attncheck/gpu/batch_plan.hpp"
#include "attncheck/gpu/cuda_scope.hpp"
#include "attncheck/gpu/normal_layout.hpp"
#include "attncheck/monte_carlo/sample_norms.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "kernels.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

namespace attncheck::gpu {

using monte_carlo::Estimand;
using monte_carlo::EstimandRequest;
using monte_carlo::SampleTotals;
using monte_carlo::SampleValues;
using monte_carlo::SweepPoint;
using theory::InputError;

namespace {

CudaError cuda_error(cudaError_t status, std::string_view what) {
  return CudaError(
      fmt::format("CUDA error in {}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status)));
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw cuda_error(status, what);
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(fmt::format("cuBLAS error in {}: {}", what, cublasGetStatusString(status)));
}

// Device memory that only grows: successive batches and points reuse it.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  T* reserve(std::int64_t count) {
    const auto wanted = static_cast<std::size_t>(std::max<std::int64_t>(count, 1));
    if (wanted > capacity_) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = nullptr;
      capacity_ = 0;
      check(cudaMalloc(reinterpret_cast<void**>(&data_), wanted * sizeof(T)), "cudaMalloc");
      capacity_ = wanted;
    }
    return data_;
  }
  std::size_t bytes() const { return capacity_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// Column-major strided-batched DGEMM, C_b = alpha op(A_b) op(B_b) + beta C_b. Row-major matrices are passed
// as their column-major transposes: a row-major r x c matrix is a column-major c x r one with ld = c.
struct Gemm {
  cublasHandle_t handle;
  void operator()(cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  double alpha, const double* A, std::int64_t lda, std::int64_t stride_a, const double* B,
                  std::int64_t ldb, std::int64_t stride_b, double* C, std::int64_t ldc, std::int64_t stride_c,
                  std::int64_t batch) const {
    const double beta = 0;
    check(cublasDgemmStridedBatched(handle, op_a, op_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                    &alpha, A, static_cast<int>(lda), stride_a, B, static_cast<int>(ldb), stride_b,
                                    &beta, C, static_cast<int>(ldc), stride_c, static_cast<int>(batch)),
          "cublasDgemmStridedBatched");
  }
};

// Sizes the device code can index, then what the point asks for, checked as on every backend.
EstimandRequest validate(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  if (point.N < 1 || point.D < 1 || point.d < 1) {
    throw InputError(
        fmt::format("shapes do not chain: N = {}, D = {}, d = {} must all be >= 1", point.N, point.D, point.d));
  }
  constexpr auto kIntMax = static_cast<theory::Index>(std::numeric_limits<int>::max());
  if (point.N > kIntMax || point.D > kIntMax || point.d > kIntMax) {
    throw InputError(fmt::format("N = {}, D = {}, d = {}: the CUDA backend takes sizes up to {}", point.N, point.D,
                                 point.d, kIntMax));
  }
  const EstimandRequest request = check_request(point, estimands);
  if (request.cross_norm && (point.dv > kIntMax || point.dv > 65535)) {
    throw InputError(fmt::format("--dv {}: the CUDA backend takes up to 65535 value columns", point.dv));
  }
  if (const std::string reason = cuda_unsupported_reason(point, estimands, {}); !reason.empty()) {
    throw InputError(reason);
  }
  return request;
}

class CudaBackend final : public monte_carlo::Backend {
 public:
  CudaBackend(int device, const CudaBackendOptions& options) : device_(device), request_(options.request) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    score_bytes_ = options.score_buffer_bytes;
    if (score_bytes_ == 0) {
      int l2_bytes = 0;
      check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device_), "cudaDeviceGetAttribute");
      score_bytes_ = default_score_buffer_bytes(l2_bytes);
    }
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
  }
  ~CudaBackend() override {
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string unsupported(const SweepPoint& point, const std::vector<Estimand>& estimands) const override {
    return cuda_unsupported_reason(point, estimands, request_);
  }
  int device() const override { return device_; }
  std::string describe() const override {
    return fmt::format("cuda: device {}, {}", device_, cuda_device_description(device_));
  }

  void evaluate(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t first,
                std::uint64_t count, std::vector<SampleValues>& out) override {
    const std::size_t base = out.size();
    out.resize(base + count);
    if (count == 0) return;
    const EstimandRequest request = validate(point, estimands);
    check(cudaSetDevice(device_), "cudaSetDevice");
    if (request.cross_norm) {
      evaluate_cross_norm(point, request, first, count, out.data() + base);
      return;
    }
    const std::int64_t n = point.N, D = point.D, d = point.d;
    // Saturating: an absurd N must read as too large for the device, not wrap to a small or negative size.
    using records::saturating_product;
    const auto un = static_cast<std::uint64_t>(n), uD = static_cast<std::uint64_t>(D),
               ud = static_cast<std::uint64_t>(d);
    const std::uint64_t per_sample_bytes =
        saturating_product({8, records::saturating_sum({saturating_product({un, uD}), saturating_product({2, uD, ud}),
                                                        saturating_product({2, un, ud}), saturating_product({8, un}),
                                                        saturating_product({5, ud, ud})})});
    const auto memory_samples = static_cast<std::int64_t>(std::min<std::uint64_t>(
        device_samples(per_sample_bytes, score_bytes_, fmt::format("N = {}, D = {}, d = {}", n, D, d)), INT64_MAX));
    const BatchPlan plan = plan_batch(n, static_cast<std::int64_t>(std::min<std::uint64_t>(count, 1ULL << 40)),
                                      static_cast<std::int64_t>(score_bytes_ / sizeof(double)), memory_samples);
    // Batches are enqueued back to back and the host waits once per group of them: at large N a batch is
    // one sample, and a wait per sample would leave the device idle while the host copies and launches.
    const std::uint64_t group = static_cast<std::uint64_t>(plan.samples) *
                                static_cast<std::uint64_t>(std::max<std::int64_t>(1, kSamplesPerWait / plan.samples));
    for (std::uint64_t group_start = 0; group_start < count; group_start += group) {
      const std::uint64_t group_count = std::min(group, count - group_start);
      const auto batches = static_cast<std::int64_t>((group_count + plan.samples - 1) / plan.samples);
      double* totals = totals_.reserve(static_cast<std::int64_t>(group_count) * kTotals);
      unsigned long long* bad = bad_.reserve(batches);
      static_assert(detail::kNoBadRow == ~0ULL, "the flags are reset by setting every byte");
      check(cudaMemsetAsync(bad, 0xFF, static_cast<std::size_t>(batches) * sizeof *bad, stream_), "cudaMemsetAsync");
      for (std::int64_t k = 0; k < batches; ++k) {
        const std::uint64_t done = static_cast<std::uint64_t>(k * plan.samples);
        const auto batch = static_cast<std::int64_t>(std::min<std::uint64_t>(plan.samples, group_count - done));
        enqueue_batch(point, request, first + group_start + done, batch, plan.strip_rows,
                      totals + static_cast<std::int64_t>(done) * kTotals, bad + k);
      }
      const CopiedBack copied = copy_back(totals, group_count * kTotals, bad, static_cast<std::size_t>(batches));
      for (std::int64_t k = 0; k < batches; ++k) {
        const std::uint64_t done = static_cast<std::uint64_t>(k * plan.samples);
        const auto batch = static_cast<std::int64_t>(std::min<std::uint64_t>(plan.samples, group_count - done));
        refuse_non_finite(copied.bad_rows[static_cast<std::size_t>(k)], first + group_start + done, n,
                          "non-finite score or per-entry term", ": a score overflowed or is NaN");
        finish_batch(point, request, batch, copied.totals.data() + done * kTotals,
                     out.data() + base + group_start + done);
      }
    }
  }

 private:
  std::size_t held_bytes() const {
    std::size_t sum = 0;
    for (const auto* a : {&X_,
                          &Q_,
                          &K_,
                          &V_,
                          &U_,
                          &x_sq_,
                          &v_sq_,
                          &u_sq_,
                          &diag_sq_,
                          &row_sums_,
                          &totals_,
                          &gram_v_,
                          &gram_u_,
                          &cross_,
                          &power_,
                          &work_,
                          &tile_,
                          &u_bar_,
                          &x_bar_,
                          &W_,
                          &values_,
                          &probabilities_,
                          &mixed_,
                          &output_,
                          &softmax_output_}) {
      sum += a->bytes();
    }
    return sum + top_.bytes();
  }

  // Per-sample totals of a batch, slot-major: slot s of sample b at s * batch + b.
  enum Slot { kValueSq = 0, kDsSq, kDqSq, kDkSq, kGramDot, kDiagSq, kXSq, kUSq, kVSq, kPowerSq, kTotals };
  // Samples whose results are copied back together (the runner's largest chunk).
  static constexpr std::int64_t kSamplesPerWait = 1024;

  // How many samples of per_sample_bytes the device holds beside reserved_bytes: what this backend already holds
  // is reusable, and a quarter of the rest is left for cuBLAS and the driver. A point too large for the device is,
  // like require_memory on the CPU, the input's fault, named by `point`.
  std::uint64_t device_samples(std::uint64_t per_sample_bytes, std::uint64_t reserved_bytes, const std::string& point) {
    std::size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const std::uint64_t usable = free_bytes / 4 * 3 + held_bytes();
    const std::uint64_t samples = (usable > reserved_bytes ? usable - reserved_bytes : 0) / per_sample_bytes;
    if (samples < 1) {
      throw InputError(fmt::format("{} needs {:.1f} MiB of device memory per sample; device {} has {:.1f} MiB free",
                                   point, per_sample_bytes / 1048576.0, device_, free_bytes / 1048576.0));
    }
    return samples;
  }

  struct CopiedBack {
    std::vector<double> totals;
    std::vector<unsigned long long> bad_rows;
  };

  // Waits for the kernels enqueued on the stream and copies back their totals and non-finite flags.
  CopiedBack copy_back(const double* totals, std::uint64_t total_count, const unsigned long long* bad,
                       std::size_t flag_count) {
    CopiedBack copied{std::vector<double>(static_cast<std::size_t>(total_count)),
                      std::vector<unsigned long long>(flag_count)};
    check(cudaMemcpyAsync(copied.totals.data(), totals, copied.totals.size() * sizeof(double), cudaMemcpyDeviceToHost,
                          stream_),
          "cudaMemcpyAsync");
    check(cudaMemcpyAsync(copied.bad_rows.data(), bad, flag_count * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                          stream_),
          "cudaMemcpyAsync");
    check(cudaGetLastError(), "a kernel launch");
    check(cudaStreamSynchronize(stream_), "the kernels of a batch");
    return copied;
  }

  // A batch's flag holds the first b * n + i whose row had a non-finite term; the sample and row it names are
  // the user's to look at.
  static void refuse_non_finite(unsigned long long bad_row, std::uint64_t batch_first, std::int64_t n, const char* what,
                                const char* cause) {
    if (bad_row == detail::kNoBadRow) return;
    throw InputError(fmt::format("{} in sample {}, row {} (0-based){}", what,
                                 batch_first + bad_row / static_cast<std::uint64_t>(n),
                                 bad_row % static_cast<std::uint64_t>(n), cause));
  }

  struct Projections {
    double *X, *Q, *K, *W, *V, *U;
  };

  // Draws a batch's X, W_Q, W_K (and W_V for dv > 0) into the backend's buffers and enqueues V = X W_Q and
  // U = X W_K, row-major n x d.
  Projections enqueue_projections(const SweepPoint& point, std::uint64_t first, std::int64_t batch, std::int64_t dv) {
    const std::int64_t n = point.N, D = point.D, d = point.d;
    const NormalLayout layout{n * D, D * d, D * d, D * dv};
    Projections p;
    p.X = X_.reserve(batch * n * D);
    p.Q = Q_.reserve(batch * D * d);
    p.K = K_.reserve(batch * D * d);
    p.W = dv > 0 ? W_.reserve(batch * D * dv) : nullptr;
    p.V = V_.reserve(batch * n * d);
    p.U = U_.reserve(batch * n * d);
    detail::draw_samples(point.seed, first, static_cast<int>(batch), layout, point.sigma_x, point.sigma_t, p.X, p.Q,
                         p.K, p.W, stream_);
    // Row-major n x d products X M are column-major d x n = M^T X^T, with M^T the row-major storage of M.
    const Gemm gemm{blas_};
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, d, n, D, 1.0, p.Q, d, D * d, p.X, D, n * D, p.V, d, n * d, batch);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, d, n, D, 1.0, p.K, d, D * d, p.X, D, n * D, p.U, d, n * d, batch);
    return p;
  }

  // Enqueues the squared row norms of X, of V = X Q and of U = X K (and the diagonal scores) of a batch into the
  // backend's buffers; the returned arguments name them for the kernels that follow.
  detail::RowNormArgs enqueue_row_norms(std::int64_t batch, std::int64_t n, std::int64_t D, std::int64_t d, double* X,
                                        double* V, double* U) {
    detail::RowNormArgs norms;
    norms.batch = static_cast<int>(batch);
    norms.n = n;
    norms.D = D;
    norms.d = d;
    norms.X = X;
    norms.V = V;
    norms.U = U;
    norms.x_sq = x_sq_.reserve(batch * n);
    norms.v_sq = v_sq_.reserve(batch * n);
    norms.u_sq = u_sq_.reserve(batch * n);
    norms.diag_sq = diag_sq_.reserve(batch * n);
    detail::row_norms(norms, stream_);
    return norms;
  }

  // Enqueues a batch: its totals go to `totals` (batch * kTotals doubles), its non-finite flag to `bad`.
  void enqueue_batch(const SweepPoint& point, const EstimandRequest& req, std::uint64_t first, std::int64_t batch,
                     std::int64_t strip_rows, double* totals, unsigned long long* bad) {
    const std::int64_t n = point.N, D = point.D, d = point.d;
    const Gemm gemm{blas_};
    const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const Projections projections = enqueue_projections(point, first, batch, 0);
    double* V = projections.V;
    double* U = projections.U;
    const detail::RowNormArgs norms = enqueue_row_norms(batch, n, D, d, projections.X, V, U);

    const auto slot = [&](Slot s) { return totals + s * batch; };

    const bool gram_needed = req.score_var || (req.linear && req.value) || (req.matpow && req.value);
    double* gram_v = nullptr;
    double* gram_u = nullptr;
    if (gram_needed) {
      // Gram matrices V^T V and U^T U of the unscaled projections (fact 6), d x d per sample.
      gram_v = gram_v_.reserve(batch * d * d);
      gram_u = gram_u_.reserve(batch * d * d);
      gemm(N, T, d, d, n, 1.0, V, d, n * d, V, d, n * d, gram_v, d, d * d, batch);
      gemm(N, T, d, d, n, 1.0, U, d, n * d, U, d, n * d, gram_u, d, d * d, batch);
      detail::batched_dot(static_cast<int>(batch), d * d, gram_v, gram_u, slot(kGramDot), stream_);
    }
    if (req.score_var) detail::sum_rows(static_cast<int>(batch), n, 1, norms.diag_sq, slot(kDiagSq), stream_);
    if (req.linear && req.any_norm()) {
      detail::sum_rows(static_cast<int>(batch), n, 1, norms.x_sq, slot(kXSq), stream_);
      detail::sum_rows(static_cast<int>(batch), n, 1, norms.u_sq, slot(kUSq), stream_);
      detail::sum_rows(static_cast<int>(batch), n, 1, norms.v_sq, slot(kVSq), stream_);
    }
    const int p = point.map.activation.p;
    if (req.matpow && req.value) {
      if (p == 1) {
        check(cudaMemcpyAsync(slot(kPowerSq), slot(kGramDot), batch * sizeof(double), cudaMemcpyDeviceToDevice,
                              stream_),
              "cudaMemcpyAsync");
      } else {
        // ||S^p||^2 = lambda^(2p) tr(M^T G_V M G_U) with M = (U^T V)^(p-1): d x d work, no N x N matrix.
        double* cross = cross_.reserve(batch * d * d);
        double* power = power_.reserve(batch * d * d);
        double* work = work_.reserve(batch * d * d);
        gemm(N, T, d, d, n, 1.0, U, d, n * d, V, d, n * d, cross, d, d * d, batch);
        check(cudaMemcpyAsync(power, cross, batch * d * d * sizeof(double), cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpyAsync");
        for (int k = 2; k < p; ++k) {
          gemm(N, N, d, d, d, 1.0, power, d, d * d, cross, d, d * d, work, d, d * d, batch);
          std::swap(power, work);
        }
        gemm(N, N, d, d, d, 1.0, gram_v, d, d * d, power, d, d * d, work, d, d * d, batch);  // G_V M
        gemm(T, N, d, d, d, 1.0, power, d, d * d, work, d, d * d, cross, d, d * d, batch);   // M^T G_V M
        detail::batched_dot(static_cast<int>(batch), d * d, cross, gram_u, slot(kPowerSq), stream_);
      }
    }
    if (req.any_norm() && !req.linear && !req.matpow) {
      reduce_strips(point, req, batch, strip_rows, norms, slot(kValueSq), bad);
    }
  }

  // C9 (THEORY.md fact 11): whole N x N attention matrices per sample, batches of as many samples as the device
  // holds; per batch: draw X, W_Q, W_K, W_V -> V = X W_Q, U = X W_K, values = X W_V (DGEMM) -> scores lambda V U^T
  // (DGEMM) -> row softmax in place -> column softmax and mix of the values -> O = A P_mix and A P (DGEMM) -> the
  // per-row sums of theory::cross_norm_entry_terms -> per-sample totals, copied back once per batch.
  void evaluate_cross_norm(const SweepPoint& point, const EstimandRequest& req, std::uint64_t first,
                           std::uint64_t count, SampleValues* out) {
    const std::int64_t n = point.N, D = point.D, d = point.d, dv = point.dv;
    using records::saturating_product;
    using records::saturating_sum;
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    const std::uint64_t per_sample_bytes =
        saturating_product({8, saturating_sum({saturating_product({u(n), u(D)}), saturating_product({2, u(D), u(d)}),
                                               saturating_product({u(D), u(dv)}), saturating_product({2, u(n), u(d)}),
                                               saturating_product({u(n), u(n)}), saturating_product({5, u(n), u(dv)}),
                                               saturating_product({10, u(n)})})});
    const std::uint64_t memory_samples =
        device_samples(per_sample_bytes, 0, fmt::format("C9 at N = {}, D = {}, d = {}, dv = {}", n, D, d, dv));
    const auto most = static_cast<std::int64_t>(
        std::min<std::uint64_t>({memory_samples, count, static_cast<std::uint64_t>(kMaxBatchSamples)}));
    for (std::uint64_t done = 0; done < count; done += static_cast<std::uint64_t>(most)) {
      const auto batch = static_cast<std::int64_t>(std::min<std::uint64_t>(most, count - done));
      double* totals = totals_.reserve(batch * kTotals);
      unsigned long long* bad = bad_.reserve(1);
      check(cudaMemsetAsync(bad, 0xFF, sizeof *bad, stream_), "cudaMemsetAsync");
      enqueue_cross_norm_batch(point, req, first + done, batch, totals, bad);
      const CopiedBack copied = copy_back(totals, static_cast<std::uint64_t>(batch * kTotals), bad, 1);
      refuse_non_finite(copied.bad_rows[0], first + done, n, "non-finite score, value or per-entry term", "");
      finish_batch(point, req, batch, copied.totals.data(), out + done);
    }
  }

  void enqueue_cross_norm_batch(const SweepPoint& point, const EstimandRequest& req, std::uint64_t first,
                                std::int64_t batch, double* totals, unsigned long long* bad) {
    const std::int64_t n = point.N, D = point.D, d = point.d, dv = point.dv;
    const Gemm gemm{blas_};
    const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const auto [X, Q, K, W, V, U] = enqueue_projections(point, first, batch, dv);
    double* values = values_.reserve(batch * n * dv);
    gemm(N, N, dv, n, D, 1.0, W, dv, D * dv, X, D, n * D, values, dv, n * dv, batch);  // X W_V, like V and U
    const detail::RowNormArgs norms = enqueue_row_norms(batch, n, D, d, X, V, U);
    detail::scale(V, batch * n * d, point.map.inner, stream_);
    // The whole score matrix, rows row-major: the strip of all n rows.
    detail::StripArgs strip;
    strip.batch = static_cast<int>(batch);
    strip.n = n;
    strip.D = D;
    strip.d = d;
    strip.row0 = 0;
    strip.rows = n;
    strip.tile = tile_.reserve(batch * n * n);
    strip.X = X;
    strip.U = U;
    strip.bad = bad;
    gemm(T, N, n, n, d, 1.0, U, d, n * d, V, d, n * d, strip.tile, n, n * n, batch);
    detail::softmax_probabilities(strip, top_.reserve(batch * n), stream_);
    double* probabilities = probabilities_.reserve(batch * n * dv);
    double* mixed = mixed_.reserve(batch * n * dv);
    detail::cross_norm_values(static_cast<int>(batch), n, dv, *point.mix, values, probabilities, mixed, bad, stream_);
    // O = A P_mix (n x dv, row-major) = column-major dv x n = P_mix^T-view (dv x n) times A^T-view (n x n).
    double* output = output_.reserve(batch * n * dv);
    gemm(N, N, dv, n, n, 1.0, mixed, dv, n * dv, strip.tile, n, n * n, output, dv, n * dv, batch);
    double* softmax_output = output;
    if (*point.mix != 1) {
      softmax_output = softmax_output_.reserve(batch * n * dv);
      gemm(N, N, dv, n, n, 1.0, probabilities, dv, n * dv, strip.tile, n, n * n, softmax_output, dv, n * dv, batch);
    }
    detail::CrossNormRowArgs rows;
    rows.batch = static_cast<int>(batch);
    rows.n = n;
    rows.d = d;
    rows.dv = dv;
    rows.mix = *point.mix;
    rows.with_query = req.dQ;
    rows.attention = strip.tile;
    rows.probabilities = probabilities;
    rows.mixed = mixed;
    rows.output = output;
    rows.softmax_output = softmax_output;
    rows.U = U;
    rows.x_sq = norms.x_sq;
    rows.row_sums = row_sums_.reserve(batch * n * detail::kRowSumWidth);
    rows.bad = bad;
    detail::cross_norm_rows(rows, stream_);
    detail::sum_rows(static_cast<int>(batch), n, detail::kRowSumWidth, rows.row_sums, totals + kValueSq * batch,
                     stream_);
  }

  // The norms of a batch from its totals, copied back to the host.
  void finish_batch(const SweepPoint& point, const EstimandRequest& req, std::int64_t batch, const double* host,
                    SampleValues* out) const {
    const auto at = [&](Slot s, std::int64_t b) { return host[static_cast<std::size_t>(s * batch + b)]; };
    for (std::int64_t b = 0; b < batch; ++b) {
      SampleTotals totals;
      if (req.cross_norm) {
        // C9's fourth row-sum slot carries dO/dV.
        totals.entries = {at(kValueSq, b), at(kDsSq, b), at(kDqSq, b), 0.0};
        totals.values_grad_sq = at(kDkSq, b);
        out[b] = sample_values(req, point.map, point.N, totals);
        continue;
      }
      totals.entries = {at(kValueSq, b), at(kDsSq, b), at(kDqSq, b), at(kDkSq, b)};
      totals.gram_dot = at(kGramDot, b);
      totals.diagonal_sq = at(kDiagSq, b);
      totals.x_sq = at(kXSq, b);
      totals.u_sq = at(kUSq, b);
      totals.v_sq = at(kVSq, b);
      totals.matpow_sq = at(kPowerSq, b);
      out[b] = sample_values(req, point.map, point.N, totals);
    }
  }

  // The strip path: writes per-sample value_sq, dS_sq, dQ_sq, dK_sq (four slots of `batch` doubles from
  // `sums`) and lowers `bad` to the first b * n + i whose row has a non-finite score or term.
  void reduce_strips(const SweepPoint& point, const EstimandRequest& req, std::int64_t batch, std::int64_t strip_rows,
                     const detail::RowNormArgs& norms, double* sums, unsigned long long* bad) {
    const std::int64_t n = point.N, D = point.D, d = point.d;
    const Gemm gemm{blas_};
    const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    double* V = const_cast<double*>(norms.V);
    detail::scale(V, batch * n * d, point.map.inner, stream_);  // a strip is then one GEMM: lambda v_i . u_j

    detail::StripArgs args;
    args.batch = static_cast<int>(batch);
    args.n = n;
    args.D = D;
    args.d = d;
    args.tile = tile_.reserve(batch * strip_rows * n);
    args.X = norms.X;
    args.U = norms.U;
    args.x_sq = norms.x_sq;
    args.u_sq = norms.u_sq;
    args.v_sq = norms.v_sq;
    args.row_sums = row_sums_.reserve(batch * n * detail::kRowSumWidth);
    args.bad = bad;
    std::int64_t* top = req.softmax ? top_.reserve(batch * strip_rows) : nullptr;
    double* u_bar = req.softmax && req.dQ ? u_bar_.reserve(batch * strip_rows * d) : nullptr;
    double* x_bar = req.softmax && req.dK ? x_bar_.reserve(batch * strip_rows * D) : nullptr;
    for (std::int64_t row0 = 0; row0 < n; row0 += strip_rows) {
      const std::int64_t rows = std::min(strip_rows, n - row0);
      args.row0 = row0;
      args.rows = rows;
      // Strip (rows x n, row-major) = column-major n x rows = U^T-view times the strip's V rows.
      gemm(T, N, n, rows, d, 1.0, norms.U, d, n * d, V + row0 * d, d, n * d, args.tile, n, rows * n, batch);
      if (!req.softmax) {
        detail::pointwise_strip(args, point.map.activation.h, point.map.activation.p, stream_);
        continue;
      }
      detail::softmax_probabilities(args, top, stream_);
      // u_bar = A U (rows x d, row-major) = column-major d x rows = U^T-view (d x n) times A^T-view (n x rows).
      if (u_bar != nullptr)
        gemm(N, N, d, rows, n, 1.0, norms.U, d, n * d, args.tile, n, rows * n, u_bar, d, rows * d, batch);
      if (x_bar != nullptr)
        gemm(N, N, D, rows, n, 1.0, norms.X, D, n * D, args.tile, n, rows * n, x_bar, D, rows * D, batch);
      detail::softmax_strip(args, top, u_bar, x_bar, stream_);
    }
    detail::sum_rows(static_cast<int>(batch), n, detail::kRowSumWidth, args.row_sums, sums, stream_);
  }

  int device_;
  monte_carlo::BackendRequest request_;
  std::size_t score_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceArray<double> X_, Q_, K_, V_, U_, x_sq_, v_sq_, u_sq_, diag_sq_, row_sums_, totals_, gram_v_, gram_u_, cross_,
      power_, work_, tile_, u_bar_, x_bar_, W_, values_, probabilities_, mixed_, output_, softmax_output_;
  DeviceArray<std::int64_t> top_;
  DeviceArray<unsigned long long> bad_;
};

}  // namespace

namespace detail {

void launch_failed(cudaError_t status, const char* kernel) {
  throw cuda_error(status, fmt::format("the launch of {} (or the work queued before it)", kernel));
}

}  // namespace detail

int cuda_device_count() {
  int count = 0;
  // No driver, no GPU, or a driver older than the runtime: all mean "use the CPU", never a failure.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the next CUDA call
    return 0;
  }
  return count;
}

bool built_with_cuda() { return true; }

std::string cuda_unavailable_reason() {
  return cuda_device_count() > 0 ? std::string() : std::string("no CUDA device answers (no GPU, or no driver)");
}

std::string cuda_device_description(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB)", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize / 1048576.0);
}

std::unique_ptr<monte_carlo::Backend> make_cuda_backend(int device, const CudaBackendOptions& options) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    throw CudaError(count == 0 ? fmt::format("no CUDA device answers (no GPU or no driver)")
                               : fmt::format("CUDA device {} does not exist ({} device(s) answer)", device, count));
  }
  return std::make_unique<CudaBackend>(device, options);
}

namespace {
template <class T>
std::vector<T> copy_back(const T* device_data, std::size_t count) {
  std::vector<T> host(count);
  check(cudaMemcpy(host.data(), device_data, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}
}  // namespace

namespace {

// The self-test's view of the device: raw words of subsequences first.. (blocks blocks of four words each;
// `sequential`: from one curand_init(seed, k, 0), else each block from curand_init(seed, k, 4 * block)), and
// X, Q, K (and W_V) of sample k as the sampling kernel draws them.
std::vector<std::uint32_t> device_philox_words(int device, std::uint64_t seed, std::uint64_t first, int subsequences,
                                               int blocks, bool sequential) {
  check(cudaSetDevice(device), "cudaSetDevice");
  DeviceArray<std::uint32_t> words;
  const std::int64_t count = static_cast<std::int64_t>(subsequences) * blocks * 4;
  std::uint32_t* data = words.reserve(count);
  detail::philox_words(seed, first, subsequences, blocks, sequential, data, nullptr);
  return copy_back(data, static_cast<std::size_t>(count));
}

DrawnSample device_draw_sample(int device, const SweepPoint& point, std::uint64_t k) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const NormalLayout layout{point.N * point.D, point.D * point.d, point.D * point.d,
                            point.mix ? point.D * point.dv : 0};
  DeviceArray<double> X, Q, K, W;
  double* x = X.reserve(layout.x_count);
  double* q = Q.reserve(layout.q_count);
  double* kk = K.reserve(layout.k_count);
  double* w = W.reserve(layout.w_count);
  detail::draw_samples(point.seed, k, 1, layout, point.sigma_x, point.sigma_t, x, q, kk, w, nullptr);
  DrawnSample drawn;
  drawn.X = copy_back(x, static_cast<std::size_t>(layout.x_count));
  drawn.Q = copy_back(q, static_cast<std::size_t>(layout.q_count));
  drawn.K = copy_back(kk, static_cast<std::size_t>(layout.k_count));
  drawn.W_V = copy_back(w, static_cast<std::size_t>(layout.w_count));
  return drawn;
}

// Registered here, with the functions of cuda_devices.hpp that the program calls anyway (gpu-selftest), so
// that this object file, and the registration, is always linked.
const bool registered = monte_carlo::register_backend(
    {"cuda",
     "an NVIDIA GPU through CUDA (device 0; under MPI one per rank): cuRAND's Philox draws, cuBLAS score strips", 10,
     [] { return cuda_unavailable_reason(); },
     [](const monte_carlo::BackendRequest& request) {
       namespace distributed = monte_carlo::distributed;
       check_cuda_request(request);
       return make_cuda_backend(distributed::device_for_local_rank(distributed::local_rank(), cuda_device_count()),
                                {0, request});
     }});

}  // namespace

SelftestTarget cuda_selftest_target(int device) {
  SelftestTarget target;
  target.backend = make_cuda_backend(device);
  target.small_buffer_backend = make_cuda_backend(device, {kSmallScoreBufferBytes});
  target.hooks.philox_words = [device](std::uint64_t seed, std::uint64_t first, int subsequences, int blocks,
                                       bool sequential) {
    return device_philox_words(device, seed, first, subsequences, blocks, sequential);
  };
  target.hooks.draw_sample = [device](const SweepPoint& point, std::uint64_t k) {
    return device_draw_sample(device, point, k);
  };
  target.hooks.backend = target.backend.get();
  target.hooks.small_buffer_backend = target.small_buffer_backend.get();
  return target;
}

}  // namespace attncheck::gpu
