#pragma once
// Writes .npy files byte by byte, including deliberately broken ones.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace attncheck::testing {

// Format version 1 (a 2-byte header length), or 2 (4 bytes) for a header too long for version 1, as NumPy does.
inline void write_npy_raw(const std::filesystem::path& path, const std::string& header_dict, const std::string& data,
                          std::uint16_t declared_header_len = 0) {
  const bool long_header = header_dict.size() > 65000 && declared_header_len == 0;
  const std::size_t preamble = long_header ? 12 : 10;
  std::string header = header_dict;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  const std::uint32_t len = declared_header_len != 0 ? declared_header_len : static_cast<std::uint32_t>(header.size());
  std::ofstream out(path, std::ios::binary);
  out.write(long_header ? "\x93NUMPY\x02\x00" : "\x93NUMPY\x01\x00", 8);
  for (std::size_t k = 0; k < preamble - 8; ++k) out.put(static_cast<char>((len >> (8 * k)) & 0xFF));
  out << header << data;
}

template <class Real>
std::string raw_bytes(const std::vector<Real>& values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(Real)};
}

}  // namespace attncheck::testing
