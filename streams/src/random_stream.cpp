#include "attncheck/streams/random_stream.hpp"

#include "attncheck/theory/common.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#if defined(ATTNCHECK_STREAMS_LIBMVEC) && defined(__x86_64__)
#define ATTNCHECK_AVX2_NORMALS 1
#include <immintrin.h>
#endif

namespace attncheck::streams {

namespace {

std::array<double, 2> scalar_pair(double u, double angle, double sd) {
  return box_muller_pair(std::log(u), std::sin(angle), std::cos(angle), sd);
}

// The reference: one block at a time through Random123 and glibc's scalar log, sin, cos.
void normal_pairs_scalar(const PhiloxKey& key, PhiloxCounter& counter, std::size_t pairs, double sd, double* out) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const PhiloxCounter w = r123::Philox4x32{}(counter, key);
    PhiloxStream::advance(counter);
    const BoxMullerUniforms uv = box_muller_uniforms(w.v[0], w.v[1], w.v[2], w.v[3]);
    const auto pair = scalar_pair(uv.u, uv.angle, sd);
    out[2 * i] = pair[0];
    out[2 * i + 1] = pair[1];
  }
}

#if defined(ATTNCHECK_AVX2_NORMALS)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// glibc's libmvec, AVX2 variants (vector ABI names). glibc tested them to a 4-ulp maximum relative error;
// the arguments here (u in (0, 1), angles in (0, 2 pi)) never reach their scalar fallbacks.
extern "C" __m256d _ZGVdN4v_log(__m256d);
extern "C" __m256d _ZGVdN4v_sin(__m256d);
extern "C" __m256d _ZGVdN4v_cos(__m256d);

// Blocks per pass: multiples of the 8 Philox lanes and the 4 libmvec lanes, small enough for L1. Lanes past
// the requested count are computed on the following counters and dropped, so every pair, wherever it falls
// in a call, goes through the same vector code: fill_normal and next_normal_pair agree bit for bit.
constexpr std::size_t kChunk = 64;
constexpr std::size_t kPhiloxLanes = 8;

// Philox4x32-10 on 8 counters, words in struct-of-arrays form, one 32-bit word per 64-bit lane so that
// vpmuludq gives the full 32 x 32 -> 64 product of Random123's mulhilo. The high halves of the low products
// (lanes 1 and 3) only ever reach high halves, which the multiplies ignore; they are cleared at the end.
void philox8(const PhiloxKey& key, std::uint64_t* c0, std::uint64_t* c1, std::uint64_t* c2, std::uint64_t* c3) {
  const __m256i m0 = _mm256_set1_epi64x(PHILOX_M4x32_0), m1 = _mm256_set1_epi64x(PHILOX_M4x32_1);
  __m256i x[2][4];
  for (int g = 0; g < 2; ++g) {
    x[g][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c0 + 4 * g));
    x[g][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c1 + 4 * g));
    x[g][2] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c2 + 4 * g));
    x[g][3] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c3 + 4 * g));
  }
  std::uint32_t k0 = key.v[0], k1 = key.v[1];
  for (int round = 0; round < 10; ++round) {
    const __m256i key0 = _mm256_set1_epi64x(k0), key1 = _mm256_set1_epi64x(k1);
    for (int g = 0; g < 2; ++g) {
      const __m256i p0 = _mm256_mul_epu32(m0, x[g][0]), p1 = _mm256_mul_epu32(m1, x[g][2]);
      const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), x[g][1]), key0);
      const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), x[g][3]), key1);
      x[g][0] = n0;
      x[g][1] = p1;
      x[g][2] = n2;
      x[g][3] = p0;
    }
    k0 += PHILOX_W32_0;
    k1 += PHILOX_W32_1;
  }
  const __m256i low = _mm256_set1_epi64x(0xFFFFFFFF);
  for (int g = 0; g < 2; ++g) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c0 + 4 * g), _mm256_and_si256(x[g][0], low));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c1 + 4 * g), _mm256_and_si256(x[g][1], low));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c2 + 4 * g), _mm256_and_si256(x[g][2], low));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c3 + 4 * g), _mm256_and_si256(x[g][3], low));
  }
}

