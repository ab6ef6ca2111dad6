#include "attncheck/probes/safetensors.hpp"
#include "attncheck/probes/gguf.hpp"

#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/json_input.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <span>

namespace attncheck::probes {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// Above this a header is not a model's: the reference implementation refuses headers over 100 MB too.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

template <class T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // tensor data need not be aligned
  return value;
}

double half_to_double(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    magnitude = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

// OCP FP8: E4M3 (bias 7, no infinities, S.1111.111 is NaN) and E5M2 (bias 15, IEEE-like).
double fp8_to_double(std::uint8_t bits, int exponent_bits) {
  const int mantissa_bits = 7 - exponent_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int sign = bits >> 7, exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const int max_exponent = (1 << exponent_bits) - 1;
  double magnitude;
  if (exponent_bits == 4 && exponent == max_exponent && mantissa == 7) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent_bits == 5 && exponent == max_exponent) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(mantissa + (1 << mantissa_bits), exponent - bias - mantissa_bits);
  }
  return sign ? -magnitude : magnitude;
}

struct DTypeRow {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1}, {DType::I64, "I64", 8},   {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},         {DType::I8, "I8", 1},           {DType::U64, "U64", 8},   {DType::U32, "U32", 4},
    {DType::U16, "U16", 2},         {DType::U8, "U8", 1},           {DType::BOOL, "BOOL", 1},
};

const DTypeRow& row_of(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row;
  }
  throw std::logic_error("unknown dtype enumerator");
}

// The value of a JSON number as a byte count or dimension, or nothing if it is not a non-negative integer.
std::optional<std::uint64_t> as_count(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
  return std::nullopt;
}

}  // namespace

std::size_t dtype_size(DType dtype) { return row_of(dtype).size; }
std::string_view dtype_name(DType dtype) { return row_of(dtype).name; }
std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

double element_to_double(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::F64: return load<double>(p);
    case DType::F32: return load<float>(p);
    case DType::F16: return half_to_double(load<std::uint16_t>(p));
    case DType::BF16: {
      const std::uint32_t bits = std::uint32_t{load<std::uint16_t>(p)} << 16;
      return std::bit_cast<float>(bits);
    }
    case DType::F8_E4M3: return fp8_to_double(load<std::uint8_t>(p), 4);
    case DType::F8_E5M2: return fp8_to_double(load<std::uint8_t>(p), 5);
    case DType::I64: return static_cast<double>(load<std::int64_t>(p));
    case DType::I32: return load<std::int32_t>(p);
    case DType::I16: return load<std::int16_t>(p);
    case DType::I8: return load<std::int8_t>(p);
    case DType::U64: return static_cast<double>(load<std::uint64_t>(p));
    case DType::U32: return load<std::uint32_t>(p);
    case DType::U16: return load<std::uint16_t>(p);
    case DType::U8: return load<std::uint8_t>(p);
    case DType::BOOL: return load<std::uint8_t>(p) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

namespace {
// `count` elements from p, widened as element_to_double widens each.
void elements_to_double(DType dtype, const std::byte* p, std::int64_t count, double* out) {
  switch (dtype) {
    case DType::F64:
      for (std::int64_t k = 0; k < count; ++k) out[k] = load<double>(p + k * 8);
      return;
    case DType::F32:
      for (std::int64_t k = 0; k < count; ++k) out[k] = load<float>(p + k * 4);
      return;
    default: {
      const std::size_t size = dtype_size(dtype);
      for (std::int64_t k = 0; k < count; ++k)
        out[k] = element_to_double(dtype, p + static_cast<std::size_t>(k) * size);
    }
  }
}
}  // namespace

std::int64_t TensorInfo::element_count() const {
  // An empty tensor may declare huge other dimensions whose product would overflow: it has no elements.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t count = 1;
  for (auto dim : shape) count *= dim;
  return count;
}

std::string_view type_name(const TensorInfo& tensor) {
  return tensor.block ? tensor.block->name : dtype_name(tensor.dtype);
}

void sort_by_offset_without_overlaps(std::vector<TensorInfo>& tensors, const std::string& source) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  for (std::size_t k = 1; k < tensors.size(); ++k) {
    const auto& previous = tensors[k - 1];
    const auto& current = tensors[k];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (current.begin < previous.end && current.begin != current.end) {
      throw InputError(fmt::format("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", source, previous.name,
                                   previous.begin, previous.end, current.name, current.begin, current.end));
    }
  }
}

