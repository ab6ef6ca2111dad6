#pragma once
// Reading of llama.cpp's GGUF files (versions 2 and 3; little-endian): the magic "GGUF", the version, the
// tensor and metadata counts, the metadata key/values (every value type, arrays nested), the tensor infos
// (name, dimensions innermost first, ggml type, offset), then the tensor data, aligned to general.alignment
// (32 by default). Read like safetensors files (by pread, never mapped) and held to the same rules: every
// malformed input is an InputError naming the file and, where there is one, the tensor or key.
//
// Tensors are described in the readers' common TensorInfo with their shape outermost first (GGUF's
// dimensions reversed), so a GGUF weight has the shape of the PyTorch tensor it was converted from. F32, F16
// and BF16 are plain element types; the block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, Q8_K and IQ4_NL (the K-quant files' fallback) are dequantized exactly as ggml does (in
// float32, then widened); every other ggml type (the other IQ, the TQ and FP4 formats) is known by its name and
// size, so the file still validates, and refused with its name when one of its tensors is read.

#include "attncheck/probes/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace attncheck::probes {

// ggml's quantized (and other non-plain) tensor types: `elements` values stored in `bytes` bytes. `decode`
// writes the block's values; it is null for the types that are recognised but not supported.
struct BlockFormat {
  std::string_view name;
  std::uint32_t ggml_type = 0;
  std::size_t elements = 1, bytes = 0;
  void (*decode)(const std::byte* block, double* out) = nullptr;
};

// The block formats (and other ggml types) by ggml type id; nullptr when the id is unknown.
const BlockFormat* block_format(std::uint32_t ggml_type);
// The names of the ggml types whose tensors are read (plain or dequantized), for messages.
std::vector<std::string_view> readable_ggml_types();

enum class GgufType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
std::string_view gguf_type_name(GgufType type);

// An array as the file holds it: its elements' bytes after the element type and the count (numbers and BOOLs
// little-endian; strings and inner arrays each with their lengths), checked when the file was read and decoded only
// when asked for. It takes its bytes in the file, where a value each took about fifty bytes (a 100 MB array of UINT8
// took 4.85 GB; 36 MB of one-letter strings 188 MB, and of one-element arrays 216 MB).
struct GgufArray {
  std::uint64_t count = 0;
  std::vector<std::byte> bytes;
  // Where every 64th element starts in `bytes`, for arrays of strings or of arrays (whose elements differ in size):
  // element k is found by walking at most 63 elements.
  std::vector<std::uint64_t> marks;
};

struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType element_type = GgufType::u8;  // for arrays
  // Unsigned integers as uint64, signed as int64, floats as double, then bool, string, and an array of any type.
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, GgufArray> data;

  // The number of elements of an array (0 for a single value), and element k as a value of its own.
  std::size_t size() const;
  GgufValue element(std::size_t k) const;
};

struct GgufHeader {
  std::string source;  // the file, for messages
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<TensorInfo> tensors;  // in file order of their data; begin/end relative to data_begin
  std::size_t data_begin = 0;

  const GgufValue* find(std::string_view key) const;
  // Typed reads: errors name the file and the key (absent, or of another type). Any integer type of the right
  // sign and range is accepted where an integer is asked for; F32 and F64 where a number is.
  std::uint64_t unsigned_integer(std::string_view key) const;
  double number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  const std::string& string(std::string_view key) const;
  // An array of strings, decoded now (its memory checked against the budget first).
  std::vector<std::string> strings(std::string_view key) const;
};

// Validates a whole file image: magic, version 2 or 3, every length and count within the file (and what the
// metadata takes in memory within the memory budget, records/memory_budget.hpp), value types known, arrays nested
// at most 16 deep, no duplicate keys or tensor names, 1-4 dimensions, known ggml types,
// rows that are whole blocks, alignment a power of two, offsets aligned, data inside the file and not
// overlapping. Needs no file: the fuzz target calls it directly.
GgufHeader parse_gguf(std::span<const std::byte> image, const std::string& source);

// An open GGUF file: metadata and tensor infos read and validated at once, tensor bytes when asked for.
class GgufFile : public TensorFile {
 public:
  explicit GgufFile(const std::filesystem::path& path);
  const std::filesystem::path& path() const override { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const override { return header_.tensors; }
  void read(const TensorInfo& tensor, std::uint64_t offset, std::span<std::byte> out) const override;
  const GgufHeader& header() const { return header_; }

 private:
  records::InputFile file_;
  GgufHeader header_;
};

}  // namespace attncheck::probes