// Lane i of w[0..3] gets counter + i for i < lanes; counter is advanced past the first n only.
void lane_counters(PhiloxCounter& counter, std::size_t n, std::size_t lanes, std::uint64_t (*w)[kChunk]) {
  if (counter.v[0] <= 0xFFFFFFFFu - lanes) {  // no carry into the second word: a loop the compiler vectorizes
    for (std::size_t i = 0; i < lanes; ++i) {
      w[0][i] = counter.v[0] + i;
      w[1][i] = counter.v[1];
      w[2][i] = counter.v[2];
      w[3][i] = counter.v[3];
    }
    counter.v[0] += static_cast<std::uint32_t>(n);
    return;
  }
  PhiloxCounter c = counter;
  for (std::size_t i = 0; i < lanes; ++i) {
    for (int j = 0; j < 4; ++j) w[j][i] = c.v[j];
    PhiloxStream::advance(c);
    if (i + 1 == n) counter = c;
  }
}

std::size_t round_up(std::size_t n, std::size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// One vector pass of Philox over the lanes laid out as lane_counters writes them (philox8, philox16).
using PhiloxPass = void (*)(const PhiloxKey&, std::uint64_t*, std::uint64_t*, std::uint64_t*, std::uint64_t*);

// The words of the n <= kChunk blocks from counter on into w (counter advanced past them), in whole passes:
// lanes past n are the following counters' words, computed and dropped. Returns the lanes filled. Inlined
// into its callers (the AVX-512 ones too: their target includes AVX2's) with the pass a direct call, so each
// path's code is what it was with this loop written out in it (normal_pairs_avx512: identical instructions).
template <std::size_t PassLanes, PhiloxPass Pass>
[[gnu::always_inline]] inline std::size_t chunk_words(const PhiloxKey& key, PhiloxCounter& counter, std::size_t n,
                                                      std::uint64_t (*w)[kChunk]) {
  const std::size_t lanes = round_up(n, PassLanes);
  lane_counters(counter, n, lanes, w);
  for (std::size_t i = 0; i < lanes; i += PassLanes) Pass(key, w[0] + i, w[1] + i, w[2] + i, w[3] + i);
  return lanes;
}

template <std::size_t PassLanes, PhiloxPass Pass>
[[gnu::always_inline]] inline void philox_blocks_vector(const PhiloxKey& key, PhiloxCounter& counter,
                                                        std::size_t blocks, std::uint32_t* words) {
  alignas(64) std::uint64_t w[4][kChunk];
  for (std::size_t done = 0; done < blocks;) {
    const std::size_t n = std::min(kChunk, blocks - done);
    chunk_words<PassLanes, Pass>(key, counter, n, w);
    for (std::size_t i = 0; i < n; ++i) {
      for (int j = 0; j < 4; ++j) words[4 * (done + i) + j] = static_cast<std::uint32_t>(w[j][i]);
    }
    done += n;
  }
}

void philox_blocks_avx2(const PhiloxKey& key, PhiloxCounter& counter, std::size_t blocks, std::uint32_t* words) {
  philox_blocks_vector<kPhiloxLanes, philox8>(key, counter, blocks, words);
}

// Box-Muller on up to kChunk uniforms; lanes = n rounded up to whole libmvec lanes, all of them readable.
void box_muller_chunk(const double* u, const double* angle, std::size_t n, std::size_t lanes, double sd, double* out) {
  alignas(32) double log_u[kChunk], sin_a[kChunk], cos_a[kChunk];
  for (std::size_t i = 0; i < lanes; i += 4) {
    const __m256d a = _mm256_loadu_pd(angle + i);
    _mm256_store_pd(log_u + i, _ZGVdN4v_log(_mm256_loadu_pd(u + i)));
    _mm256_store_pd(sin_a + i, _ZGVdN4v_sin(a));
    _mm256_store_pd(cos_a + i, _ZGVdN4v_cos(a));
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto pair = box_muller_pair(log_u[i], sin_a[i], cos_a[i], sd);
    out[2 * i] = pair[0];
    out[2 * i + 1] = pair[1];
  }
}

void normal_pairs_avx2(const PhiloxKey& key, PhiloxCounter& counter, std::size_t pairs, double sd, double* out) {
  alignas(32) std::uint64_t w[4][kChunk];
  alignas(32) double u[kChunk], angle[kChunk];
  for (std::size_t done = 0; done < pairs;) {
    const std::size_t n = std::min(kChunk, pairs - done);
    const std::size_t lanes = chunk_words<kPhiloxLanes, philox8>(key, counter, n, w);
    for (std::size_t i = 0; i < lanes; ++i) {
      const BoxMullerUniforms uv =
          box_muller_uniforms(static_cast<std::uint32_t>(w[0][i]), static_cast<std::uint32_t>(w[1][i]),
                              static_cast<std::uint32_t>(w[2][i]), static_cast<std::uint32_t>(w[3][i]));
      u[i] = uv.u;
      angle[i] = uv.angle;
    }
    box_muller_chunk(u, angle, n, lanes, sd, out + 2 * done);
    done += n;
  }
}

void box_muller_pairs_avx2(const double* u, const double* angle, std::size_t pairs, double sd, double* out) {
  alignas(32) double u_chunk[kChunk], angle_chunk[kChunk];
  for (std::size_t done = 0; done < pairs;) {
    const std::size_t n = std::min(kChunk, pairs - done), lanes = round_up(n, 4);
    std::copy(u + done, u + done + n, u_chunk);
    std::copy(angle + done, angle + done + n, angle_chunk);
    std::fill(u_chunk + n, u_chunk + lanes, 0.5);  // any argument will do for lanes that are dropped
    std::fill(angle_chunk + n, angle_chunk + lanes, 1.0);
    box_muller_chunk(u_chunk, angle_chunk, n, lanes, sd, out + 2 * done);
    done += n;
  }
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
// GCC 12's AVX-512 shift and multiply intrinsics start from _mm512_undefined_epi32(), which it then reports as
// used uninitialized (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

// glibc's libmvec, AVX-512 variants (8 doubles a lane group), the same 4-ulp guarantee as the AVX2 ones.
extern "C" __m512d _ZGVeN8v_log(__m512d);
extern "C" __m512d _ZGVeN8v_sin(__m512d);
extern "C" __m512d _ZGVeN8v_cos(__m512d);

constexpr std::size_t kPhiloxLanes512 = 16;

// philox8 on 16 counters, two registers of eight 64-bit lanes (same word-per-lane layout).
void philox16(const PhiloxKey& key, std::uint64_t* c0, std::uint64_t* c1, std::uint64_t* c2, std::uint64_t* c3) {
  const __m512i m0 = _mm512_set1_epi64(PHILOX_M4x32_0), m1 = _mm512_set1_epi64(PHILOX_M4x32_1);
  __m512i x[2][4];
  for (int g = 0; g < 2; ++g) {
    x[g][0] = _mm512_loadu_si512(c0 + 8 * g);
    x[g][1] = _mm512_loadu_si512(c1 + 8 * g);
    x[g][2] = _mm512_loadu_si512(c2 + 8 * g);
    x[g][3] = _mm512_loadu_si512(c3 + 8 * g);
  }
  std::uint32_t k0 = key.v[0], k1 = key.v[1];
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi64(k0), key1 = _mm512_set1_epi64(k1);
    for (int g = 0; g < 2; ++g) {
      const __m512i p0 = _mm512_mul_epu32(m0, x[g][0]), p1 = _mm512_mul_epu32(m1, x[g][2]);
      // a ^ b ^ c in one instruction (truth table 0x96).
      const __m512i n0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), x[g][1], key0, 0x96);
      const __m512i n2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), x[g][3], key1, 0x96);
      x[g][0] = n0;
      x[g][1] = p1;
      x[g][2] = n2;
      x[g][3] = p0;
    }
    k0 += PHILOX_W32_0;
    k1 += PHILOX_W32_1;
  }
  const __m512i low = _mm512_set1_epi64(0xFFFFFFFF);
  for (int g = 0; g < 2; ++g) {
    _mm512_storeu_si512(c0 + 8 * g, _mm512_and_si512(x[g][0], low));
    _mm512_storeu_si512(c1 + 8 * g, _mm512_and_si512(x[g][1], low));
    _mm512_storeu_si512(c2 + 8 * g, _mm512_and_si512(x[g][2], low));
    _mm512_storeu_si512(c3 + 8 * g, _mm512_and_si512(x[g][3], low));
  }
}

