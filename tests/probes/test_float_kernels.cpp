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
  CHECK_THROWS_WITH(rounded_to_float32(huge, SummedAlong::rows),
                    Catch::Contains("--precision mixed: an activation or weight is beyond "
                                    "float32's range (magnitude 4e+38)") &&
                        Catch::Contains("--precision double takes it"));
  // Finite factors whose product overflows float32.
  const FloatMatrix big = FloatMatrix::Constant(2, 2, 3e19f);
  CHECK_THROWS_WITH(float32_product(big, big), Catch::Contains("a matrix product is beyond float32's range"));
}

TEST_CASE("mixed precision refuses what float32's underflow would lose: a line of a factor, an entry of a product",
          "[float_kernels]") {
  constexpr double smallest = 1.1754943508222875e-38;  // FLT_MIN
  // A row whose largest value is below FLT_MIN keeps fewer than 24 bits (1e-39), or none (1e-46 rounds to 0).
  for (const double tiny : {1e-39, 1e-46}) {
    INFO(tiny);
    Matrix m = Matrix::Ones(3, 4);
    m.row(1).setConstant(tiny);
    CHECK_THROWS_WITH(rounded_to_float32(m, SummedAlong::rows),
                      Catch::Contains("--precision mixed: a row of activations is below float32's normal range") &&
                          Catch::Contains("--precision double takes it"));
    // Its columns each hold a 1, next to which tiny's error is below 2^-24 of it.
    CHECK(rounded_to_float32(m, SummedAlong::columns)(0, 0) == 1.0f);
    CHECK(rounded_to_float32(m.transpose(), SummedAlong::rows)(0, 0) == 1.0f);
    CHECK_THROWS_WITH(rounded_to_float32(m.transpose(), SummedAlong::columns),
                      Catch::Contains("a column of weights, keys or values is below float32's normal range"));
    // Logits the float32 softmax reads, relative to their largest.
    CHECK_NOTHROW(rounded_to_float32(m, SummedAlong::neither));
  }
  // Zeros, and values below FLT_MIN beside a normal one in their line, are what float32 rounds them to.
  Matrix sparse = Matrix::Zero(3, 3);
  sparse(0, 0) = 1;
  sparse(0, 1) = 1e-42;
  CHECK(rounded_to_float32(sparse, SummedAlong::rows)(0, 1) == static_cast<float>(1e-42));
  // Normal factors whose terms underflow: 1e-20 * 1e-20 = 1e-40, subnormal (a few bits); 1e-25 * 1e-25 rounds to 0.
  for (const float scale : {1e-20f, 1e-25f}) {
    INFO(scale);
    const FloatMatrix a = FloatMatrix::Constant(2, 3, scale), b = FloatMatrix::Constant(3, 2, scale);
    CHECK_THROWS_WITH(float32_product(a, b), Catch::Contains("a matrix product is below float32's normal range") &&
                                                 Catch::Contains("--precision double takes it"));
  }
  // An entry below FLT_MIN by cancellation of normal terms keeps float32's error bound relative to them: kept.
  FloatMatrix a(1, 2), b(2, 1);
  a << 1.0f, 1.0f;
  b << 1.0f, -1.0f;
  CHECK(float32_product(a, b)(0, 0) == 0.0);
  // Terms at FLT_MIN sum to at least it; a zero row or column gives exact zeros.
  const FloatMatrix at_min = FloatMatrix::Constant(2, 2, static_cast<float>(std::sqrt(smallest)));
  CHECK(float32_product(at_min, at_min)(0, 0) >= smallest);
  FloatMatrix zero_row = FloatMatrix::Ones(2, 3);
  zero_row.row(0).setZero();
  const FloatMatrix right = FloatMatrix::Ones(3, 2);
  CHECK(float32_product(zero_row, right).row(0).isZero(0));
}

TEST_CASE("the float32 kernels give the same bits wherever their data lies in memory", "[float_kernels]") {
  // The heap places matrices differently with the number of threads (--threads), so an offset of the data must not
  // change a bit: Eigen treats the values before an aligned address apart (scalar code, another order). Offsets 0 to
  // 15 floats cover every alignment up to AVX-512's 64 bytes. The sizes take both Eigen's product paths: entries one
  // at a time under 20 (rows + depth + columns), blocked kernels above.
  std::mt19937_64 random(17);
  const FloatMatrix logits = 3 * random_floats(7, 301, random);
  std::vector<float> activations(301);
  for (float& x : activations) x = 2 * std::normal_distribution<float>()(random);
  for (const auto& [m, k, n] : std::vector<std::tuple<Index, Index, Index>>{{7, 5, 6}, {9, 70, 66}}) {
    const FloatMatrix a = random_floats(m, k, random), b = random_floats(k, n, random);
    on_every_build([&] {
      INFO(m << " x " << k << " x " << n);
      std::vector<float> first_product, first_softmax, first_gelu;
      for (std::size_t offset = 0; offset < 16; ++offset) {
        INFO("offset " << offset);
        std::vector<float> storage(offset + static_cast<std::size_t>(std::max<Index>(m * n, logits.size())) + 301);
        float* at = storage.data() + offset;
        float_kernels::product({a.data(), m, k, true}, {b.data(), k, n, true}, at);
        std::vector<float> product(at, at + m * n);
        std::copy(logits.data(), logits.data() + logits.size(), at);
        float_kernels::softmax_rows(at, logits.rows(), logits.cols(), 200, true);  // rows of 201 to 207 keys
        std::vector<float> softmax(at, at + logits.size());
        std::copy(activations.begin(), activations.end(), at);
        float_kernels::gelu(at, static_cast<std::int64_t>(activations.size()));
        std::vector<float> gelu(at, at + activations.size());
        if (offset == 0) {
          first_product = product, first_softmax = softmax, first_gelu = gelu;
          continue;
        }
        CHECK(product == first_product);
        CHECK(softmax == first_softmax);
        CHECK(gelu == first_gelu);
      }
    });
  }
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
