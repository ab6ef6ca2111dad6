// The ways of evaluating Box-Muller (random_stream.hpp: scalar, AVX2, AVX-512): the same words and uniforms,
// the same pairing and order, normals within a few ulps of each other, and the scalar path exactly the
// reference formula.
#include "attncheck/streams/random_stream.hpp"
#include "normal_math_guard.hpp"
#include "philox_known_answers.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

using namespace attncheck::streams;

namespace {

// The bound stated in docs/implementation.md and bench/monte_carlo/README.md. glibc tested libmvec's log, sin
// and cos to a 4-ulp maximum error; against
// glibc's scalar functions they differed here by at most 1 (log), 3 (sin) and 4 (cos) ulp, and the normals
// below by at most 5 ulp over random draws and 3 at the uniforms next to where log(u), sin or cos vanish
// (the square root halves log's share; the two products add their roundings).
constexpr std::int64_t kMaxUlps = 8;

// Distance in units in the last place, for finite doubles of either sign.
std::int64_t ulps_apart(double a, double b) {
  const auto ordered = [](double x) {
    const auto bits = std::bit_cast<std::int64_t>(x);
    return bits < 0 ? std::numeric_limits<std::int64_t>::min() - bits : bits;
  };
  const std::int64_t ia = ordered(a), ib = ordered(b);
  return ia > ib ? ia - ib : ib - ia;
}

PhiloxKey key_of(std::uint64_t seed) {
  return {{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
}
PhiloxCounter counter_of(std::uint32_t c0, std::uint32_t c1, std::uint64_t subsequence) {
  return {{c0, c1, static_cast<std::uint32_t>(subsequence), static_cast<std::uint32_t>(subsequence >> 32)}};
}

std::vector<double> draw(NormalMath math, std::uint64_t seed, PhiloxCounter counter, std::size_t pairs, double sd) {
  std::vector<double> out(2 * pairs);
  normal_pairs(math, key_of(seed), counter, pairs, sd, out.data());
  return out;
}

}  // namespace

TEST_CASE("the scalar path is curand_normal2_double's formula on next_block's words, bit for bit") {
  const PhiloxKey key = key_of(0x0123456789ABCDEFULL);
  PhiloxCounter counter = counter_of(5, 0, 77);
  PhiloxStream words(0x0123456789ABCDEFULL, 77);
  for (int i = 0; i < 5; ++i) words.next_block();
  std::vector<double> got(2 * 300);
  normal_pairs(NormalMath::scalar, key, counter, 300, 1.5, got.data());
  for (std::size_t i = 0; i < 300; ++i) {
    const auto w = words.next_block();
    const BoxMullerUniforms uv = box_muller_uniforms(w[0], w[1], w[2], w[3]);
    REQUIRE(uv.u > 0);
    REQUIRE(uv.u < 1);
    const auto want = box_muller_pair(std::log(uv.u), std::sin(uv.angle), std::cos(uv.angle), 1.5);
    INFO("pair " << i);
    REQUIRE(got[2 * i] == want[0]);
    REQUIRE(got[2 * i + 1] == want[1]);
  }
  CHECK(counter.v[0] == 305);
}

TEST_CASE("the words are cuRAND's Philox known answers, on next_block and on every path, without libcurand") {
  for (const auto& known : attncheck::testing::kPhiloxKnownAnswers) {
    INFO("seed " << known.seed << ", subsequence " << known.subsequence << ", block " << known.block);
    PhiloxStream stream(known.seed, known.subsequence);
    for (std::uint32_t b = 0; b < known.block; ++b) stream.next_block();
    CHECK(stream.next_block() == known.words);
    for (const NormalMath math : kNormalMaths) {
      if (!normal_math_supported(math)) continue;
      PhiloxCounter counter = counter_of(known.block, 0, known.subsequence);
      std::array<std::uint32_t, 4> words{};
      philox_blocks(math, key_of(known.seed), counter, 1, words.data());
      CHECK(words == known.words);
    }
  }
}

TEST_CASE("the vector paths draw the same words as next_block, across the 2^32 carry of the counter") {
  for (const NormalMath math : vector_normal_maths()) {
    INFO("path " << normal_math_name(math));
    const std::uint64_t seed = 20240601;
    // Lengths that end inside, on and past the 8- and 16-lane and 64-block boundaries; the first counter word starts
    // just below 2^32 so that lanes of one pass straddle the carry into the second word.
    for (std::size_t blocks : {std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{9}, std::size_t{16},
                               std::size_t{17}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{200}}) {
      for (std::uint32_t start : {0u, 0xFFFFFFFFu - 5u}) {
        PhiloxCounter vec = counter_of(start, 3, 0x1234567890ULL), ref = vec;
        std::vector<std::uint32_t> got(4 * blocks), want(4 * blocks);
        philox_blocks(math, key_of(seed), vec, blocks, got.data());
        philox_blocks(NormalMath::scalar, key_of(seed), ref, blocks, want.data());
        INFO(blocks << " blocks from counter word " << start);
        CHECK(got == want);
        CHECK(vec == ref);  // both advanced by exactly `blocks`
      }
    }
    // And the scalar words are next_block's (the stream pinned to cuRAND's known answers above).
    PhiloxStream stream(seed, 9);
    PhiloxCounter counter = counter_of(0, 0, 9);
    std::vector<std::uint32_t> words(4 * 100);
    philox_blocks(math, key_of(seed), counter, 100, words.data());
    for (std::size_t i = 0; i < 100; ++i) {
      const auto w = stream.next_block();
      INFO("block " << i);
      CHECK(std::equal(w.begin(), w.end(), words.begin() + static_cast<std::ptrdiff_t>(4 * i)));
    }
  }
}

TEST_CASE("vector-path normals agree with the scalar formula within the stated ulps, in the same order") {
  for (const NormalMath math : vector_normal_maths()) {
    INFO("path " << normal_math_name(math));
    std::int64_t worst = 0;
    double worst_abs = 0;
    std::size_t compared = 0;
    for (std::uint64_t seed : {1ULL, 0xFEEDFACECAFEBEEFULL}) {
      for (std::uint64_t k : {0ULL, 1ULL, 1ULL << 40}) {
        const std::size_t pairs = std::size_t{1} << 18;
        const auto vec = draw(math, seed, counter_of(0, 0, k), pairs, 1.0);
        const auto ref = draw(NormalMath::scalar, seed, counter_of(0, 0, k), pairs, 1.0);
        for (std::size_t i = 0; i < vec.size(); ++i) {
          worst = std::max(worst, ulps_apart(vec[i], ref[i]));
          worst_abs = std::max(worst_abs, std::abs(vec[i] - ref[i]));
        }
        compared += vec.size();
      }
    }
    INFO(compared << " normals: at most " << worst << " ulp and " << worst_abs << " apart");
    CHECK(worst <= kMaxUlps);
    CHECK(worst_abs <= 1e-12);  // the GPU self-test's tolerance, in units of sigma
    // Not equal everywhere either: otherwise this test would not be comparing two evaluations.
    CHECK(worst > 0);
  }
}

TEST_CASE("the vector paths form the scalar path's uniforms bit for bit, and pair them in its order") {
  // normal_pairs on a vector path is box_muller_pairs on the same path applied to the uniforms of the scalar
  // words: a uniform one ulp off would otherwise hide inside the normals' ulp tolerance.
  const std::uint64_t seed = 0xC0FFEE;
  for (const NormalMath math : vector_normal_maths()) {
    INFO("path " << normal_math_name(math));
    for (std::size_t pairs : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{63},
                              std::size_t{64}, std::size_t{65}, std::size_t{1000}}) {
      for (std::uint32_t start : {0u, 0xFFFFFFFFu - 5u}) {
        PhiloxCounter scalar_counter = counter_of(start, 2, 0xABCDEF), vector_counter = scalar_counter;
        std::vector<std::uint32_t> words(4 * pairs);
        philox_blocks(NormalMath::scalar, key_of(seed), scalar_counter, pairs, words.data());
        std::vector<double> u(pairs), angle(pairs);
        for (std::size_t i = 0; i < pairs; ++i) {
          const BoxMullerUniforms uv =
              box_muller_uniforms(words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3]);
          u[i] = uv.u;
          angle[i] = uv.angle;
        }
        std::vector<double> from_uniforms(2 * pairs), drawn(2 * pairs);
        box_muller_pairs(math, u.data(), angle.data(), pairs, 1.25, from_uniforms.data());
        normal_pairs(math, key_of(seed), vector_counter, pairs, 1.25, drawn.data());
        INFO(pairs << " pairs from counter word " << start);
        CHECK(drawn == from_uniforms);
        CHECK(vector_counter == scalar_counter);
      }
    }
  }
}

