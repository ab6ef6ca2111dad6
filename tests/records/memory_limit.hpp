#pragma once
// Runs a piece of a test in a forked child whose address space may grow only by a given amount (RLIMIT_AS), so
// that the memory budget (records/memory_budget.hpp) is small there and what a reader sizes from a file can be
// seen to be checked against it before anything is allocated.

#include "attncheck/theory/common.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <new>
#include <string>

namespace attncheck::testing {

// AddressSanitizer reserves and maps its own memory as it goes: under an address-space limit it aborts.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressLimitsWork = false;
#else
inline constexpr bool kAddressLimitsWork = true;
#endif

// What `body` ended with, in a child allowed `room` more bytes of address space than it has at the fork:
// "ok", "InputError: <message>", "bad_alloc", "other: <message>", or "died" when the child did not exit.
inline std::string outcome_with_memory_room(std::uint64_t room, const std::function<void()>& body) {
  int channel[2];
  if (::pipe(channel) != 0) return "no pipe";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(channel[0]);
    // Line by line: the first lines ("Name:", "State:") hold words, where reading a number would stop the search.
    std::ifstream status("/proc/self/status");
    std::uint64_t kib = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmSize:", 0) == 0) kib = std::stoull(line.substr(7));
    }
    const rlimit limit{kib * 1024 + room, kib * 1024 + room};
    std::string outcome = "ok";
    if (::setrlimit(RLIMIT_AS, &limit) != 0) {
      outcome = "setrlimit failed";
    } else {
      try {
        body();
      } catch (const theory::InputError& e) {
        outcome = std::string("InputError: ") + e.what();
      } catch (const std::bad_alloc&) {
        outcome = "bad_alloc";
      } catch (const std::exception& e) {
        outcome = std::string("other: ") + e.what();
      }
    }
    [[maybe_unused]] const auto written = ::write(channel[1], outcome.data(), outcome.size());
    ::_exit(0);
  }
  ::close(channel[1]);
  std::string outcome;
  char buffer[4096];
  for (ssize_t n; (n = ::read(channel[0], buffer, sizeof buffer)) > 0;)
    outcome.append(buffer, static_cast<std::size_t>(n));
  ::close(channel[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && !outcome.empty() ? outcome : "died";
}

}  // namespace attncheck::testing
