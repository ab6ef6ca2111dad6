#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include "attncheck/probes/gguf.hpp"
#include "attncheck/probes/model.hpp"
#include "gguf_image.hpp"
#include "records/memory_limit.hpp"
#include "tiny_models.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

using namespace attncheck::probes;
using attncheck::probes::testing::GgufImage;
using attncheck::probes::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

template <class T>
std::vector<std::byte> raw(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Q4_0: scale 0.5 (half 0x3800); byte j holds j (low nibble, element j) and 15 - j (high, element j + 16).
std::vector<std::byte> q4_0_block() {
  auto out = bytes_of({0x00, 0x38});
  for (int j = 0; j < 16; ++j) out.push_back(static_cast<std::byte>(j | ((15 - j) << 4)));
  return out;
}
double q4_0_value(int k) { return k < 16 ? (k - 8) * 0.5 : ((15 - (k - 16)) - 8) * 0.5; }

// Q4_1: scale 2^-14 (half 0x0400), minimum 2000 (half 0x67d0): 2000 + q 2^-14 rounded to float32 (ulp 2^-13
// there), as ggml computes it; in double it would be exact.
std::vector<std::byte> q4_1_block() {
  auto out = bytes_of({0x00, 0x04, 0xd0, 0x67});
  for (int j = 0; j < 16; ++j) out.push_back(static_cast<std::byte>(j | ((15 - j) << 4)));
  return out;
}
double q4_1_value(int k) {
  const int q = k < 16 ? k : 15 - (k - 16);
  return static_cast<double>(2000.0f + static_cast<float>(q) * std::ldexp(1.0f, -14));
}

// Q8_0: scale 0.125 (half 0x3000), quants -16 + 3 j.
std::vector<std::byte> q8_0_block() {
  auto out = bytes_of({0x00, 0x30});
  for (int j = 0; j < 32; ++j) out.push_back(static_cast<std::byte>(static_cast<std::int8_t>(-16 + 3 * j)));
  return out;
}
double q8_0_value(int k) { return (-16 + 3 * k) * 0.125; }

// Q4_K, two super-blocks with every quant 1: the first with d = 1 and dmin = 0 gives each sub-block's 6-bit scale
// (10 + j for j < 4, stored in bytes 0-3; 49 + j for 4 + j, its low nibble in byte 8 + j and its top bits in the
// top of byte j), the second with d = 0 and dmin = 1 the negated minimums (20 + j, bytes 4-7; 37 + j, the high
// nibble of byte 8 + j and the top of byte 4 + j).
std::vector<std::byte> q4_k_blocks() {
  std::vector<std::byte> scales;
  for (int j = 0; j < 4; ++j) scales.push_back(static_cast<std::byte>(0xc0 | (10 + j)));
  for (int j = 0; j < 4; ++j) scales.push_back(static_cast<std::byte>(0x80 | (20 + j)));
  for (int j = 0; j < 4; ++j) scales.push_back(static_cast<std::byte>(((j + 5) << 4) | (j + 1)));
  std::vector<std::byte> out;
  for (const auto& d_dmin : {bytes_of({0x00, 0x3c, 0x00, 0x00}), bytes_of({0x00, 0x00, 0x00, 0x3c})}) {
    out.insert(out.end(), d_dmin.begin(), d_dmin.end());
    out.insert(out.end(), scales.begin(), scales.end());
    out.resize(out.size() + 128, std::byte{0x11});
  }
  return out;
}
double q4_k_scale(int sub) { return sub < 4 ? 10 + sub : 49 + (sub - 4); }
double q4_k_minimum(int sub) { return sub < 4 ? 20 + sub : 37 + (sub - 4); }

// Q8_K: a float32 scale 0.1 (rounded, so that its products with the quants -128 + j round too), then 32 bytes of
// sums that dequantization ignores.
std::vector<std::byte> q8_k_block() {
  auto out = raw<float>({0.1f});
  for (int j = 0; j < 256; ++j) out.push_back(static_cast<std::byte>(static_cast<std::int8_t>(j - 128)));
  out.resize(292, std::byte{0x55});
  return out;
}

// A valid file with metadata of every value type and one tensor of every supported type.
GgufImage valid_image() {
  GgufImage g;
  g.kv_string("general.architecture", "llama");
  g.kv<std::uint8_t>("u8", 0, 200);
  g.kv<std::int8_t>("i8", 1, -5);
  g.kv<std::uint16_t>("u16", 2, 60000);
  g.kv<std::int16_t>("i16", 3, -300);
  g.kv<std::uint32_t>("llama.block_count", 4, 7);
  g.kv<std::int32_t>("i32", 5, -70000);
  g.kv<float>("llama.rope.freq_base", 6, 100000.0f);
  g.kv<std::uint8_t>("flag", 7, 1);
  g.kv<std::uint64_t>("u64", 10, 1ull << 40);
  g.kv<std::int64_t>("i64", 11, -(1ll << 40));
  g.kv<double>("f64", 12, 0.1);
  g.kv_strings("tokenizer.ggml.tokens", {"a", "b", "\xc4\xa0the"});
  {  // an array of arrays of INT32: [[1, 2], []]
    std::vector<std::byte> value;
    GgufImage::append(value, std::uint32_t{9});
    GgufImage::append(value, std::uint64_t{2});
    GgufImage::append(value, std::uint32_t{5});
    GgufImage::append(value, std::uint64_t{2});
    GgufImage::append(value, std::int32_t{1});
    GgufImage::append(value, std::int32_t{2});
    GgufImage::append(value, std::uint32_t{5});
    GgufImage::append(value, std::uint64_t{0});
    g.kv_raw("nested", 9, value);
  }
  g.tensor("f32", {3, 2}, 0, raw<float>({1, 2, 3, 4, 5, 6}));
  g.tensor("f16", {2}, 1, bytes_of({0x00, 0x3c, 0x00, 0xc1}));    // 1, -2.5
  g.tensor("bf16", {2}, 30, bytes_of({0x80, 0x3f, 0x49, 0x40}));  // 1, 3.140625
  auto q4_0 = q4_0_block(), q4_1 = q4_1_block(), q8_0 = q8_0_block();
  g.tensor("q4_0", {32}, 2, q4_0);
  g.tensor("q4_1", {32}, 3, q4_1);
  auto two_rows = bytes_of({0x00, 0x00});  // first row: scale 0, so every value is 0 whatever the quants
  two_rows.resize(34, std::byte{7});
  two_rows.insert(two_rows.end(), q8_0.begin(), q8_0.end());
  g.tensor("q8_0", {32, 2}, 8, two_rows);
  g.tensor("q4_k", {256, 2}, 12, q4_k_blocks());
  g.tensor("q8_k", {256}, 15, q8_k_block());
  g.tensor("iq4_xs", {256}, 23, std::vector<std::byte>(136, std::byte{1}));
  return g;
}

void expect_refused(const std::vector<std::byte>& image, const std::string& fragment) {
  try {
    parse_gguf(image, "model.gguf");
    FAIL("no error for input that should be refused: " << fragment);
  } catch (const InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("model.gguf") != std::string::npos);
    CHECK(message.find(fragment) != std::string::npos);
  }
}