TEST_CASE("vector-path normals stay within the stated ulps where log(u), sin or cos vanish") {
  // The 53-bit integers behind the uniforms, built into words as Philox would have to give them:
  // z = w0 ^ (w1 << 21) with w1 = z >> 21 and w0 = the low 21 bits.
  const auto words_of = [](std::uint64_t z) {
    const auto high = static_cast<std::uint32_t>(z >> 21);
    return std::array<std::uint32_t, 2>{static_cast<std::uint32_t>(z & 0x1FFFFF), high};
  };
  constexpr std::uint64_t kTop = (std::uint64_t{1} << 53) - 1;
  constexpr std::int64_t kSpread = 20000;
  // u next to 0, 1/2 and 1; angles next to every multiple of pi/4 in [0, 2 pi].
  const std::uint64_t radius_centres[] = {0, std::uint64_t{1} << 52, kTop};
  std::vector<double> u, angle;
  std::size_t next_radius = 0;
  for (std::uint64_t k = 0; k <= 8; ++k) {
    const std::uint64_t centre = std::min(k << 50, kTop);
    for (std::int64_t d = -kSpread; d <= kSpread; ++d) {
      const std::int64_t zy = static_cast<std::int64_t>(centre) + d;
      if (zy < 0 || zy > static_cast<std::int64_t>(kTop)) continue;
      const std::uint64_t rc = radius_centres[next_radius++ % 3];
      const std::int64_t zx = std::clamp<std::int64_t>(static_cast<std::int64_t>(rc) + d, 0, kTop);
      const auto wx = words_of(static_cast<std::uint64_t>(zx)), wy = words_of(static_cast<std::uint64_t>(zy));
      const BoxMullerUniforms uv = box_muller_uniforms(wx[0], wx[1], wy[0], wy[1]);
      u.push_back(uv.u);
      angle.push_back(uv.angle);
    }
  }
  std::vector<double> ref(2 * u.size());
  box_muller_pairs(NormalMath::scalar, u.data(), angle.data(), u.size(), 1.0, ref.data());
  CHECK(u.front() > 0);  // z = 0 still gives a finite log
  for (const NormalMath math : vector_normal_maths()) {
    std::vector<double> vec(2 * u.size());
    box_muller_pairs(math, u.data(), angle.data(), u.size(), 1.0, vec.data());
    std::int64_t worst = 0;
    for (std::size_t i = 0; i < vec.size(); ++i) worst = std::max(worst, ulps_apart(vec[i], ref[i]));
    INFO("path " << normal_math_name(math) << ": " << vec.size() << " normals at the hard arguments, at most " << worst
                 << " ulp apart");
    CHECK(worst <= kMaxUlps);
    CHECK(std::isfinite(vec[0]));
    // An odd count ends inside a lane group: the last pairs are the same as in the whole call.
    std::vector<double> shorter(2 * 13);
    box_muller_pairs(math, u.data(), angle.data(), 13, 1.0, shorter.data());
    CHECK(std::equal(shorter.begin(), shorter.end(), vec.begin()));
  }
}

