// Times one probe of MODEL on the first N tokens of a text file, or on the pixels of a .npy file (a vision model; N is
// then its 1 + patches), by phase: opening the checkpoint, tokenizing (or reading and embedding the pixels), the
// forward pass through every layer (streamed, as `attncheck probe` runs it: each layer measured as it is computed,
// then released, its weights read as it starts), and the norms of the heads (every layer's, or LAYER's
// alone, on THREADS threads). PRECISION is the forward's (`probe --precision`). Prints one JSON object: wall seconds,
// the forward's and norms' process CPU seconds (which other work on a shared machine disturbs less), and the float32
// kernels a mixed forward runs on ("avx512" or "portable").
// Usage: bench_probe MODEL INPUT N [LAYER [THREADS [PRECISION]]]   (LAYER -1: every layer, the default; THREADS 1;
//        PRECISION double or mixed, default double)

#include "attncheck/probes/float_kernels.hpp"
#include "attncheck/probes/image.hpp"
#include "attncheck/probes/live_metrics.hpp"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <numeric>
#include <sstream>

int main(int argc, char** argv) {
  using namespace attncheck::probes;
  using Clock = std::chrono::steady_clock;
  if (argc < 4 || argc > 7) {
    fmt::print(stderr, "usage: bench_probe MODEL INPUT N [LAYER [THREADS [double|mixed]]]\n");
    return 2;
  }
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  keep_freed_matrices_in_heap();  // as the CLI runs
  try {
    const std::string input = argv[2];
    // The arguments are checked before anything is loaded.
    const auto whole_number = [](const char* text, const char* what) {
      std::size_t used = 0;
      long long value = 0;
      try {
        value = std::stoll(text, &used);
      } catch (const std::logic_error&) {
        used = 0;
      }
      if (used == 0 || used != std::string_view(text).size()) {
        throw InputError(fmt::format("{} = '{}' is not a whole number", what, text));
      }
      return value;
    };
    const long long length = whole_number(argv[3], "N");
    if (length <= 0) throw InputError(fmt::format("N = {} is not positive", length));
    const auto n = static_cast<std::size_t>(length);
    const int only_layer = argc > 4 ? static_cast<int>(whole_number(argv[4], "LAYER")) : -1;
    const int threads = argc > 5 ? static_cast<int>(whole_number(argv[5], "THREADS")) : 1;
    const std::string precision = argc > 6 ? argv[6] : "double";
    if (precision != "double" && precision != "mixed") {
      throw InputError(fmt::format("precision '{}' is neither double nor mixed", precision));
    }
    const auto t0 = Clock::now();
    const auto model = TransformerModel::load(argv[1]);
    const auto t1 = Clock::now();
    Matrix embeddings;
    if (input.ends_with(".npy")) {
      embeddings = model.embed_pixels(read_pixels(input));
    } else {
      std::ifstream in(input);
      std::stringstream text;
      text << in.rdbuf();
      auto ids = tokenize_for_model(argv[1], model, text.str());
      if (ids.size() < n) throw InputError(fmt::format("{} has only {} tokens", input, ids.size()));
      ids.resize(n);
      embeddings = model.embed_tokens(ids);
    }
    if (static_cast<std::size_t>(embeddings.rows()) != n) {
      throw InputError(fmt::format("{} gives N = {}, not {}", input, embeddings.rows(), n));
    }
    std::vector<int> all_heads(static_cast<std::size_t>(model.config().heads));
    std::iota(all_heads.begin(), all_heads.end(), 0);
    const auto t2 = Clock::now();
    const std::clock_t c2 = std::clock();
    double checksum = 0, norms_s = 0, norms_cpu_s = 0;
    LayerSink sink;
    sink.keep_attention = false;
    sink.float32_products = precision == "mixed";
    sink.receive = [&](LayerInputs& layer, std::int64_t index) {
      if (only_layer >= 0 && index != only_layer) return;
      const auto start = Clock::now();
      const std::clock_t start_cpu = std::clock();
      for (const auto& m : measure_layer(layer, static_cast<int>(index), all_heads, false, threads)) {
        checksum += m.softmax.value;
      }
      norms_s += seconds(start, Clock::now());
      norms_cpu_s += static_cast<double>(std::clock() - start_cpu) / CLOCKS_PER_SEC;
    };
    model.forward_embeddings(std::move(embeddings), only_layer >= 0 ? std::vector<int>{only_layer} : std::vector<int>{},
                             sink);
    const auto t4 = Clock::now();
    const std::clock_t c4 = std::clock();
    const auto cpu = [](std::clock_t a, std::clock_t b) { return static_cast<double>(b - a) / CLOCKS_PER_SEC; };
    fmt::print(
        "{{\"N\": {}, \"load_s\": {:.4f}, \"input_s\": {:.4f}, \"forward_s\": {:.4f}, \"norms_s\": {:.4f}, "
        "\"forward_cpu_s\": {:.4f}, \"norms_cpu_s\": {:.4f}, \"softmax_fro_sum\": {:.12g}, \"float_kernels\": "
        "\"{}\"}}\n",
        n, seconds(t0, t1), seconds(t1, t2), seconds(t2, t4) - norms_s, norms_s, cpu(c2, c4) - norms_cpu_s, norms_cpu_s,
        checksum, float_kernels::instruction_set());
  } catch (const InputError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  return 0;
}