fs::path write(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// F32 zeros of ggml dimensions `ne` (fastest first: a [rows, cols] tensor is {cols, rows}).
void add_zeros(GgufImage& g, const std::string& name, const std::vector<std::uint64_t>& ne) {
  std::uint64_t count = 1;
  for (const std::uint64_t n : ne) count *= n;
  g.tensor(name, ne, 0, std::vector<std::byte>(count * 4, std::byte{0}));
}

// What the sizes in a file's metadata are checked against: a tensor of each of `layers` layers (PREFIX N.attn_norm),
// and layer 0's tensors `rows` of them (name, rows), each reading the D columns of the hidden size.
void add_layers(GgufImage& g, const std::string& prefix, std::uint32_t layers, std::uint64_t D,
                const std::vector<std::pair<std::string, std::uint64_t>>& rows) {
  for (std::uint32_t l = 0; l < layers; ++l) add_zeros(g, fmt::format("{}{}.attn_norm.weight", prefix, l), {D});
  for (const auto& [name, count] : rows) add_zeros(g, prefix + "0." + name + ".weight", {D, count});
}

}  // namespace

TEST_CASE("GGUF metadata of every value type is read back with its type") {
  const auto header = parse_gguf(valid_image().bytes(), "model.gguf");
  CHECK(header.version == 3);
  CHECK(header.alignment == 32);
  CHECK(header.string("general.architecture") == "llama");
  CHECK(header.unsigned_integer("u8") == 200);
  CHECK(std::get<std::int64_t>(header.find("i8")->data) == -5);
  CHECK(header.unsigned_integer("u16") == 60000);
  CHECK(std::get<std::int64_t>(header.find("i16")->data) == -300);
  CHECK(header.unsigned_integer("llama.block_count") == 7);
  CHECK(std::get<std::int64_t>(header.find("i32")->data) == -70000);
  CHECK(header.number("llama.rope.freq_base") == 100000.0);
  CHECK(header.boolean("flag"));
  CHECK(header.unsigned_integer("u64") == (1ull << 40));
  CHECK(std::get<std::int64_t>(header.find("i64")->data) == -(1ll << 40));
  CHECK(header.number("f64") == 0.1);
  CHECK(header.strings("tokenizer.ggml.tokens") == std::vector<std::string>{"a", "b", "\xc4\xa0the"});
  // Arrays are kept as the file holds them, a byte in memory per byte in the file; their elements read one by one.
  const GgufValue& outer = *header.find("nested");
  REQUIRE(outer.size() == 2);
  CHECK(outer.element_type == GgufType::array);
  const GgufValue first = outer.element(0), second = outer.element(1);
  CHECK(first.type == GgufType::array);
  CHECK(first.element_type == GgufType::i32);
  CHECK(first.size() == 2);
  CHECK(std::get<GgufArray>(first.data).bytes.size() == 8);
  CHECK(std::get<std::int64_t>(first.element(1).data) == 2);
  CHECK(first.element(1).type == first.element_type);
  CHECK(second.size() == 0);
  CHECK_THROWS_AS(second.element(0), std::out_of_range);
  CHECK_THROWS_AS(outer.element(2), std::out_of_range);
  const GgufValue* tokens = header.find("tokenizer.ggml.tokens");
  CHECK(std::get<std::string>(tokens->element(2).data) == "\xc4\xa0the");
  CHECK(tokens->element(2).type == GgufType::string);

  CHECK_THROWS_WITH(header.unsigned_integer("absent"), Catch::Contains("model.gguf: no metadata key 'absent'"));
  CHECK_THROWS_WITH(header.unsigned_integer("i8"), Catch::Contains("'i8' is -5, not a non-negative integer"));
  CHECK_THROWS_WITH(header.number("general.architecture"), Catch::Contains("'general.architecture' is STRING"));
  CHECK_THROWS_WITH(header.strings("nested"), Catch::Contains("not an ARRAY of STRING"));
  CHECK_THROWS_WITH(header.string("u8"), Catch::Contains("'u8' is UINT8, not a STRING"));
}

