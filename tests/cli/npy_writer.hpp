#pragma once
// Writes .npy files byte by byte, including deliberately broken ones.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace attncheck::testing {

inline void write_npy_raw(const std::filesystem::path& path, const std::string& header_dict, const std::string& data,
                          std::uint16_t declared_header_len = 0) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  const std::uint16_t len = declared_header_len != 0 ? declared_header_len : static_cast<std::uint16_t>(header.size());
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(len & 0xFF));
  out.put(static_cast<char>(len >> 8));
  out << header << data;
}

template <class Real>
std::string raw_bytes(const std::vector<Real>& values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(Real)};
}

}  // namespace attncheck::testing
