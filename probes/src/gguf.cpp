#include "attncheck/probes/gguf.hpp"

#include "attncheck/records/memory_budget.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>

namespace attncheck::probes {

namespace {

static_assert(std::endian::native == std::endian::little, "GGUF files are read as little-endian");

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian word
constexpr int kMaxDimensions = 4;             // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;

template <class T>
T load(const std::byte* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

float half_at(const std::byte* p) { return static_cast<float>(element_to_double(DType::F16, p)); }
int byte_at(const std::byte* p, int k) { return std::to_integer<int>(p[k]); }

// ggml's reference dequantization (ggml-quants.c, dequantize_row_*), in float32 with ggml's order of operations,
// then widened exactly. A half-precision scale (11 significant bits) times the block's small integers needs at
// most 24 bits, so it is exact in float32: float32 rounds only where ggml's does, where a minimum is added or
// subtracted (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) and where Q8_K's float32 scale multiplies its quant.
void decode_q8_0(const std::byte* block, double* out) {
  const float d = half_at(block);
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(block[2 + j])) * d;
}

void decode_q4_0(const std::byte* block, double* out) {
  const float d = half_at(block);
  for (int j = 0; j < 16; ++j) {
    const auto q = byte_at(block, 2 + j);
    out[j] = static_cast<float>((q & 0x0f) - 8) * d;
    out[j + 16] = static_cast<float>((q >> 4) - 8) * d;
  }
}

void decode_q4_1(const std::byte* block, double* out) {
  const float d = half_at(block), m = half_at(block + 2);
  for (int j = 0; j < 16; ++j) {
    const auto q = byte_at(block, 4 + j);
    const float low = static_cast<float>(q & 0x0f) * d, high = static_cast<float>(q >> 4) * d;
    out[j] = low + m;
    out[j + 16] = high + m;
  }
}

// Q5_0 and Q5_1: the fifth bit of element j is bit j of a 32-bit word after the scale(s).
void decode_q5_0(const std::byte* block, double* out) {
  const float d = half_at(block);
  const auto high = load<std::uint32_t>(block + 2);
  for (int j = 0; j < 16; ++j) {
    const auto q = byte_at(block, 6 + j);
    const int low = static_cast<int>((q & 0x0f) | (((high >> j) & 1) << 4));
    const int up = static_cast<int>((q >> 4) | (((high >> (j + 16)) & 1) << 4));
    out[j] = static_cast<float>(low - 16) * d;
    out[j + 16] = static_cast<float>(up - 16) * d;
  }
}

void decode_q5_1(const std::byte* block, double* out) {
  const float d = half_at(block), m = half_at(block + 2);
  const auto high = load<std::uint32_t>(block + 4);
  for (int j = 0; j < 16; ++j) {
    const auto q = byte_at(block, 8 + j);
    const float low = static_cast<float>((q & 0x0f) | (((high >> j) & 1) << 4)) * d;
    const float up = static_cast<float>((q >> 4) | (((high >> (j + 16)) & 1) << 4)) * d;
    out[j] = low + m;
    out[j + 16] = up + m;
  }
}

// The K-quants: super-blocks of 256 (ggml's QK_K) in sub-blocks of 16 or 32, each with its own small integer
// scale (and minimum) times the super-block's.

// Q2_K: 16 bytes of 4-bit scale (low) and minimum (high) per 16 values, 2-bit quants four to a byte, then d and
// dmin. Each 32 bytes of quants hold 128 values: the byte's bit pairs 0-1, 2-3, 4-5, 6-7 in turn.
void decode_q2_k(const std::byte* block, double* out) {
  const std::byte* scales = block;
  const float d = half_at(block + 80), dmin = half_at(block + 82);
  int sub = 0;
  for (int half = 0; half < 2; ++half) {
    const std::byte* q = block + 16 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++sub) {
        const int sc = byte_at(scales, sub);
        const float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          const float scaled = dl * static_cast<float>((byte_at(q, 16 * part + l) >> shift) & 3);
          *out++ = scaled - ml;
        }
      }
    }
  }
}

