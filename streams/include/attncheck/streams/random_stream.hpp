#pragma once
// The CPU random stream: Philox4x32-10 with key (seed low, seed high) and counter (c, 0, k low, k high) for
// sample k, c = 0, 1, 2, ...: the stream of cuRAND's curand_init(seed, k, 0, &state) for
// curandStatePhilox4_32_10_t. Normals pair up exactly as curand_normal2_double does: one 4-word block gives
// two 53-bit uniforms and Box-Muller gives two normals (the GPU's sincospi may differ in the last bits).
//
// Three ways to evaluate log, sin and cos of Box-Muller (NormalMath): glibc's scalar functions, or glibc's
// vector library (libmvec) four lanes at a time (AVX2 variants, on CPUs with AVX2 and FMA) or eight (AVX-512
// variants, on CPUs with AVX-512 F and DQ). The words and uniforms are the same bits on every path; the normals
// differ by a few ulps (at most 5 measured, 8 asserted by tests/streams/test_random_stream.cpp), far inside the
// GPU self-test's 1e-12 sigma. The path is chosen once per process (the fastest the CPU has), never per thread
// or per call site, so results do not depend on the thread count, and machines with different vector units
// reproduce each other's results up to those last bits (ATTNCHECK_NORMALS=scalar|avx2|avx512 picks a path,
// and reproduces another machine's bits exactly where both have it).

#include <Random123/philox.h>

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>

namespace attncheck::streams {

using PhiloxKey = r123::Philox4x32::key_type;
using PhiloxCounter = r123::Philox4x32::ctr_type;

// curand_normal2_double's conversion of one block: the radius uniform u in (0, 1), so log(u) is finite, and
// the angle pi v with v in (0, 2). The products by powers of two are exact, so these are the same bits on
// every path and with or without FMA contraction.
struct BoxMullerUniforms {
  double u, angle;
};
inline BoxMullerUniforms box_muller_uniforms(std::uint32_t w0, std::uint32_t w1, std::uint32_t w2, std::uint32_t w3) {
  constexpr double kTwoPow53Inv = 1.1102230246251565e-16;  // CURAND_2POW53_INV_DOUBLE
  constexpr double kPi = 3.1415926535897932;               // CURAND_PI_DOUBLE
  const std::uint64_t zx = static_cast<std::uint64_t>(w0) ^ (static_cast<std::uint64_t>(w1) << 21);
  const std::uint64_t zy = static_cast<std::uint64_t>(w2) ^ (static_cast<std::uint64_t>(w3) << 21);
  const double u = static_cast<double>(zx) * kTwoPow53Inv + kTwoPow53Inv / 2.0;
  const double v = static_cast<double>(zy) * (kTwoPow53Inv * 2.0) + kTwoPow53Inv;
  return {u, v * kPi};
}

// The pair from log(u), sin(angle), cos(angle), scaled by sd (exactly rounded operations only: identical
// wherever the three inputs are).
inline std::array<double, 2> box_muller_pair(double log_u, double sin_angle, double cos_angle, double sd) {
  const double radius = std::sqrt(-2.0 * log_u);
  return {sd * (radius * sin_angle), sd * (radius * cos_angle)};
}

enum class NormalMath { scalar, avx2, avx512 };
// Every path, the fastest first.
inline constexpr NormalMath kNormalMaths[] = {NormalMath::avx512, NormalMath::avx2, NormalMath::scalar};
// "scalar", "avx2", "avx512": ATTNCHECK_NORMALS's values.
const char* normal_math_name(NormalMath math);

// Whether this CPU can take the path (scalar always can).
bool normal_math_supported(NormalMath math);
// The path of this process: the fastest supported one, unless the environment names one (ATTNCHECK_NORMALS).
NormalMath normal_math();
// Changes the path of the whole process (tests; reproducing another machine's bits). Not meant to race with
// draws in flight. Throws theory::InputError (a std::invalid_argument) when the CPU cannot take it.
void set_normal_math(NormalMath math);

// `blocks` Philox blocks from `counter` on (counter advanced past them) into words[0, 4 blocks), as
// next_block would give them: the words under normal_pairs, exposed so that both paths can be pinned.
void philox_blocks(NormalMath math, const PhiloxKey& key, PhiloxCounter& counter, std::size_t blocks,
                   std::uint32_t* words);

// `pairs` normal pairs from the blocks at `counter`, counter, counter + 1, ..., (counter advanced past them)
// into out[0, 2 pairs): out[2i], out[2i + 1] = sd * (the pair of block i).
void normal_pairs(NormalMath math, const PhiloxKey& key, PhiloxCounter& counter, std::size_t pairs, double sd,
                  double* out);

// Box-Muller on chosen uniforms (u in (0, 1) and angle = pi v, as box_muller_uniforms gives them) on path
// `math`: what normal_pairs does after the words, exposed so that tests can pick the hardest arguments.
void box_muller_pairs(NormalMath math, const double* u, const double* angle, std::size_t pairs, double sd, double* out);

class PhiloxStream {
 public:
  PhiloxStream(std::uint64_t seed, std::uint64_t subsequence)
      : key_{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}},
        counter_{{0, 0, static_cast<std::uint32_t>(subsequence), static_cast<std::uint32_t>(subsequence >> 32)}} {}

