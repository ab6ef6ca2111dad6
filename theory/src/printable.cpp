#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

namespace attncheck::theory {

namespace {

// The length of the valid UTF-8 sequence at the start of `text` and its code point; 0 when it is not one
// (a stray continuation byte, a cut or overlong sequence, a surrogate, beyond U+10FFFF).
std::size_t utf8_sequence(std::string_view text, char32_t& code_point) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  char32_t value = 0, smallest = 0;
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  }
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, smallest = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(k) & 0x3F);
  }
  if (value < smallest || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  code_point = value;
  return length;
}

}  // namespace

std::string printable(std::string_view text, bool one_line) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    char32_t code_point = 0;
    const std::size_t length = utf8_sequence(text, code_point);
    const bool control = code_point < 0x20 || (code_point >= 0x7F && code_point <= 0x9F);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
      continue;
    }
    if (control && (one_line || (code_point != '\n' && code_point != '\t'))) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(code_point));  // C1's two bytes as one code point
      text.remove_prefix(length);
      continue;
    }
    out.append(text.substr(0, length));
    text.remove_prefix(length);
  }
  return out;
}

std::string message_text(std::string_view message) {
  constexpr std::size_t kHead = 3000, kTail = 800;
  if (message.size() <= kHead + kTail + 100) return printable(message);
  return printable(message.substr(0, kHead)) +
         fmt::format(" ... ({} bytes left out) ... ", message.size() - kHead - kTail) +
         printable(message.substr(message.size() - kTail));
}

}  // namespace attncheck::theory
