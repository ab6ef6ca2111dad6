// The vision adapters: Hugging Face ViTModel and Dinov2Model checkpoints. A stride-P convolution cuts the
// image into patches (row-major: over height, then width), a CLS token goes first, position embeddings are
// added (DINOv2: interpolated bicubically to the image's patch grid), then pre-LayerNorm encoder blocks with
// bidirectional attention (DINOv2: each branch scaled by its LayerScale vector).

#include "adapters.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;
using theory::Index;

extern const FamilyAdapter dinov2_adapter;

namespace {

bool is_dinov2(const ModelConfig& c) { return c.family == &dinov2_adapter; }

PreNormNames layer_names(const ModelConfig& c, std::int64_t layer) {
  const std::string p = fmt::format("{}encoder.layer.{}.", c.tensor_prefix, layer);
  const std::string a = p + "attention.attention.";
  if (is_dinov2(c)) {
    return {p + "norm1",
            a + "query",
            a + "key",
            a + "value",
            p + "attention.output.dense",
            p + "norm2",
            p + "mlp.fc1",
            p + "mlp.fc2",
            p + "layer_scale1.lambda1",
            p + "layer_scale2.lambda1"};
  }
  return {p + "layernorm_before",
          a + "query",
          a + "key",
          a + "value",
          p + "attention.output.dense",
          p + "layernorm_after",
          p + "intermediate.dense",
          p + "output.dense",
          "",
          ""};
}

// Keys's cubic convolution kernel with a = -0.75 (PyTorch's bicubic, ONNX Resize's cubic_coeff_a default),
// weights of the four samples at offsets -1, 0, 1, 2 from floor(x) for the fraction t.
std::array<double, 4> cubic_weights(double t) {
  constexpr double a = -0.75;
  const auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };       // |x| <= 1
  const auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };  // 1 < |x| < 2
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

// Bicubic resampling of a grid of rows (in_h x in_w positions, row-major, D columns) to out_h x out_w, with
// half-pixel centers and no antialiasing, clamping samples at the border: as torch.nn.functional.interpolate
// (mode "bicubic", align_corners False) and ONNX Resize (cubic, half_pixel), which DINOv2 uses.
Matrix resize_bicubic(const Matrix& grid, Index in_h, Index in_w, Index out_h, Index out_w) {
  const auto taps = [](Index in, Index out) {
    std::vector<std::pair<std::array<Index, 4>, std::array<double, 4>>> out_taps;
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    for (Index o = 0; o < out; ++o) {
      const double source = (static_cast<double>(o) + 0.5) * scale - 0.5;
      const double base = std::floor(source);
      std::array<Index, 4> index;
      for (int k = 0; k < 4; ++k) index[k] = std::clamp<Index>(static_cast<Index>(base) - 1 + k, 0, in - 1);
      out_taps.push_back({index, cubic_weights(source - base)});
    }
    return out_taps;
  };
  const auto rows = taps(in_h, out_h), cols = taps(in_w, out_w);
  Matrix out = Matrix::Zero(out_h * out_w, grid.cols());
  for (Index y = 0; y < out_h; ++y) {
    for (Index x = 0; x < out_w; ++x) {
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          const double w = rows[y].second[i] * cols[x].second[j];
          out.row(y * out_w + x) += w * grid.row(rows[y].first[i] * in_w + cols[x].first[j]);
        }
      }
    }
  }
  return out;
}

}  // namespace

void set_patch_grid(ModelConfig& c, const fs::path& file) {
  if (c.patch_size > c.image_size) {
    throw InputError(
        fmt::format("{}: patch_size {} is larger than image_size {}", file.string(), c.patch_size, c.image_size));
  }
  const std::int64_t grid = c.image_size / c.patch_size;
  c.max_positions = 1 + grid * grid;
}

std::string patch_grid_declared(const ModelConfig& c, std::string_view within) {
  const std::int64_t grid = c.image_size / c.patch_size;
  return fmt::format("\"{0}image_size\" {1} in patches of \"{0}patch_size\" {2} is 1 + {3} x {3} positions", within,
                     c.image_size, c.patch_size, grid);
}