TEST_CASE("a pair's bits do not depend on how the draws are split into calls, on every path") {
  for (NormalMath math : kNormalMaths) {
    if (!normal_math_supported(math)) continue;
    const NormalMathGuard guard(math);
    INFO("path " << normal_math_name(math));
    const std::uint64_t seed = 4242, k = 17;
    std::vector<double> whole(2 * 500);
    PhiloxStream(seed, k).fill_normal(whole.begin(), whole.end(), 0.75);

    std::vector<double> pieces(whole.size());
    PhiloxStream stream(seed, k);
    std::size_t at = 0;
    for (std::size_t length : {2, 6, 14, 128, 130, 2, 16, 500, 202}) {  // even: whole pairs, ends on odd lanes
      stream.fill_normal(pieces.data() + at, pieces.data() + at + length, 0.75);
      at += length;
    }
    REQUIRE(at == pieces.size());
    CHECK(pieces == whole);

    PhiloxStream pairwise(seed, k);
    for (std::size_t i = 0; i < 500; ++i) {
      const auto pair = pairwise.next_normal_pair();
      INFO("pair " << i);
      REQUIRE(0.75 * pair[0] == whole[2 * i]);
      REQUIRE(0.75 * pair[1] == whole[2 * i + 1]);
    }
  }
}

