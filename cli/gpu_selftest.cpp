// attncheck gpu-selftest: the CUDA backend against the CPU backend, same seeds, fixed points (gpu/selftest.hpp).

#include "number_options.hpp"
#include "subcommand.hpp"

#include "attncheck/gpu/cuda_devices.hpp"
#include "attncheck/gpu/selftest.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>

namespace attncheck::cli {
namespace {

struct SelftestOptions {
  int device = 0;
  int threads = 0;
  std::uint64_t throughput_samples = 32;
};

int run(const SelftestOptions& o) {
  if (const std::string reason = gpu::cuda_unavailable_reason(); !reason.empty()) {
    fmt::print(stderr, "attncheck gpu-selftest: {}; nothing to test\n", reason);
    return kExitUsage;
  }
  const int count = gpu::cuda_device_count();
  if (o.device < 0 || o.device >= count) {
    throw UsageError(
        fmt::format("--device {}: {} CUDA device(s) answer, numbered 0 to {}", o.device, count, count - 1));
  }
  fmt::print("device {}: {}\n", o.device, gpu::cuda_device_description(o.device));
  const gpu::SelftestTarget target = gpu::cuda_selftest_target(o.device);
  monte_carlo::CpuBackend cpu(o.threads);
  const gpu::SelftestReport report = gpu::run_selftest(target.hooks, cpu, gpu::selftest_cases());
  int failed = 0;
  for (const gpu::CheckResult& check : report.checks) {
    fmt::print("{} {}: {}\n", check.passed ? "ok  " : "FAIL", check.name, check.detail);
    failed += check.passed ? 0 : 1;
  }
  if (o.throughput_samples > 0) {
    using monte_carlo::Estimand;
    for (const auto& estimands : {std::vector<Estimand>{Estimand::value},
                                  std::vector<Estimand>{Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS}}) {
      const gpu::Throughput t = gpu::measure_throughput(*target.backend, estimands, o.throughput_samples);
      fmt::print(
          "throughput, x^3, N = 4096, D = d = 64 [{}]: {:.0f} samples/s, score phase {:.1f} TFLOP/s "
          "(docs/gpu.md: roofline estimates to compare with)\n",
          t.estimands, t.samples_per_second, t.score_tflops);
    }
  }
  fmt::print("{} of {} checks agree\n", report.checks.size() - failed, report.checks.size());
  return report.passed() ? kExitHolds : kExitViolated;
}

// A build without CUDA lists the command too (scripts and CI call it everywhere), and says there what it will do.
const bool registered = register_subcommand(
    "gpu-selftest",
    gpu::built_with_cuda()
        ? "Check the CUDA backend against the CPU backend: Philox words bit for bit, normals, every estimand and phi"
        : "Check the CUDA backend against the CPU backend (not in this build, which has no CUDA backend: it says "
          "so and exits 2; configure with -DATTNCHECK_CUDA=ON on a machine with nvcc)",
    [](CLI::App& command) -> std::function<int()> {
      auto options = std::make_shared<SelftestOptions>();
      command.footer(
          "Raw Philox words must be equal bit for bit, normals within 1e-12 sigma, per-sample estimates within 1e-6 "
          "relative (both backends form scores in double; see docs/gpu.md). Then times x^3 at N = 4096, "
          "D = d = 64 for comparison with the roofline estimate.\n"
          "Exit codes: 0 every check agrees, 1 a check disagrees, 2 no CUDA device answers, this attncheck was built "
          "without CUDA support, or bad usage.");
      command.add_option("--device", options->device, "CUDA device to test")
          ->capture_default_str()
          ->check(integer_in(0, 1023));
      command.add_option("--threads", options->threads, "CPU threads of the reference backend (0: all cores)")
          ->capture_default_str()
          ->check(integer_in(0, kMaxThreads));
      command
          .add_option("--throughput-samples", options->throughput_samples,
                      "samples timed at N = 4096, D = d = 64 (0: no timing)")
          ->capture_default_str()
          ->check(unsigned_in(0, 1000000));
      return [options] { return run(*options); };
    });

}  // namespace
}  // namespace attncheck::cli
