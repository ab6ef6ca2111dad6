#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include "attncheck/probes/safetensors.hpp"

#include "tiny_models.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace attncheck::probes;
using attncheck::probes::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> image(const std::string& header, const std::vector<std::byte>& data = {},
                             std::uint64_t declared_length = UINT64_MAX) {
  std::vector<std::byte> out(8);
  const std::uint64_t length = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::memcpy(out.data(), &length, 8);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<std::byte> float_bytes(std::initializer_list<float> values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

void expect_error(const std::vector<std::byte>& bytes, const std::string& fragment) {
  try {
    parse_safetensors(bytes, "model.safetensors");
    FAIL("no error for input that should be refused: " << fragment);
  } catch (const InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("model.safetensors") != std::string::npos);
    CHECK(message.find(fragment) != std::string::npos);
  }
}

void write_file(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("a well-formed header is parsed with shapes, dtypes and offsets", "[safetensors]") {
  const auto bytes = image(R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                           R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})",
                           float_bytes({1, 2, 3, 4}));
  const auto header = parse_safetensors(bytes, "model.safetensors");
  REQUIRE(header.tensors.size() == 2);
  CHECK(header.tensors[0].name == "a");  // sorted by offset
  CHECK(header.tensors[0].shape == std::vector<std::int64_t>{1, 2});
  CHECK(header.tensors[1].begin == 8);
  CHECK(header.metadata.at("format") == "pt");
}

TEST_CASE("malformed files are refused with a message naming file and tensor", "[safetensors]") {
  const auto data = float_bytes({1, 2});
  SECTION("too short") { expect_error(std::vector<std::byte>(5), "not a safetensors file: 5 bytes is too short"); }
  SECTION("header length beyond the file") {
    expect_error(image(R"({})", {}, 1000),
                 "not a safetensors file: header length 1000 (its first 8 bytes, little-endian) exceeds the file "
                 "(10 bytes)");
  }
  SECTION("header length that would overflow") {
    expect_error(image(R"({})", {}, UINT64_MAX - 3), "not a safetensors file: header length 18446744073709551612");
  }
  SECTION("bad JSON") { expect_error(image(R"({"a": [)"), "malformed JSON"); }
  SECTION("JSON that is not an object") { expect_error(image(R"([1,2])"), "not an object"); }
  SECTION("entry not an object") { expect_error(image(R"({"w": 3})"), "tensor 'w': entry is not an object"); }
  SECTION("missing key") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[2]}})", data), "tensor 'w': no \"data_offsets\"");
  }
  SECTION("unknown dtype") {
    expect_error(image(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data), "unknown dtype 'F33'");
  }
  SECTION("negative dimension") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data), "shape entry -2");
  }
  SECTION("fractional dimension") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data), "shape entry 2.5");
  }
  SECTION("offsets out of range") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data),
                 "tensor 'w': data_offsets [0, 16] run beyond");
  }
  SECTION("offsets reversed") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data), "end before they begin");
  }
  SECTION("offsets not a pair") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data), "array of two offsets");
  }
  SECTION("byte count does not match the shape") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
                 "tensor 'w': shape [3] of F32 needs 12 bytes");
  }
  SECTION("byte count does not match the dtype") {
    expect_error(image(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", data), "needs 16 bytes");
  }
  SECTION("a shape whose element count overflows") {
    expect_error(image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", data),
                 "needs more than the file's");
  }
  SECTION("overlapping tensors") {
    expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       data),
                 "overlap");
  }
  SECTION("duplicate names") {
    expect_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       data),
                 "tensor 'a' appears twice");
  }
  SECTION("metadata that is not strings") {
    expect_error(image(R"({"__metadata__":{"step":3}})"), "__metadata__ entry 'step'");
  }
}

