// Writes tensors of a GGUF file as the probes' reader dequantizes them (F64 safetensors), for the comparison
// with the gguf package (torch_reference.py dequant).
// Usage: dump_gguf FILE.gguf OUT.safetensors [--rows K] [NAME ...]   (default: every 1-D and 2-D tensor of a
// supported type; --rows keeps the first K rows of 2-D tensors)

#include "attncheck/probes/gguf.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace attncheck::probes;
  if (argc < 3) {
    fmt::print(stderr, "usage: dump_gguf FILE.gguf OUT.safetensors [--rows K] [NAME ...]\n");
    return 2;
  }
  try {
    const auto checkpoint = Checkpoint::open(argv[1]);
    std::int64_t row_limit = -1;
    std::vector<std::string> names;
    for (int k = 3; k < argc; ++k) {
      if (std::string(argv[k]) == "--rows" && k + 1 < argc) {
        row_limit = std::stoll(argv[++k]);
      } else {
        names.emplace_back(argv[k]);
      }
    }
    if (names.empty()) {
      for (const auto& name : checkpoint.names()) {
        const auto& info = checkpoint.info(name);
        if (info.shape.size() <= 2 && (!info.block || info.block->decode)) names.push_back(name);
      }
    }
    std::vector<NamedTensor> out;
    for (const auto& name : names) {
      const auto& info = checkpoint.info(name);
      NamedTensor tensor{name, info.shape, {}, DType::F64};
      if (info.shape.size() == 1) {
        const Vector v = checkpoint.vector(name);
        tensor.values.assign(v.data(), v.data() + v.size());
      } else {
        const std::int64_t rows = row_limit >= 0 ? std::min(row_limit, info.shape[0]) : info.shape[0];
        std::vector<std::int64_t> ids(static_cast<std::size_t>(rows));
        for (std::int64_t r = 0; r < rows; ++r) ids[static_cast<std::size_t>(r)] = r;
        const Matrix m = checkpoint.rows(name, ids);
        tensor.shape[0] = rows;
        tensor.values.assign(m.data(), m.data() + m.size());
      }
      out.push_back(std::move(tensor));
    }
    write_safetensors(argv[2], out);
  } catch (const InputError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  return 0;
}