// Q3_K: a high-bit mask (32 bytes, bit b of byte l for the b-th run of 32 values), 2-bit quants as Q2_K's, then
// sixteen 6-bit scales packed in 12 bytes (low nibbles in bytes 0-7, high bit pairs in bytes 8-11), then d.
// A clear high bit subtracts 4, so quants run from -4 to 3; scales are stored plus 32.
void decode_q3_k(const std::byte* block, double* out) {
  const std::byte* mask = block;
  const std::byte* packed_scales = block + 96;
  const float d = half_at(block + 108);
  std::array<int, 16> scales{};
  for (int k = 0; k < 16; ++k) {
    const int low = k < 8 ? byte_at(packed_scales, k) & 0x0f : byte_at(packed_scales, k - 8) >> 4;
    const int high = (byte_at(packed_scales, 8 + k % 4) >> (2 * (k / 4))) & 3;
    scales[static_cast<std::size_t>(k)] = (low | (high << 4)) - 32;
  }
  int sub = 0, bit = 0;
  for (int half = 0; half < 2; ++half) {
    const std::byte* q = block + 32 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2, ++bit) {
      for (int part = 0; part < 2; ++part, ++sub) {
        const float dl = d * static_cast<float>(scales[static_cast<std::size_t>(sub)]);
        for (int l = 0; l < 16; ++l) {
          const int at = 16 * part + l;
          const int value = ((byte_at(q, at) >> shift) & 3) - (((byte_at(mask, at) >> bit) & 1) ? 0 : 4);
          *out++ = dl * static_cast<float>(value);
        }
      }
    }
  }
}

// Q4_K's and Q5_K's scale and minimum of sub-block j (of 8), 6 bits each in 12 bytes (ggml's get_scale_min_k4):
// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums); sub-blocks 4-7 in the nibbles of
// bytes 8-11 with their top two bits in the top bits of bytes 0-7.
std::pair<int, int> scale_min_k4(int j, const std::byte* scales) {
  if (j < 4) return {byte_at(scales, j) & 63, byte_at(scales, j + 4) & 63};
  return {(byte_at(scales, j + 4) & 0x0f) | ((byte_at(scales, j - 4) >> 6) << 4),
          (byte_at(scales, j + 4) >> 4) | ((byte_at(scales, j) >> 6) << 4)};
}

// Q4_K and Q5_K: d, dmin, the packed scales, (Q5_K: a fifth bit per value, bit 2c or 2c + 1 of byte l for the
// chunk c of 64 values,) then 4-bit quants: each 32 bytes hold 64 values, low nibbles first.
void decode_q45_k(const std::byte* block, double* out, const std::byte* fifth_bits) {
  const float d = half_at(block), dmin = half_at(block + 2);
  const std::byte* scales = block + 4;
  const std::byte* qs = block + (fifth_bits ? 48 : 16);
  for (int chunk = 0; chunk < 4; ++chunk) {
    const std::byte* q = qs + 32 * chunk;
    for (int nibble = 0; nibble < 2; ++nibble) {
      const int sub = 2 * chunk + nibble;
      const auto [sc, m] = scale_min_k4(sub, scales);
      const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        int value = (byte_at(q, l) >> (4 * nibble)) & 0x0f;
        if (fifth_bits) value |= ((byte_at(fifth_bits, l) >> sub) & 1) << 4;
        const float scaled = dl * static_cast<float>(value);
        *out++ = scaled - ml;
      }
    }
  }
}
void decode_q4_k(const std::byte* block, double* out) { decode_q45_k(block, out, nullptr); }
void decode_q5_k(const std::byte* block, double* out) { decode_q45_k(block, out, block + 16); }

// Q6_K: low nibbles (128 bytes), high bit pairs (64 bytes), sixteen int8 scales, then d. Each half of 128 values
// takes 64 bytes of nibbles (values l and l + 64 from byte l, l + 32 and l + 96 from byte l + 32) and 32 bytes of
// bit pairs (pairs 0, 1, 2, 3 of byte l for values l, l + 32, l + 64, l + 96); quants are stored plus 32.
void decode_q6_k(const std::byte* block, double* out) {
  const float d = half_at(block + 208);
  for (int half = 0; half < 2; ++half) {
    const std::byte* ql = block + 64 * half;
    const std::byte* qh = block + 128 + 32 * half;
    const std::byte* scales = block + 192 + 8 * half;
    double* y = out + 128 * half;
    for (int l = 0; l < 32; ++l) {
      for (int k = 0; k < 4; ++k) {
        const int low = (byte_at(ql, l + 32 * (k % 2)) >> (4 * (k / 2))) & 0x0f;
        const int value = (low | (((byte_at(qh, l) >> (2 * k)) & 3) << 4)) - 32;
        const float dl = d * static_cast<float>(static_cast<std::int8_t>(scales[l / 16 + 2 * k]));
        y[l + 32 * k] = dl * static_cast<float>(value);
      }
    }
  }
}

