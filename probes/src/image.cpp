#include "attncheck/probes/image.hpp"

#include "adapters.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/matrix_io.hpp"
#include "attncheck/records/memory_budget.hpp"

#include <stb_image.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <span>
#include <string_view>
#include <cmath>
#include <memory>

namespace attncheck::probes {

namespace fs = std::filesystem;

Pixels read_pixels(const fs::path& npy) {
  records::NpyArray array = records::read_npy_array(npy, 3, records::memory_budget_bytes());
  Pixels out;
  out.channels = static_cast<std::int64_t>(array.shape[0]);
  out.height = static_cast<std::int64_t>(array.shape[1]);
  out.width = static_cast<std::int64_t>(array.shape[2]);
  out.values = std::move(array.values);
  return out;
}

namespace {

// stb_image does not check that a file holds all the bytes its header promises: a binary PNM or TGA cut short
// decodes with the rest of the pixels left as whatever the buffer held (other values each run), a JPEG or BMP with
// zeros. So an image is decoded only in a format whose end can be found in its bytes, and only when it is there.
// The checks follow each format's own framing; what is inside a complete frame is the decoder's to judge.
class CompleteImage {
 public:
  CompleteImage(std::span<const std::byte> bytes, const fs::path& file) : bytes_(bytes), file_(file) {}

  void check() const {
    if (starts_with("\x89PNG\r\n\x1a\n")) return png();
    if (starts_with("\xff\xd8")) return jpeg();
    if (starts_with("P5") || starts_with("P6")) return pnm();
    if (starts_with("BM")) return bmp();
    const char* refused = starts_with("GIF8")                                  ? "GIF"
                          : starts_with("8BPS")                                ? "PSD"
                          : starts_with("#?RADIANCE") || starts_with("#?RGBE") ? "HDR"
                          : starts_with("P1") || starts_with("P2") || starts_with("P3") || starts_with("P4")
                              ? "text or 1-bit PNM"
                              : nullptr;
    throw InputError(fmt::format(
        "{}: {}: attncheck reads PNG, JPEG, binary PPM/PGM (P6/P5) and uncompressed BMP, formats whose end it can "
        "check (a file cut short is refused rather than decoded into made-up pixels); convert it to PNG",
        file_.string(), refused ? fmt::format("a {} image", refused) : std::string("not an image attncheck reads")));
  }

 private:
  bool starts_with(std::string_view magic) const {
    return bytes_.size() >= magic.size() && std::memcmp(bytes_.data(), magic.data(), magic.size()) == 0;
  }
  unsigned byte(std::size_t at) const { return std::to_integer<unsigned>(bytes_[at]); }
  std::uint64_t big_endian(std::size_t at, int width) const {
    std::uint64_t value = 0;
    for (int k = 0; k < width; ++k) value = value << 8 | byte(at + static_cast<std::size_t>(k));
    return value;
  }
  std::uint64_t little_endian(std::size_t at, int width) const {
    std::uint64_t value = 0;
    for (int k = width; k-- > 0;) value = value << 8 | byte(at + static_cast<std::size_t>(k));
    return value;
  }
  [[noreturn]] void cut_short(const std::string& what) const {
    throw InputError(
        fmt::format("{}: the image is cut short: {} (the file has {} bytes)", file_.string(), what, bytes_.size()));
  }
  void need(std::uint64_t end, const std::string& what) const {
    if (end > bytes_.size()) cut_short(fmt::format("{} ends at byte {}", what, end));
  }

  // Chunks of length, type, data and CRC, up to IEND.
  void png() const {
    for (std::uint64_t at = 8;;) {
      need(at + 8, fmt::format("the chunk header at byte {}", at));
      const std::uint64_t end = at + 12 + big_endian(static_cast<std::size_t>(at), 4);
      const bool last = std::memcmp(bytes_.data() + at + 4, "IEND", 4) == 0;
      need(end, fmt::format("the chunk at byte {}", at));
      if (last) return;
      at = end;
    }
  }