  // The next block of four 32-bit words (what curand4 returns).
  std::array<std::uint32_t, 4> next_block() {
    const r123::Philox4x32::ctr_type out = r123::Philox4x32{}(counter_, key_);
    advance(counter_);
    return {out.v[0], out.v[1], out.v[2], out.v[3]};
  }

  // Two independent N(0, 1) draws from one block, as curand_normal2_double; the same bits as fill_normal
  // gives at this position.
  std::array<double, 2> next_normal_pair() {
    std::array<double, 2> pair;
    normal_pairs(normal_math(), key_, counter_, 1, 1.0, pair.data());
    return pair;
  }

  // Fills [first, last) with N(0, sd^2) draws, consuming pairs; an odd count discards the last spare draw so
  // that what follows starts on a block boundary on the GPU too.
  template <class It>
  void fill_normal(It first, It last, double sd) {
    const NormalMath math = normal_math();
    if constexpr (std::contiguous_iterator<It> && std::same_as<std::iter_value_t<It>, double>) {
      const auto count = static_cast<std::size_t>(last - first);
      if (count == 0) return;
      double* out = std::to_address(first);
      normal_pairs(math, key_, counter_, count / 2, sd, out);
      if (count % 2 == 1) {
        std::array<double, 2> pair;
        normal_pairs(math, key_, counter_, 1, sd, pair.data());
        out[count - 1] = pair[0];
      }
    } else {
      while (first != last) {
        std::array<double, 2> pair;
        normal_pairs(math, key_, counter_, 1, sd, pair.data());
        *first++ = pair[0];
        if (first == last) break;
        *first++ = pair[1];
      }
    }
  }

  // Moves on `blocks` blocks (2 * blocks normals) without drawing them: a sample's matrices can then be drawn
  // out of their order, or in row blocks, and still be the same numbers.
  void skip_blocks(std::uint64_t blocks) {
    const std::uint64_t low = (static_cast<std::uint64_t>(counter_.v[1]) << 32 | counter_.v[0]) + blocks;
    counter_.v[0] = static_cast<std::uint32_t>(low);
    counter_.v[1] = static_cast<std::uint32_t>(low >> 32);
  }

  // The block counter's increment (a carry past the second word would take 2^64 blocks).
  static void advance(PhiloxCounter& counter) {
    if (++counter.v[0] == 0) ++counter.v[1];
  }

 private:
  PhiloxKey key_;
  PhiloxCounter counter_;
};

// Seed of sweep point `point` of a run seeded with `seed`: SplitMix64 of (seed + golden-ratio * (point + 1)),
// so neighbouring points and neighbouring seeds get unrelated streams. Documented in docs/implementation.md.
inline std::uint64_t derive_point_seed(std::uint64_t seed, std::uint64_t point) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (point + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace attncheck::streams