namespace {

// The header length must leave room for itself in a file of `file_size` bytes and stay below the limit.
void check_header_length(std::uint64_t header_length, std::uint64_t file_size, const std::string& source) {
  if (file_size < 8) {
    throw InputError(
        fmt::format("{}: not a safetensors file: {} bytes is too short (an 8-byte header length "
                    "comes first)",
                    source, file_size));
  }
  if (header_length > file_size - 8) {
    throw InputError(
        fmt::format("{}: not a safetensors file: header length {} (its first 8 bytes, little-endian) "
                    "exceeds the file ({} bytes)",
                    source, header_length, file_size));
  }
  if (header_length > kMaxHeaderBytes) {
    throw InputError(fmt::format("{}: not a safetensors file: header length {} exceeds the limit of {} bytes", source,
                                 header_length, kMaxHeaderBytes));
  }
}

// The JSON header (its length already checked) of a file of `file_size` bytes.
SafetensorsHeader parse_header(std::string_view header_bytes, std::uint64_t file_size, const std::string& source) {
  const char* header_text = header_bytes.data();
  const std::uint64_t header_length = header_bytes.size();
  // Duplicate names would be silently merged by the parser: catch them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  const nlohmann::json::parser_callback_t catch_duplicates = [&](int depth, nlohmann::json::parse_event_t event,
                                                                 nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  const nlohmann::json header =
      records::parse_json(std::string_view(header_text, header_length), source + ": the header",
                          records::JsonPlacement::column, catch_duplicates);
  if (!header.is_object()) {
    throw InputError(fmt::format("{}: the header is JSON but not an object of tensors", source));
  }
  if (!duplicate.empty()) {
    throw InputError(fmt::format("{}: tensor '{}' appears twice in the header", source, duplicate));
  }
  SafetensorsHeader out;
  out.data_begin = 8 + static_cast<std::size_t>(header_length);
  const std::uint64_t data_size = file_size - out.data_begin;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw InputError(fmt::format("{}: __metadata__ is not an object", source));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          throw InputError(fmt::format("{}: __metadata__ entry '{}' is not a string", source, key));
        }
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const auto fail = [&](const std::string& what) {
      return InputError(fmt::format("{}: tensor '{}': {}", source, name, what));
    };
    if (!entry.is_object()) throw fail("entry is not an object");
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) throw fail(fmt::format("no \"{}\"", key));
    }
    TensorInfo tensor;
    tensor.name = name;
    const auto& dtype = entry["dtype"];
    if (!dtype.is_string()) throw fail("dtype is not a string");
    const auto parsed_dtype = parse_dtype(dtype.get<std::string>());
    if (!parsed_dtype) throw fail(fmt::format("unknown dtype '{}'", dtype.get<std::string>()));
    tensor.dtype = *parsed_dtype;
    const auto& shape = entry["shape"];
    if (!shape.is_array()) throw fail("shape is not an array");
    // The element count is checked against the data size as it grows, so the product cannot overflow.
    std::uint64_t elements = 1;
    for (const auto& dim : shape) {
      const auto size = as_count(dim);
      if (!size) throw fail(fmt::format("shape entry {} is not a non-negative integer", records::json_excerpt(dim)));
      if (*size != 0 && elements > data_size / *size) {
        elements = std::numeric_limits<std::uint64_t>::max();
      } else {
        elements *= *size;
      }
      tensor.shape.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(*size, INT64_MAX)));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) throw fail("data_offsets is not an array of two offsets");
    const auto begin = as_count(offsets[0]), end = as_count(offsets[1]);
    if (!begin || !end) throw fail("data_offsets are not non-negative integers");
    if (*begin > *end) throw fail(fmt::format("data_offsets [{}, {}] end before they begin", *begin, *end));
    if (*end > data_size) {
      throw fail(
          fmt::format("data_offsets [{}, {}] run beyond the {} data bytes in the file", *begin, *end, data_size));
    }
    const std::uint64_t size = dtype_size(tensor.dtype);
    const std::uint64_t expected = elements > data_size ? std::numeric_limits<std::uint64_t>::max() : elements * size;
    if (*end - *begin != expected) {
      throw fail(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                             records::json_excerpt(shape), dtype_name(tensor.dtype),
                             expected == std::numeric_limits<std::uint64_t>::max() ? std::string("more than the file's")
                                                                                   : std::to_string(expected),
                             *begin, *end, *end - *begin));
    }
    tensor.begin = *begin;
    tensor.end = *end;
    out.tensors.push_back(std::move(tensor));
  }
  sort_by_offset_without_overlaps(out.tensors, source);
  return out;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const std::byte> image, const std::string& source) {
  const std::uint64_t header_length = image.size() < 8 ? 0 : load<std::uint64_t>(image.data());
  check_header_length(header_length, image.size(), source);
  return parse_header({reinterpret_cast<const char*>(image.data() + 8), static_cast<std::size_t>(header_length)},
                      image.size(), source);
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  const std::string source = path.string();
  std::uint64_t header_length = 0;
  if (file_.size() >= 8) file_.read_at(0, std::as_writable_bytes(std::span(&header_length, 1)));
  check_header_length(header_length, file_.size(), source);
  std::string header(static_cast<std::size_t>(header_length), '\0');
  file_.read_at(8, std::as_writable_bytes(std::span(header)));
  header_ = parse_header(header, file_.size(), source);
  for (std::size_t k = 0; k < header_.tensors.size(); ++k) index_.emplace(header_.tensors[k].name, k);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

void SafetensorsFile::read(const TensorInfo& tensor, std::uint64_t offset, std::span<std::byte> out) const {
  if (offset > tensor.end - tensor.begin || out.size() > tensor.end - tensor.begin - offset) {
    throw std::logic_error(
        fmt::format("bytes {}..{} are outside tensor '{}'", offset, offset + out.size(), tensor.name));
  }
  file_.read_at(header_.data_begin + tensor.begin + offset, out);
}

Checkpoint Checkpoint::open(const std::filesystem::path& file_or_folder) {
  namespace fs = std::filesystem;
  Checkpoint checkpoint;
  std::error_code error;
  if (!fs::exists(file_or_folder, error)) {
    throw InputError(fmt::format("{}: no such file or folder", file_or_folder.string()));
  }
  std::vector<fs::path> shards;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name, for sharded checkpoints
  if (fs::is_directory(file_or_folder, error)) {
    const fs::path index_path = file_or_folder / "model.safetensors.index.json";
    if (fs::exists(index_path, error)) {
      const nlohmann::json index = records::read_json_file(index_path);
      if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        throw InputError(fmt::format("{}: no \"weight_map\" object", index_path.string()));
      }
      std::set<std::string> files;
      for (const auto& [tensor, file] : index["weight_map"].items()) {
        if (!file.is_string()) {
          throw InputError(
              fmt::format("{}: weight_map entry for '{}' is not a file name", index_path.string(), tensor));
        }
        const std::string shard = file.get<std::string>();
        // Shards live beside the index; a path out of the folder is not a shard.
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
          throw InputError(fmt::format("{}: shard '{}' of tensor '{}' is not a file name in the folder",
                                       index_path.string(), shard, tensor));
        }
        weight_map[tensor] = shard;
        files.insert(shard);
      }
      for (const auto& file : files) {
        // Said of the index, which names it: the shard's own "no such file" would not say where the name came from.
        if (!fs::is_regular_file(file_or_folder / file, error)) {
          throw InputError(
              fmt::format("{}: shard '{}' is not a file in {}", index_path.string(), file, file_or_folder.string()));
        }
        shards.push_back(file_or_folder / file);
      }
    } else if (fs::exists(file_or_folder / "model.safetensors", error)) {
      shards.push_back(file_or_folder / "model.safetensors");
    } else {
      throw InputError(fmt::format("{}: neither model.safetensors nor model.safetensors.index.json is there",
                                   file_or_folder.string()));
    }
  } else if (file_or_folder.filename() == "config.json" || file_or_folder.filename() == "tokenizer.json" ||
             file_or_folder.filename() == "model.safetensors.index.json") {
    // The file a Hugging Face folder is known by, not its weights: name the folder, not a header length.
    throw InputError(fmt::format("{}: give the model's folder ({}), which holds its weights beside this file",
                                 file_or_folder.string(), file_or_folder.parent_path().string()));
  } else if (file_or_folder.extension() == ".gguf") {
    auto gguf = std::make_unique<GgufFile>(file_or_folder);
    checkpoint.gguf_ = gguf.get();
    checkpoint.files_.push_back(std::move(gguf));
  } else {
    shards.push_back(file_or_folder);
  }
  for (const auto& shard : shards) checkpoint.files_.push_back(std::make_unique<SafetensorsFile>(shard));
  for (std::size_t index = 0; index < checkpoint.files_.size(); ++index) {
    const auto& file = *checkpoint.files_[index];
    for (const auto& tensor : file.tensors()) {
      const auto [it, inserted] = checkpoint.entries_.emplace(tensor.name, Entry{index, &tensor});
      if (!inserted) {
        throw InputError(fmt::format("tensor '{}' is in both {} and {}", tensor.name,
                                     checkpoint.files_[it->second.file]->path().string(), file.path().string()));
      }
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    const auto it = checkpoint.entries_.find(tensor);
    if (it == checkpoint.entries_.end() || checkpoint.files_[it->second.file]->path().filename() != shard) {
      throw InputError(fmt::format("{}: tensor '{}' is listed in shard {}, which does not hold it",
                                   (file_or_folder / "model.safetensors.index.json").string(), tensor,
                                   (file_or_folder / shard).string()));
    }
  }
  return checkpoint;
}

