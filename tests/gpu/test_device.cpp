// Tests that need a CUDA device. Exit 77 (CTest: skipped) with a message when none answers; otherwise the
// full self-test against the CPU backend, and the CUDA backend's answers to bad input.

#define CATCH_CONFIG_RUNNER
#include "attncheck/gpu/cuda_backend.hpp"
#include "attncheck/gpu/selftest.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"

#include <catch2/catch.hpp>

#include <cstdio>

using namespace attncheck;

TEST_CASE("every self-test check agrees on device 0") {
  const gpu::SelftestTarget target = gpu::cuda_selftest_target(0);
  monte_carlo::CpuBackend cpu;
  const gpu::SelftestReport report = gpu::run_selftest(target.hooks, cpu, gpu::selftest_cases());
  for (const auto& check : report.checks) {
    INFO(check.name << ": " << check.detail);
    CHECK(check.passed);
  }
}

TEST_CASE("the CUDA backend refuses what the CPU backend refuses, with the same message") {
  const auto backend = gpu::make_cuda_backend(0);
  monte_carlo::CpuBackend cpu(1);
  monte_carlo::SweepPoint point;
  point.N = 8;
  point.D = 4;
  point.d = 4;
  point.map.activation = {theory::ActivationKind::matpow, theory::Pointwise::identity, 2};
  std::vector<monte_carlo::SampleValues> out;
  const std::vector<monte_carlo::Estimand> dq{monte_carlo::Estimand::dQ};
  CHECK_THROWS_WITH(backend->evaluate(point, dq, 0, 2, out),
                    "the matrix-power reading is supported for the value estimand only");
  CHECK_THROWS_WITH(cpu.evaluate(point, dq, 0, 2, out),
                    "the matrix-power reading is supported for the value estimand only");
  point.N = 1;
  const std::vector<monte_carlo::Estimand> var{monte_carlo::Estimand::score_var};
  CHECK_THROWS_AS(backend->evaluate(point, var, 0, 1, out), theory::InputError);
}

int main(int argc, char** argv) {
  if (gpu::cuda_device_count() == 0) {
    std::puts("no CUDA device answers: the device tests are skipped (run them, or attncheck gpu-selftest, on a GPU)");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