Matrix embed_patches(const Checkpoint& checkpoint, const ModelConfig& c, const Pixels& pixels,
                     const PatchEmbeddingNames& names) {
  const std::int64_t D = c.hidden, P = c.patch_size, C = c.channels;
  if (pixels.channels != C) {
    throw InputError(fmt::format("the image has {} channels, the model takes {}", pixels.channels, C));
  }
  if (pixels.height < P || pixels.width < P) {
    throw InputError(
        fmt::format("the image is {} x {} pixels, smaller than one {} x {} patch", pixels.height, pixels.width, P, P));
  }
  if (!names.interpolate && (pixels.height != c.image_size || pixels.width != c.image_size)) {
    throw InputError(
        fmt::format("the image is {} x {} pixels; this {} takes {} x {} (its position embeddings "
                    "are not interpolated)",
                    pixels.height, pixels.width, architecture_name(c), c.image_size, c.image_size));
  }
  for (std::size_t k = 0; k < pixels.values.size(); ++k) {
    if (!std::isfinite(pixels.values[k])) {
      throw InputError(
          fmt::format("pixel value {} at flat index {} (channel-major) is not finite", pixels.values[k], k));
    }
  }
  // The convolution drops the pixels past the last whole patch, as PyTorch's stride-P convolution does.
  const std::int64_t grid_h = pixels.height / P, grid_w = pixels.width / P, patches = grid_h * grid_w;
  const std::int64_t n = 1 + patches;
  // The convolution as one product: each patch flattened over (channel, row, column), as the kernel is.
  const Matrix kernel = checkpoint.flattened(names.kernel, {D, C, P, P}).reshaped<Eigen::RowMajor>(D, C * P * P);
  Matrix patch_rows(patches, C * P * P);
  for (std::int64_t py = 0; py < grid_h; ++py) {
    for (std::int64_t px = 0; px < grid_w; ++px) {
      Index column = 0;
      for (std::int64_t ch = 0; ch < C; ++ch) {
        for (std::int64_t i = 0; i < P; ++i) {
          for (std::int64_t j = 0; j < P; ++j)
            patch_rows(py * grid_w + px, column++) = pixels.at(ch, py * P + i, px * P + j);
        }
      }
    }
  }
  Matrix h(n, D);
  h.row(0) = checkpoint.flattened(names.cls, names.batched ? std::vector<std::int64_t>{1, 1, D} : std::vector{D});
  h.bottomRows(patches) = patch_rows * kernel.transpose();
  if (!names.bias.empty()) h.bottomRows(patches).rowwise() += checkpoint.vector(names.bias, D).transpose();
  if (!h.bottomRows(patches).allFinite()) {
    double largest = 0;
    for (const double v : pixels.values) largest = std::max(largest, std::fabs(v));
    throw InputError(
        fmt::format("the patch embeddings are not finite: pixel values up to {:g} in magnitude overflow "
                    "double precision in the patch projection (pixels are normalized, of order 1)",
                    largest));
  }

  const auto& position_shape = checkpoint.info(names.positions).shape;
  const std::size_t rank = names.batched ? 3 : 2;
  const std::int64_t stored = position_shape.size() == rank ? position_shape[rank - 2] : 0;
  const Matrix positions = checkpoint.flattened(names.positions, names.batched ? std::vector<std::int64_t>{1, stored, D}
                                                                               : std::vector{stored, D});
  const std::int64_t trained = stored - 1;
  const auto side =
      static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(std::max<std::int64_t>(trained, 0)))));
  if (trained < 1 || side * side != trained) {
    throw InputError(fmt::format("{}: {} position embeddings are not 1 + a square grid of patches",
                                 checkpoint.where(names.positions), stored));
  }
  h.row(0) += positions.row(0);
  if (grid_h == side && grid_w == side) {
    h.bottomRows(patches) += positions.bottomRows(trained);
  } else if (names.interpolate) {
    h.bottomRows(patches) += resize_bicubic(positions.bottomRows(trained), side, side, grid_h, grid_w);
  } else {
    throw InputError(fmt::format("the image's {} x {} patches do not match the model's {} x {} position embeddings",
                                 grid_h, grid_w, side, side));
  }
  return h;
}

