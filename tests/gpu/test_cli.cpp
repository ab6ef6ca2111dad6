// The command line where no CUDA device answers: gpu-selftest says so and exits 2, --backend cuda exits 2
// naming the reason, --backend auto says on stderr that it uses the CPU. Every device is hidden from this
// program and the attncheck it starts (CUDA_VISIBLE_DEVICES empty), so a machine with a GPU tests the same
// thing; what a device does is the device tests' business.

#include "run_command.hpp"

#ifdef ATTNCHECK_HAVE_CUDA
#include "attncheck/gpu/cuda_backend.hpp"
#endif

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

using attncheck::testing::run_attncheck;

namespace {

// Set during static initialization, before anything here starts the CUDA runtime; children inherit it.
const bool kDevicesHidden = ::setenv("CUDA_VISIBLE_DEVICES", "", 1) == 0;

bool device_answers() {
#ifdef ATTNCHECK_HAVE_CUDA
  return attncheck::gpu::cuda_device_count() > 0;
#else
  return false;
#endif
}

#ifdef ATTNCHECK_HAVE_CUDA
const std::string kNoCudaReason = "no CUDA device answers";
#else
const std::string kNoCudaReason = "built without CUDA support";
#endif

bool mentions(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

}  // namespace

TEST_CASE("without a device, gpu-selftest says why and exits 2") {
  REQUIRE(kDevicesHidden);
  REQUIRE_FALSE(device_answers());
  const auto result = run_attncheck("gpu-selftest");
  INFO(result.err);
  CHECK(result.exit_code == 2);
  CHECK(mentions(result.err, kNoCudaReason));
  CHECK(mentions(result.err, "nothing to test"));
}

TEST_CASE("without a device, --backend cuda exits 2 naming the reason and auto says it uses the CPU") {
  REQUIRE(kDevicesHidden);
  REQUIRE_FALSE(device_answers());
  const auto cuda = run_attncheck("mc --claim C3 --N 8,16 --D 4 --d 4 --p 1 --samples 10 --backend cuda");
  INFO(cuda.err);
  CHECK(cuda.exit_code == 2);
  CHECK(mentions(cuda.err, "--backend cuda: "));
  CHECK(mentions(cuda.err, kNoCudaReason));

  // Where a GPU could help (N from 1024 on) auto says why it passed CUDA over; below, only what it uses.
  const auto automatic =
      run_attncheck("mc --claim C3 --N 512,1024 --D 4 --d 4 --p 1 --samples 10 --backend auto --json");
  INFO(automatic.err);
  CHECK(automatic.exit_code == 0);
  CHECK(mentions(automatic.err, "backend auto: " + kNoCudaReason.substr(0, 2)));
  CHECK(mentions(automatic.err, "using the CPU"));
  CHECK(mentions(automatic.out, "\"backend\": \"cpu\""));
  const auto small = run_attncheck("mc --claim C3 --N 8,16 --D 4 --d 4 --p 1 --samples 10 --backend auto --json");
  INFO(small.err);
  CHECK(small.exit_code == 0);
  CHECK(mentions(small.err, "backend auto: cpu: "));
  CHECK_FALSE(mentions(small.err, "CUDA"));
}

TEST_CASE("the command list says whether gpu-selftest can test anything in this build") {
  const auto help = run_attncheck("--help");
  CHECK(help.exit_code == 0);
#ifdef ATTNCHECK_HAVE_CUDA
  CHECK_FALSE(mentions(help.out, "not in this build"));
#else
  CHECK(mentions(help.out, "not in this build, which has no CUDA backend"));
#endif
}

TEST_CASE("gpu-selftest rejects unknown options with exit 2") {
  const auto result = run_attncheck("gpu-selftest --no-such-option");
  CHECK(result.exit_code == 2);
}
