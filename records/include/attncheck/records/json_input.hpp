#pragma once
// Every JSON text attncheck reads is parsed here: results folders (fits.json, points.jsonl), probe logs and
// probe --json documents, and a model's config.json, tokenizer files, preprocessor_config.json and safetensors
// headers. nlohmann's parser keeps its own stack, but printing, copying and comparing a value recurse once per
// level of nesting: a file of 100,000 nested '[' parses, then ends the program when a message prints it. So the
// nesting every reader accepts is bounded before parsing, and messages quote values through json_excerpt, which
// neither recurses nor prints more than it shows.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace attncheck::records {

// Far deeper than any file attncheck reads nests (tokenizer.json: 6 levels), and shallow enough that the recursive
// parts of the JSON library stay far from the end of any thread's stack.
inline constexpr std::size_t kMaxJsonDepth = 64;

// How a syntax error is placed in messages: by line and column, or by column alone for a text that is one line
// of a JSON-lines file (whose `where` already names the line).
enum class JsonPlacement { line_and_column, column };

// Parses `text`. A syntax error is a theory::InputError naming `where`, the line and column, and the parser's reason;
// nesting deeper than kMaxJsonDepth one naming `where`, the line and column and the keys that lead there.
// `callback` is nlohmann's parser callback, for readers that watch the parse (duplicate keys).
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          JsonPlacement placement = JsonPlacement::line_and_column,
                          const nlohmann::json::parser_callback_t& callback = nullptr);

// The file at `path` read (records::read_text_file) and parsed, `where` being the path.
nlohmann::json read_json_file(const std::filesystem::path& path);

// A value as a message quotes it: its JSON text cut after `limit` characters with "...", built without recursion
// and without printing more than it shows.
std::string json_excerpt(const nlohmann::json& value, std::size_t limit = 60);

}  // namespace attncheck::records
