// bench_gpu: the CUDA backend's speed on device 0 against the DGEMM ceiling measured in the same run, and the CPU
// backend's speed at the same points on the same machine. Prints one JSON object on stdout (README.md there
// lists its keys), progress on stderr.
//
// The ceiling is cuBLAS DGEMM at the call shape the backend forms its score strips with at N = 4096, D = d = 64
// (gpu/src/cuda_backend.cpp, reduce_strips: the strip size comes from the same default_score_buffer_bytes and
// plan_batch), and at 8192^3. Engine points are timed through measure_throughput (gpu/selftest.hpp), the
// function gpu-selftest times with, after a short calibration run so that each point takes a few seconds.
//
// Exit codes: 0 everything measured; 1 a measurement failed (its entry says why, the JSON is still printed);
// 2 bad options or no CUDA device ({"error": "..."}).

#include "attncheck/gpu/batch_plan.hpp"
#include "attncheck/gpu/cuda_backend.hpp"
#include "attncheck/gpu/cuda_devices.hpp"
#include "attncheck/gpu/selftest.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/theory/common.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

using namespace attncheck;
using monte_carlo::Estimand;
using monte_carlo::SweepPoint;
using nlohmann::json;

namespace {

constexpr int kDevice = 0;
constexpr theory::Index kDim = 64;                  // D = d at every point
constexpr theory::Index kScoreShapeN = 4096;        // the roofline point of docs/gpu.md
constexpr std::int64_t kSquare = 8192;              // the large square DGEMM
constexpr std::uint64_t kMostSamples = 1ULL << 20;  // per timed run: bounds the host's result rows
constexpr theory::Index kLargestCpuN = 8192;        // above, one CPU sample takes seconds
constexpr std::int64_t kRunnerChunk = 1024;         // samples per evaluate() call of `attncheck mc` at most

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  bool quick = false;
  std::optional<double> max_seconds;  // per point; default 4 (quick: 0.2)
  std::vector<std::string> points;    // empty: all
  bool cpu = true;
  bool cpu_only = false;
  bool help = false;
  double seconds_per_point() const { return max_seconds.value_or(quick ? 0.2 : 4.0); }
};

const char* const kUsage =
    "usage: bench_gpu [--quick] [--max-seconds-per-point S] [--points NAME,NAME,...] [--no-cpu | --cpu-only]\n"
    "  --quick                    tiny counts (a smoke run): 0.2 s per point, few DGEMM repeats\n"
    "  --max-seconds-per-point S  time each engine point for about 3/4 of S seconds (default 4, at most 600)\n"
    "  --points LIST              only these engine points (and their CPU counterparts); names below\n"
    "  --no-cpu                   leave out the CPU backend's timings\n"
    "  --cpu-only                 only the CPU backend's timings (needs no device)\n"
    "Exit codes: 0 all measured, 1 a measurement failed (its entry says why), 2 bad options or no CUDA device.\n";

double parse_seconds(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value <= 0 || value > 600) {
    throw UsageError(fmt::format("--max-seconds-per-point {}: expected seconds in (0, 600]", text));
  }
  return value;
}

std::vector<std::string> split_names(std::string_view text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma == start) throw UsageError(fmt::format("--points {}: an empty name", text));
    names.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&](std::string_view option) -> std::string_view {
      if (arg.size() > option.size() && arg[option.size()] == '=') return arg.substr(option.size() + 1);
      if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", option));
      return argv[++i];
    };
    const auto is = [&](std::string_view option) {
      return arg == option ||
             (arg.size() > option.size() && arg.substr(0, option.size()) == option && arg[option.size()] == '=');
    };
    if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--cpu-only") {
      o.cpu_only = true;
    } else if (arg == "--no-cpu") {
      o.cpu = false;
    } else if (is("--max-seconds-per-point")) {
      o.max_seconds = parse_seconds(value("--max-seconds-per-point"));
    } else if (is("--points")) {
      o.points = split_names(value("--points"));
    } else {
      throw UsageError(fmt::format("{}: unknown option", arg));
    }
  }
  return o;
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw gpu::CudaError(
        fmt::format("CUDA error in {}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status)));
  }
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw gpu::CudaError(fmt::format("cuBLAS error in {}: {}", what, cublasGetStatusString(status)));
  }
}