  // Marker segments up to the end-of-image marker; after each start of scan, entropy-coded data in which 0xFF is
  // followed only by 0x00 (a stuffed byte) or a restart marker until the next marker.
  void jpeg() const {
    std::uint64_t at = 2;
    for (;;) {
      need(at + 2, fmt::format("the marker at byte {}", at));
      if (byte(at) != 0xFF) {
        throw InputError(fmt::format("{}: not a JPEG stb_image can decode: no marker at byte {}", file_.string(), at));
      }
      const unsigned marker = byte(at + 1);
      at += 2;
      if (marker == 0xFF) {  // fill byte
        --at;
        continue;
      }
      if (marker == 0xD9) return;
      if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) continue;
      need(at + 2, fmt::format("the length of the segment at byte {}", at - 2));
      const std::uint64_t length = big_endian(static_cast<std::size_t>(at), 2);
      need(at + length, fmt::format("the segment at byte {}", at - 2));
      at += std::max<std::uint64_t>(length, 2);
      if (marker != 0xDA) continue;
      for (;; ++at) {
        need(at + 2, "the scan data");
        const unsigned next = byte(at + 1);
        if (byte(at) == 0xFF && next != 0x00 && !(next >= 0xD0 && next <= 0xD7)) break;
      }
    }
  }

  // "P6 width height maxval" and one whitespace byte (comments allowed, as stb_image reads them), then
  // width x height samples of 1 (P5) or 3 (P6) channels, each one byte or, above 255, two.
  void pnm() const {
    std::size_t at = 2;
    const auto number = [&](const char* what) {
      for (;;) {
        while (at < bytes_.size() && std::isspace(static_cast<int>(byte(at)))) ++at;
        if (at >= bytes_.size() || byte(at) != '#') break;
        while (at < bytes_.size() && byte(at) != '\n' && byte(at) != '\r') ++at;
      }
      std::uint64_t value = 0;
      const std::size_t first = at;
      while (at < bytes_.size() && std::isdigit(static_cast<int>(byte(at))) && value < (std::uint64_t{1} << 40)) {
        value = value * 10 + (byte(at++) - '0');
      }
      if (at == first) cut_short(fmt::format("the header has no {}", what));
      return value;
    };
    const std::uint64_t width = number("width"), height = number("height"), maxval = number("maximum value");
    const std::uint64_t channels = starts_with("P6") ? 3 : 1, sample = maxval > 255 ? 2 : 1;
    const std::uint64_t pixels = records::saturating_product({width, height, channels, sample});
    need(records::saturating_sum({at + 1, pixels}),
         fmt::format("{} x {} pixels of {} byte{} per channel", width, height, sample, sample > 1 ? "s" : ""));
  }

  // The file header's offset of the pixels, then |height| rows of width x bits, each padded to 4 bytes.
  void bmp() const {
    need(30, "the BMP header");
    const std::uint64_t offset = little_endian(10, 4), header = little_endian(14, 4);
    std::uint64_t width = 0, height = 0, bits = 0, compression = 0;
    if (header == 12) {
      width = little_endian(18, 2), height = little_endian(20, 2), bits = little_endian(24, 2);
    } else {
      need(34, "the BMP header");
      width = little_endian(18, 4);
      const auto signed_height = static_cast<std::int32_t>(little_endian(22, 4));
      height =
          static_cast<std::uint64_t>(signed_height < 0 ? -static_cast<std::int64_t>(signed_height) : signed_height);
      bits = little_endian(28, 2), compression = little_endian(30, 4);
    }
    if (compression != 0 && compression != 3) {
      throw InputError(
          fmt::format("{}: a compressed BMP (compression {}): convert it to PNG", file_.string(), compression));
    }
    const std::uint64_t row =
        records::saturating_product({width, bits}) / 32 * 4 + (records::saturating_product({width, bits}) % 32 ? 4 : 0);
    need(records::saturating_sum({offset, records::saturating_product({row, height})}),
         fmt::format("{} rows of {} bytes from byte {}", height, row, offset));
  }

  std::span<const std::byte> bytes_;
  const fs::path& file_;
};

}  // namespace