void pre_norm_encoder(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                      const LayerSink& sink, PreNormNames (*layer_names)(const ModelConfig&, std::int64_t)) {
  const std::int64_t D = c.hidden, I = c.intermediate;
  const double inner = 1 / std::sqrt(static_cast<double>(c.head_dim()));
  const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
  for (std::int64_t l = 0; l <= last; ++l) {
    const PreNormNames names = layer_names(c, l);
    LayerInputs layer;
    layer.causal = c.causal;
    layer.inner = inner;
    layer.X = layer_norm(h, checkpoint.vector(names.norm_before + ".weight", D),
                         checkpoint.vector(names.norm_before + ".bias", D), c.layer_norm_eps);
    const AttentionWeights weights = linear_attention_weights(checkpoint, names.q, names.k, names.v, D, D, D);
    Matrix attended = project(checkpoint, fill_heads(layer, weights, c.heads, &map, l, sink), names.o, D, sink);
    if (!names.scale_attention.empty()) {
      attended.array().rowwise() *= checkpoint.vector(names.scale_attention, D).transpose().array();
    }
    h += attended;
    const Matrix m = layer_norm(h, checkpoint.vector(names.norm_after + ".weight", D),
                                checkpoint.vector(names.norm_after + ".bias", D), c.layer_norm_eps);
    Matrix inter = project(checkpoint, m, names.mlp_in, I, sink);
    apply_hidden_activation(inter, c.hidden_act, sink.float32_products);
    Matrix mlp = project(checkpoint, inter, names.mlp_out, D, sink);
    if (!names.scale_mlp.empty()) mlp.array().rowwise() *= checkpoint.vector(names.scale_mlp, D).transpose().array();
    h += mlp;
    require_finite_hidden_states(h, l);
    sink.receive(layer, l);
  }
}

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c;
  const bool dinov2 = value_or<std::string>(config, "model_type", "", file) == "dinov2";
  c.hidden = positive_int(config, "hidden_size", file);
  c.heads = positive_int(config, "num_attention_heads", file);
  c.layers = positive_int(config, "num_hidden_layers", file);
  if (dinov2) {
    const double ratio = value_or<double>(config, "mlp_ratio", 4.0, file);
    const double intermediate = ratio * static_cast<double>(c.hidden);
    if (!(ratio > 0) || intermediate != std::floor(intermediate) || intermediate > 1e9) {
      throw InputError(fmt::format("{}: mlp_ratio {} times hidden_size {} is not a positive whole number",
                                   file.string(), ratio, c.hidden));
    }
    c.intermediate = static_cast<std::int64_t>(intermediate);
    if (value_or<bool>(config, "use_swiglu_ffn", false, file)) {
      throw InputError(fmt::format("{}: use_swiglu_ffn is not supported (the MLP of fc1, fc2)", file.string()));
    }
  } else {
    c.intermediate = positive_int(config, "intermediate_size", file);
  }
  c.layer_norm_eps = checked_number(value_or<double>(config, "layer_norm_eps", dinov2 ? 1e-6 : 1e-12, file), 0, false,
                                    file.string(), "layer_norm_eps");
  c.hidden_act = value_or<std::string>(config, "hidden_act", "gelu", file);
  c.image_size = positive_int_or(config, "image_size", 224, file);
  c.patch_size = positive_int_or(config, "patch_size", dinov2 ? 14 : 16, file);
  c.channels = positive_int_or(config, "num_channels", 3, file);
  set_patch_grid(c, file);
  for (const char* prefix : {"", "vit.", "dinov2."}) {
    if (checkpoint.contains(std::string(prefix) + "embeddings.cls_token")) c.tensor_prefix = prefix;
  }
  const std::string positions = c.tensor_prefix + "embeddings.position_embeddings";
  const std::string kernel = c.tensor_prefix + "embeddings.patch_embeddings.projection.weight";
  require_declared_sizes(checkpoint, file.string(), "num_hidden_layers", c.layers, c.tensor_prefix + "encoder.layer.",
                         {{declared_value("hidden_size", c.hidden), c.hidden, positions, 2},
                          {patch_grid_declared(c, ""), c.max_positions, positions, 1, false},
                          {declared_value("num_channels", c.channels), c.channels, kernel, 1},
                          {declared_value("patch_size", c.patch_size), c.patch_size, kernel, 2},
                          {dinov2 ? fmt::format("\"mlp_ratio\" x \"hidden_size\" is {}", c.intermediate)
                                  : declared_value("intermediate_size", c.intermediate),
                           c.intermediate,
                           c.tensor_prefix + (dinov2 ? "encoder.layer.0.mlp.fc1.weight"
                                                     : "encoder.layer.0.intermediate.dense.weight"),
                           0}});
  return c;
}

std::string position_embedding_name(const ModelConfig& c) { return c.tensor_prefix + "embeddings.position_embeddings"; }

Matrix embed(const Checkpoint& checkpoint, const ModelConfig& c, const Pixels& pixels) {
  const std::string e = c.tensor_prefix + "embeddings.";
  return embed_patches(checkpoint, c, pixels,
                       {.kernel = e + "patch_embeddings.projection.weight",
                        .bias = e + "patch_embeddings.projection.bias",
                        .cls = e + "cls_token",
                        .positions = position_embedding_name(c),
                        .batched = true,
                        .interpolate = is_dinov2(c)});
}

void forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last, const LayerSink& sink) {
  pre_norm_encoder(checkpoint, c, std::move(h), last, sink, layer_names);
}

std::string describe(const ModelConfig& c) {
  return fmt::format("{} x {} pixel patches{}\n", c.patch_size, c.patch_size,
                     is_dinov2(c) ? fmt::format("; LayerScale; position embeddings for {0} x {0} pixels, interpolated "
                                                "bicubically to other patch grids",
                                                c.image_size)
                                  : fmt::format("; position embeddings for {0} x {0} pixels", c.image_size));
}

FamilyAdapter vision_adapter(std::string_view name, std::string_view model_type) {
  return {.name = name,
          .model_types = {model_type},
          .config_from_json = config_from_json,
          .embedding_scale_tensor = position_embedding_name,
          .embed_pixels = embed,
          .forward = forward,
          .describe = describe};
}

}  // namespace

// ViT (ViTModel): a CLS token and patch embeddings, pre-LayerNorm encoder blocks, bidirectional attention.
extern const FamilyAdapter vit_adapter = vision_adapter("ViT", "vit");
// DINOv2 (Dinov2Model): a ViT with LayerScale and position embeddings interpolated to the image's patch grid.
extern const FamilyAdapter dinov2_adapter = vision_adapter("DINOv2", "dinov2");

}  // namespace attncheck::probes::detail