// IQ4_NL: Q4_0's layout, the nibbles indexing a non-linear grid of 16 int8 values (ggml's kvalues_iq4nl).
// llama.cpp writes it for the tensors of Q2_K and Q3_K files whose rows are not whole super-blocks.
void decode_iq4_nl(const std::byte* block, double* out) {
  constexpr std::array<int, 16> kGrid = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const float d = half_at(block);
  for (int j = 0; j < 16; ++j) {
    const auto q = static_cast<std::size_t>(byte_at(block, 2 + j));
    out[j] = d * static_cast<float>(kGrid[q & 0x0f]);
    out[j + 16] = d * static_cast<float>(kGrid[q >> 4]);
  }
}

// Q8_K: a float32 scale and 256 int8 quants (then 16 sums of 16 quants, which only ggml's dot products use).
void decode_q8_k(const std::byte* block, double* out) {
  const auto d = load<float>(block);
  for (int j = 0; j < 256; ++j) out[j] = d * static_cast<float>(static_cast<std::int8_t>(block[4 + j]));
}

// Every ggml type GGUF files use today (ggml.h's numbering; the gaps are types ggml has retired). F32, F16 and
// BF16 are read as plain element types; the rest are blocks.
constexpr BlockFormat kFormats[] = {
    {"F32", 0, 1, 4},
    {"F16", 1, 1, 2},
    {"Q4_0", 2, 32, 18, decode_q4_0},
    {"Q4_1", 3, 32, 20, decode_q4_1},
    {"Q5_0", 6, 32, 22, decode_q5_0},
    {"Q5_1", 7, 32, 24, decode_q5_1},
    {"Q8_0", 8, 32, 34, decode_q8_0},
    {"Q8_1", 9, 32, 40},
    {"Q2_K", 10, 256, 84, decode_q2_k},
    {"Q3_K", 11, 256, 110, decode_q3_k},
    {"Q4_K", 12, 256, 144, decode_q4_k},
    {"Q5_K", 13, 256, 176, decode_q5_k},
    {"Q6_K", 14, 256, 210, decode_q6_k},
    {"Q8_K", 15, 256, 292, decode_q8_k},
    {"IQ2_XXS", 16, 256, 66},
    {"IQ2_XS", 17, 256, 74},
    {"IQ3_XXS", 18, 256, 98},
    {"IQ1_S", 19, 256, 50},
    {"IQ4_NL", 20, 32, 18, decode_iq4_nl},
    {"IQ3_S", 21, 256, 110},
    {"IQ2_S", 22, 256, 82},
    {"IQ4_XS", 23, 256, 136},
    {"I8", 24, 1, 1},
    {"I16", 25, 1, 2},
    {"I32", 26, 1, 4},
    {"I64", 27, 1, 8},
    {"F64", 28, 1, 8},
    {"IQ1_M", 29, 256, 56},
    {"BF16", 30, 1, 2},
    {"TQ1_0", 34, 256, 54},
    {"TQ2_0", 35, 256, 66},
    {"MXFP4", 39, 32, 17},
    {"NVFP4", 40, 64, 36},
    {"Q1_0", 41, 128, 18},
};

