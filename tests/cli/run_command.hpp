#pragma once
// Runs the built attncheck program and captures its exit code, stdout and stderr.

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace attncheck::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

inline CommandResult run_attncheck(const std::string& arguments) {
  const auto err_path =
      std::filesystem::temp_directory_path() / ("attncheck-test-stderr-" + std::to_string(::getpid()) + ".txt");
  const std::string command = std::string(ATTNCHECK_BINARY) + " " + arguments + " 2>" + err_path.string();
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  std::size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), got);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  result.err = text.str();
  std::filesystem::remove(err_path);
  return result;
}

}  // namespace attncheck::testing
