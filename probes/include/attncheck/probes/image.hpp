#pragma once
// Images for the vision models (ViT, DINOv2, CLIP): a model's pixel_values from a NumPy file, or an image file
// decoded by stb_image and preprocessed as the checkpoint's preprocessor_config.json says (Hugging Face's
// ViTImageProcessor and BitImageProcessor steps: resize with Pillow's resampling, center crop, rescale,
// normalize).

#include "attncheck/probes/model.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace attncheck::probes {

// channels x height x width, float32 or float64 .npy, already normalized; InputError naming the file otherwise.
Pixels read_pixels(const std::filesystem::path& npy);

// 8-bit RGB, height x width x 3, row-major (grey images are replicated to three channels, alpha is dropped).
struct RgbImage {
  std::int64_t height = 0, width = 0;
  std::vector<std::uint8_t> values;
};

// PNG, JPEG, binary PPM/PGM and uncompressed BMP as stb_image decodes them (its JPEG decoder can differ from
// libjpeg's by a few levels per pixel), once the file is seen to hold every byte its format frames (a file cut
// short is refused, never decoded into made-up pixels); formats whose end cannot be checked (GIF, TGA, PSD, HDR)
// are refused. InputError naming the file when it cannot be decoded or would not fit in memory.
RgbImage read_image(const std::filesystem::path& file);

// Pillow's resampling filters as Hugging Face's processors give them ("resample").
enum class Resample { bilinear = 2, bicubic = 3 };

struct ImagePreprocessing {
  bool resize = true;
  // Either the shorter side scaled to shortest_edge (the longer one in proportion, truncated), or exactly
  // resize_height x resize_width.
  std::int64_t shortest_edge = 0, resize_height = 0, resize_width = 0;
  Resample resample = Resample::bicubic;
  bool center_crop = false;
  std::int64_t crop_height = 0, crop_width = 0;
  bool rescale = true;
  double rescale_factor = 1.0 / 255;
  bool normalize = true;
  std::array<double, 3> mean{0.485, 0.456, 0.406}, std{0.229, 0.224, 0.225};  // ImageNet's
  bool from_file = false;  // false: the ImageNet defaults at the model's image size, no preprocessor_config.json
  std::string describe() const;
};

// preprocessor_config.json beside MODEL (folder or file), or, when absent, ImageNet's mean and std after a
// bicubic resize to the model's image_size square. Errors name the file and the key.
ImagePreprocessing read_preprocessing(const std::filesystem::path& model, const ModelConfig& config);

// Pillow's Image.resize on 8-bit RGB (its fixed-point convolution, bit for bit): horizontal pass, then vertical.
RgbImage resize_like_pillow(const RgbImage& image, std::int64_t height, std::int64_t width, Resample resample);

// The steps in Hugging Face's order: resize, center crop, rescale, normalize; channels first.
Pixels preprocess_image(const RgbImage& image, const ImagePreprocessing& preprocessing);

}  // namespace attncheck::probes