TEST_CASE("GGUF tensors: shapes outermost first, plain types and blocks dequantized as ggml does") {
  TempDir dir;
  const auto file = write(dir.path / "model.gguf", valid_image().bytes());
  const auto checkpoint = Checkpoint::open(file);
  REQUIRE(checkpoint.gguf() != nullptr);
  CHECK(checkpoint.info("f32").shape == std::vector<std::int64_t>{2, 3});
  const Matrix m = checkpoint.matrix("f32", 2, 3);
  CHECK(m(0, 0) == 1);
  CHECK(m(0, 2) == 3);
  CHECK(m(1, 0) == 4);
  CHECK(checkpoint.vector("f16", 2) == Vector{{1.0, -2.5}});
  CHECK(checkpoint.vector("bf16", 2) == Vector{{1.0, 3.140625}});
  const Vector q4_0 = checkpoint.vector("q4_0", 32), q4_1 = checkpoint.vector("q4_1", 32);
  for (int k = 0; k < 32; ++k) {
    INFO("element " << k);
    CHECK(q4_0[k] == q4_0_value(k));
    CHECK(q4_1[k] == q4_1_value(k));
  }
  // Q4_1's float32 rounding: 2000 + 3 * 2^-14 lies halfway between floats and rounds to even, 2000 + 2^-12.
  CHECK(q4_1[3] == 2000.0 + std::ldexp(1.0, -12));
  const std::int64_t second[] = {1, 0};
  const Matrix rows = checkpoint.rows("q8_0", second, 32);
  for (int k = 0; k < 32; ++k) {
    CHECK(rows(0, k) == q8_0_value(k));
    CHECK(rows(1, k) == 0.0);
  }
  const double rms = checkpoint.root_mean_square("q4_0");
  double sum = 0;
  for (int k = 0; k < 32; ++k) sum += q4_0_value(k) * q4_0_value(k);
  CHECK(rms == Approx(std::sqrt(sum / 32)).epsilon(1e-15));
  const Matrix q4_k = checkpoint.matrix("q4_k", 2, 256);
  const Vector q8_k = checkpoint.vector("q8_k", 256);
  for (int k = 0; k < 256; ++k) {
    INFO("element " << k);
    CHECK(q4_k(0, k) == q4_k_scale(k / 32));
    CHECK(q4_k(1, k) == -q4_k_minimum(k / 32));
    CHECK(q8_k[k] == static_cast<double>(0.1f * static_cast<float>(k - 128)));
  }
  CHECK(q8_k[129] == static_cast<double>(0.1f));
  // The mixed-precision forward's float32 weights: every type rounded from what the double reader gives (exact here:
  // each value is a float32).
  CHECK(checkpoint.float_matrix("f32", 2, 3) == m.cast<float>());
  CHECK(checkpoint.float_matrix("q4_k", 2, 256) == q4_k.cast<float>());
  CHECK(checkpoint.float_matrix("bf16") == checkpoint.matrix("bf16").cast<float>());
  CHECK_THROWS_WITH(checkpoint.float_matrix("q4_k", 2, 255),
                    Catch::Contains("tensor 'q4_k'") && Catch::Contains("has shape [2, 256], expected [2, 255]"));
  CHECK(q8_k[131] != 3 * static_cast<double>(0.1f));  // 3 times 0.1f is not a float32: the product is rounded
  // A known type that is not supported is refused when read, by name, with the types that are read.
  CHECK_THROWS_WITH(checkpoint.vector("iq4_xs"), Catch::Contains("tensor 'iq4_xs' in " + file.string()) &&
                                                     Catch::Contains("type IQ4_XS, which is not supported") &&
                                                     Catch::Contains("Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"));
  CHECK(type_name(checkpoint.info("q4_k")) == "Q4_K");
  CHECK(type_name(checkpoint.info("iq4_xs")) == "IQ4_XS");
  CHECK(type_name(checkpoint.info("bf16")) == "BF16");
}

TEST_CASE("Malformed GGUF files are refused, naming the file and what is wrong") {
  const auto valid = valid_image();
  auto with = [&](auto change) {
    GgufImage g = valid;
    change(g);
    return g.bytes();
  };
  expect_refused(with([](GgufImage& g) { g.magic = 0x12345678; }), "not a GGUF file");
  expect_refused(with([](GgufImage& g) { g.version = 1; }), "version 1 is not supported");
  expect_refused(with([](GgufImage& g) { g.version = 0x03000000; }), "big-endian");
  expect_refused(with([](GgufImage& g) { g.version = 7; }), "unknown GGUF version 7");
  expect_refused(with([](GgufImage& g) { g.declared_kv_count = 1ll << 60; }), "metadata entries cannot fit");
  expect_refused(with([](GgufImage& g) { g.declared_tensor_count = 1ll << 60; }), "tensor infos cannot fit");
  expect_refused(with([](GgufImage& g) { g.kv<std::uint32_t>("bad", 13, 0); }), "'bad': unknown value type 13");
  expect_refused(with([](GgufImage& g) { g.kv<std::uint8_t>("u8", 0, 1); }), "metadata key 'u8' appears twice");
  expect_refused(with([](GgufImage& g) {
                   std::vector<std::byte> value;
                   GgufImage::append(value, std::uint32_t{4});
                   GgufImage::append(value, std::uint64_t{1} << 40);
                   g.kv_raw("long", 9, value);
                 }),
                 "'long': an array of 1099511627776 UINT32 values cannot fit");
  expect_refused(with([](GgufImage& g) {
                   std::vector<std::byte> value;
                   for (int k = 0; k < 40; ++k) {
                     GgufImage::append(value, std::uint32_t{9});
                     GgufImage::append(value, std::uint64_t{1});
                   }
                   g.kv_raw("deep", 9, value);
                 }),
                 "'deep': arrays nested more than 16 deep");
  expect_refused(with([](GgufImage& g) { g.kv<std::uint32_t>("general.alignment", 4, 48); }),
                 "general.alignment is not a UINT32 power of two");
  expect_refused(with([](GgufImage& g) { g.tensor("f32", {1}, 0, raw<float>({1})); }), "tensor 'f32' appears twice");
  expect_refused(with([](GgufImage& g) {
                   g.tensor("five", {1, 1, 1, 1, 1}, 0, raw<float>({1}));
                 }),
                 "tensor 'five': 5 dimensions");
  expect_refused(with([](GgufImage& g) { g.tensor("none", {}, 0, {}); }), "tensor 'none': 0 dimensions");
  expect_refused(with([](GgufImage& g) { g.tensor("odd", {1}, 99, {}); }), "tensor 'odd': unknown ggml type 99");
  expect_refused(with([](GgufImage& g) { g.tensor("part", {16}, 2, q4_0_block()); }),
                 "tensor 'part': rows of 16 elements are not whole blocks of 32 (Q4_0)");
  // llama.cpp stores a tensor whose rows are not whole super-blocks of 256 in another type: one that says it is
  // a K-quant is refused, and one whose blocks the file does not hold in full is never read past its end.
  expect_refused(with([](GgufImage& g) {
                   g.tensor("rows", {100, 2}, 12, q4_k_blocks());
                 }),
                 "tensor 'rows': rows of 100 elements are not whole blocks of 256 (Q4_K)");
  expect_refused(with([](GgufImage& g) {
                   g.tensor("cut", {256, 3}, 14, std::vector<std::byte>(2 * 210));
                 }),
                 "tensor 'cut': 630 bytes at offset");
  expect_refused(with([](GgufImage& g) {
                   g.tensor("huge", {1ull << 40, 1ull << 40}, 0, {});
                 }),
                 "tensor 'huge': dimensions [1099511627776, 1099511627776] need more bytes");
  expect_refused(with([](GgufImage& g) { g.tensor("skew", {1}, 0, raw<float>({1}), 4); }),
                 "tensor 'skew': offset 4 is not a multiple of the alignment 32");
  expect_refused(with([](GgufImage& g) { g.tensor("past", {1}, 0, raw<float>({1}), 1 << 20); }),
                 "tensor 'past': 4 bytes at offset 1048576 run beyond");
  expect_refused(with([](GgufImage& g) {
                   g.tensor("over", {8}, 0, raw<float>({1, 2, 3, 4, 5, 6, 7, 8}), 0);
                 }),
                 "overlap");
}

