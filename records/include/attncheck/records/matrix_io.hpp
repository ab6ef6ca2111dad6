#pragma once
// Reading a user's matrix of logits: NumPy .npy (float32 or float64, either byte order, C or Fortran order)
// or CSV (one row per line, comma- or whitespace-separated; "inf", "-inf", "nan" accepted as tokens).

#include "attncheck/theory/common.hpp"

#include <cstdint>
#include <filesystem>
#include <vector>

namespace attncheck::records {

// Throws theory::InputError naming the file (and the line/column or header field) when the file is missing,
// malformed, not 2-D, empty, or would take more than `max_bytes` as doubles - checked before allocating.
// NaN entries are read as NaN; the exact routines reject them naming row and column.
theory::Matrix read_matrix(const std::filesystem::path& path, std::uint64_t max_bytes);

// An .npy array of any number of dimensions (float32 or float64, either byte order, C or Fortran order), its
// values in row-major (C) order.
struct NpyArray {
  std::vector<std::uint64_t> shape;
  std::vector<double> values;
};
// Throws theory::InputError naming the file when it is not an .npy array of exactly `dimensions` dimensions,
// is empty, or would take more than `max_bytes` as doubles.
NpyArray read_npy_array(const std::filesystem::path& path, std::size_t dimensions, std::uint64_t max_bytes);

}  // namespace attncheck::records