std::optional<DType> plain_dtype(std::uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

// Fills a buffer with the bytes at an offset of the file (or of an image in memory).
using ReadAt = std::function<void(std::uint64_t offset, std::span<std::byte> out)>;

// A bounds-checked cursor over a file of `size` bytes, read through a window of at least 1 MiB so that the
// thousands of small metadata values (a tokenizer's vocabulary) cost few reads; every failure names the file and
// what was being read.
class Cursor {
 public:
  Cursor(std::uint64_t size, ReadAt read_at, const std::string& source)
      : size_(size), read_at_(std::move(read_at)), source_(source) {}

  std::uint64_t size() const { return size_; }
  std::uint64_t offset() const { return at_; }
  std::uint64_t remaining() const { return size_ - at_; }

  // Messages name `what` followed by `detail`, joined only when one is written: an array's millions of elements
  // are read with the same words.
  template <class T>
  T read(std::string_view what, std::string_view detail = {}) {
    T value;
    read_into(std::as_writable_bytes(std::span(&value, 1)), what, detail);
    return value;
  }

  void read_into(std::span<std::byte> out, std::string_view what, std::string_view detail = {}) {
    need(out.size(), what, detail);
    std::memcpy(out.data(), window(out.size()), out.size());
    at_ += out.size();
  }

  std::string read_string(std::string_view what) {
    const auto bytes = static_cast<std::size_t>(string_length(what));
    std::string out(reinterpret_cast<const char*>(window(bytes)), bytes);
    at_ += bytes;
    return out;
  }
  void skip_string(std::string_view what) { at_ += string_length(what); }

  void skip(std::uint64_t length, std::string_view what) {
    need(length, what);
    at_ += length;
  }

  // The bytes from `begin` to the cursor, read again straight into their own buffer.
  std::vector<std::byte> bytes_since(std::uint64_t begin) {
    std::vector<std::byte> out(static_cast<std::size_t>(at_ - begin));
    if (!out.empty()) read_at_(begin, out);
    return out;
  }

  // `length` bytes from the cursor on, read straight into their own buffer.
  std::vector<std::byte> read_bytes(std::uint64_t length, const std::string& what) {
    need(length, what);
    std::vector<std::byte> out(static_cast<std::size_t>(length));
    if (length > 0) read_at_(at_, out);
    at_ += length;
    return out;
  }

  InputError error(const std::string& what) const { return InputError(fmt::format("{}: {}", source_, what)); }

 private:
  static constexpr std::size_t kWindowBytes = std::size_t{1} << 20;

  void need(std::uint64_t bytes, std::string_view what, std::string_view detail = {}) const {
    if (bytes > remaining()) {
      throw error(fmt::format("{}{} at byte {} runs beyond the end of the file ({} bytes)", what, detail, at_, size_));
    }
  }
  // A string's length, read and checked to lie within the file; the cursor moves past the length.
  std::uint64_t string_length(std::string_view what) {
    const auto length = read<std::uint64_t>(what, " (its length)");
    if (length > remaining()) need(length, what, fmt::format(" ({} bytes)", length));
    return length;
  }
  // The `bytes` bytes at the cursor (already checked to be in the file), refilling the window when needed.
  const std::byte* window(std::size_t bytes) {
    if (at_ < window_begin_ || at_ + bytes > window_begin_ + buffer_.size()) {
      const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(std::max(bytes, kWindowBytes), remaining()));
      buffer_.resize(length);
      read_at_(at_, buffer_);
      window_begin_ = at_;
    }
    return buffer_.data() + (at_ - window_begin_);
  }
  std::uint64_t size_;
  ReadAt read_at_;
  const std::string& source_;
  std::uint64_t at_ = 0;
  std::uint64_t window_begin_ = 0;
  std::vector<std::byte> buffer_;
};

// The fewest bytes one value of a type can take: bounds array counts before anything is allocated.
std::uint64_t smallest_size(GgufType type) {
  switch (type) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean: return 1;
    case GgufType::u16:
    case GgufType::i16: return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32: return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64:
    case GgufType::string: return 8;
    case GgufType::array: return 12;
  }
  return 1;
}

bool known_type(std::uint32_t type) { return type <= static_cast<std::uint32_t>(GgufType::f64); }

bool packed(GgufType type) { return type != GgufType::string && type != GgufType::array; }

// What the metadata will hold in memory, counted before each allocation and held to the memory budget (read once
// per file): a file's counts are checked against its bytes, but a value in memory takes more than in the file.
class MetadataMemory {
 public:
  explicit MetadataMemory(const std::string& source) : source_(source), budget_(records::memory_budget_bytes()) {}
  void add(std::uint64_t bytes, const std::string& key) {
    held_ = records::saturating_sum({held_, bytes});
    if (held_ > budget_) records::require_memory(held_, fmt::format("{}: the metadata up to '{}'", source_, key));
  }

 private:
  const std::string& source_;
  std::uint64_t budget_, held_ = 0;
};