int attribute(cudaDeviceAttr what) {
  int value = 0;
  check(cudaDeviceGetAttribute(&value, what, kDevice), "cudaDeviceGetAttribute");
  return value;
}

std::string cuda_version(int version) { return fmt::format("{}.{}", version / 1000, version % 1000 / 10); }

json device_json() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, kDevice), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  // cudaDeviceProp lost its clock fields in CUDA 13; the attributes remain.
  const int clock_khz = attribute(cudaDevAttrClockRate);
  const int memory_clock_khz = attribute(cudaDevAttrMemoryClockRate);
  int cublas_version = 0;
  check(cublasGetProperty(MAJOR_VERSION, &cublas_version), "cublasGetProperty");
  int cublas_minor = 0, cublas_patch = 0;
  check(cublasGetProperty(MINOR_VERSION, &cublas_minor), "cublasGetProperty");
  check(cublasGetProperty(PATCH_LEVEL, &cublas_patch), "cublasGetProperty");
  return {
      {"index", kDevice},
      {"name", prop.name},
      {"description", gpu::cuda_device_description(kDevice)},
      {"compute_capability", fmt::format("{}.{}", prop.major, prop.minor)},
      {"multiprocessors", prop.multiProcessorCount},
      {"memory_bytes", prop.totalGlobalMem},
      {"l2_cache_bytes", prop.l2CacheSize},
      {"clock_mhz", clock_khz / 1000.0},
      {"memory_clock_mhz", memory_clock_khz / 1000.0},
      {"memory_bus_width_bits", prop.memoryBusWidth},
      // Double data rate: two transfers per memory clock.
      {"peak_memory_bandwidth_gb_per_s", 2.0 * memory_clock_khz * 1e3 * (prop.memoryBusWidth / 8.0) / 1e9},
      {"driver_version", cuda_version(driver)},
      {"runtime_version", cuda_version(runtime)},
      {"cublas_version", fmt::format("{}.{}.{}", cublas_version, cublas_minor, cublas_patch)},
  };
}

