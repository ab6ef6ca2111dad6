#include "attncheck/records/matrix_io.hpp"

#include "attncheck/records/input_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace attncheck::records {

using theory::InputError;
using theory::Matrix;

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw InputError(fmt::format("{}: {}", path.string(), what));
}

void check_fits(const std::filesystem::path& path, std::uint64_t rows, std::uint64_t cols, std::uint64_t max_bytes) {
  if (rows == 0 || cols == 0) fail(path, fmt::format("the matrix is empty ({} x {})", rows, cols));
  if (cols > max_bytes / sizeof(double) / rows) {
    fail(path, fmt::format("a {} x {} matrix of doubles needs {:.3g} GiB, more than the {:.3g} GiB available", rows,
                           cols, static_cast<double>(rows) * static_cast<double>(cols) * 8 / (1 << 30),
                           static_cast<double>(max_bytes) / (1 << 30)));
  }
}

// The header: a Python dict literal with the three keys NumPy writes, {'descr': '<f8', 'fortran_order': False,
// 'shape': (3, 4), }, padded with spaces. Read by one pass over its characters (no regular expression: std::regex
// recurses once per character it repeats over, and a shape padded with 60,000 spaces ended the program), each
// value checked as it is read.
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<std::uint64_t> shape;
  std::string shape_text;  // as Python writes it, for messages
};

// NumPy's own limit on the number of dimensions.
constexpr std::size_t kMaxNpyDimensions = 64;

class NpyHeaderReader {
 public:
  NpyHeaderReader(const std::filesystem::path& path, std::string_view text) : path_(path), text_(text) {}

  NpyHeader read() {
    NpyHeader out;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    for (;;) {
      skip_blanks();
      if (peek() == '}') break;
      const std::string key = quoted("a key");
      skip_blanks();
      expect(':');
      skip_blanks();
      bool* seen = nullptr;
      if (key == "descr") {
        out.descr = quoted("'descr'");
        seen = &has_descr;
      } else if (key == "fortran_order") {
        out.fortran = word();
        seen = &has_order;
      } else if (key == "shape") {
        out.shape = tuple();
        out.shape_text = fmt::format("({}{})", fmt::join(out.shape, ", "), out.shape.size() == 1 ? "," : "");
        seen = &has_shape;
      } else {
        fail(fmt::format("key '{}' is not one of 'descr', 'fortran_order', 'shape'", shown(key)));
      }
      if (*seen) fail(fmt::format("key '{}' appears twice", key));
      *seen = true;
      skip_blanks();
      if (peek() == ',') {
        ++at_;
      } else if (peek() != '}') {
        fail("expected ',' or '}'");
      }
    }
    for (const auto& [has, key] : {std::pair{has_descr, "descr"}, {has_order, "fortran_order"}, {has_shape, "shape"}}) {
      if (!has) throw InputError(fmt::format("{}: npy header has no '{}' field", path_.string(), key));
    }
    return out;
  }