bool Checkpoint::contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const Checkpoint::Entry& Checkpoint::entry(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string files;
    for (const auto& file : files_) files += (files.empty() ? "" : ", ") + file->path().string();
    throw InputError(fmt::format("tensor '{}' is missing from {}", name, files));
  }
  return it->second;
}

const TensorInfo& Checkpoint::info(std::string_view name) const { return *entry(name).tensor; }

std::string Checkpoint::where(std::string_view name) const {
  return fmt::format("tensor '{}' in {}", name, files_[entry(name).file]->path().string());
}

namespace {
// Refuses a tensor's elements first, first + 1, ... held in `values` when one is not finite, naming it.
template <class Real>
void require_finite_elements(std::span<const Real> values, std::int64_t first, const std::string& where) {
  using Array = Eigen::Array<Real, Eigen::Dynamic, 1>;
  if (theory::all_finite(Eigen::Map<const Array>(values.data(), static_cast<Eigen::Index>(values.size())))) return;
  const auto bad = std::find_if(values.begin(), values.end(), [](Real v) { return !std::isfinite(v); });
  throw InputError(fmt::format("{}: element {} is {}", where, first + (bad - values.begin()), *bad));
}

// Calls visit(index, values) for the elements first .. first + count - 1, values[k] being element first + index + k,
// read a chunk of about 1 MiB at a time, so that
// converting a tensor never holds its raw bytes whole. For GGUF's block formats both are whole blocks (whole
// rows), decoded as ggml does. Non-finite values are refused naming the element.
template <class Visit>
void for_each_element(const TensorFile& file, const TensorInfo& tensor, std::int64_t first, std::int64_t count,
                      const std::string& where, Visit&& visit) {
  std::int64_t unit_elements = 1;  // a block, or one plain element
  std::size_t unit_bytes = 0;
  if (tensor.block) {
    if (!tensor.block->decode) {
      throw InputError(fmt::format("{} has type {}, which is not supported ({})", where, tensor.block->name,
                                   fmt::join(readable_ggml_types(), ", ")));
    }
    unit_elements = static_cast<std::int64_t>(tensor.block->elements);
    unit_bytes = tensor.block->bytes;
  } else {
    unit_bytes = dtype_size(tensor.dtype);
  }
  const std::int64_t first_unit = first / unit_elements, units = count / unit_elements;
  const std::int64_t per_chunk =
      std::max<std::int64_t>(1, static_cast<std::int64_t>((std::size_t{1} << 20) / unit_bytes));
  const std::int64_t chunk_units = std::min(units, per_chunk);
  std::vector<std::byte> chunk(static_cast<std::size_t>(chunk_units) * unit_bytes);
  std::vector<double> values(static_cast<std::size_t>(chunk_units * unit_elements));
  for (std::int64_t start = 0; start < units; start += per_chunk) {
    const std::int64_t n = std::min(per_chunk, units - start);
    const std::span<std::byte> bytes(chunk.data(), static_cast<std::size_t>(n) * unit_bytes);
    file.read(tensor, static_cast<std::uint64_t>(first_unit + start) * unit_bytes, bytes);
    // The whole chunk is converted before any value is visited: one loop per type, which the compiler vectorizes,
    // rather than a switch per element (reading DINOv2's float32 weights took a tenth of its forward).
    if (tensor.block) {
      for (std::int64_t k = 0; k < n; ++k) {
        tensor.block->decode(bytes.data() + static_cast<std::size_t>(k) * unit_bytes,
                             values.data() + k * unit_elements);
      }
    } else {
      elements_to_double(tensor.dtype, bytes.data(), n, values.data());
    }
    const std::span<const double> converted(values.data(), static_cast<std::size_t>(n * unit_elements));
    require_finite_elements(converted, first + start * unit_elements, where);
    visit(start * unit_elements, converted);
  }
}

void fill_checked(const TensorFile& file, const TensorInfo& tensor, std::int64_t first, std::int64_t count, double* out,
                  const std::string& where) {
  for_each_element(file, tensor, first, count, where, [out](std::int64_t index, std::span<const double> values) {
    std::copy(values.begin(), values.end(), out + index);
  });
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }
}  // namespace

