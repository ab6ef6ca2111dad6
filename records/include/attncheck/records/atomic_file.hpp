#pragma once
// Every file attncheck writes (reports, results folders, checkpoints) is complete or absent: the content goes to a
// temporary file in the same folder, which is flushed and then renamed over the target (rename is atomic within one
// file system).

#include <filesystem>
#include <string_view>

namespace attncheck::records {

// Writes `content` to `path` atomically. Throws records::IoError naming the path when it cannot (InputError when `path`
// is not a regular file).
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// A temporary name next to `path` (same folder, so the final rename stays on one file system), unique to
// this process so that two writers never share one.
std::filesystem::path temporary_sibling(const std::filesystem::path& path);

// Whether `candidate` is a name temporary_sibling(path) gives (in any process).
bool is_temporary_of(const std::filesystem::path& candidate, const std::filesystem::path& path);

// Removes the temporaries that writers killed mid-write left next to `path`. Only call it while holding the
// lock under which every writer of `path` writes (folder_lock.hpp): then none of them is in use.
void remove_stale_temporaries(const std::filesystem::path& path);

// Renames `from` over `to`; throws records::IoError naming both when it cannot.
void replace_file(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace attncheck::records