 private:
  static std::string shown(std::string_view text) {
    return text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text);
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("{}: npy header, byte {}: {}", path_.string(), at_, what));
  }
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void skip_blanks() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++at_;
  }
  // A Python string literal in single or double quotes, without escapes (NumPy writes none).
  std::string quoted(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(fmt::format("expected {} in quotes", what));
    const std::size_t end = text_.find(quote, at_ + 1);
    if (end == std::string_view::npos) fail(fmt::format("{} has no closing quote", what));
    const std::string_view value = text_.substr(at_ + 1, end - at_ - 1);
    if (value.find('\\') != std::string_view::npos) fail(fmt::format("{} holds an escape", what));
    at_ = end + 1;
    return std::string(value);
  }
  bool word() {
    for (const auto& [text, value] : {std::pair{std::string_view("True"), true}, {std::string_view("False"), false}}) {
      if (text_.substr(at_, text.size()) == text) {
        at_ += text.size();
        return value;
      }
    }
    fail("'fortran_order' is neither True nor False");
  }
  // (a, b, ...): whole numbers >= 0, a trailing comma allowed, as Python writes tuples.
  std::vector<std::uint64_t> tuple() {
    std::vector<std::uint64_t> out;
    expect('(');
    for (;;) {
      skip_blanks();
      if (peek() == ')') break;
      const std::size_t begin = at_;
      if (peek() == '-' || peek() == '+') ++at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      const std::string_view digits = text_.substr(begin, at_ - begin);
      std::uint64_t extent = 0;
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), extent);
      if (digits.empty() || digits[0] == '-' || digits[0] == '+' || error != std::errc() ||
          end != digits.data() + digits.size()) {
        at_ = begin;
        fail(digits.starts_with("-") ? fmt::format("'shape' holds the negative dimension {}", shown(digits))
                                     : fmt::format("'shape' holds '{}', not a dimension (a whole number >= 0 that "
                                                   "fits 64 bits)",
                                                   shown(digits.empty() ? text_.substr(at_, 1) : digits)));
      }
      if (out.size() == kMaxNpyDimensions) fail(fmt::format("'shape' has more than {} dimensions", kMaxNpyDimensions));
      out.push_back(extent);
      skip_blanks();
      if (peek() == ',') {
        ++at_;
      } else if (peek() != ')') {
        fail("expected ',' or ')' in 'shape'");
      }
    }
    ++at_;
    return out;
  }

  const std::filesystem::path& path_;
  std::string_view text_;
  std::size_t at_ = 0;
};

template <class Real>
Real load_swapped(const char* bytes, bool swap) {
  using Bits = std::conditional_t<sizeof(Real) == 4, std::uint32_t, std::uint64_t>;
  Bits bits;
  std::memcpy(&bits, bytes, sizeof(Bits));
  if (swap) {  // std::byteswap is C++23
    Bits reversed = 0;
    for (std::size_t k = 0; k < sizeof(Bits); ++k) reversed = (reversed << 8) | ((bits >> (8 * k)) & 0xFF);
    bits = reversed;
  }
  return std::bit_cast<Real>(bits);
}

std::span<std::byte> bytes_of(void* data, std::size_t size) { return {static_cast<std::byte*>(data), size}; }

