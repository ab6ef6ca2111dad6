#pragma once
// Reading (validated; by pread, not mapped: see records/input_file.hpp) and writing of safetensors files: an
// 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw
// little-endian tensor bytes.
// Every malformed input is an InputError naming the file and, where there is one, the tensor.

#include "attncheck/records/input_file.hpp"
#include "attncheck/theory/common.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::probes {

using theory::InputError;
using theory::Matrix;
using theory::Vector;
// Float32 matrices of the mixed-precision forward pass (`probe --precision mixed`), stored by rows as Matrix is.
using FloatMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class DType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);

// Value of one element in double precision (F16, BF16 and F8 are widened exactly).
double element_to_double(DType dtype, const std::byte* element);

struct BlockFormat;  // GGUF's block formats (gguf.hpp)

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  const BlockFormat* block = nullptr;  // set for GGUF's block-quantized (and other non-plain) types
  std::vector<std::int64_t> shape;
  std::size_t begin = 0;  // byte offsets into the data section (after the header)
  std::size_t end = 0;
  std::int64_t element_count() const;
};

// "F32", "Q4_1", ...: the tensor's storage type as its file names it.
std::string_view type_name(const TensorInfo& tensor);

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in file order of their data
  std::map<std::string, std::string> metadata;
  std::size_t data_begin = 0;  // 8 + header length
};

// Validates a whole file image: header length within the file, header a JSON object of well-formed entries,
// known dtypes, byte counts equal to shape x dtype size, offsets inside the data and not overlapping, no
// duplicate names. `source` names the file in messages. Needs no file: the fuzz target calls it directly.
SafetensorsHeader parse_safetensors(std::span<const std::byte> image, const std::string& source);

// Orders a file's tensors by their data offsets and refuses two whose bytes overlap, naming both.
void sort_by_offset_without_overlaps(std::vector<TensorInfo>& tensors, const std::string& source);

// One open file of tensors, as Checkpoint reads it: safetensors or GGUF. The header is read and validated at
// once, tensor bytes when asked for. The file stays open, so a file replaced under its name still reads
// consistently; one truncated while it is read is an InputError naming it.
class TensorFile {
 public:
  virtual ~TensorFile() = default;
  virtual const std::filesystem::path& path() const = 0;
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  // Fills `out` with the tensor's bytes from byte `offset` of its data on.
  virtual void read(const TensorInfo& tensor, std::uint64_t offset, std::span<std::byte> out) const = 0;
};

class SafetensorsFile : public TensorFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  const std::filesystem::path& path() const override { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const override { return header_.tensors; }
  const SafetensorsHeader& header() const { return header_; }
  const TensorInfo* find(std::string_view name) const;
  void read(const TensorInfo& tensor, std::uint64_t offset, std::span<std::byte> out) const override;

 private:
  records::InputFile file_;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

class GgufFile;

// One model's tensors: a single .safetensors or .gguf file, or a folder holding model.safetensors or the
// shards listed in model.safetensors.index.json. Accessors convert to double and check shapes, naming file and
// tensor.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& file_or_folder);
  // The GGUF file when the checkpoint is one (its metadata describe the model), else nullptr.
  const GgufFile* gguf() const { return gguf_; }

  bool contains(std::string_view name) const;
  std::vector<std::string> names() const;
  const TensorInfo& info(std::string_view name) const;
  std::string where(std::string_view name) const;  // "tensor 'x' in file.safetensors"

  // Whole tensor as a matrix: 2-D as is, 1-D as one row; the shape must be exactly `rows` x `cols` (-1: any).
  Matrix matrix(std::string_view name, std::int64_t rows = -1, std::int64_t cols = -1) const;
  // The same in float32, for the mixed-precision forward: float32 tensors read as they are stored, others rounded (a
  // value beyond float32's range is an InputError naming it).
  FloatMatrix float_matrix(std::string_view name, std::int64_t rows = -1, std::int64_t cols = -1) const;
  Vector vector(std::string_view name, std::int64_t length = -1) const;
  // A tensor of exactly `shape` (any number of dimensions) as rows of its last extent, in row-major order.
  Matrix flattened(std::string_view name, const std::vector<std::int64_t>& shape) const;
  // Selected rows of a 2-D tensor, converting only those (an embedding lookup).
  Matrix rows(std::string_view name, std::span<const std::int64_t> row_ids, std::int64_t cols = -1) const;
  // Root mean square of all entries, streamed without a copy.
  double root_mean_square(std::string_view name) const;

 private:
  struct Entry {
    std::size_t file;
    const TensorInfo* tensor;
  };
  const Entry& entry(std::string_view name) const;
  // A 2-D (or 1-D: one row) tensor's rows and columns, checked against the ones asked for (-1: any).
  std::pair<std::int64_t, std::int64_t> matrix_shape(std::string_view name, std::int64_t rows, std::int64_t cols) const;
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
  const GgufFile* gguf_ = nullptr;
};

// Head `head` of a [heads, N, N] tensor (as `attncheck probe --attention-out` writes the attention maps) as an
// N x N matrix. Throws InputError naming the file and tensor for a missing tensor, another shape or a head out of
// range.
Matrix read_attention_head(const std::filesystem::path& file, std::string_view tensor, std::int64_t head);

// A tensor to write: values in row-major order, stored as F64 or F32.
struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<double> values;
  DType dtype = DType::F64;
};

// Writes a complete file or nothing: a temporary file in the same folder, then rename.
void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace attncheck::probes