RgbImage read_image(const fs::path& file) {
  const records::InputFile in(file);
  // A decoded pixel takes at least as much as an encoded one in every format but the compressed ones, whose
  // dimensions are checked below before decoding.
  records::require_memory(in.size(), fmt::format("reading the image {}", file.string()));
  std::vector<std::byte> encoded(in.size());
  in.read_at(0, encoded);
  if (encoded.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(fmt::format("{}: {} bytes is too large an image file", file.string(), encoded.size()));
  }
  CompleteImage(encoded, file).check();
  const auto* bytes = reinterpret_cast<const stbi_uc*>(encoded.data());
  const int length = static_cast<int>(encoded.size());
  int width = 0, height = 0, channels = 0;
  if (!stbi_info_from_memory(bytes, length, &width, &height, &channels)) {
    throw InputError(fmt::format("{}: not an image stb_image can decode: {}", file.string(), stbi_failure_reason()));
  }
  records::require_memory(records::saturating_product(
                              {static_cast<std::uint64_t>(width), static_cast<std::uint64_t>(height), 3 * 16}),
                          fmt::format("the {} x {} image {}", width, height, file.string()));
  // In the file's own channels: stb_image's conversion to 3 channels treats 16-bit samples as 8-bit ones (a 16-bit
  // PGM came out as a third of its pixels and bytes read past the buffer), so grey is widened to RGB here.
  const std::unique_ptr<stbi_uc, void (*)(void*)> decoded(stbi_load_from_memory(bytes, length, &width, &height,
                                                                                &channels, 0),
                                                          stbi_image_free);
  if (!decoded) throw InputError(fmt::format("{}: cannot decode the image: {}", file.string(), stbi_failure_reason()));
  if (channels < 1 || channels > 4) {
    throw InputError(fmt::format("{}: an image of {} channels (1 to 4 are read)", file.string(), channels));
  }
  RgbImage out;
  out.height = height;
  out.width = width;
  const auto pixels = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  out.values.resize(pixels * 3);
  // Grey (and grey + alpha) replicated to three channels, alpha dropped.
  const bool grey = channels < 3;
  for (std::size_t p = 0; p < pixels; ++p) {
    for (std::size_t c = 0; c < 3; ++c) {
      out.values[p * 3 + c] = decoded.get()[p * static_cast<std::size_t>(channels) + (grey ? 0 : c)];
    }
  }
  return out;
}

std::string ImagePreprocessing::describe() const {
  std::string out = from_file ? "preprocessor_config.json: " : "no preprocessor_config.json, ImageNet defaults: ";
  if (resize) {
    out += shortest_edge > 0 ? fmt::format("resize (shorter side {})", shortest_edge)
                             : fmt::format("resize to {} x {}", resize_height, resize_width);
    out += resample == Resample::bicubic ? " bicubic, " : " bilinear, ";
  }
  if (center_crop) out += fmt::format("center crop {} x {}, ", crop_height, crop_width);
  if (rescale) out += fmt::format("rescale x {:.6g}, ", rescale_factor);
  if (normalize)
    out += fmt::format("normalize mean [{:.4g}] std [{:.4g}]", fmt::join(mean, ", "), fmt::join(std, ", "));
  return out;
}

namespace {

std::int64_t side_of(const nlohmann::json& object, const char* key, const fs::path& file, const char* where) {
  if (!object.contains(key)) return 0;
  const auto& value = object[key];
  if (!value.is_number_integer() || value.get<std::int64_t>() <= 0 || value.get<std::int64_t>() > 65536) {
    throw InputError(fmt::format("{}: \"{}\".\"{}\" is {}, not a positive number of pixels (at most 65536)",
                                 file.string(), where, key, records::json_excerpt(value)));
  }
  return value.get<std::int64_t>();
}

std::array<double, 3> triple(const nlohmann::json& config, const char* key, std::array<double, 3> fallback,
                             const fs::path& file, bool positive) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const auto& value = config[key];
  std::array<double, 3> out{};
  const bool scalar = value.is_number();
  if (!scalar && !(value.is_array() && value.size() == 3 &&
                   std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_number(); }))) {
    throw InputError(fmt::format("{}: \"{}\" is {}, not a number or a list of 3 numbers", file.string(), key,
                                 records::json_excerpt(value)));
  }
  for (std::size_t c = 0; c < 3; ++c) {
    out[c] = scalar ? value.get<double>() : value[c].get<double>();
    if (!std::isfinite(out[c]) || (positive && !(out[c] > 0))) {
      throw InputError(fmt::format("{}: \"{}\" is {}: {}", file.string(), key, records::json_excerpt(value),
                                   positive ? "every value must be positive" : "every value must be finite"));
    }
  }
  return out;
}

}  // namespace