TEST_CASE("Every truncation of a GGUF file is refused with a message naming the file") {
  const auto image = valid_image().bytes();
  // The data of the last tensor ends the file, so every proper prefix is missing bytes the header promises.
  for (std::size_t length = 0; length < image.size(); ++length) {
    INFO("length " << length);
    const std::vector<std::byte> prefix(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(length));
    CHECK_THROWS_WITH(parse_gguf(prefix, "model.gguf"), Catch::StartsWith("model.gguf: "));
  }
}

TEST_CASE("A single changed byte never crashes the GGUF reader") {
  const auto image = valid_image().bytes();
  rc::prop("parse or InputError, and every decoded element of a parsed file is readable", [&] {
    auto changed = image;
    const auto at = *rc::gen::inRange<std::size_t>(0, changed.size());
    changed[at] = static_cast<std::byte>(*rc::gen::arbitrary<std::uint8_t>());
    try {
      const auto header = parse_gguf(changed, "model.gguf");
      for (const auto& tensor : header.tensors) {
        RC_ASSERT(tensor.end <= changed.size() - header.data_begin);
        const std::size_t expected_bytes =
            tensor.block
                ? static_cast<std::size_t>(tensor.element_count()) / tensor.block->elements * tensor.block->bytes
                : static_cast<std::size_t>(tensor.element_count()) * dtype_size(tensor.dtype);
        RC_ASSERT(tensor.end - tensor.begin == expected_bytes);
      }
    } catch (const InputError& e) {
      RC_ASSERT(std::string(e.what()).starts_with("model.gguf: "));
    }
  });
}

TEST_CASE("GGUF files are opened as checkpoints by their extension: a non-GGUF .gguf file is refused") {
  TempDir dir;
  const auto bad = write(dir.path / "fake.gguf", bytes_of({'{', '}', 0, 0, 0, 0, 0, 0, 0, 0}));
  CHECK_THROWS_WITH(Checkpoint::open(bad), Catch::Contains(bad.string() + ": not a GGUF file"));
  CHECK_THROWS_WITH(Checkpoint::open(dir.path / "absent.gguf"), Catch::Contains("no such file"));
}

