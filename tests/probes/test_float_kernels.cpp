#include <catch2/catch.hpp>

#include "attncheck/probes/float_kernels.hpp"
#include "attncheck/probes/model.hpp"
#include "attncheck/theory/softmax.hpp"

#include <cmath>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace attncheck::probes;
using attncheck::theory::Index;

namespace {

// Runs `check` on every build of the kernels this CPU can run: AVX-512 (when it has it), then the portable one, as
// ATTNCHECK_NO_AVX512 selects it.
template <class Check>
void on_every_build(Check&& check) {
  const bool avx512 = float_kernels::instruction_set() == "avx512";
  if (avx512) {
    INFO("avx512");
    check();
  }
  ::setenv("ATTNCHECK_NO_AVX512", "1", 1);
  REQUIRE(float_kernels::instruction_set() == "portable");
  {
    INFO("portable");
    check();
  }
  ::unsetenv("ATTNCHECK_NO_AVX512");
  REQUIRE((float_kernels::instruction_set() == "avx512") == avx512);
}

FloatMatrix random_floats(Index rows, Index cols, std::mt19937_64& random) {
  std::normal_distribution<float> normal;
  FloatMatrix m(rows, cols);
  for (Index k = 0; k < m.size(); ++k) m.data()[k] = normal(random);
  return m;
}

}  // namespace

TEST_CASE("float32 products lie within float32's rounding bound of the exact product, in every storage order",
          "[float_kernels]") {
  std::mt19937_64 random(11);
  // Sizes off every vector width and block size, and a one-row product (a block of one query row).
  for (const auto& [m, k, n] : std::vector<std::tuple<Index, Index, Index>>{{37, 53, 29}, {1, 64, 257}, {130, 7, 40}}) {
    const FloatMatrix a = random_floats(m, k, random), b = random_floats(k, n, random);
    const Matrix exact = a.cast<double>() * b.cast<double>();
    const Matrix magnitude = a.cast<double>().cwiseAbs() * b.cast<double>().cwiseAbs();
    // A sum of k products in float32 is within gamma_k |a| |b| of the exact one, gamma_k = k u / (1 - k u),
    // u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 3.5), whatever the order of the sums.
    const double u = std::ldexp(1.0, -24), gamma = static_cast<double>(k) * u / (1 - static_cast<double>(k) * u);
    const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor> a_columns = a, b_columns = b;
    on_every_build([&] {
      INFO(m << " x " << k << " x " << n);
      for (const Matrix& product : {float32_product(a, b), float32_product(a_columns, b), float32_product(a, b_columns),
                                    float32_product(a_columns, b_columns)}) {
        REQUIRE(product.rows() == m);
        REQUIRE(product.cols() == n);
        CHECK(((product - exact).cwiseAbs() - gamma * magnitude).maxCoeff() <= 0);
      }
      // A transposed row-major matrix is read as column-major storage, without a copy.
      const FloatMatrix b_transposed = b.transpose();
      CHECK(((float32_product(a, b_transposed.transpose()) - exact).cwiseAbs() - gamma * magnitude).maxCoeff() <= 0);
    });
  }
}

TEST_CASE("float32 products refuse factors not stored whole or of mismatched shapes, and values beyond float32",
          "[float_kernels]") {
  std::mt19937_64 random(3);
  const FloatMatrix a = random_floats(4, 6, random), b = random_floats(6, 5, random);
  CHECK_THROWS_AS(float32_product(a.leftCols(3), b.topRows(3)), std::invalid_argument);  // rows of 6 floats apart
  CHECK_THROWS_AS(float32_product(a, b.transpose()), std::invalid_argument);
  CHECK(float32_product(a.topRows(2), b).isApprox(a.topRows(2).cast<double>() * b.cast<double>(), 1e-5));
  Matrix huge = Matrix::Ones(2, 2);
  huge(1, 0) = -4e38;
  CHECK_THROWS_WITH(rounded_to_float32(huge), Catch::Contains("--precision mixed: an activation or weight is beyond "
                                                              "float32's range (magnitude 4e+38)") &&
                                                  Catch::Contains("--precision double takes it"));
  // Finite factors whose product overflows float32.
  const FloatMatrix big = FloatMatrix::Constant(2, 2, 3e19f);
  CHECK_THROWS_WITH(float32_product(big, big), Catch::Contains("a matrix product is beyond float32's range"));
}

TEST_CASE("float32 GELU is x Phi(x) to a few units in the last place of x", "[float_kernels]") {
  std::vector<float> inputs;
  for (int k = -4000; k <= 4000; ++k) inputs.push_back(static_cast<float>(k) / 400);  // -10 .. 10
  for (const float x : {1e-30f, -1e-30f, 0.0f, 30.0f, -30.0f}) inputs.push_back(x);
  on_every_build([&] {
    std::vector<float> out = inputs;
    float_kernels::gelu(out.data(), static_cast<std::int64_t>(out.size()));
    double worst = 0;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const double x = inputs[k], exact = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
      worst = std::max(worst, std::abs(out[k] - exact) / std::max(std::abs(x), 1e-300));
    }
    // Eigen's float32 erf is within a few ulp; x Phi(x) then within 2^-21 |x| (eight units of 2^-24).
    CHECK(worst <= std::ldexp(1.0, -21));
  });
}

TEST_CASE("float32 softmax rows match double's over the keys attended, causal or not, and are 0 elsewhere",
          "[float_kernels]") {
  std::mt19937_64 random(5);
  const Index rows = 9, cols = 37;
  const FloatMatrix logits = 4 * random_floats(rows, cols, random);
  // From position 0 (its row sees one key), from 20, and from 32, whose last rows see every key: a block of rows past
  // the columns (a causal block whose rows outnumber the keys it starts at).
  for (const auto& [causal, first_row] :
       std::vector<std::pair<bool, Index>>{{false, 20}, {true, 0}, {true, 20}, {true, 32}}) {
    on_every_build([&] {
      INFO("causal " << causal << ", first row " << first_row);
      FloatMatrix p = logits;
      float_kernels::softmax_rows(p.data(), rows, cols, first_row, causal);
      for (Index r = 0; r < rows; ++r) {
        const Index visible = causal ? std::min(cols, first_row + r + 1) : cols;
        const std::vector<double> row(logits.row(r).data(), logits.row(r).data() + visible);
        std::vector<double> exact(static_cast<std::size_t>(visible));
        attncheck::theory::softmax_row(row, exact, r);
        for (Index j = 0; j < cols; ++j) {
          INFO("row " << r << " key " << j);
          // Each probability is a float32 exp over a float32 sum of at most 37 terms: within 2^-17 relative.
          if (j < visible) {
            CHECK(std::abs(p(r, j) - exact[static_cast<std::size_t>(j)]) <=
                  std::ldexp(1.0, -17) * exact[static_cast<std::size_t>(j)] + 1e-30);
          } else {
            CHECK(p(r, j) == 0.0f);
          }
        }
      }
    });
  }
}
