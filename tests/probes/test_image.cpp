// Images are decoded completely or refused naming the file: a file cut short at any byte, in every format read,
// and random corruption, never give made-up pixels (stb_image leaves what a short file lacks uninitialised or zero).

#include "attncheck/probes/image.hpp"

#include "tiny_models.hpp"

#include <catch2/catch.hpp>
#include <stb/stb_image_write.h>

#include <fstream>
#include <random>

using namespace attncheck::probes;
using namespace attncheck::probes::testing;
using Catch::Matchers::Contains;

namespace {

constexpr int kWidth = 9, kHeight = 7;

std::vector<std::uint8_t> gradient(int channels) {
  std::vector<std::uint8_t> pixels;
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) {
      for (int c = 0; c < channels; ++c) pixels.push_back(static_cast<std::uint8_t>(17 * x + 29 * y + 61 * c));
    }
  }
  return pixels;
}

std::string written_by_stb(int (*write)(stbi_write_func*, void*, int, int, int, const void*), int channels) {
  std::string out;
  const auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<std::size_t>(size));
  };
  const std::vector<std::uint8_t> pixels = gradient(channels);
  REQUIRE(write(append, &out, kWidth, kHeight, channels, pixels.data()) != 0);
  return out;
}

// The formats attncheck reads, each a small whole file.
std::vector<std::pair<std::string, std::string>> whole_images() {
  std::vector<std::pair<std::string, std::string>> images;
  const std::vector<std::uint8_t> rgb = gradient(3);
  images.emplace_back("ppm", fmt::format("P6\n# a comment\n{} {}\n255\n", kWidth, kHeight) +
                                 std::string(rgb.begin(), rgb.end()));
  std::string grey16 = fmt::format("P5 {} {} 65535\n", kWidth, kHeight);
  for (std::uint8_t v : gradient(1)) grey16 += std::string{static_cast<char>(v), static_cast<char>(255 - v)};
  images.emplace_back("pgm16", grey16);
  std::string rgb16 = fmt::format("P6 {} {} 1000\n", kWidth, kHeight);
  for (std::uint8_t v : rgb) rgb16 += std::string{static_cast<char>(v % 3), static_cast<char>(v)};
  images.emplace_back("ppm16", rgb16);
  images.emplace_back("png",
                      written_by_stb([](stbi_write_func* f, void* c, int w, int h, int n,
                                        const void* d) { return stbi_write_png_to_func(f, c, w, h, n, d, w * n); },
                                     3));
  images.emplace_back("jpg", written_by_stb([](stbi_write_func* f, void* c, int w, int h, int n,
                                               const void* d) { return stbi_write_jpg_to_func(f, c, w, h, n, d, 90); },
                                            3));
  images.emplace_back("bmp", written_by_stb(&stbi_write_bmp_to_func, 3));
  return images;
}

RgbImage read_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary) << bytes;
  return read_image(file);
}

}  // namespace

TEST_CASE("an image cut short at any byte is refused naming the file, in every format read", "[image][hostile]") {
  TempDir dir;
  for (const auto& [format, bytes] : whole_images()) {
    INFO(format);
    const fs::path file = dir.path / ("image." + format);
    const RgbImage whole = read_bytes(file, bytes);
    CHECK(whole.width == kWidth);
    CHECK(whole.height == kHeight);
    for (std::size_t length = 0; length < bytes.size(); ++length) {
      INFO("cut to " << length << " of " << bytes.size() << " bytes");
      CHECK_THROWS_WITH(read_bytes(file, bytes.substr(0, length)), Contains(file.string()));
    }
  }
}

TEST_CASE("formats whose end cannot be checked are refused by name", "[image][hostile]") {
  TempDir dir;
  const fs::path file = dir.path / "image";
  CHECK_THROWS_WITH(read_bytes(file, written_by_stb(&stbi_write_tga_to_func, 3)),
                    Contains(file.string()) && Contains("convert it to PNG"));
  CHECK_THROWS_WITH(read_bytes(file, "GIF89a" + std::string(40, '\0')),
                    Contains("a GIF image") && Contains("convert it to PNG"));
  CHECK_THROWS_WITH(read_bytes(file, "P3 1 1 255 0 0 0"), Contains("PNM"));
}

TEST_CASE("corrupt images decode the same twice or are refused: fuzzed from a fixed seed", "[image][hostile][fuzz]") {
  TempDir dir;
  std::mt19937_64 random(20261121);
  int decoded = 0, refused = 0;
  for (const auto& [format, bytes] : whole_images()) {
    const fs::path file = dir.path / ("image." + format);
    for (int run = 0; run < 150; ++run) {
      std::string mutated = bytes;
      const int flips = 1 + static_cast<int>(random() % 4);
      for (int k = 0; k < flips; ++k) {
        mutated[random() % mutated.size()] = static_cast<char>(random() % 256);
      }
      INFO(format << " run " << run);
      try {
        const RgbImage first = read_bytes(file, mutated);
        const RgbImage second = read_image(file);
        CHECK(first.values == second.values);
        CHECK(first.values.size() == static_cast<std::size_t>(first.width * first.height * 3));
        ++decoded;
      } catch (const InputError& e) {
        CHECK_THAT(e.what(), Contains(file.string()));
        ++refused;
      }
    }
  }
  CHECK(decoded > 0);
  CHECK(refused > 0);
}
