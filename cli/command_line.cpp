// The command line of attncheck: the registry of subcommands, parsing, and the one place where every error
// becomes a message and an exit code.

#include "subcommand.hpp"

#include "attncheck/monte_carlo/distributed.hpp"
#include "attncheck/records/errors.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <map>
#include <vector>

namespace attncheck::cli {

namespace {
struct Entry {
  std::string description;
  SubcommandSetup setup;
};
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> entries;
  return entries;
}
}  // namespace

bool register_subcommand(std::string name, std::string description, SubcommandSetup setup) {
  registry().emplace(std::move(name), Entry{std::move(description), std::move(setup)});
  return true;
}

}  // namespace attncheck::cli

int attncheck::cli::run_command_line(int argc, char** argv) {
  CLI::App app{"attncheck " ATTNCHECK_VERSION
               ": checks exactly and statistically what the attention-regularity papers claim "
               "(softmax and polynomial attention norms, their Jacobians, and their growth in N)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", ATTNCHECK_VERSION);
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& [name, entry] : registry()) {
    CLI::App* command = app.add_subcommand(name, entry.description);
    runners.emplace_back(command, entry.setup(*command));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  // In a run of several MPI ranks, an error on one must end them all, never leave them waiting for it.
  const auto failed = [](int exit_code) { return attncheck::monte_carlo::distributed::end_after_error(exit_code); };
  try {
    for (auto& [command, run] : runners) {
      if (command->parsed()) return run();
    }
  } catch (const UsageError& e) {
    fmt::print(stderr, "attncheck: error: {}\n", e.what());
    return failed(kExitUsage);
  } catch (const attncheck::theory::InputError& e) {
    fmt::print(stderr, "attncheck: error: {}\n", e.what());
    return failed(kExitUsage);
  } catch (const attncheck::records::IoError& e) {
    fmt::print(stderr, "attncheck: error: file system: {}\n", e.what());
    return failed(kExitIo);
  } catch (const attncheck::records::DeviceError& e) {
    fmt::print(stderr, "attncheck: error: device: {}\n", e.what());
    return failed(kExitDevice);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "attncheck: error: out of memory\n");
    return failed(kExitUsage);
  } catch (const std::exception& e) {
    // Anything else still ends with a message, not an abort; its text was not made printable where it was made.
    fmt::print(stderr, "attncheck: error: {}\n", attncheck::theory::message_text(e.what()));
    return failed(kExitUsage);
  } catch (...) {
    fmt::print(stderr, "attncheck: error: an unknown failure\n");
    return failed(kExitUsage);
  }
  return failed(kExitUsage);
}