TEST_CASE("every dtype is widened to the exact double", "[safetensors]") {
  const auto bits = [](auto v) {
    std::vector<std::byte> b(sizeof v);
    std::memcpy(b.data(), &v, sizeof v);
    return b;
  };
  CHECK(element_to_double(DType::F64, bits(0.1).data()) == 0.1);
  CHECK(element_to_double(DType::F32, bits(0.1f).data()) == static_cast<double>(0.1f));
  CHECK(element_to_double(DType::F16, bits(std::uint16_t{0x3c00}).data()) == 1.0);
  CHECK(element_to_double(DType::F16, bits(std::uint16_t{0xc000}).data()) == -2.0);
  CHECK(element_to_double(DType::F16, bits(std::uint16_t{0x0001}).data()) == std::ldexp(1.0, -24));  // subnormal
  CHECK(element_to_double(DType::F16, bits(std::uint16_t{0x7bff}).data()) == 65504.0);
  CHECK(std::isinf(element_to_double(DType::F16, bits(std::uint16_t{0x7c00}).data())));
  CHECK(element_to_double(DType::BF16, bits(std::uint16_t{0x3f80}).data()) == 1.0);
  CHECK(element_to_double(DType::BF16, bits(std::uint16_t{0xc0a0}).data()) == -5.0);
  CHECK(element_to_double(DType::F8_E4M3, bits(std::uint8_t{0x38}).data()) == 1.0);
  CHECK(element_to_double(DType::F8_E4M3, bits(std::uint8_t{0x7e}).data()) == 448.0);
  CHECK(std::isnan(element_to_double(DType::F8_E4M3, bits(std::uint8_t{0x7f}).data())));
  CHECK(element_to_double(DType::F8_E5M2, bits(std::uint8_t{0x3c}).data()) == 1.0);
  CHECK(element_to_double(DType::F8_E5M2, bits(std::uint8_t{0x7b}).data()) == 57344.0);
  CHECK(element_to_double(DType::I64, bits(std::int64_t{-7}).data()) == -7.0);
  CHECK(element_to_double(DType::I32, bits(std::int32_t{-70000}).data()) == -70000.0);
  CHECK(element_to_double(DType::I16, bits(std::int16_t{-300}).data()) == -300.0);
  CHECK(element_to_double(DType::I8, bits(std::int8_t{-3}).data()) == -3.0);
  CHECK(element_to_double(DType::U64, bits(std::uint64_t{1} << 40).data()) == std::ldexp(1.0, 40));
  CHECK(element_to_double(DType::U32, bits(std::uint32_t{4000000000u}).data()) == 4e9);
  CHECK(element_to_double(DType::U16, bits(std::uint16_t{65535}).data()) == 65535.0);
  CHECK(element_to_double(DType::U8, bits(std::uint8_t{255}).data()) == 255.0);
  CHECK(element_to_double(DType::BOOL, bits(std::uint8_t{2}).data()) == 1.0);
  for (auto name : {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U64", "U32", "U16",
                    "U8", "BOOL"}) {
    const auto dtype = parse_dtype(name);
    REQUIRE(dtype);
    CHECK(dtype_name(*dtype) == name);
  }
}

TEST_CASE("F16 widening is exact and ordered over every finite half", "[safetensors]") {
  // Positive finite halves in bit order are strictly increasing values, each with at most 11 significant bits.
  double previous = -1;
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const double value = element_to_double(DType::F16, reinterpret_cast<const std::byte*>(&half));
    REQUIRE(value > previous);
    previous = value;
    int exponent;
    const double scaled = std::ldexp(std::frexp(value, &exponent), 11);
    REQUIRE(scaled == std::floor(scaled));
    const auto negative = static_cast<std::uint16_t>(h | 0x8000);
    REQUIRE(element_to_double(DType::F16, reinterpret_cast<const std::byte*>(&negative)) == -value);
  }
  CHECK(previous == 65504.0);
}