ImagePreprocessing read_preprocessing(const fs::path& model, const ModelConfig& config) {
  using detail::value_or;
  const fs::path folder = fs::is_directory(model) ? model : model.parent_path();
  const fs::path file = folder / "preprocessor_config.json";
  ImagePreprocessing out;
  if (std::error_code absent; !fs::exists(file, absent)) {
    out.resize_height = out.resize_width = config.image_size;
    return out;
  }
  out.from_file = true;
  const nlohmann::json json = records::read_json_file(file);
  if (!json.is_object()) throw InputError(fmt::format("{}: not a JSON object", file.string()));
  out.resize = value_or<bool>(json, "do_resize", true, file);
  if (out.resize) {
    const nlohmann::json size = json.contains("size") ? json["size"] : nlohmann::json(config.image_size);
    if (size.is_number_integer()) {
      out.resize_height = out.resize_width = side_of(nlohmann::json{{"size", size}}, "size", file, "size");
    } else if (size.is_object()) {
      out.shortest_edge = side_of(size, "shortest_edge", file, "size");
      out.resize_height = side_of(size, "height", file, "size");
      out.resize_width = side_of(size, "width", file, "size");
      if (size.contains("longest_edge")) {
        throw InputError(
            fmt::format("{}: \"size\".\"longest_edge\" is not supported (shortest_edge, or height and width)",
                        file.string()));
      }
    }
    if (out.shortest_edge == 0 && (out.resize_height == 0 || out.resize_width == 0)) {
      throw InputError(fmt::format("{}: \"size\" is {}: give shortest_edge, or height and width", file.string(),
                                   records::json_excerpt(size)));
    }
    const auto resample = value_or<std::int64_t>(json, "resample", 2, file);
    if (resample != 2 && resample != 3) {
      throw InputError(
          fmt::format("{}: \"resample\" {} is not supported (2 bilinear, 3 bicubic)", file.string(), resample));
    }
    out.resample = static_cast<Resample>(resample);
  }
  out.center_crop = value_or<bool>(json, "do_center_crop", false, file);
  if (out.center_crop) {
    const nlohmann::json crop = json.contains("crop_size") ? json["crop_size"] : nlohmann::json::object();
    if (crop.is_number_integer()) {
      out.crop_height = out.crop_width = side_of(nlohmann::json{{"crop_size", crop}}, "crop_size", file, "crop_size");
    } else if (crop.is_object()) {
      out.crop_height = side_of(crop, "height", file, "crop_size");
      out.crop_width = side_of(crop, "width", file, "crop_size");
    }
    if (out.crop_height == 0 || out.crop_width == 0) {
      throw InputError(
          fmt::format("{}: \"crop_size\" is {}: give height and width", file.string(), records::json_excerpt(crop)));
    }
  }
  out.rescale = value_or<bool>(json, "do_rescale", true, file);
  out.rescale_factor = value_or<double>(json, "rescale_factor", 1.0 / 255, file);
  if (!std::isfinite(out.rescale_factor)) {
    throw InputError(fmt::format("{}: \"rescale_factor\" {} is not finite", file.string(), out.rescale_factor));
  }
  out.normalize = value_or<bool>(json, "do_normalize", true, file);
  out.mean = triple(json, "image_mean", out.mean, file, false);
  out.std = triple(json, "image_std", out.std, file, true);
  return out;
}

namespace {

// Pillow's Resample.c: the filters, their supports, and 8-bit fixed point with 22 fraction bits.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear_filter(double x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

struct Taps {
  std::int64_t first = 0, count = 0;
  std::vector<std::int32_t> weights;
};

// precompute_coeffs and normalize_coeffs_8bpc, step for step.
std::vector<Taps> pillow_taps(std::int64_t in_size, std::int64_t out_size, Resample resample) {
  const double support_1 = resample == Resample::bicubic ? 2.0 : 1.0;
  const auto filter = resample == Resample::bicubic ? &bicubic_filter : &bilinear_filter;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = support_1 * filter_scale;
  std::vector<Taps> out(static_cast<std::size_t>(out_size));
  for (std::int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    // C's (int) conversion truncates toward zero.
    std::int64_t first = std::max<std::int64_t>(static_cast<std::int64_t>(center - support + 0.5), 0);
    std::int64_t last = std::min<std::int64_t>(static_cast<std::int64_t>(center + support + 0.5), in_size);
    std::vector<double> w;
    double total = 0;
    for (std::int64_t x = first; x < last; ++x) {
      w.push_back(filter((static_cast<double>(x) - center + 0.5) * (1.0 / filter_scale)));
      total += w.back();
    }
    Taps& taps = out[static_cast<std::size_t>(o)];
    taps.first = first;
    taps.count = last - first;
    for (double v : w) {
      if (total != 0) v /= total;
      const double fixed = v * static_cast<double>(1 << kPrecisionBits);
      taps.weights.push_back(static_cast<std::int32_t>(v < 0 ? -0.5 + fixed : 0.5 + fixed));
    }
  }
  return out;
}

std::uint8_t clip8(std::int64_t value) {
  if (value >= (std::int64_t{1} << kPrecisionBits << 8)) return 255;
  if (value <= 0) return 0;
  return static_cast<std::uint8_t>(value >> kPrecisionBits);
}

}  // namespace