TEST_CASE("Llama's architecture is read from GGUF metadata: what it cannot probe is refused by name") {
  TempDir dir;
  const auto make = [&](const std::function<void(GgufImage&)>& change) {
    GgufImage g;
    g.kv_string("general.architecture", "llama");
    g.kv<std::uint32_t>("llama.block_count", 4, 2);
    g.kv<std::uint32_t>("llama.context_length", 4, 64);
    g.kv<std::uint32_t>("llama.embedding_length", 4, 8);
    g.kv<std::uint32_t>("llama.feed_forward_length", 4, 16);
    g.kv<std::uint32_t>("llama.attention.head_count", 4, 4);
    g.kv<std::uint32_t>("llama.attention.head_count_kv", 4, 2);
    g.kv<float>("llama.rope.freq_base", 6, 500.0f);
    g.kv<float>("llama.attention.layer_norm_rms_epsilon", 6, 1e-5f);
    change(g);
    g.tensor("token_embd.weight", {8, 5}, 0, std::vector<std::byte>(8 * 5 * 4, std::byte{0}));
    add_layers(g, "blk.", 2, 8, {{"attn_q", 8}, {"attn_k", 4}, {"ffn_up", 16}});
    return write(dir.path / "model.gguf", g.bytes());
  };
  const auto model = TransformerModel::load(make([](GgufImage&) {}));
  const auto& c = model.config();
  CHECK(architecture_name(c) == "Llama");
  CHECK(c.layers == 2);
  CHECK(c.hidden == 8);
  CHECK(c.heads == 4);
  CHECK(c.key_value_heads() == 2);
  CHECK(c.kv_head_of(0) == 0);
  CHECK(c.kv_head_of(1) == 0);
  CHECK(c.kv_head_of(2) == 1);
  CHECK(c.head_dim() == 2);
  CHECK(c.rope_theta == 500.0);
  CHECK(c.rope_interleaved);
  CHECK(c.vocab == 5);  // from token_embd when llama.vocab_size is absent
  CHECK(c.max_positions == 64);
  CHECK(c.layer_norm_eps == static_cast<double>(1e-5f));

  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage& g) { g.kv_string("general.architecture", "x"); })),
                    Catch::Contains("metadata key 'general.architecture' appears twice"));
  const auto other = [&](const std::string& architecture) {
    GgufImage g;
    g.kv_string("general.architecture", architecture);
    return write(dir.path / "other.gguf", g.bytes());
  };
  CHECK_THROWS_WITH(TransformerModel::load(other("mpt")),
                    Catch::Contains("general.architecture 'mpt' is not supported (") && Catch::Contains("qwen2") &&
                        Catch::Contains("gemma3"));
  // Another architecture's keys carry its own prefix.
  CHECK_THROWS_WITH(TransformerModel::load(other("qwen2")), Catch::Contains("no metadata key 'qwen2.block_count'"));
  CHECK_THROWS_WITH(TransformerModel::load(other("llama")), Catch::Contains("no metadata key 'llama.block_count'"));
  CHECK_THROWS_WITH(TransformerModel::load(
                        make([](GgufImage& g) { g.kv<std::uint32_t>("llama.rope.dimension_count", 4, 1); })),
                    Catch::Contains("rotary embeddings on 1 of the 2 head dimensions are not supported"));
  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage& g) { g.kv_string("llama.rope.scaling.type", "yarn"); })),
                    Catch::Contains("rope scaling 'yarn' is not supported"));
  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage& g) { g.kv<std::uint32_t>("llama.expert_count", 4, 8); })),
                    Catch::Contains("mixtures of experts are not supported"));
}

TEST_CASE("Gemma 2 and 3 GGUF files take what llama.cpp does not read from it: the scale, the cap, the windows") {
  TempDir dir;
  const auto make = [&](const std::string& arch, std::uint32_t layers, const std::function<void(GgufImage&)>& change) {
    GgufImage g;
    g.kv_string("general.architecture", arch);
    g.kv<std::uint32_t>(arch + ".block_count", 4, layers);
    g.kv<std::uint32_t>(arch + ".context_length", 4, 64);
    g.kv<std::uint32_t>(arch + ".embedding_length", 4, 8);
    g.kv<std::uint32_t>(arch + ".feed_forward_length", 4, 16);
    g.kv<std::uint32_t>(arch + ".attention.head_count", 4, 4);
    g.kv<std::uint32_t>(arch + ".attention.key_length", 4, 6);
    g.kv<std::uint32_t>(arch + ".attention.value_length", 4, 6);
    g.kv<float>(arch + ".attention.layer_norm_rms_epsilon", 6, 1e-6f);
    change(g);
    g.tensor("token_embd.weight", {8, 5}, 0, std::vector<std::byte>(8 * 5 * 4, std::byte{0}));
    add_layers(g, "blk.", layers, 8, {{"attn_q", 24}, {"attn_k", 24}, {"ffn_up", 16}});
    return write(dir.path / (arch + ".gguf"), g.bytes());
  };
  // Gemma 2: the cap and window llama.cpp defaults to, the even layers sliding; 46 layers are the 27B model,
  // scaled by (D / heads)^-1/2 instead of head_dim^-1/2.
  const auto gemma2 = TransformerModel::load(make("gemma2", 4, [](GgufImage&) {})).config();
  CHECK(architecture_name(gemma2) == "Gemma 2");
  CHECK(!gemma2.rope_interleaved);
  CHECK(gemma2.rope_theta == 10000.0);
  CHECK(gemma2.query_pre_attn_scalar == 6);
  CHECK(gemma2.logit_softcap == 50);
  CHECK(gemma2.sliding_window == 4096);
  CHECK(gemma2.sliding_layers == std::vector<bool>{true, false, true, false});
  CHECK(TransformerModel::load(make("gemma2", 46, [](GgufImage&) {})).config().query_pre_attn_scalar == 2);
  // Gemma 3: every sixth layer global, linear scaling read; without a window, none.
  const auto gemma3 = TransformerModel::load(make("gemma3", 7, [](GgufImage& g) {
                        g.kv<std::uint32_t>("gemma3.attention.sliding_window", 4, 3);
                        g.kv_string("gemma3.rope.scaling.type", "linear");
                        g.kv<float>("gemma3.rope.scaling.factor", 6, 8.0f);
                      })).config();
  CHECK(gemma3.sliding_window == 3);
  CHECK(gemma3.sliding_layers == std::vector<bool>{true, true, true, true, true, false, true});
  CHECK(gemma3.rope_linear_factor == 8);
  CHECK(gemma3.rope_local_theta == 10000);
  CHECK(gemma3.logit_softcap == 0);
  const auto unwindowed = TransformerModel::load(make("gemma3", 7, [](GgufImage&) {})).config();
  CHECK(unwindowed.sliding_window == 0);
  CHECK(std::none_of(unwindowed.sliding_layers.begin(), unwindowed.sliding_layers.end(), [](bool b) { return b; }));
  // Only Gemma 3 reads linear scaling.
  CHECK_THROWS_WITH(TransformerModel::load(
                        make("gemma2", 4, [](GgufImage& g) { g.kv_string("gemma2.rope.scaling.type", "linear"); })),
                    Catch::Contains("rope scaling 'linear' is not supported"));
}