void philox_blocks_avx512(const PhiloxKey& key, PhiloxCounter& counter, std::size_t blocks, std::uint32_t* words) {
  philox_blocks_vector<kPhiloxLanes512, philox16>(key, counter, blocks, words);
}

// Box-Muller on 8 lanes into 8 interleaved pairs (16 doubles at out): box_muller_pair's operations, each
// correctly rounded, in its order.
void box_muller_8(__m512d u, __m512d angle, __m512d sd, double* out) {
  const __m512d radius = _mm512_sqrt_pd(_mm512_mul_pd(_mm512_set1_pd(-2.0), _ZGVeN8v_log(u)));
  const __m512d first = _mm512_mul_pd(sd, _mm512_mul_pd(radius, _ZGVeN8v_sin(angle)));
  const __m512d second = _mm512_mul_pd(sd, _mm512_mul_pd(radius, _ZGVeN8v_cos(angle)));
  _mm512_storeu_pd(out, _mm512_permutex2var_pd(first, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), second));
  _mm512_storeu_pd(out + 8, _mm512_permutex2var_pd(first, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), second));
}

// box_muller_uniforms on 8 lanes of words (each in the low half of a 64-bit lane): the integers are below
// 2^53, so the unsigned conversion is exact, and the operations are those of the scalar function.
void uniforms_8(const std::uint64_t* w0, const std::uint64_t* w1, const std::uint64_t* w2, const std::uint64_t* w3,
                __m512d& u, __m512d& angle) {
  constexpr double kTwoPow53Inv = 1.1102230246251565e-16;
  constexpr double kPi = 3.1415926535897932;
  const __m512i zx = _mm512_xor_si512(_mm512_loadu_si512(w0), _mm512_slli_epi64(_mm512_loadu_si512(w1), 21));
  const __m512i zy = _mm512_xor_si512(_mm512_loadu_si512(w2), _mm512_slli_epi64(_mm512_loadu_si512(w3), 21));
  u = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepu64_pd(zx), _mm512_set1_pd(kTwoPow53Inv)),
                    _mm512_set1_pd(kTwoPow53Inv / 2.0));
  const __m512d v = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepu64_pd(zy), _mm512_set1_pd(kTwoPow53Inv * 2.0)),
                                  _mm512_set1_pd(kTwoPow53Inv));
  angle = _mm512_mul_pd(v, _mm512_set1_pd(kPi));
}