// A number or BOOL from its bytes in the file.
decltype(GgufValue::data) scalar_at(GgufType type, const std::byte* bytes) {
  switch (type) {
    case GgufType::u8: return std::uint64_t{load<std::uint8_t>(bytes)};
    case GgufType::i8: return std::int64_t{load<std::int8_t>(bytes)};
    case GgufType::u16: return std::uint64_t{load<std::uint16_t>(bytes)};
    case GgufType::i16: return std::int64_t{load<std::int16_t>(bytes)};
    case GgufType::u32: return std::uint64_t{load<std::uint32_t>(bytes)};
    case GgufType::i32: return std::int64_t{load<std::int32_t>(bytes)};
    case GgufType::f32: return double{load<float>(bytes)};
    case GgufType::boolean: return load<std::uint8_t>(bytes) != 0;
    case GgufType::u64: return load<std::uint64_t>(bytes);
    case GgufType::i64: return load<std::int64_t>(bytes);
    case GgufType::f64: return load<double>(bytes);
    case GgufType::string:
    case GgufType::array: break;
  }
  throw std::logic_error("scalar_at: not a number or BOOL");
}

// Every 64th element of an array of strings or arrays is marked (GgufArray::marks).
constexpr std::size_t kMarkEvery = 64;

// The bytes taken by the element at `p` of an array of `type`, from bytes checked when the file was read.
std::size_t element_size(GgufType type, const std::byte* p) {
  if (type == GgufType::string) return sizeof(std::uint64_t) + static_cast<std::size_t>(load<std::uint64_t>(p));
  if (type != GgufType::array) return static_cast<std::size_t>(smallest_size(type));
  const auto inner = static_cast<GgufType>(load<std::uint32_t>(p));
  const auto count = static_cast<std::size_t>(load<std::uint64_t>(p + 4));
  std::size_t at = 12;
  if (packed(inner)) return at + count * static_cast<std::size_t>(smallest_size(inner));
  for (std::size_t k = 0; k < count; ++k) at += element_size(inner, p + at);
  return at;
}

GgufArray make_array(GgufType element_type, std::uint64_t count, std::vector<std::byte> bytes) {
  GgufArray out{count, std::move(bytes), {}};
  if (packed(element_type)) return out;
  out.marks.reserve(static_cast<std::size_t>((count + kMarkEvery - 1) / kMarkEvery));
  std::size_t at = 0;
  for (std::uint64_t k = 0; k < count; ++k) {
    if (k % kMarkEvery == 0) out.marks.push_back(at);
    at += element_size(element_type, out.bytes.data() + at);
  }
  return out;
}

// An array's element type and count, the cursor on its first element; `depth` counts the arrays around it.
std::pair<GgufType, std::uint64_t> read_array_head(Cursor& in, const std::string& key, std::string_view what,
                                                   int depth) {
  if (depth >= kMaxArrayDepth) {
    throw in.error(fmt::format("'{}': arrays nested more than {} deep", key, kMaxArrayDepth));
  }
  const auto element_type = in.read<std::uint32_t>(what, " (its element type)");
  if (!known_type(element_type)) throw in.error(fmt::format("'{}': unknown array element type {}", key, element_type));
  const auto type = static_cast<GgufType>(element_type);
  const auto count = in.read<std::uint64_t>(what, " (its length)");
  if (count > in.remaining() / smallest_size(type)) {
    throw in.error(fmt::format("'{}': an array of {} {} values cannot fit in the {} bytes left", key, count,
                               gguf_type_name(type), in.remaining()));
  }
  return {type, count};
}

// Checks an array's elements as they would be read, without holding them, and moves past them.
void skip_elements(Cursor& in, GgufType type, std::uint64_t count, const std::string& key, std::string_view what,
                   int depth) {
  if (packed(type)) {
    in.skip(count * smallest_size(type), what);
    return;
  }
  for (std::uint64_t k = 0; k < count; ++k) {
    if (type == GgufType::string) {
      in.skip_string(what);
    } else {
      const auto [inner, inner_count] = read_array_head(in, key, what, depth + 1);
      skip_elements(in, inner, inner_count, key, what, depth + 1);
    }
  }
}

GgufValue read_value(Cursor& in, GgufType type, const std::string& key, MetadataMemory& memory) {
  GgufValue value;
  value.type = type;
  const std::string what = fmt::format("the value of '{}'", key);
  switch (type) {
    case GgufType::string:
      value.data = in.read_string(what);  // no larger than the file
      memory.add(std::get<std::string>(value.data).size(), key);
      break;
    case GgufType::array: {
      const auto [element_type, count] = read_array_head(in, key, what, 0);
      value.element_type = element_type;
      if (packed(element_type)) {
        const std::uint64_t bytes = count * smallest_size(element_type);
        memory.add(bytes, key);
        value.data = make_array(element_type, count, in.read_bytes(bytes, what));
        break;
      }
      // Walked once to check it and find its end, then read whole: memory for its bytes, not for a value each.
      const std::uint64_t begin = in.offset();
      memory.add((count + kMarkEvery - 1) / kMarkEvery * sizeof(std::uint64_t), key);
      skip_elements(in, element_type, count, key, what, 0);
      memory.add(in.offset() - begin, key);
      value.data = make_array(element_type, count, in.bytes_since(begin));
      break;
    }
    default: {
      std::array<std::byte, 8> bytes{};
      const std::size_t width = smallest_size(type);
      in.read_into(std::span(bytes).first(width), what);
      value.data = scalar_at(type, bytes.data());
    }
  }
  return value;
}

}  // namespace