TEST_CASE("BERT GGUF files (RoBERTa's and DistilBERT's too) are read as llama.cpp runs them, what is missing named") {
  TempDir dir;
  const auto make = [&](const std::function<void(GgufImage&)>& change, bool token_types = true, std::uint32_t heads = 2,
                        float epsilon = 1e-5f) {
    GgufImage g;
    g.kv_string("general.architecture", "bert");
    g.kv<std::uint32_t>("bert.block_count", 4, 3);
    g.kv<std::uint32_t>("bert.context_length", 4, 510);
    g.kv<std::uint32_t>("bert.embedding_length", 4, 8);
    g.kv<std::uint32_t>("bert.feed_forward_length", 4, 16);
    g.kv<std::uint32_t>("bert.attention.head_count", 4, heads);
    g.kv<float>("bert.attention.layer_norm_epsilon", 6, epsilon);
    change(g);
    g.tensor("token_embd.weight", {8, 5}, 0, std::vector<std::byte>(8 * 5 * 4, std::byte{0}));
    if (token_types) g.tensor("token_types.weight", {8, 2}, 0, std::vector<std::byte>(8 * 2 * 4, std::byte{0}));
    add_zeros(g, "position_embd.weight", {8, 510});
    add_layers(g, "blk.", 3, 8, {{"ffn_up", 16}});
    return write(dir.path / "bert.gguf", g.bytes());
  };
  const auto causal = [](bool value) {
    return [value](GgufImage& g) { g.kv<std::uint8_t>("bert.attention.causal", 7, value ? 1 : 0); };
  };
  const auto c = TransformerModel::load(make(causal(false))).config();
  CHECK(architecture_name(c) == "BERT");
  CHECK(c.gguf);
  CHECK(c.layers == 3);
  CHECK(c.hidden == 8);
  CHECK(c.intermediate == 16);
  CHECK(c.heads == 2);
  CHECK(c.max_positions == 510);
  CHECK(c.vocab == 5);
  CHECK(c.type_vocab == 2);
  CHECK(!c.causal);
  CHECK(c.layer_norm_eps == static_cast<double>(1e-5f));
  CHECK(c.hidden_act == "gelu_pytorch_tanh");  // ggml_gelu, whatever the model was trained with
  CHECK(TransformerModel::load(make(causal(false), false)).config().type_vocab == 0);  // DistilBERT's
  CHECK(TransformerModel::load(make(causal(true))).config().causal);

  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage&) {})),
                    Catch::Contains("no metadata key 'bert.attention.causal'"));
  CHECK_THROWS_WITH(TransformerModel::load(make([&](GgufImage& g) {
                      causal(false)(g);
                      g.kv<std::uint32_t>("bert.attention.head_count_kv", 4, 1);
                    })),
                    Catch::Contains("2 query heads with 1 key/value heads"));
  CHECK_THROWS_WITH(TransformerModel::load(make(causal(false), true, 3)),
                    Catch::Contains("embedding_length 8 is not a multiple of the 3 heads"));
  CHECK_THROWS_WITH(TransformerModel::load(make([&](GgufImage& g) {
                      causal(false)(g);
                      g.tensor("blk.0.attn_qkv.weight", {8, 24}, 0, std::vector<std::byte>(8 * 24 * 4, std::byte{0}));
                    })),
                    Catch::Contains("fused query/key/value projections (attn_qkv) are not supported"));
  CHECK_THROWS_WITH(TransformerModel::load(make(causal(false), true, 2, -1.0f)),
                    Catch::Contains("\"bert.attention.layer_norm_epsilon\" is -1"));
}

TEST_CASE(
    "CLIP mmproj GGUF files: the vision tower's sizes, llama.cpp's activation and MLP names, other towers refused") {
  TempDir dir;
  const auto zeros = [](std::size_t floats) { return std::vector<std::byte>(floats * 4, std::byte{0}); };
  const auto make = [&](const std::function<void(GgufImage&)>& change, bool legacy_mlp = true, bool cls = true) {
    GgufImage g;
    g.kv_string("general.architecture", "clip");
    g.kv<std::uint8_t>("clip.has_vision_encoder", 7, 1);
    g.kv<std::uint32_t>("clip.vision.image_size", 4, 24);
    g.kv<std::uint32_t>("clip.vision.patch_size", 4, 6);
    g.kv<std::uint32_t>("clip.vision.embedding_length", 4, 8);
    g.kv<std::uint32_t>("clip.vision.feed_forward_length", 4, 16);
    g.kv<std::uint32_t>("clip.vision.attention.head_count", 4, 2);
    g.kv<std::uint32_t>("clip.vision.block_count", 4, 1);
    g.kv<float>("clip.vision.attention.layer_norm_epsilon", 6, 1e-5f);
    change(g);
    if (cls) g.tensor("v.class_embd", {8}, 0, zeros(8));
    g.tensor("v.pre_ln.weight", {8}, 0, zeros(8));
    // The older converter's ffn_down is the first projection: it reads the 8 embedding columns.
    g.tensor("v.blk.0.ffn_down.weight",
             legacy_mlp ? std::vector<std::uint64_t>{8, 16} : std::vector<std::uint64_t>{16, 8}, 0, zeros(128));
    g.tensor("v.blk.0.ffn_up.weight",
             legacy_mlp ? std::vector<std::uint64_t>{16, 8} : std::vector<std::uint64_t>{8, 16}, 0, zeros(128));
    // 1 + (24 / 6)^2 positions; the patch kernel [D, 3, 6, 6].
    g.tensor("v.position_embd.weight", {8, 17}, 0, zeros(8 * 17));
    g.tensor("v.patch_embd.weight", {6, 6, 3, 8}, 0, zeros(6 * 6 * 3 * 8));
    return write(dir.path / "mmproj.gguf", g.bytes());
  };
  const auto c = TransformerModel::load(make([](GgufImage& g) { g.kv_string("clip.projector_type", "mlp"); })).config();
  CHECK(architecture_name(c) == "CLIP vision");
  CHECK(c.gguf);
  CHECK(c.layers == 1);
  CHECK(c.hidden == 8);
  CHECK(c.intermediate == 16);
  CHECK(c.heads == 2);
  CHECK(c.max_positions == 17);
  CHECK(c.layer_norm_eps == static_cast<double>(1e-5f));
  CHECK(c.hidden_act == "quick_gelu");
  CHECK(c.gguf_mlp_swapped);
  CHECK(!TransformerModel::load(make([](GgufImage&) {}, false)).config().gguf_mlp_swapped);
  CHECK(TransformerModel::load(make([](GgufImage& g) { g.kv<std::uint8_t>("clip.use_gelu", 7, 1); }))
            .config()
            .hidden_act == "gelu_pytorch_tanh");

  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage& g) { g.kv_string("clip.projector_type", "gemma3"); })),
                    Catch::Contains("clip.projector_type 'gemma3' is not supported"));
  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage&) {}, true, false)),
                    Catch::Contains("no tensor 'v.class_embd': not CLIP's vision tower"));
  CHECK_THROWS_WITH(TransformerModel::load(make([](GgufImage& g) {
                      g.kv<std::uint8_t>("clip.use_gelu", 7, 1);
                      g.kv<std::uint8_t>("clip.use_silu", 7, 1);
                    })),
                    Catch::Contains("use_gelu and use_silu are both true"));
}