void normal_pairs_avx512(const PhiloxKey& key, PhiloxCounter& counter, std::size_t pairs, double sd, double* out) {
  alignas(64) std::uint64_t w[4][kChunk];
  alignas(64) double tail[16];
  const __m512d sd8 = _mm512_set1_pd(sd);
  for (std::size_t done = 0; done < pairs;) {
    const std::size_t n = std::min(kChunk, pairs - done);
    chunk_words<kPhiloxLanes512, philox16>(key, counter, n, w);
    for (std::size_t i = 0; i < n; i += 8) {
      __m512d u, angle;
      uniforms_8(w[0] + i, w[1] + i, w[2] + i, w[3] + i, u, angle);
      double* at = out + 2 * (done + i);
      if (i + 8 <= n) {
        box_muller_8(u, angle, sd8, at);
      } else {
        box_muller_8(u, angle, sd8, tail);
        std::copy(tail, tail + 2 * (n - i), at);
      }
    }
    done += n;
  }
}

void box_muller_pairs_avx512(const double* u, const double* angle, std::size_t pairs, double sd, double* out) {
  alignas(64) double u_lanes[8], angle_lanes[8], tail[16];
  const __m512d sd8 = _mm512_set1_pd(sd);
  for (std::size_t i = 0; i < pairs; i += 8) {
    if (i + 8 <= pairs) {
      box_muller_8(_mm512_loadu_pd(u + i), _mm512_loadu_pd(angle + i), sd8, out + 2 * i);
      continue;
    }
    std::fill(u_lanes, u_lanes + 8, 0.5);  // any argument will do for lanes that are dropped
    std::fill(angle_lanes, angle_lanes + 8, 1.0);
    std::copy(u + i, u + pairs, u_lanes);
    std::copy(angle + i, angle + pairs, angle_lanes);
    box_muller_8(_mm512_load_pd(u_lanes), _mm512_load_pd(angle_lanes), sd8, tail);
    std::copy(tail, tail + 2 * (pairs - i), out + 2 * i);
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

// `math` itself; throws when that path is asked for where it does not exist.
NormalMath checked(NormalMath math) {
  if (!normal_math_supported(math)) {
    throw theory::InputError(std::string("this CPU or build has no ") + normal_math_name(math) + " normals (libmvec)");
  }
  return math;
}

NormalMath initial_normal_math() {
  const char* env = std::getenv("ATTNCHECK_NORMALS");
  const std::string wanted = env ? env : "";
  for (const NormalMath math : kNormalMaths) {
    if (wanted != normal_math_name(math)) continue;
    if (!normal_math_supported(math)) {
      throw theory::InputError("ATTNCHECK_NORMALS=" + wanted + ", but this CPU or build has no " + wanted +
                               " normals (libmvec)");
    }
    return math;
  }
  if (!wanted.empty()) {
    throw theory::InputError("ATTNCHECK_NORMALS=" + wanted + ": expected scalar, avx2 or avx512 (or unset)");
  }
  for (const NormalMath math : kNormalMaths) {
    if (normal_math_supported(math)) return math;  // the fastest first
  }
  return NormalMath::scalar;
}

std::atomic<NormalMath>& current_normal_math() {
  static std::atomic<NormalMath> math{initial_normal_math()};
  return math;
}

}  // namespace

const char* normal_math_name(NormalMath math) {
  switch (math) {
    case NormalMath::scalar: return "scalar";
    case NormalMath::avx2: return "avx2";
    case NormalMath::avx512: return "avx512";
  }
  return "unknown";
}

bool normal_math_supported(NormalMath math) {
  switch (math) {
    case NormalMath::scalar: return true;
#if defined(ATTNCHECK_AVX2_NORMALS)
    case NormalMath::avx2: {
      static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
      return avx2;
    }
    case NormalMath::avx512: {
      static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
      return avx512;
    }
#endif
    default: return false;
  }
}

NormalMath normal_math() { return current_normal_math().load(std::memory_order_relaxed); }

void set_normal_math(NormalMath math) { current_normal_math().store(checked(math), std::memory_order_relaxed); }

void philox_blocks(NormalMath math, const PhiloxKey& key, PhiloxCounter& counter, std::size_t blocks,
                   std::uint32_t* words) {
  switch (checked(math)) {
#if defined(ATTNCHECK_AVX2_NORMALS)
    case NormalMath::avx2: philox_blocks_avx2(key, counter, blocks, words); return;
    case NormalMath::avx512: philox_blocks_avx512(key, counter, blocks, words); return;
#endif
    default:
      for (std::size_t i = 0; i < blocks; ++i) {
        const PhiloxCounter w = r123::Philox4x32{}(counter, key);
        PhiloxStream::advance(counter);
        for (int j = 0; j < 4; ++j) words[4 * i + j] = w.v[j];
      }
  }
}

void normal_pairs(NormalMath math, const PhiloxKey& key, PhiloxCounter& counter, std::size_t pairs, double sd,
                  double* out) {
  switch (checked(math)) {
#if defined(ATTNCHECK_AVX2_NORMALS)
    case NormalMath::avx2: normal_pairs_avx2(key, counter, pairs, sd, out); return;
    case NormalMath::avx512: normal_pairs_avx512(key, counter, pairs, sd, out); return;
#endif
    default: normal_pairs_scalar(key, counter, pairs, sd, out);
  }
}

void box_muller_pairs(NormalMath math, const double* u, const double* angle, std::size_t pairs, double sd,
                      double* out) {
  switch (checked(math)) {
#if defined(ATTNCHECK_AVX2_NORMALS)
    case NormalMath::avx2: box_muller_pairs_avx2(u, angle, pairs, sd, out); return;
    case NormalMath::avx512: box_muller_pairs_avx512(u, angle, pairs, sd, out); return;
#endif
    default:
      for (std::size_t i = 0; i < pairs; ++i) {
        const auto pair = scalar_pair(u[i], angle[i], sd);
        out[2 * i] = pair[0];
        out[2 * i + 1] = pair[1];
      }
  }
}

}  // namespace attncheck::streams