// Device memory for the DGEMM timings, filled with uniform values in [-1, 1) (the values do not change
// DGEMM's speed; a repeated block keeps the host side short).
class DeviceMatrix {
 public:
  explicit DeviceMatrix(std::int64_t count) : count_(count) {
    check(cudaMalloc(reinterpret_cast<void**>(&data_), static_cast<std::size_t>(count) * sizeof(double)), "cudaMalloc");
  }
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;
  ~DeviceMatrix() { cudaFree(data_); }
  double* get() const { return data_; }
  void fill_random(std::uint64_t seed) {
    std::mt19937_64 engine(seed);
    std::uniform_real_distribution<double> uniform(-1, 1);
    std::vector<double> block(static_cast<std::size_t>(std::min<std::int64_t>(count_, 1 << 20)));
    for (double& v : block) v = uniform(engine);
    for (std::int64_t at = 0; at < count_; at += static_cast<std::int64_t>(block.size())) {
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(count_ - at, std::ssize(block)));
      check(cudaMemcpy(data_ + at, block.data(), n * sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    // A pageable copy may return before its DMA ends; the timing stream does not wait for the legacy stream.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  double* data_ = nullptr;
  std::int64_t count_ = 0;
};

class Blas {
 public:
  Blas() {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cublasCreate(&handle), "cublasCreate");
    check(cublasSetStream(handle, stream), "cublasSetStream");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas() {
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
    cublasDestroy(handle);
    cudaStreamDestroy(stream);
  }
  // Seconds that `work` takes on the stream, between two events.
  template <class Work>
  double time(Work&& work) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms / 1e3;
  }

  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// Median, minimum and maximum rate of `repeats` timed repeats of `work` (flops each), after one warm-up; each
// repeat runs `work` as many times as makes it last about 5 ms, so that event resolution does not matter.
template <class Work>
json time_gemm(Blas& blas, double flops, int repeats, Work&& work) {
  blas.time(work);  // first call: cuBLAS's kernel choice and module loading
  const double warm = blas.time(work);
  const int inner = std::clamp(static_cast<int>(std::ceil(5e-3 / std::max(warm, 1e-7))), 1, 10000);
  std::vector<double> tflops;
  for (int r = 0; r < repeats; ++r) {
    const double seconds = blas.time([&] {
      for (int i = 0; i < inner; ++i) work();
    });
    tflops.push_back(flops * inner / seconds / 1e12);
  }
  std::sort(tflops.begin(), tflops.end());
  return {{"repeats", repeats},
          {"calls_per_repeat", inner},
          {"tflops", tflops[tflops.size() / 2]},
          {"tflops_min", tflops.front()},
          {"tflops_max", tflops.back()}};
}

// The score strips of one batch at N = 4096, D = d = 64, exactly as reduce_strips forms them: strip (rows x n,
// row-major) = column-major n x rows = U^T-view times the strip's rows of V, into one buffer reused by every
// strip, so that it stays in L2 as it does in the backend.
json dgemm_score_shape(Blas& blas, int repeats) {
  const std::int64_t n = kScoreShapeN, d = kDim;
  const std::size_t score_bytes = gpu::default_score_buffer_bytes(attribute(cudaDevAttrL2CacheSize));
  const gpu::BatchPlan plan =
      gpu::plan_batch(n, kRunnerChunk, static_cast<std::int64_t>(score_bytes / sizeof(double)), kRunnerChunk);
  const std::int64_t batch = plan.samples, rows = plan.strip_rows;
  DeviceMatrix U(batch * n * d), V(batch * n * d), tile(batch * rows * n);
  U.fill_random(1);
  V.fill_random(2);
  const double one = 1, zero = 0;
  const auto strips = [&] {
    for (std::int64_t row0 = 0; row0 < n; row0 += rows) {
      const std::int64_t r = std::min(rows, n - row0);
      check(cublasDgemmStridedBatched(blas.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(r),
                                      static_cast<int>(d), &one, U.get(), static_cast<int>(d), n * d,
                                      V.get() + row0 * d, static_cast<int>(d), n * d, &zero, tile.get(),
                                      static_cast<int>(n), r * n, static_cast<int>(batch)),
            "cublasDgemmStridedBatched");
    }
  };
  json result = time_gemm(blas, 2.0 * static_cast<double>(n * n * d * batch), repeats, strips);
  const std::int64_t calls = (n + rows - 1) / rows;
  result["what"] = fmt::format(
      "the score strips of {} sample(s) at N = {}, d = {}: {} cublasDgemmStridedBatched call(s) (the last with "
      "{} rows), 2 N^2 d flops per sample",
      batch, n, d, calls, n - (calls - 1) * rows);
  result["call"] = {{"function", "cublasDgemmStridedBatched"},
                    {"transa", "T"},
                    {"transb", "N"},
                    {"m", n},
                    {"n", rows},
                    {"k", d},
                    {"lda", d},
                    {"ldb", d},
                    {"ldc", n},
                    {"stride_a", n * d},
                    {"stride_b", n * d},
                    {"stride_c", rows * n},
                    {"batch", batch}};
  result["N"] = n;
  result["d"] = d;
  result["strip_rows"] = rows;
  result["calls_per_sample"] = calls;
  result["score_buffer_bytes"] = score_bytes;
  return result;
}

json dgemm_square(Blas& blas, int repeats) {
  const std::int64_t n = kSquare;
  DeviceMatrix A(n * n), B(n * n), C(n * n);
  A.fill_random(3);
  B.fill_random(4);
  const double one = 1, zero = 0;
  const auto gemm = [&] {
    const int m = static_cast<int>(n);
    check(cublasDgemm(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, A.get(), m, B.get(), m, &zero, C.get(), m),
          "cublasDgemm");
  };
  json result =
      time_gemm(blas, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n), repeats, gemm);
  result["what"] = fmt::format("cublasDgemm N N, m = n = k = {}", n);
  result["m"] = result["n"] = result["k"] = n;
  return result;
}

json dgemm_json(const Options& o, bool& failed) {
  json result;
  const int repeats = o.quick ? 3 : 15;
  Blas blas;
  cublasMath_t mode{};
  check(cublasGetMathMode(blas.handle, &mode), "cublasGetMathMode");
  result["math_mode"] = mode == CUBLAS_DEFAULT_MATH ? "default (FP64 tensor cores where the device has them)"
                                                    : fmt::format("{}", static_cast<int>(mode));
  for (const auto& [key, measure] :
       {std::pair<const char*, json (*)(Blas&, int)>{"score_shape", dgemm_score_shape}, {"square", dgemm_square}}) {
    try {
      result[key] = measure(blas, repeats);
      fmt::print(stderr, "bench_gpu: dgemm {}: {:.1f} TFLOP/s\n", key, result[key]["tflops"].get<double>());
    } catch (const std::exception& e) {
      result[key] = {{"error", e.what()}};
      fmt::print(stderr, "bench_gpu: dgemm {} failed: {}\n", key, e.what());
      failed = true;
    }
  }
  return result;
}

struct BenchPoint {
  std::string name;
  std::string map;  // "x^3", "softmax", "matrix power 3"
  SweepPoint point;
  std::vector<Estimand> estimands;
  std::string cpu_skip;  // why the CPU backend is not timed here, or empty
};

bool is_matrix_power(const SweepPoint& point) { return point.map.activation.kind == theory::ActivationKind::matpow; }

std::vector<BenchPoint> bench_points() {
  using theory::ActivationKind;
  using theory::Pointwise;
  const std::vector<Estimand> value{Estimand::value};
  const std::vector<Estimand> norms{Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS};
  const auto cube = [](theory::Index N, std::uint64_t case_number) {
    return gpu::make_point(N, kDim, kDim, gpu::pointwise(Pointwise::poly, 3), 0, case_number);
  };
  const auto cpu_skip = [](theory::Index N) {
    return N > kLargestCpuN ? fmt::format("N = {} > {}: the CPU side times only N <= {}", N, kLargestCpuN, kLargestCpuN)
                            : std::string();
  };
  // Case 1000 is the point gpu-selftest times.
  std::vector<BenchPoint> points{{"x3_n4096_value", "x^3", cube(4096, 1000), value, ""},
                                 {"x3_n4096_norms", "x^3", cube(4096, 1000), norms, ""}};
  std::uint64_t case_number = 1001;
  for (const theory::Index N : {1024, 2048, 8192, 16384, 32768, 65536}) {
    points.push_back({fmt::format("x3_n{}_value", N), "x^3", cube(N, case_number++), value, cpu_skip(N)});
  }
  points.push_back(
      {"softmax_n4096_value", "softmax",
       gpu::make_point(4096, kDim, kDim, {ActivationKind::softmax, Pointwise::identity, 1}, 0, case_number++), value,
       ""});
  constexpr theory::Index kMatpowN = theory::Index{1} << 20;
  points.push_back(
      {"matpow3_n1048576_value", "matrix power 3 (mc --phi matpow --p 3)",
       gpu::make_point(kMatpowN, kDim, kDim, {ActivationKind::matpow, Pointwise::identity, 3}, 0, case_number++), value,
       cpu_skip(kMatpowN)});
  return points;
}

// GEMM flops of one sample on the matrix-power path (cuda_backend.cpp, enqueue_batch): V = X W_Q and U = X W_K,
// the Gram matrices V^T V, U^T U and the cross matrix U^T V, then p d x d products.
double matrix_power_flops(const SweepPoint& p) {
  const double N = static_cast<double>(p.N), D = static_cast<double>(p.D), d = static_cast<double>(p.d);
  return 2 * (2 * N * D * d) + 3 * (2 * N * d * d) + p.map.activation.p * (2 * d * d * d);
}

// About 3/4 of the point's seconds: a calibration run grows fourfold from one sample until it takes a tenth of
// that, and the timed run's count follows from its rate (capped by kMostSamples).
gpu::Throughput timed(monte_carlo::Backend& backend, const BenchPoint& p, double seconds_per_point) {
  const double target = 0.75 * seconds_per_point;
  std::uint64_t samples = 1;
  gpu::Throughput t = gpu::measure_throughput(backend, p.point, p.estimands, samples);
  while (t.seconds < target / 10 && samples < kMostSamples) {
    samples = std::min(samples * 4, kMostSamples);
    t = gpu::measure_throughput(backend, p.point, p.estimands, samples);
  }
  const auto wanted = static_cast<std::uint64_t>(
      std::clamp(std::floor(target * t.samples_per_second), 1.0, static_cast<double>(kMostSamples)));
  return wanted <= samples ? t : gpu::measure_throughput(backend, p.point, p.estimands, wanted);
}

json point_json(const BenchPoint& p, const monte_carlo::Backend& backend) {
  return {{"name", p.name},
          {"map", p.map},
          {"N", p.point.N},
          {"D", p.point.D},
          {"d", p.point.d},
          {"estimands", gpu::estimand_list(p.estimands)},
          {"path", backend.evaluation_path(p.point, p.estimands)}};
}

void add_rates(json& j, const BenchPoint& p, const gpu::Throughput& t, std::optional<double> score_dgemm_tflops) {
  j["samples"] = t.samples;
  j["seconds"] = t.seconds;
  j["samples_per_second"] = t.samples_per_second;
  if (is_matrix_power(p.point)) {
    const double flops = matrix_power_flops(p.point);
    j["score_tflops"] = nullptr;
    j["fraction_of_dgemm"] = nullptr;
    j["flops_per_sample"] = flops;
    j["path_tflops"] = t.samples_per_second * flops / 1e12;
    j["flops_counted"] =
        "no score is formed: the path's GEMMs, X W_Q and X W_K (2 x 2 N D d), V^T V, U^T U, U^T V (3 x 2 N d^2) "
        "and p d x d products (2 d^3 each)";
    return;
  }
  j["score_tflops"] = t.score_tflops;
  j["flops_counted"] = "the score GEMM only: 2 N^2 d per sample";
  j["fraction_of_dgemm"] = score_dgemm_tflops ? json(t.score_tflops / *score_dgemm_tflops) : json(nullptr);
}

std::vector<BenchPoint> chosen_points(const Options& o) {
  std::vector<BenchPoint> all = bench_points();
  if (o.points.empty()) return all;
  std::vector<BenchPoint> chosen;
  std::set<std::string> seen;
  for (const std::string& name : o.points) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const BenchPoint& p) { return p.name == name; });
    if (it == all.end()) {
      std::string names;
      for (const BenchPoint& p : all) names += (names.empty() ? "" : ", ") + p.name;
      throw UsageError(fmt::format("--points: no point named \"{}\" (points: {})", name, names));
    }
    if (seen.insert(name).second) chosen.push_back(*it);
  }
  return chosen;
}