std::pair<std::int64_t, std::int64_t> Checkpoint::matrix_shape(std::string_view name, std::int64_t rows,
                                                               std::int64_t cols) const {
  const TensorInfo& tensor = info(name);
  const std::int64_t r = tensor.shape.size() == 2 ? tensor.shape[0] : 1;
  const std::int64_t c = tensor.shape.size() == 2 ? tensor.shape[1] : (tensor.shape.size() == 1 ? tensor.shape[0] : -1);
  if (tensor.shape.size() > 2 || tensor.shape.empty() || (rows >= 0 && r != rows) || (cols >= 0 && c != cols)) {
    throw InputError(fmt::format("{} has shape {}, expected [{}, {}]", where(name), shape_text(tensor.shape),
                                 rows >= 0 ? std::to_string(rows) : "any", cols >= 0 ? std::to_string(cols) : "any"));
  }
  return {r, c};
}

Matrix Checkpoint::matrix(std::string_view name, std::int64_t rows, std::int64_t cols) const {
  const auto [r, c] = matrix_shape(name, rows, cols);
  const auto& e = entry(name);
  Matrix out(r, c);
  fill_checked(*files_[e.file], *e.tensor, 0, r * c, out.data(), where(name));
  return out;
}

FloatMatrix Checkpoint::float_matrix(std::string_view name, std::int64_t rows, std::int64_t cols) const {
  const auto [r, c] = matrix_shape(name, rows, cols);
  const auto& e = entry(name);
  const TensorInfo& tensor = *e.tensor;
  FloatMatrix out(r, c);
  const std::string source = where(name);
  if (!tensor.block && tensor.dtype == DType::F32 && std::endian::native == std::endian::little) {
    // Stored as the forward takes it: read in place, then checked as what is widened is.
    const std::span<float> values(out.data(), static_cast<std::size_t>(r * c));
    files_[e.file]->read(tensor, 0, std::as_writable_bytes(values));
    require_finite_elements<float>(values, 0, source);
    return out;
  }
  for_each_element(*files_[e.file], tensor, 0, r * c, source, [&](std::int64_t index, std::span<const double> chunk) {
    for (std::size_t k = 0; k < chunk.size(); ++k) {
      const float rounded = static_cast<float>(chunk[k]);
      if (std::isinf(rounded)) {
        throw InputError(
            fmt::format("{}: element {} is {:g}, beyond float32's range (--precision mixed rounds the "
                        "weights to float32; --precision double takes them)",
                        source, index + static_cast<std::int64_t>(k), chunk[k]));
      }
      out.data()[index + static_cast<std::int64_t>(k)] = rounded;
    }
  });
  return out;
}

