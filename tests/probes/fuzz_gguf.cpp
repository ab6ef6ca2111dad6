// libFuzzer target for the GGUF reader: any byte string must either parse into a consistent header whose
// every tensor of a supported type can be dequantized, or raise InputError. Anything else (crash, sanitizer
// report, other exception) is a bug.

#include "attncheck/probes/gguf.hpp"

#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attncheck::probes;
  const std::span<const std::byte> image{reinterpret_cast<const std::byte*>(data), size};
  try {
    const GgufHeader header = parse_gguf(image, "fuzz-input");
    const std::size_t data_size = size - header.data_begin;
    double sum = 0;
    for (const TensorInfo& tensor : header.tensors) {
      if (tensor.begin > tensor.end || tensor.end > data_size) std::abort();
      const auto count = static_cast<std::size_t>(tensor.element_count());
      const std::byte* bytes = image.data() + header.data_begin + tensor.begin;
      if (tensor.block) {
        if (count % tensor.block->elements != 0) std::abort();
        if (count / tensor.block->elements * tensor.block->bytes != tensor.end - tensor.begin) std::abort();
        if (!tensor.block->decode) continue;
        std::vector<double> values(tensor.block->elements);
        for (std::size_t at = 0; at < tensor.end - tensor.begin; at += tensor.block->bytes) {
          tensor.block->decode(bytes + at, values.data());
          for (double v : values) sum += v;
        }
      } else {
        if (count * dtype_size(tensor.dtype) != tensor.end - tensor.begin) std::abort();
        for (std::size_t at = 0; at < tensor.end - tensor.begin; at += dtype_size(tensor.dtype)) {
          sum += element_to_double(tensor.dtype, bytes + at);
        }
      }
    }
    (void)sum;
  } catch (const InputError&) {
  }
  return 0;
}