// The device, DGEMM and CUDA-backend sections; returns the engine's entries, one per point.
json measure_device(const Options& o, const std::vector<BenchPoint>& points, json& out, bool& failed) {
  out["device"] = device_json();
  fmt::print(stderr, "bench_gpu: device {}: {}\n", kDevice, out["device"]["description"].get<std::string>());
  out["dgemm"] = dgemm_json(o, failed);
  std::optional<double> score_dgemm;
  if (out["dgemm"]["score_shape"].contains("tflops")) score_dgemm = out["dgemm"]["score_shape"]["tflops"].get<double>();
  const auto score_entries = static_cast<std::int64_t>(
      gpu::default_score_buffer_bytes(out["device"]["l2_cache_bytes"].get<int>()) / sizeof(double));
  json engine = json::array();
  const auto backend = gpu::make_cuda_backend(kDevice);
  out["engine_backend"] = backend->describe();
  for (const BenchPoint& p : points) {
    json j = point_json(p, *backend);
    if (!is_matrix_power(p.point)) {
      // How the backend batches the point with its default buffer (device memory permitting).
      const gpu::BatchPlan plan = gpu::plan_batch(p.point.N, kRunnerChunk, score_entries, kRunnerChunk);
      j["plan"] = {{"samples_per_batch", plan.samples}, {"strip_rows", plan.strip_rows}};
    }
    try {
      const gpu::Throughput t = timed(*backend, p, o.seconds_per_point());
      add_rates(j, p, t, score_dgemm);
      fmt::print(stderr, "bench_gpu: cuda {}: {:.1f} samples/s ({} samples in {:.2f} s)\n", p.name,
                 t.samples_per_second, t.samples, t.seconds);
    } catch (const std::exception& e) {
      j["error"] = e.what();
      fmt::print(stderr, "bench_gpu: cuda {} failed: {}\n", p.name, e.what());
      failed = true;
    }
    engine.push_back(std::move(j));
  }
  return engine;
}