RgbImage resize_like_pillow(const RgbImage& image, std::int64_t height, std::int64_t width, Resample resample) {
  RgbImage current = image;
  if (width != current.width) {
    const auto taps = pillow_taps(current.width, width, resample);
    RgbImage next{current.height, width,
                  std::vector<std::uint8_t>(static_cast<std::size_t>(current.height * width * 3))};
    for (std::int64_t y = 0; y < current.height; ++y) {
      for (std::int64_t x = 0; x < width; ++x) {
        const Taps& t = taps[static_cast<std::size_t>(x)];
        for (int c = 0; c < 3; ++c) {
          std::int64_t sum = std::int64_t{1} << (kPrecisionBits - 1);
          for (std::int64_t k = 0; k < t.count; ++k) {
            sum += static_cast<std::int64_t>(
                       current.values[static_cast<std::size_t>((y * current.width + t.first + k) * 3 + c)]) *
                   t.weights[static_cast<std::size_t>(k)];
          }
          next.values[static_cast<std::size_t>((y * width + x) * 3 + c)] = clip8(sum);
        }
      }
    }
    current = std::move(next);
  }
  if (height != current.height) {
    const auto taps = pillow_taps(current.height, height, resample);
    RgbImage next{height, current.width,
                  std::vector<std::uint8_t>(static_cast<std::size_t>(height * current.width * 3))};
    for (std::int64_t y = 0; y < height; ++y) {
      const Taps& t = taps[static_cast<std::size_t>(y)];
      for (std::int64_t x = 0; x < current.width; ++x) {
        for (int c = 0; c < 3; ++c) {
          std::int64_t sum = std::int64_t{1} << (kPrecisionBits - 1);
          for (std::int64_t k = 0; k < t.count; ++k) {
            sum += static_cast<std::int64_t>(
                       current.values[static_cast<std::size_t>(((t.first + k) * current.width + x) * 3 + c)]) *
                   t.weights[static_cast<std::size_t>(k)];
          }
          next.values[static_cast<std::size_t>((y * current.width + x) * 3 + c)] = clip8(sum);
        }
      }
    }
    current = std::move(next);
  }
  return current;
}

Pixels preprocess_image(const RgbImage& image, const ImagePreprocessing& p) {
  RgbImage current = image;
  if (p.resize) {
    std::int64_t height = p.resize_height, width = p.resize_width;
    if (p.shortest_edge > 0) {
      // Hugging Face's get_resize_output_image_size: the longer side int(size * long / short).
      const bool portrait = current.height > current.width;
      const std::int64_t shorter = std::min(current.height, current.width),
                         longer = std::max(current.height, current.width);
      const auto scaled = static_cast<std::int64_t>(static_cast<double>(p.shortest_edge) * static_cast<double>(longer) /
                                                    static_cast<double>(shorter));
      height = portrait ? scaled : p.shortest_edge;
      width = portrait ? p.shortest_edge : scaled;
    }
    records::require_memory(records::saturating_product(
                                {static_cast<std::uint64_t>(height), static_cast<std::uint64_t>(width), 3 * 16}),
                            fmt::format("resizing the image to {} x {}", height, width));
    current = resize_like_pillow(current, height, width, p.resample);
  }
  std::int64_t top = 0, left = 0, height = current.height, width = current.width;
  if (p.center_crop) {
    if (p.crop_height > current.height || p.crop_width > current.width) {
      throw InputError(fmt::format("the image is {} x {} after resizing, smaller than the {} x {} center crop",
                                   current.height, current.width, p.crop_height, p.crop_width));
    }
    top = (current.height - p.crop_height) / 2;
    left = (current.width - p.crop_width) / 2;
    height = p.crop_height;
    width = p.crop_width;
  }
  Pixels out;
  out.channels = 3;
  out.height = height;
  out.width = width;
  out.values.resize(static_cast<std::size_t>(3 * height * width));
  for (std::int64_t c = 0; c < 3; ++c) {
    for (std::int64_t y = 0; y < height; ++y) {
      for (std::int64_t x = 0; x < width; ++x) {
        double v = current.values[static_cast<std::size_t>(((top + y) * current.width + left + x) * 3 + c)];
        if (p.rescale) v *= p.rescale_factor;
        if (p.normalize) v = (v - p.mean[static_cast<std::size_t>(c)]) / p.std[static_cast<std::size_t>(c)];
        out.values[static_cast<std::size_t>((c * height + y) * width + x)] = v;
      }
    }
  }
  return out;
}

}  // namespace attncheck::probes