Matrix Checkpoint::flattened(std::string_view name, const std::vector<std::int64_t>& shape) const {
  const auto& e = entry(name);
  const TensorInfo& tensor = *e.tensor;
  if (tensor.shape != shape || shape.empty() || shape.back() == 0) {
    throw InputError(
        fmt::format("{} has shape {}, expected {}", where(name), shape_text(tensor.shape), shape_text(shape)));
  }
  const std::int64_t cols = shape.back(), rows = tensor.element_count() / cols;
  Matrix out(rows, cols);
  fill_checked(*files_[e.file], tensor, 0, rows * cols, out.data(), where(name));
  return out;
}

Vector Checkpoint::vector(std::string_view name, std::int64_t length) const {
  const auto& e = entry(name);
  const TensorInfo& tensor = *e.tensor;
  if (tensor.shape.size() != 1 || (length >= 0 && tensor.shape[0] != length)) {
    throw InputError(fmt::format("{} has shape {}, expected [{}]", where(name), shape_text(tensor.shape),
                                 length >= 0 ? std::to_string(length) : "any"));
  }
  Vector out(tensor.shape[0]);
  fill_checked(*files_[e.file], tensor, 0, tensor.shape[0], out.data(), where(name));
  return out;
}

Matrix Checkpoint::rows(std::string_view name, std::span<const std::int64_t> row_ids, std::int64_t cols) const {
  const auto& e = entry(name);
  const TensorInfo& tensor = *e.tensor;
  if (tensor.shape.size() != 2 || (cols >= 0 && tensor.shape[1] != cols)) {
    throw InputError(fmt::format("{} has shape {}, expected [any, {}]", where(name), shape_text(tensor.shape),
                                 cols >= 0 ? std::to_string(cols) : "any"));
  }
  const std::int64_t c = tensor.shape[1];
  Matrix out(static_cast<Eigen::Index>(row_ids.size()), c);
  for (std::size_t k = 0; k < row_ids.size(); ++k) {
    if (row_ids[k] < 0 || row_ids[k] >= tensor.shape[0]) {
      throw InputError(fmt::format("{}: row {} is outside its {} rows (a token or position id out of range)",
                                   where(name), row_ids[k], tensor.shape[0]));
    }
    fill_checked(*files_[e.file], tensor, row_ids[k] * c, c, out.row(static_cast<Eigen::Index>(k)).data(), where(name));
  }
  return out;
}