NpyArray read_npy_image(const InputFile& in, std::uint64_t max_bytes, std::size_t wanted_dimensions) {
  const std::filesystem::path& path = in.path();
  const std::uint64_t file_size = in.size();
  char magic[8];
  if (file_size < 8) fail(path, "not an .npy file (too short)");
  in.read_at(0, bytes_of(magic, 8));
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) fail(path, "not an .npy file (bad magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint64_t header_len = 0;
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  const int len_size = major == 1 ? 2 : 4;
  if (major < 1 || major > 3) fail(path, fmt::format("unsupported .npy version {}", major));
  if (file_size < 8 + static_cast<std::uint64_t>(len_size)) fail(path, "truncated .npy header");
  in.read_at(8, bytes_of(len_bytes, static_cast<std::size_t>(len_size)));
  for (int k = len_size - 1; k >= 0; --k) header_len = header_len * 256 + len_bytes[k];
  // NumPy itself refuses headers above 10,000 bytes unless told otherwise; this bound only keeps the copy small.
  constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{1} << 20;
  if (header_len > kMaxHeaderBytes) {
    fail(path,
         fmt::format("npy header length {} is more than the {} bytes a header takes", header_len, kMaxHeaderBytes));
  }
  const std::uint64_t data_offset = 8 + static_cast<std::uint64_t>(len_size) + header_len;
  if (data_offset > file_size)
    fail(path, fmt::format("npy header length {} runs past the end of the file", header_len));
  std::string header(header_len, '\0');
  in.read_at(8 + static_cast<std::uint64_t>(len_size), bytes_of(header.data(), header.size()));

  const NpyHeader parsed = NpyHeaderReader(path, header).read();
  const std::string& type = parsed.descr;
  const bool fortran = parsed.fortran;
  const std::vector<std::uint64_t>& shape = parsed.shape;
  const std::string& shape_text = parsed.shape_text;
  if (shape.size() != wanted_dimensions) {
    fail(path, wanted_dimensions == 2
                   ? fmt::format("npy array has shape {}, expected a 2-D matrix", shape_text)
                   : fmt::format("npy array has shape {}, expected {} dimensions", shape_text, wanted_dimensions));
  }

  std::size_t item = 0;
  bool is_float32 = false;
  if (type == "<f8" || type == ">f8" || type == "=f8") {
    item = 8;
  } else if (type == "<f4" || type == ">f4" || type == "=f4") {
    item = 4;
    is_float32 = true;
  } else {
    fail(path,
         fmt::format("npy dtype '{}' is not float32 or float64", type.size() > 40 ? type.substr(0, 40) + "..." : type));
  }
  const bool swap = (type[0] == '>') != (std::endian::native == std::endian::big);
  // Rows are the first extent, columns all the others: the size check is the matrix one.
  std::uint64_t rest = 1;
  for (std::size_t k = 1; k < shape.size(); ++k) {
    if (shape[k] != 0 && rest > std::numeric_limits<std::uint64_t>::max() / shape[k]) {
      fail(path, fmt::format("npy shape {} is out of range", shape_text));
    }
    rest *= shape[k];
  }
  const std::uint64_t rows = shape.empty() ? 0 : shape[0], cols = rest;
  check_fits(path, rows, cols, max_bytes);
  const std::uint64_t count = rows * cols;
  const std::uint64_t data_bytes = count * item;
  if (file_size - data_offset != data_bytes) {
    fail(path, fmt::format("npy data is {} bytes, but shape {} of {} needs {}", file_size - data_offset, shape_text,
                           type, data_bytes));
  }
  std::vector<char> raw(data_bytes);
  in.read_at(data_offset, bytes_of(raw.data(), raw.size()));
  NpyArray out;
  out.shape = shape;
  out.values.resize(count);
  std::vector<std::uint64_t> c_strides(shape.size(), 1);
  for (std::size_t axis = shape.size(); axis-- > 1;) c_strides[axis - 1] = c_strides[axis] * shape[axis];
  for (std::uint64_t k = 0; k < count; ++k) {
    const char* at = raw.data() + k * item;
    const double value = is_float32 ? load_swapped<float>(at, swap) : load_swapped<double>(at, swap);
    // Element k in storage order; its position in row-major (C) order.
    std::uint64_t target = k;
    if (fortran) {
      std::uint64_t remaining = k;
      target = 0;
      for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        target += (remaining % shape[axis]) * c_strides[axis];
        remaining /= shape[axis];
      }
    }
    out.values[target] = value;
  }
  return out;
}

Matrix read_npy(const InputFile& in, std::uint64_t max_bytes) {
  NpyArray array = read_npy_image(in, max_bytes, 2);
  Matrix out(static_cast<theory::Index>(array.shape[0]), static_cast<theory::Index>(array.shape[1]));
  for (theory::Index r = 0; r < out.rows(); ++r) {
    for (theory::Index c = 0; c < out.cols(); ++c)
      out(r, c) = array.values[static_cast<std::size_t>(r * out.cols() + c)];
  }
  return out;
}

// A value's text longer than this is no number anyone writes; it is refused, not held.
constexpr std::size_t kMaxCsvToken = 4096;

std::string shown_token(std::string_view token) {
  return token.size() > 40 ? std::string(token.substr(0, 40)) + "..." : std::string(token);
}

