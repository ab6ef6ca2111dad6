#pragma once
// Where each normal pair of a sample's stream lands. The CPU draws a sample sequentially (draw_sample in
// cpu_backend.hpp: X (N x D, row-major), then Q, then K (D x d, row-major), then for C9 W_V (D x d_v), each
// matrix starting on a fresh
// pair, an odd count discarding its spare draw). The GPU draws every pair in its own thread, at stream
// position `pair` (curand_init(seed, k, 4 * pair) is the same state as curand_init(seed, k, 0) followed by
// `pair` calls of curand4), and uses this map to put it where the CPU would have. One definition for both,
// so the host tests of this map pin the kernel's order to the CPU's.

#include "attncheck/theory/host_device.hpp"

#include <cstdint>

namespace attncheck::gpu {

enum class DrawTarget : int { X = 0, Q, K, W_V };

struct NormalSlot {
  DrawTarget target = DrawTarget::X;
  std::int64_t element = 0;  // row-major index, in the target matrix, of the pair's first draw
  int count = 2;             // 1 when the pair's second draw is the discarded spare
};

struct NormalLayout {
  std::int64_t x_count = 0, q_count = 0, k_count = 0;  // N * D, D * d, D * d
  std::int64_t w_count = 0;                            // D * d_v for C9, else 0

  ATTNCHECK_HD static std::int64_t pairs(std::int64_t count) { return (count + 1) / 2; }
  ATTNCHECK_HD std::int64_t total_pairs() const {
    return pairs(x_count) + pairs(q_count) + pairs(k_count) + pairs(w_count);
  }

  // The slot of pair number `pair` (0 <= pair < total_pairs()).
  ATTNCHECK_HD NormalSlot slot(std::int64_t pair) const {
    NormalSlot s;
    std::int64_t count = x_count;
    if (pair >= pairs(x_count)) {
      pair -= pairs(x_count);
      s.target = DrawTarget::Q;
      count = q_count;
      if (pair >= pairs(q_count)) {
        pair -= pairs(q_count);
        s.target = DrawTarget::K;
        count = k_count;
        if (pair >= pairs(k_count)) {
          pair -= pairs(k_count);
          s.target = DrawTarget::W_V;
          count = w_count;
        }
      }
    }
    s.element = 2 * pair;
    s.count = s.element + 1 < count ? 2 : 1;
    return s;
  }
};

}  // namespace attncheck::gpu
