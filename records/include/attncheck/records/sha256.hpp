#pragma once
// SHA-256 (FIPS 180-4) of bytes, as lowercase hex: what `sha256sum` prints, so that a result names the exact
// configuration it was measured with and anyone can check it with standard tools.

#include <string>
#include <string_view>

namespace attncheck::records {

std::string sha256_hex(std::string_view bytes);

}  // namespace attncheck::records