double Checkpoint::root_mean_square(std::string_view name) const {
  const auto& e = entry(name);
  const TensorInfo& tensor = *e.tensor;
  const std::int64_t count = tensor.element_count();
  if (count == 0) throw InputError(fmt::format("{} is empty", where(name)));
  double sum = 0;
  for_each_element(*files_[e.file], tensor, 0, count, where(name),
                   [&sum](std::int64_t, std::span<const double> values) {
                     for (const double value : values) sum += value * value;
                   });
  return std::sqrt(sum / static_cast<double>(count));
}

void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& tensor : tensors) {
    std::int64_t count = 1;
    for (auto dim : tensor.shape) count *= dim;
    if (count != static_cast<std::int64_t>(tensor.values.size())) {
      throw InputError(fmt::format("tensor '{}' has shape {} but {} values", tensor.name, shape_text(tensor.shape),
                                   tensor.values.size()));
    }
    if (tensor.dtype != DType::F64 && tensor.dtype != DType::F32 && tensor.dtype != DType::I64) {
      throw InputError(fmt::format("tensor '{}': only F64, F32 and I64 are written", tensor.name));
    }
    if (tensor.dtype == DType::I64) {
      // Integers are held as doubles: exact only up to 2^53, so anything else would be written wrongly.
      for (double v : tensor.values) {
        if (!(std::abs(v) <= 9007199254740992.0) || v != std::trunc(v)) {
          throw InputError(
              fmt::format("tensor '{}': {} is not an integer exactly representable for I64", tensor.name, v));
        }
      }
    }
    const std::size_t bytes = tensor.values.size() * dtype_size(tensor.dtype);
    header[tensor.name] = {{"dtype", dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::string file;
  const std::uint64_t length = header_text.size();
  file.append(reinterpret_cast<const char*>(&length), 8);
  file += header_text;
  for (const auto& tensor : tensors) {
    if (tensor.dtype == DType::F64) {
      file.append(reinterpret_cast<const char*>(tensor.values.data()), tensor.values.size() * sizeof(double));
    } else if (tensor.dtype == DType::I64) {
      for (double v : tensor.values) {
        const auto i = static_cast<std::int64_t>(v);
        file.append(reinterpret_cast<const char*>(&i), sizeof i);
      }
    } else {
      for (double v : tensor.values) {
        const float f = static_cast<float>(v);
        file.append(reinterpret_cast<const char*>(&f), sizeof f);
      }
    }
  }
  records::write_file_atomically(path, file);
}

Matrix read_attention_head(const std::filesystem::path& file, std::string_view tensor, std::int64_t head) {
  const Checkpoint checkpoint = Checkpoint::open(file);
  if (!checkpoint.contains(tensor)) {
    throw InputError(fmt::format("{} has no tensor \"{}\"", file.string(), tensor));
  }
  const std::vector<std::int64_t> shape = checkpoint.info(tensor).shape;
  if (shape.size() != 3 || shape[1] != shape[2] || shape[0] < 1 || shape[1] < 1) {
    throw InputError(
        fmt::format("{} has shape {}, expected [heads, N, N]", checkpoint.where(tensor), shape_text(shape)));
  }
  if (head < 0 || head >= shape[0]) {
    throw InputError(fmt::format("{}: head {} is not among its {} heads", checkpoint.where(tensor), head, shape[0]));
  }
  return checkpoint.flattened(tensor, shape).middleRows(head * shape[1], shape[1]);
}

}  // namespace attncheck::probes