TEST_CASE("written files read back exactly, through a folder and a sharded index", "[safetensors]") {
  TempDir dir;
  const fs::path file = dir.path / "model.safetensors";
  write_safetensors(file, {{"w", {2, 3}, {1, 2, 3, 4, 5, 6}, DType::F64}, {"b", {3}, {0.5, -0.25, 8}, DType::F32}},
                    {{"format", "pt"}});
  CHECK_FALSE(fs::exists(dir.path / "model.safetensors.tmp"));
  const auto from_file = Checkpoint::open(file);
  const Matrix w = from_file.matrix("w", 2, 3);
  CHECK(w(1, 2) == 6.0);
  CHECK(from_file.vector("b", 3)[1] == -0.25);
  const std::int64_t ids[] = {1, 0};
  CHECK(from_file.rows("w", ids)(0, 0) == 4.0);
  CHECK(from_file.root_mean_square("b") == Approx(std::sqrt((0.25 + 0.0625 + 64) / 3)));
  CHECK(Checkpoint::open(dir.path).contains("w"));

  SECTION("shape and lookup errors name the tensor and file") {
    CHECK_THROWS_WITH(from_file.matrix("w", 3, 2), Catch::Contains("tensor 'w' in") && Catch::Contains("[2, 3]"));
    CHECK_THROWS_WITH(from_file.vector("q"),
                      Catch::Contains("tensor 'q' is missing from") && Catch::Contains("model.safetensors"));
    const std::int64_t bad[] = {2};
    CHECK_THROWS_WITH(from_file.rows("w", bad), Catch::Contains("row 2 is outside its 2 rows"));
  }
  SECTION("non-finite weights are refused") {
    write_safetensors(dir.path / "nan.safetensors", {{"w", {2}, {1, std::nan("")}, DType::F32}});
    CHECK_THROWS_WITH(Checkpoint::open(dir.path / "nan.safetensors").vector("w"),
                      Catch::Contains("tensor 'w'") && Catch::Contains("element 1 is nan"));
  }
  SECTION("sharded") {
    const fs::path sharded = dir.path / "sharded";
    fs::create_directories(sharded);
    write_safetensors(sharded / "part-1.safetensors", {{"w", {2}, {1, 2}}});
    write_safetensors(sharded / "part-2.safetensors", {{"b", {1}, {3}}});
    nlohmann::json index = {{"weight_map", {{"w", "part-1.safetensors"}, {"b", "part-2.safetensors"}}}};
    std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
    const auto checkpoint = Checkpoint::open(sharded);
    CHECK(checkpoint.vector("b")[0] == 3.0);
    CHECK(checkpoint.vector("w")[1] == 2.0);
    index["weight_map"]["c"] = "part-2.safetensors";
    std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
    CHECK_THROWS_WITH(Checkpoint::open(sharded),
                      Catch::Contains("model.safetensors.index.json: tensor 'c' is listed in shard"));
    index["weight_map"] = {{"w", "../model.safetensors"}};
    std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
    CHECK_THROWS_WITH(Checkpoint::open(sharded), Catch::Contains("is not a file name in the folder"));
  }
  SECTION("a truncated file on disk") {
    write_file(dir.path / "cut.safetensors",
               image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", float_bytes({1, 2})));
    CHECK_THROWS_WITH(Checkpoint::open(dir.path / "cut.safetensors"),
                      Catch::Contains("cut.safetensors") && Catch::Contains("tensor 'w'"));
    write_file(dir.path / "empty.safetensors", {});
    CHECK_THROWS_WITH(Checkpoint::open(dir.path / "empty.safetensors"), Catch::Contains("too short"));
    CHECK_THROWS_WITH(Checkpoint::open(dir.path / "absent.safetensors"), Catch::Contains("no such file"));
  }
  SECTION("a folder's config.json given for the model: the folder is asked for, not a header length read") {
    write_file(dir.path / "config.json", {std::byte{'{'}, std::byte{'}'}});
    CHECK_THROWS_WITH(Checkpoint::open(dir.path / "config.json"),
                      Catch::Contains("give the model's folder (" + dir.path.string() + ")"));
  }
}

TEST_CASE(
    "float32 matrices for the mixed-precision forward: float32 read as stored, wider types rounded, range checked",
    "[safetensors]") {
  TempDir dir;
  const double third = 1.0 / 3;
  write_safetensors(dir.path / "m.safetensors", {{"f32", {2, 2}, {1.5, -third, 1e30, 7}, DType::F32},
                                                 {"f64", {2, 1}, {third, -2}, DType::F64},
                                                 {"huge", {3}, {1, -4e38, 2}, DType::F64},
                                                 {"nan", {2}, {0, std::nan("")}, DType::F32}});
  const auto checkpoint = Checkpoint::open(dir.path / "m.safetensors");
  const FloatMatrix f32 = checkpoint.float_matrix("f32", 2, 2);
  CHECK(f32 == checkpoint.matrix("f32").cast<float>());
  CHECK(f32(0, 1) == static_cast<float>(-third));
  const FloatMatrix f64 = checkpoint.float_matrix("f64", 2, 1);
  CHECK(f64(0, 0) == static_cast<float>(third));  // rounded to nearest, not truncated
  CHECK(f64(1, 0) == -2.0f);
  const std::string file = (dir.path / "m.safetensors").string();
  CHECK_THROWS_WITH(checkpoint.float_matrix("huge"),
                    Catch::Contains("tensor 'huge' in " + file) &&
                        Catch::Contains("element 1 is -4e+38, beyond float32's range") &&
                        Catch::Contains("--precision double"));
  CHECK_THROWS_WITH(checkpoint.float_matrix("nan"),
                    Catch::Contains("tensor 'nan' in " + file) && Catch::Contains("element 1 is nan"));
  CHECK_THROWS_WITH(checkpoint.float_matrix("f64", 1, 2), Catch::Contains("has shape [2, 1], expected [1, 2]"));
}

TEST_CASE("the parser never crashes on mutated files and accepts only consistent ones", "[safetensors][property]") {
  const auto valid = image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})",
                           float_bytes({1, 2, 3, 4}));
  rc::prop("any byte flips or truncation either parse consistently or raise InputError", [&] {
    auto bytes = valid;
    const auto flips = *rc::gen::inRange(1, 6);
    for (int k = 0; k < flips; ++k) {
      const auto at = *rc::gen::inRange<std::size_t>(0, bytes.size());
      bytes[at] = static_cast<std::byte>(*rc::gen::arbitrary<std::uint8_t>());
    }
    bytes.resize(*rc::gen::inRange<std::size_t>(0, bytes.size() + 1));
    try {
      const auto header = parse_safetensors(bytes, "mutated");
      const std::size_t data = bytes.size() - header.data_begin;
      for (const auto& t : header.tensors) {
        RC_ASSERT(t.begin <= t.end);
        RC_ASSERT(t.end <= data);
        RC_ASSERT(static_cast<std::size_t>(t.element_count()) * dtype_size(t.dtype) == t.end - t.begin);
      }
    } catch (const InputError&) {
    }
  });
}