TEST_CASE("GGUF metadata's sizes are checked against the tensors as the file is read, naming the key and the file") {
  TempDir dir;
  const auto llama = [&](std::uint32_t layers) {
    GgufImage g;
    g.kv_string("general.architecture", "llama");
    g.kv<std::uint32_t>("llama.block_count", 4, layers);
    g.kv<std::uint32_t>("llama.context_length", 4, 64);
    g.kv<std::uint32_t>("llama.embedding_length", 4, 8);
    g.kv<std::uint32_t>("llama.feed_forward_length", 4, 16);
    g.kv<std::uint32_t>("llama.attention.head_count", 4, 4);
    g.kv<float>("llama.attention.layer_norm_rms_epsilon", 6, 1e-5f);
    add_zeros(g, "token_embd.weight", {8, 5});
    add_layers(g, "blk.", 2, 8, {{"attn_q", 8}, {"attn_k", 8}, {"ffn_up", 16}});
    return write(dir.path / "llama.gguf", g.bytes());
  };
  CHECK(TransformerModel::load(llama(2)).config().layers == 2);
  // Weights for 2 layers: once a count of 2^31 - 1 was taken at its word until the layers were counted.
  for (const std::uint32_t layers : {3u, 2147483647u}) {
    const auto file = llama(layers);
    CHECK_THROWS_WITH(TransformerModel::load(file),
                      Catch::Contains(file.string() + ": \"llama.block_count\" is " + std::to_string(layers) +
                                      ", but the checkpoint holds layers 0..1 only") &&
                          Catch::Contains("tensor 'blk.1.attn_norm.weight' in " + file.string()));
  }
  // CLIP: the patch grid image_size / patch_size declares against the position embeddings' rows.
  const auto clip = [&](std::uint32_t image_size) {
    GgufImage g;
    g.kv_string("general.architecture", "clip");
    g.kv<std::uint32_t>("clip.vision.image_size", 4, image_size);
    g.kv<std::uint32_t>("clip.vision.patch_size", 4, 6);
    g.kv<std::uint32_t>("clip.vision.embedding_length", 4, 8);
    g.kv<std::uint32_t>("clip.vision.feed_forward_length", 4, 16);
    g.kv<std::uint32_t>("clip.vision.attention.head_count", 4, 2);
    g.kv<std::uint32_t>("clip.vision.block_count", 4, 1);
    g.kv<float>("clip.vision.attention.layer_norm_epsilon", 6, 1e-5f);
    add_zeros(g, "v.class_embd", {8});
    add_zeros(g, "v.pre_ln.weight", {8});
    add_zeros(g, "v.position_embd.weight", {8, 17});
    add_zeros(g, "v.patch_embd.weight", {6, 6, 3, 8});
    add_layers(g, "v.blk.", 1, 8, {{"ffn_up", 16}});
    return write(dir.path / "mmproj.gguf", g.bytes());
  };
  CHECK(TransformerModel::load(clip(24)).config().max_positions == 17);
  const auto file = clip(6 * 65536);
  CHECK_THROWS_WITH(TransformerModel::load(file),
                    Catch::Contains(file.string() + ": \"clip.vision.image_size\" 393216 in patches of "
                                                    "\"clip.vision.patch_size\" 6 is 1 + 65536 x 65536 positions") &&
                        Catch::Contains("tensor 'v.position_embd.weight'") &&
                        Catch::Contains("should be at least 4294967297"));
}

TEST_CASE("An empty tensor with huge other dimensions has no elements (no overflow)") {
  GgufImage g;
  g.tensor("empty", {0, 1ull << 40, 1ull << 40, 1ull << 40}, 0, {});
  const auto header = parse_gguf(g.bytes(), "model.gguf");
  REQUIRE(header.tensors.size() == 1);
  CHECK(header.tensors[0].element_count() == 0);
  TensorInfo safetensors_like{"t", DType::F32, nullptr, {std::int64_t{1} << 40, std::int64_t{1} << 40, 0}, 0, 0};
  CHECK(safetensors_like.element_count() == 0);
}