const BlockFormat* block_format(std::uint32_t ggml_type) {
  for (const auto& format : kFormats) {
    if (format.ggml_type == ggml_type) return &format;
  }
  return nullptr;
}

std::vector<std::string_view> readable_ggml_types() {
  std::vector<std::string_view> out;
  for (const auto& format : kFormats) {
    if (format.decode || plain_dtype(format.ggml_type)) out.push_back(format.name);
  }
  return out;
}

std::string_view gguf_type_name(GgufType type) {
  constexpr std::string_view kNames[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                         "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  const auto index = static_cast<std::size_t>(type);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  const auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

namespace {
const GgufValue& required(const GgufHeader& header, std::string_view key) {
  const GgufValue* value = header.find(key);
  if (!value) throw InputError(fmt::format("{}: no metadata key '{}'", header.source, key));
  return *value;
}

InputError wrong_type(const GgufHeader& header, std::string_view key, const GgufValue& value, std::string_view wanted) {
  return InputError(
      fmt::format("{}: metadata '{}' is {}, not {}", header.source, key, gguf_type_name(value.type), wanted));
}
}  // namespace

std::uint64_t GgufHeader::unsigned_integer(std::string_view key) const {
  const GgufValue& value = required(*this, key);
  if (const auto* u = std::get_if<std::uint64_t>(&value.data)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&value.data)) {
    if (*i >= 0) return static_cast<std::uint64_t>(*i);
    throw InputError(fmt::format("{}: metadata '{}' is {}, not a non-negative integer", source, key, *i));
  }
  throw wrong_type(*this, key, value, "an integer");
}

double GgufHeader::number(std::string_view key) const {
  const GgufValue& value = required(*this, key);
  if (const auto* x = std::get_if<double>(&value.data)) return *x;
  throw wrong_type(*this, key, value, "a FLOAT32 or FLOAT64 number");
}

bool GgufHeader::boolean(std::string_view key) const {
  const GgufValue& value = required(*this, key);
  if (const auto* b = std::get_if<bool>(&value.data)) return *b;
  throw wrong_type(*this, key, value, "a BOOL");
}

const std::string& GgufHeader::string(std::string_view key) const {
  const GgufValue& value = required(*this, key);
  if (const auto* s = std::get_if<std::string>(&value.data)) return *s;
  throw wrong_type(*this, key, value, "a STRING");
}

std::size_t GgufValue::size() const {
  const auto* array = std::get_if<GgufArray>(&data);
  return array ? static_cast<std::size_t>(array->count) : 0;
}

GgufValue GgufValue::element(std::size_t k) const {
  if (k >= size()) throw std::out_of_range(fmt::format("element {} of an array of {}", k, size()));
  const GgufArray& array = std::get<GgufArray>(data);
  GgufValue out;
  out.type = element_type;
  if (packed(element_type)) {
    out.data = scalar_at(element_type, array.bytes.data() + k * smallest_size(element_type));
    return out;
  }
  std::size_t at = static_cast<std::size_t>(array.marks[k / kMarkEvery]);
  for (std::size_t j = k - k % kMarkEvery; j < k; ++j) at += element_size(element_type, array.bytes.data() + at);
  const std::byte* p = array.bytes.data() + at;
  if (element_type == GgufType::string) {
    out.data = std::string(reinterpret_cast<const char*>(p + 8), static_cast<std::size_t>(load<std::uint64_t>(p)));
  } else {
    out.element_type = static_cast<GgufType>(load<std::uint32_t>(p));
    out.data = make_array(out.element_type, load<std::uint64_t>(p + 4),
                          std::vector<std::byte>(p + 12, p + element_size(element_type, p)));
  }
  return out;
}

std::vector<std::string> GgufHeader::strings(std::string_view key) const {
  const GgufValue& value = required(*this, key);
  const auto* array = std::get_if<GgufArray>(&value.data);
  if (!array || value.element_type != GgufType::string) throw wrong_type(*this, key, value, "an ARRAY of STRING");
  records::require_memory(records::saturating_sum(
                              {records::saturating_product({array->count, sizeof(std::string)}), array->bytes.size()}),
                          fmt::format("{}: the {} strings of metadata '{}'", source, array->count, key));
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(array->count));
  for (std::size_t at = 0; at < array->bytes.size();) {
    const auto length = static_cast<std::size_t>(load<std::uint64_t>(array->bytes.data() + at));
    out.emplace_back(reinterpret_cast<const char*>(array->bytes.data() + at + 8), length);
    at += 8 + length;
  }
  return out;
}

