#pragma once
// Every JSON text attncheck writes is made here. JSON text is UTF-8, while what the tool reports can hold bytes
// that are not: a --text line, a tokenizer's or GGUF vocabulary's tokens, file names and arguments. Such bytes
// become U+FFFD, as the text tables replace them through theory::printable, instead of ending a finished probe
// with the JSON library's own message.

#include <nlohmann/json.hpp>

#include <string>

namespace attncheck::records {

// `value` as JSON text, indented by `indent` spaces per level (-1: on one line), every byte that is not part of a
// UTF-8 character written as U+FFFD.
inline std::string json_text(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace attncheck::records