TEST_CASE("odd lengths discard the spare draw and leave the stream on the next block, on every path") {
  for (NormalMath math : kNormalMaths) {
    if (!normal_math_supported(math)) continue;
    const NormalMathGuard guard(math);
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{129}, std::size_t{1001}}) {
      INFO("path " << normal_math_name(math) << ", " << n << " draws");
      std::vector<double> odd(n), even(n + 1);
      PhiloxStream a(99, 3), b(99, 3);
      a.fill_normal(odd.data(), odd.data() + n, 2.0);
      b.fill_normal(even.data(), even.data() + n + 1, 2.0);
      CHECK(std::equal(odd.begin(), odd.end(), even.begin()));
      CHECK(a.next_block() == b.next_block());
      // A non-contiguous iterator (the generic loop) gives the same draws.
      std::vector<double> via_list(n);
      PhiloxStream c(99, 3);
      struct Forward {
        std::vector<double>::iterator it;
        // Read by fill_normal's iterator concepts, which GCC's -Wunused-local-typedefs does not see.
        using difference_type [[maybe_unused]] = std::ptrdiff_t;
        using value_type [[maybe_unused]] = double;
        double& operator*() const { return *it; }
        Forward& operator++() {
          ++it;
          return *this;
        }
        Forward operator++(int) {
          Forward old = *this;
          ++it;
          return old;
        }
        bool operator==(const Forward&) const = default;
      };
      c.fill_normal(Forward{via_list.begin()}, Forward{via_list.end()}, 2.0);
      CHECK(via_list == odd);
    }
  }
}

TEST_CASE("the process-wide path can be forced to scalar and refuses a path the CPU lacks") {
  const NormalMath before = normal_math();
  {
    const NormalMathGuard guard(NormalMath::scalar);
    CHECK(normal_math() == NormalMath::scalar);
    std::vector<double> forced(64), reference(64);
    PhiloxStream(5, 6).fill_normal(forced.data(), forced.data() + forced.size(), 1.0);
    PhiloxCounter counter = counter_of(0, 0, 6);
    normal_pairs(NormalMath::scalar, key_of(5), counter, 32, 1.0, reference.data());
    CHECK(forced == reference);
  }
  CHECK(normal_math() == before);
  for (const NormalMath math : kNormalMaths) {
    INFO("path " << normal_math_name(math));
    if (!normal_math_supported(math)) {
      CHECK_THROWS_AS(set_normal_math(math), std::invalid_argument);
      CHECK(normal_math() == before);
    }
  }
  if (std::getenv("ATTNCHECK_NORMALS") == nullptr) {
    // The default is the fastest path the CPU has.
    const NormalMath fastest = normal_math_supported(NormalMath::avx512) ? NormalMath::avx512
                               : normal_math_supported(NormalMath::avx2) ? NormalMath::avx2
                                                                         : NormalMath::scalar;
    CHECK(before == fastest);
  }
}
