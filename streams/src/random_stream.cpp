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

std::size_t whole_lanes(std::size_t n) { return (n + kPhiloxLanes - 1) / kPhiloxLanes * kPhiloxLanes; }

void philox_blocks_avx2(const PhiloxKey& key, PhiloxCounter& counter, std::size_t blocks, std::uint32_t* words) {
  alignas(32) std::uint64_t w[4][kChunk];
  for (std::size_t done = 0; done < blocks;) {
    const std::size_t n = std::min(kChunk, blocks - done), lanes = whole_lanes(n);
    lane_counters(counter, n, lanes, w);
    for (std::size_t i = 0; i < lanes; i += kPhiloxLanes) philox8(key, w[0] + i, w[1] + i, w[2] + i, w[3] + i);
    for (std::size_t i = 0; i < n; ++i) {
      for (int j = 0; j < 4; ++j) words[4 * (done + i) + j] = static_cast<std::uint32_t>(w[j][i]);
    }
    done += n;
  }
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
    const std::size_t n = std::min(kChunk, pairs - done), lanes = whole_lanes(n);
    lane_counters(counter, n, lanes, w);
    for (std::size_t i = 0; i < lanes; i += kPhiloxLanes) philox8(key, w[0] + i, w[1] + i, w[2] + i, w[3] + i);
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
    const std::size_t n = std::min(kChunk, pairs - done), lanes = (n + 3) / 4 * 4;
    std::copy(u + done, u + done + n, u_chunk);
    std::copy(angle + done, angle + done + n, angle_chunk);
    std::fill(u_chunk + n, u_chunk + lanes, 0.5);  // any argument will do for lanes that are dropped
    std::fill(angle_chunk + n, angle_chunk + lanes, 1.0);
    box_muller_chunk(u_chunk, angle_chunk, n, lanes, sd, out + 2 * done);
    done += n;
  }
}

#pragma GCC pop_options
#endif

// Whether `math` is the AVX2 path; throws when that path is asked for where it does not exist.
bool takes_avx2(NormalMath math) {
  if (math == NormalMath::scalar) return false;
  if (!normal_math_supported(math)) throw theory::InputError("this CPU or build has no AVX2 normals (libmvec)");
  return true;
}

NormalMath initial_normal_math() {
  const char* env = std::getenv("ATTNCHECK_NORMALS");
  const std::string wanted = env ? env : "";
  if (wanted == "scalar") return NormalMath::scalar;
  if (wanted == "avx2") {
    if (!normal_math_supported(NormalMath::avx2)) {
      throw theory::InputError("ATTNCHECK_NORMALS=avx2, but this CPU or build has no AVX2 normals (libmvec)");
    }
    return NormalMath::avx2;
  }
  if (!wanted.empty()) {
    throw theory::InputError("ATTNCHECK_NORMALS=" + wanted + ": expected scalar or avx2 (or unset)");
  }
  return normal_math_supported(NormalMath::avx2) ? NormalMath::avx2 : NormalMath::scalar;
}

std::atomic<NormalMath>& current_normal_math() {
  static std::atomic<NormalMath> math{initial_normal_math()};
  return math;
}

}  // namespace

bool normal_math_supported(NormalMath math) {
  if (math == NormalMath::scalar) return true;
#if defined(ATTNCHECK_AVX2_NORMALS)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
}

NormalMath normal_math() { return current_normal_math().load(std::memory_order_relaxed); }

void set_normal_math(NormalMath math) {
  takes_avx2(math);
  current_normal_math().store(math, std::memory_order_relaxed);
}

void philox_blocks(NormalMath math, const PhiloxKey& key, PhiloxCounter& counter, std::size_t blocks,
                   std::uint32_t* words) {
  if (takes_avx2(math)) {
#if defined(ATTNCHECK_AVX2_NORMALS)
    philox_blocks_avx2(key, counter, blocks, words);
    return;
#endif
  }
  for (std::size_t i = 0; i < blocks; ++i) {
    const PhiloxCounter w = r123::Philox4x32{}(counter, key);
    PhiloxStream::advance(counter);
    for (int j = 0; j < 4; ++j) words[4 * i + j] = w.v[j];
  }
}

void normal_pairs(NormalMath math, const PhiloxKey& key, PhiloxCounter& counter, std::size_t pairs, double sd,
                  double* out) {
  if (takes_avx2(math)) {
#if defined(ATTNCHECK_AVX2_NORMALS)
    normal_pairs_avx2(key, counter, pairs, sd, out);
    return;
#endif
  }
  normal_pairs_scalar(key, counter, pairs, sd, out);
}

void box_muller_pairs(NormalMath math, const double* u, const double* angle, std::size_t pairs, double sd,
                      double* out) {
  if (takes_avx2(math)) {
#if defined(ATTNCHECK_AVX2_NORMALS)
    box_muller_pairs_avx2(u, angle, pairs, sd, out);
    return;
#endif
  }
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto pair = scalar_pair(u[i], angle[i], sd);
    out[2 * i] = pair[0];
    out[2 * i + 1] = pair[1];
  }
}

}  // namespace attncheck::streams