double parse_csv_number(const std::filesystem::path& path, std::string_view token, std::size_t line,
                        std::size_t column) {
  std::string lowered(token);
  std::transform(lowered.begin(), lowered.end(), lowered.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (lowered == "inf" || lowered == "+inf" || lowered == "infinity") return std::numeric_limits<double>::infinity();
  if (lowered == "-inf" || lowered == "-infinity") return -std::numeric_limits<double>::infinity();
  if (lowered == "nan") return std::numeric_limits<double>::quiet_NaN();
  double value = 0;
  const char* first = token.data();
  if (!token.empty() && *first == '+') ++first;
  const auto [end, error] = std::from_chars(first, token.data() + token.size(), value);
  if (error != std::errc() || end != token.data() + token.size()) {
    fail(path, fmt::format("line {}, column {}: '{}' is not a number", line, column, shown_token(token)));
  }
  return value;
}

// Values are read as the bytes stream past, a token at a time: neither a line nor the file is ever held whole,
// so a file with no newline (or one value of gigabytes) is refused naming its line, not met with bad_alloc.
Matrix read_csv(const InputFile& in, std::uint64_t max_bytes) {
  const std::filesystem::path& path = in.path();
  std::vector<double> values;
  std::uint64_t cols = 0, rows = 0, count = 0;
  std::size_t line = 1;
  std::string token;
  bool comment = false;
  const auto end_token = [&] {
    if (token.empty()) return;
    values.push_back(parse_csv_number(path, token, line, ++count));
    token.clear();
    // Reading holds the list of values as it grows (up to twice its length), then the matrix: three times it.
    if (values.size() > max_bytes / sizeof(double) / 3) {
      fail(path, fmt::format("line {}: {} values so far, and reading them needs more than the {:.3g} GiB available "
                             "(three times the matrix: the values as they are read, then the matrix)",
                             line, values.size(), static_cast<double>(max_bytes) / (1 << 30)));
    }
  };
  const auto end_line = [&] {
    end_token();
    if (count > 0) {
      if (rows == 0) cols = count;
      if (count != cols) fail(path, fmt::format("line {} has {} values, but the first row has {}", line, count, cols));
      ++rows;
    }
    count = 0;
    comment = false;
    ++line;
  };
  in.for_each_chunk([&](std::string_view chunk) {
    for (const char c : chunk) {
      if (c == '\n') {
        end_line();
      } else if (comment) {
        continue;
      } else if (c == ',' || c == ' ' || c == '\t' || c == '\r') {
        end_token();
      } else if (c == '#' && token.empty() && count == 0) {
        comment = true;
      } else if (token.size() == kMaxCsvToken) {
        fail(path, fmt::format("line {}, column {}: a value of more than {} characters ('{}...')", line, count + 1,
                               kMaxCsvToken, token.substr(0, 40)));
      } else {
        token += c;
      }
    }
  });
  end_line();
  check_fits(path, rows, cols, max_bytes);
  Matrix out(static_cast<theory::Index>(rows), static_cast<theory::Index>(cols));
  std::copy(values.begin(), values.end(), out.data());
  return out;
}

// Every allocation is sized against max_bytes first; memory that runs out all the same (another process took it)
// still ends with the file's name.
template <class Read>
auto naming_the_file_when_memory_runs_out(const std::filesystem::path& path, Read&& read) {
  try {
    return read();
  } catch (const std::bad_alloc&) {
    fail(path, "ran out of memory while reading it");
  }
}

}  // namespace

Matrix read_matrix(const std::filesystem::path& path, std::uint64_t max_bytes) {
  return naming_the_file_when_memory_runs_out(path, [&] {
    const InputFile in(path);
    char first = 0;
    if (in.size() > 0) in.read_at(0, bytes_of(&first, 1));
    if (first == '\x93') return read_npy(in, max_bytes);
    return read_csv(in, max_bytes);
  });
}

NpyArray read_npy_array(const std::filesystem::path& path, std::size_t dimensions, std::uint64_t max_bytes) {
  return naming_the_file_when_memory_runs_out(path,
                                              [&] { return read_npy_image(InputFile(path), max_bytes, dimensions); });
}

}  // namespace attncheck::records
