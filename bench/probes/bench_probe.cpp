// Times one probe of MODEL on the first N tokens of a text file, by phase: opening the checkpoint, tokenizing,
// the forward pass through every layer, and the norms of every head. Prints one JSON object: wall seconds, and
// the forward's and norms' process CPU seconds (which other work on a shared machine disturbs less).
// Usage: bench_probe MODEL TEXT_FILE N

#include "attncheck/probes/live_metrics.hpp"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

int main(int argc, char** argv) {
  using namespace attncheck::probes;
  using Clock = std::chrono::steady_clock;
  if (argc != 4) {
    fmt::print(stderr, "usage: bench_probe MODEL TEXT_FILE N\n");
    return 2;
  }
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  try {
    std::ifstream in(argv[2]);
    std::stringstream text;
    text << in.rdbuf();
    const auto t0 = Clock::now();
    const auto model = TransformerModel::load(argv[1]);
    const auto t1 = Clock::now();
    auto ids = tokenize_for_model(argv[1], model, text.str());
    const auto n = static_cast<std::size_t>(std::stoll(argv[3]));
    if (ids.size() < n) throw InputError(fmt::format("{} has only {} tokens", argv[2], ids.size()));
    ids.resize(n);
    const auto t2 = Clock::now();
    const std::clock_t c2 = std::clock();
    const auto layers = model.forward(ids);
    const auto t3 = Clock::now();
    const std::clock_t c3 = std::clock();
    double checksum = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      std::vector<HeadMetrics> heads;
      for (int h = 0; h < model.config().heads; ++h) heads.push_back(measure_head(layers[l], static_cast<int>(l), h));
      set_group_key_derivatives(layers[l], heads);
      for (const auto& m : heads) checksum += m.softmax.value;
    }
    const auto t4 = Clock::now();
    const std::clock_t c4 = std::clock();
    const auto cpu = [](std::clock_t a, std::clock_t b) { return static_cast<double>(b - a) / CLOCKS_PER_SEC; };
    fmt::print(
        "{{\"N\": {}, \"load_s\": {:.4f}, \"tokenize_s\": {:.4f}, \"forward_s\": {:.4f}, \"norms_s\": {:.4f}, "
        "\"forward_cpu_s\": {:.4f}, \"norms_cpu_s\": {:.4f}, \"softmax_fro_sum\": {:.12g}}}\n",
        n, seconds(t0, t1), seconds(t1, t2), seconds(t2, t3), seconds(t3, t4), cpu(c2, c3), cpu(c3, c4), checksum);
  } catch (const InputError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  return 0;
}