TEST_CASE(
    "A GGUF file read from disk through its read window matches the image: one truncated after it was "
    "opened is refused naming it, not a crash") {
  TempDir dir;
  GgufImage g = valid_image();
  // 70000 tokens of 40 bytes: the metadata span several read windows, and a string straddles their borders.
  std::vector<std::string> tokens;
  for (int k = 0; k < 70000; ++k) tokens.push_back(fmt::format("{:040d}", k));
  g.kv_strings("tokenizer.ggml.merges", tokens);
  const auto image = g.bytes();
  REQUIRE(image.size() > (std::size_t{3} << 20));
  const auto path = write(dir.path / "model.gguf", image);
  const auto from_image = parse_gguf(image, path.string());
  const auto checkpoint = Checkpoint::open(path);
  REQUIRE(checkpoint.gguf() != nullptr);
  const GgufHeader& from_file = checkpoint.gguf()->header();
  CHECK(from_file.data_begin == from_image.data_begin);
  CHECK(from_file.strings("tokenizer.ggml.merges") == tokens);
  for (std::size_t k : {0, 1, 63, 64, 65, 4095, 69'999}) {
    CHECK(std::get<std::string>(from_file.find("tokenizer.ggml.merges")->element(k).data) == tokens[k]);
  }
  CHECK(from_file.metadata.size() == from_image.metadata.size());
  CHECK(checkpoint.matrix("f32", 2, 3)(1, 2) == 6.0);
  CHECK(checkpoint.vector("q4_1", 32)(5) == q4_1_value(5));
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(from_image.data_begin + 8)) == 0);
  CHECK_THROWS_WITH(checkpoint.matrix("q8_0"), Catch::Contains(path.string()) && Catch::Contains("truncated"));
}

TEST_CASE("GGUF metadata is held to the memory budget: arrays kept as the file holds them, strings counted as decoded",
          "[hostile]") {
  if (!attncheck::testing::kAddressLimitsWork) {
    WARN("skipped under AddressSanitizer, which cannot run under an address-space limit");
    return;
  }
  // A million UINT8 values: a megabyte in the file and in memory (fifty, held value by value as before).
  GgufImage numbers;
  std::vector<std::byte> array;
  GgufImage::append(array, std::uint32_t{0});
  GgufImage::append(array, std::uint64_t{1'000'000});
  array.resize(array.size() + 1'000'000, std::byte{7});
  numbers.kv_raw("big.array", 9, array);
  const std::vector<std::byte> numbers_file = numbers.bytes();
  CHECK(attncheck::testing::outcome_with_memory_room(24 << 20, [&] {
          const GgufHeader header = parse_gguf(numbers_file, "numbers.gguf");
          if (header.find("big.array")->size() != 1'000'000 ||
              std::get<std::uint64_t>(header.find("big.array")->element(999'999).data) != 7) {
            throw std::logic_error("the array did not read back");
          }
        }) == "ok");
  // A million empty strings: 8 MB in the file and in memory (48, held value by value as before); decoded, 32 MB,
  // refused naming the file and the key.
  GgufImage strings;
  strings.kv_strings("tokenizer.ggml.tokens", std::vector<std::string>(1'000'000));
  const std::vector<std::byte> strings_file = strings.bytes();
  CHECK(attncheck::testing::outcome_with_memory_room(24 << 20, [&] {
          const GgufHeader header = parse_gguf(strings_file, "strings.gguf");
          if (header.find("tokenizer.ggml.tokens")->size() != 1'000'000) {
            throw std::logic_error("the array did not read back");
          }
        }) == "ok");
  CHECK_THAT(attncheck::testing::outcome_with_memory_room(
                 24 << 20, [&] { (void)parse_gguf(strings_file, "strings.gguf").strings("tokenizer.ggml.tokens"); }),
             Catch::StartsWith(
                 "InputError: strings.gguf: the 1000000 strings of metadata 'tokenizer.ggml.tokens' needs"));
  CHECK(parse_gguf(strings_file, "strings.gguf").strings("tokenizer.ggml.tokens").size() == 1'000'000);
}

TEST_CASE("Unused GGUF arrays of strings and of arrays take about their bytes in the file", "[hostile]") {
  if (!attncheck::testing::kAddressLimitsWork) {
    WARN("skipped under AddressSanitizer, which cannot run under an address-space limit");
    return;
  }
  // A million one-letter strings (9 MB) and half a million arrays of one UINT8 (6.5 MB): held a value each, they
  // took 48 MB and 40 MB.
  GgufImage g = valid_image();
  std::vector<std::string> letters(1'000'000);
  for (std::size_t k = 0; k < letters.size(); ++k) letters[k] = std::string(1, static_cast<char>('a' + k % 26));
  g.kv_strings("unused.letters", letters);
  std::vector<std::byte> arrays;
  GgufImage::append(arrays, std::uint32_t{9});
  GgufImage::append(arrays, std::uint64_t{500'000});
  for (int k = 0; k < 500'000; ++k) {
    GgufImage::append(arrays, std::uint32_t{0});
    GgufImage::append(arrays, std::uint64_t{1});
    GgufImage::append(arrays, static_cast<std::uint8_t>(k % 251));
  }
  g.kv_raw("unused.arrays", 9, arrays);
  const std::vector<std::byte> image = g.bytes();
  const std::uint64_t array_bytes = 9'000'000 + 6'500'000;
  CHECK(attncheck::testing::outcome_with_memory_room(2 * array_bytes, [&] {
          const GgufHeader header = parse_gguf(image, "model.gguf");
          const GgufValue* read_letters = header.find("unused.letters");
          const GgufValue* read_arrays = header.find("unused.arrays");
          for (std::size_t k : {0, 63, 64, 65, 127, 128, 500'001, 999'999}) {
            if (std::get<std::string>(read_letters->element(k).data) != letters[k]) {
              throw std::logic_error(fmt::format("string {} did not read back", k));
            }
            const GgufValue inner = read_arrays->element(k % 500'000);
            if (inner.size() != 1 || std::get<std::uint64_t>(inner.element(0).data) != k % 500'000 % 251) {
              throw std::logic_error(fmt::format("array {} did not read back", k % 500'000));
            }
          }
        }) == "ok");
  CHECK(parse_gguf(image, "model.gguf").strings("unused.letters") == letters);
}
