// libFuzzer target for the safetensors reader: any byte string must either parse into a consistent header
// whose every element can be read, or raise InputError. Anything else (crash, sanitizer report, other
// exception) is a bug.

#include "attncheck/probes/safetensors.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attncheck::probes;
  const std::span<const std::byte> image{reinterpret_cast<const std::byte*>(data), size};
  try {
    const SafetensorsHeader header = parse_safetensors(image, "fuzz-input");
    const std::size_t data_size = size - header.data_begin;
    double sum = 0;
    for (const TensorInfo& tensor : header.tensors) {
      if (tensor.begin > tensor.end || tensor.end > data_size) std::abort();
      const std::size_t element = dtype_size(tensor.dtype);
      if (static_cast<std::size_t>(tensor.element_count()) * element != tensor.end - tensor.begin) std::abort();
      for (std::size_t at = tensor.begin; at < tensor.end; at += element) {
        sum += element_to_double(tensor.dtype, image.data() + header.data_begin + at);
      }
    }
    (void)sum;
  } catch (const InputError&) {
  }
  return 0;
}
