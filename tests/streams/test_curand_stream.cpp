// Pins PhiloxStream's raw 32-bit words to cuRAND's host Philox4x32-10 generator (no GPU needed). Returns 77
// (CTest: skipped) when the build found no libcurand.
#include "attncheck/streams/random_stream.hpp"
#include "philox_known_answers.hpp"

#include <cstdio>
#include <vector>

#if defined(ATTNCHECK_HAVE_CURAND)
#include <curand.h>
#endif

using attncheck::testing::kCurandHostSubsequences;
using attncheck::testing::kPhiloxKnownAnswers;

int main() {
#if !defined(ATTNCHECK_HAVE_CURAND)
  std::puts("skipped: libcurand was not found at configure time, so the Philox stream is not pinned to cuRAND");
  return 77;
#else
  // The host generator lays out its output as GPU threads do: word block k comes from subsequence k at
  // counter 0 (docs/design.md, "Random streams": {0,0,0,0} then {0,0,1,0}), i.e. from curand_init(seed, k, 0).
  constexpr std::size_t kBlocks = 256;
  std::vector<unsigned int> words(4 * kBlocks);
  curandGenerator_t gen;
  if (curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS ||
      curandSetPseudoRandomGeneratorSeed(gen, 1234) != CURAND_STATUS_SUCCESS ||
      curandGenerate(gen, words.data(), words.size()) != CURAND_STATUS_SUCCESS) {
    std::puts("FAIL: cuRAND's host Philox generator could not be created or run");
    return 1;
  }
  curandDestroyGenerator(gen);
  int failures = 0;
  for (std::size_t k = 0; k < kBlocks; ++k) {
    attncheck::streams::PhiloxStream stream(1234, k);
    const auto block = stream.next_block();
    for (int w = 0; w < 4; ++w) {
      if (block[w] != words[4 * k + w] && failures++ < 10) {
        std::printf("FAIL: subsequence %zu word %d: PhiloxStream %u, cuRAND %u\n", k, w, block[w], words[4 * k + w]);
      }
    }
  }
  // The fixed table that test_random_stream checks without libcurand must be cuRAND's own words, or a CPU-only
  // build would pin the stream to something else.
  int table_failures = 0;
  for (const auto& known : kPhiloxKnownAnswers) {
    std::vector<unsigned int> table_words(4 * (std::size_t{known.block} + 1) * kCurandHostSubsequences);
    if (curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS ||
        curandSetPseudoRandomGeneratorSeed(gen, known.seed) != CURAND_STATUS_SUCCESS ||
        curandGenerate(gen, table_words.data(), table_words.size()) != CURAND_STATUS_SUCCESS) {
      std::puts("FAIL: cuRAND's host Philox generator could not be created or run");
      return 1;
    }
    curandDestroyGenerator(gen);
    const std::size_t at = 4 * (std::size_t{known.block} * kCurandHostSubsequences + known.subsequence);
    for (int w = 0; w < 4; ++w) {
      if (table_words[at + w] != known.words[w] && table_failures++ < 10) {
        std::printf("FAIL: seed %llu subsequence %u block %u word %d: cuRAND %u, the known-answer table %u\n",
                    static_cast<unsigned long long>(known.seed), known.subsequence, known.block, w, table_words[at + w],
                    known.words[w]);
      }
    }
  }
  failures += table_failures;
  if (failures) return 1;
  std::printf(
      "PhiloxStream matches cuRAND's host Philox generator on %zu blocks of subsequences 0..%zu, and so does "
      "the known-answer table (%zu entries)\n",
      kBlocks, kBlocks - 1, kPhiloxKnownAnswers.size());
  return 0;
#endif
}
