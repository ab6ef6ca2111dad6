#pragma once
// Every subcommand registers itself from its own file, so adding one never touches main.cpp.

#include "attncheck/theory/common.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace attncheck::cli {

// Exit codes of every subcommand (docs/design.md, "CLI conventions"): 0 all checked claims hold, 1 a claim or bound is
// violated, 2 usage or input error, 3 a file could not be read or written (records::IoError), 4 a compute device failed
// (records::DeviceError), 5 no claim is violated but one is not settled (`mc`: a counted series only consistent with
// finite data, or inconclusive), so that a CI job can tell "settled" from "not settled".
inline constexpr int kExitHolds = 0;
inline constexpr int kExitViolated = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitIo = 3;
inline constexpr int kExitDevice = 4;
inline constexpr int kExitUnsettled = 5;

// Thrown for bad values the parser cannot catch itself; main prints the message and exits 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(attncheck::theory::message_text(message)) {}
};

// Adds the subcommand's options to `command` and returns the function that runs it (its exit code).
using SubcommandSetup = std::function<std::function<int()>(CLI::App& command)>;

bool register_subcommand(std::string name, std::string description, SubcommandSetup setup);

// Parses argv, runs the chosen subcommand and returns its exit code; every error, whatever its type, ends as a
// message on stderr and its exit code (2 unless it is an I/O or device failure). main() is this call alone, so that
// tests can run the command line in a child process without loading the program again.
int run_command_line(int argc, char** argv);

}  // namespace attncheck::cli
