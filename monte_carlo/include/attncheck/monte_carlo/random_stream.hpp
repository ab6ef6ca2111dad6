#pragma once
// The CPU random stream: Philox4x32-10 with key (seed low, seed high) and counter (c, 0, k low, k high) for
// sample k, c = 0, 1, 2, ...: the stream of cuRAND's curand_init(seed, k, 0, &state) for
// curandStatePhilox4_32_10_t. Normals pair up exactly as curand_normal2_double does: one 4-word block gives
// two 53-bit uniforms and Box-Muller gives two normals (the GPU's sincospi may differ in the last bits).

#include <Random123/philox.h>

#include <array>
#include <cmath>
#include <cstdint>

namespace attncheck::monte_carlo {

class PhiloxStream {
 public:
  PhiloxStream(std::uint64_t seed, std::uint64_t subsequence)
      : key_{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}},
        counter_{{0, 0, static_cast<std::uint32_t>(subsequence), static_cast<std::uint32_t>(subsequence >> 32)}} {}

  // The next block of four 32-bit words (what curand4 returns).
  std::array<std::uint32_t, 4> next_block() {
    const r123::Philox4x32::ctr_type out = r123::Philox4x32{}(counter_, key_);
    if (++counter_.v[0] == 0) ++counter_.v[1];
    return {out.v[0], out.v[1], out.v[2], out.v[3]};
  }

  // Two independent N(0, 1) draws from one block, as curand_normal2_double.
  std::array<double, 2> next_normal_pair() {
    const auto w = next_block();
    constexpr double kTwoPow53Inv = 1.1102230246251565e-16;  // CURAND_2POW53_INV_DOUBLE
    const std::uint64_t zx = static_cast<std::uint64_t>(w[0]) ^ (static_cast<std::uint64_t>(w[1]) << 21);
    const std::uint64_t zy = static_cast<std::uint64_t>(w[2]) ^ (static_cast<std::uint64_t>(w[3]) << 21);
    const double u = static_cast<double>(zx) * kTwoPow53Inv + kTwoPow53Inv / 2.0;  // in (0, 1): log(u) finite
    const double v = static_cast<double>(zy) * (kTwoPow53Inv * 2.0) + kTwoPow53Inv;
    const double radius = std::sqrt(-2.0 * std::log(u));
    constexpr double kPi = 3.1415926535897932;  // CURAND_PI_DOUBLE
    return {radius * std::sin(v * kPi), radius * std::cos(v * kPi)};
  }

  // Fills [first, last) with N(0, sd^2) draws, consuming pairs; an odd count discards the last spare draw so
  // that what follows starts on a block boundary on the GPU too.
  template <class It>
  void fill_normal(It first, It last, double sd) {
    while (first != last) {
      const auto pair = next_normal_pair();
      *first++ = sd * pair[0];
      if (first == last) break;
      *first++ = sd * pair[1];
    }
  }

 private:
  r123::Philox4x32::key_type key_;
  r123::Philox4x32::ctr_type counter_;
};

// Seed of sweep point `point` of a run seeded with `seed`: SplitMix64 of (seed + golden-ratio * (point + 1)),
// so neighbouring points and neighbouring seeds get unrelated streams. Documented in README.md.
inline std::uint64_t derive_point_seed(std::uint64_t seed, std::uint64_t point) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (point + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace attncheck::monte_carlo