// The CPU backend with all threads at the points it takes in a few seconds; `engine` (empty under --cpu-only)
// gives the speed-up.
json measure_cpu(const Options& o, const std::vector<BenchPoint>& points, const json& engine, bool& failed) {
  monte_carlo::CpuBackend cpu;
  json cpu_points = json::array();
  for (std::size_t k = 0; k < points.size(); ++k) {
    const BenchPoint& p = points[k];
    json j = point_json(p, cpu);
    if (!p.cpu_skip.empty()) {
      j["skipped"] = p.cpu_skip;
      cpu_points.push_back(std::move(j));
      continue;
    }
    try {
      const gpu::Throughput t = timed(cpu, p, o.seconds_per_point());
      add_rates(j, p, t, std::nullopt);
      j.erase("fraction_of_dgemm");
      if (k < engine.size() && engine[k].contains("samples_per_second")) {
        j["gpu_speedup"] = engine[k]["samples_per_second"].get<double>() / t.samples_per_second;
      }
      fmt::print(stderr, "bench_gpu: cpu {}: {:.2f} samples/s ({} samples in {:.2f} s)\n", p.name, t.samples_per_second,
                 t.samples, t.seconds);
    } catch (const std::exception& e) {
      j["error"] = e.what();
      fmt::print(stderr, "bench_gpu: cpu {} failed: {}\n", p.name, e.what());
      failed = true;
    }
    cpu_points.push_back(std::move(j));
  }
  return {{"backend", cpu.describe()}, {"threads", cpu.threads()}, {"points", cpu_points}};
}