namespace {
GgufHeader parse(Cursor& in, const std::string& source) {
  GgufHeader out;
  out.source = source;
  const auto magic = in.read<std::uint32_t>("the magic number");
  if (magic != kMagic) {
    throw in.error(fmt::format("not a GGUF file (it starts with 0x{:08x}, not the magic \"GGUF\")", magic));
  }
  out.version = in.read<std::uint32_t>("the version");
  if (out.version == 1) throw in.error("GGUF version 1 is not supported (versions 2 and 3 are)");
  if (out.version != 2 && out.version != 3) {
    if ((out.version & 0xffff) == 0 && __builtin_bswap32(out.version) <= 3) {
      throw in.error("a big-endian GGUF file, which is not supported (little-endian versions 2 and 3 are)");
    }
    throw in.error(fmt::format("unknown GGUF version {} (versions 2 and 3 are supported)", out.version));
  }
  const auto tensor_count = in.read<std::uint64_t>("the tensor count");
  const auto kv_count = in.read<std::uint64_t>("the metadata count");
  // A key/value takes at least 13 bytes, a tensor info at least 28: counts beyond the file are malformed.
  if (kv_count > in.remaining() / 13) {
    throw in.error(fmt::format("{} metadata entries cannot fit in the {} bytes left", kv_count, in.remaining()));
  }
  MetadataMemory memory(source);
  for (std::uint64_t k = 0; k < kv_count; ++k) {
    std::string key = in.read_string(fmt::format("metadata key {}", k));
    memory.add(key.size() + sizeof(GgufValue) + 64, key);  // the map's node besides key and value
    const auto type = in.read<std::uint32_t>(fmt::format("the type of '{}'", key));
    if (!known_type(type)) throw in.error(fmt::format("'{}': unknown value type {}", key, type));
    GgufValue value = read_value(in, static_cast<GgufType>(type), key, memory);
    if (out.metadata.contains(key)) throw in.error(fmt::format("metadata key '{}' appears twice", key));
    out.metadata.emplace(std::move(key), std::move(value));
  }
  if (const GgufValue* alignment = out.find("general.alignment")) {
    const auto* value = std::get_if<std::uint64_t>(&alignment->data);
    if (alignment->type != GgufType::u32 || !value || *value == 0 || !std::has_single_bit(*value)) {
      throw in.error("general.alignment is not a UINT32 power of two");
    }
    out.alignment = *value;
  }
  if (tensor_count > in.remaining() / 28) {
    throw in.error(fmt::format("{} tensor infos cannot fit in the {} bytes left", tensor_count, in.remaining()));
  }
  memory.add(records::saturating_product({tensor_count, sizeof(TensorInfo) + 2 * sizeof(std::uint64_t) + 64}),
             "the tensor infos");
  std::set<std::string, std::less<>> names;
  std::vector<std::uint64_t> offsets, sizes;
  for (std::uint64_t k = 0; k < tensor_count; ++k) {
    TensorInfo tensor;
    tensor.name = in.read_string(fmt::format("the name of tensor {}", k));
    const auto fail = [&](const std::string& what) {
      return in.error(fmt::format("tensor '{}': {}", tensor.name, what));
    };
    if (!names.insert(tensor.name).second) throw in.error(fmt::format("tensor '{}' appears twice", tensor.name));
    const auto dimensions = in.read<std::uint32_t>(fmt::format("the dimension count of tensor '{}'", tensor.name));
    if (dimensions < 1 || dimensions > kMaxDimensions) {
      throw fail(fmt::format("{} dimensions (1 to {} are allowed)", dimensions, kMaxDimensions));
    }
    std::vector<std::uint64_t> ne(dimensions);
    for (auto& dim : ne) dim = in.read<std::uint64_t>(fmt::format("a dimension of tensor '{}'", tensor.name));
    const auto type = in.read<std::uint32_t>(fmt::format("the type of tensor '{}'", tensor.name));
    const BlockFormat* format = block_format(type);
    if (!format) throw fail(fmt::format("unknown ggml type {}", type));
    const auto offset = in.read<std::uint64_t>(fmt::format("the offset of tensor '{}'", tensor.name));
    if (ne[0] % format->elements != 0) {
      throw fail(
          fmt::format("rows of {} elements are not whole blocks of {} ({})", ne[0], format->elements, format->name));
    }
    // Sizes are compared with the file's as they grow, so the products cannot overflow.
    const std::uint64_t limit = in.size();
    std::uint64_t bytes = ne[0] / format->elements * format->bytes;
    bool too_large = ne[0] > limit;
    for (std::size_t j = 1; j < ne.size() && !too_large; ++j) {
      if (ne[j] != 0 && bytes > limit / ne[j]) too_large = true;
      bytes *= ne[j];
    }
    for (auto dim : ne) too_large = too_large || dim > static_cast<std::uint64_t>(INT64_MAX);
    if (too_large) throw fail(fmt::format("dimensions [{}] need more bytes than the file has", fmt::join(ne, ", ")));
    if (offset % out.alignment != 0) {
      throw fail(fmt::format("offset {} is not a multiple of the alignment {}", offset, out.alignment));
    }
    if (auto dtype = plain_dtype(type)) {
      tensor.dtype = *dtype;
    } else {
      tensor.block = format;
    }
    for (auto it = ne.rbegin(); it != ne.rend(); ++it) tensor.shape.push_back(static_cast<std::int64_t>(*it));
    tensor.begin = static_cast<std::size_t>(std::min<std::uint64_t>(offset, limit + 1));
    tensor.end = static_cast<std::size_t>(std::min<std::uint64_t>(offset, limit + 1) + bytes);
    if (offset > limit) tensor.end = tensor.begin;  // reported below, as beyond the data
    offsets.push_back(offset);
    sizes.push_back(bytes);
    out.tensors.push_back(std::move(tensor));
  }
  const std::uint64_t infos_end = in.offset();
  const std::uint64_t data_begin = (infos_end + out.alignment - 1) / out.alignment * out.alignment;
  if (data_begin > in.size() && !out.tensors.empty()) {
    throw in.error(fmt::format("the data section would start at byte {}, beyond the end of the file ({} bytes)",
                               data_begin, in.size()));
  }
  out.data_begin = static_cast<std::size_t>(std::min<std::uint64_t>(data_begin, in.size()));
  const std::size_t data_size = in.size() - out.data_begin;
  for (std::size_t k = 0; k < out.tensors.size(); ++k) {
    const auto& tensor = out.tensors[k];
    if (offsets[k] > data_size || tensor.end > data_size) {
      throw InputError(fmt::format("{}: tensor '{}': {} bytes at offset {} run beyond the {} data bytes in the file",
                                   source, tensor.name, sizes[k], offsets[k], data_size));
    }
  }
  sort_by_offset_without_overlaps(out.tensors, source);
  return out;
}

}  // namespace

GgufHeader parse_gguf(std::span<const std::byte> image, const std::string& source) {
  Cursor in(
      image.size(),
      [image](std::uint64_t offset, std::span<std::byte> out) {
        std::memcpy(out.data(), image.data() + offset, out.size());
      },
      source);
  return parse(in, source);
}

GgufFile::GgufFile(const std::filesystem::path& path) : file_(path) {
  const std::string source = path.string();
  Cursor in(
      file_.size(), [this](std::uint64_t offset, std::span<std::byte> out) { file_.read_at(offset, out); }, source);
  header_ = parse(in, source);
}

void GgufFile::read(const TensorInfo& tensor, std::uint64_t offset, std::span<std::byte> out) const {
  if (offset > tensor.end - tensor.begin || out.size() > tensor.end - tensor.begin - offset) {
    throw std::logic_error(
        fmt::format("bytes {}..{} are outside tensor '{}'", offset, offset + out.size(), tensor.name));
  }
  file_.read_at(header_.data_begin + tensor.begin + offset, out);
}

}  // namespace attncheck::probes
