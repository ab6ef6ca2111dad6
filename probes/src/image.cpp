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
  const auto* bytes = reinterpret_cast<const stbi_uc*>(encoded.data());
  const int length = static_cast<int>(encoded.size());
  int width = 0, height = 0, channels = 0;
  if (!stbi_info_from_memory(bytes, length, &width, &height, &channels)) {
    throw InputError(fmt::format("{}: not an image stb_image can decode (PNG, JPEG, PPM/PGM, BMP, TGA, GIF): {}",
                                 file.string(), stbi_failure_reason()));
  }
  records::require_memory(records::saturating_product(
                              {static_cast<std::uint64_t>(width), static_cast<std::uint64_t>(height), 3 * 16}),
                          fmt::format("the {} x {} image {}", width, height, file.string()));
  const std::unique_ptr<stbi_uc, void (*)(void*)> decoded(stbi_load_from_memory(bytes, length, &width, &height,
                                                                                &channels, 3),
                                                          stbi_image_free);
  if (!decoded) throw InputError(fmt::format("{}: cannot decode the image: {}", file.string(), stbi_failure_reason()));
  RgbImage out;
  out.height = height;
  out.width = width;
  out.values.assign(decoded.get(), decoded.get() + static_cast<std::size_t>(width) * height * 3);
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