int run(const Options& o) {
  if (o.help) {
    fmt::print("{}points:", kUsage);
    for (const BenchPoint& p : bench_points()) fmt::print(" {}", p.name);
    fmt::print("\n");
    return 0;
  }
  if (o.cpu_only && !o.cpu) throw UsageError("--cpu-only and --no-cpu: nothing would be measured");
  const std::vector<BenchPoint> points = chosen_points(o);
  if (const std::string reason = gpu::cuda_unavailable_reason(); !reason.empty() && !o.cpu_only) {
    fmt::print("{}\n", json{{"error", reason}}.dump());
    fmt::print(stderr, "bench_gpu: {}\n", reason);
    return 2;
  }
  bool failed = false;
  json out;
  out["bench"] = "bench_gpu";
  out["options"] = {{"quick", o.quick},
                    {"max_seconds_per_point", o.seconds_per_point()},
                    {"cpu", o.cpu},
                    {"cpu_only", o.cpu_only}};
  const json engine = o.cpu_only ? json::array() : measure_device(o, points, out, failed);
  if (!o.cpu_only) out["engine"] = engine;
  out["cpu"] = o.cpu ? measure_cpu(o, points, engine, failed) : json{{"skipped", "--no-cpu"}};
  fmt::print("{}\n", out.dump(2));
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_options(argc, argv));
  } catch (const UsageError& e) {
    fmt::print("{}\n", json{{"error", e.what()}}.dump());
    fmt::print(stderr, "bench_gpu: {}\n{}", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    fmt::print("{}\n", json{{"error", e.what()}}.dump());
    fmt::print(stderr, "bench_gpu: {}\n", e.what());
    return 1;
  }
}
