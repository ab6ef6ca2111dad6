#include "backend_select.hpp"

#include "subcommand.hpp"

#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/monte_carlo/distributed.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

namespace attncheck::cli {

std::string backend_names() {
  std::string names = "auto";
  for (const monte_carlo::BackendEntry* entry : monte_carlo::registered_backends()) names += ", " + entry->name;
  return names;
}

std::string backend_list() {
  std::string list = "Backends (--backend): auto, the available one of highest preference;";
  for (const monte_carlo::BackendEntry* entry : monte_carlo::registered_backends()) {
    list += fmt::format(" {}, {};", entry->name, entry->description);
  }
  list.back() = '.';
  return list;
}

std::unique_ptr<monte_carlo::Backend> select_backend(const std::string& requested,
                                                     const monte_carlo::BackendRequest& request) {
  if (requested == "auto") {
    std::vector<const monte_carlo::BackendEntry*> entries = monte_carlo::registered_backends();
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* a, const auto* b) { return a->auto_preference > b->auto_preference; });
    std::string skipped;
    for (const monte_carlo::BackendEntry* entry : entries) {
      const std::string reason = entry->unavailable_reason();
      if (!reason.empty()) {
        skipped += (skipped.empty() ? "" : "; ") + reason;
        continue;
      }
      std::unique_ptr<monte_carlo::Backend> backend = entry->make(request);
      if (!monte_carlo::distributed::is_root()) return backend;  // rank 0 says which, for the whole run
      if (skipped.empty()) {
        fmt::print(stderr, "attncheck: backend auto: {}\n", backend->describe());
      } else {
        std::string upper = entry->name;
        std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
        fmt::print(stderr, "attncheck: backend auto: {}, using the {} ({})\n", skipped, upper, backend->describe());
      }
      return backend;
    }
    throw UsageError(fmt::format("--backend auto: no backend can run here ({})", skipped));
  }
  const monte_carlo::BackendEntry* entry = monte_carlo::find_backend(requested);
  if (entry == nullptr) throw UsageError(fmt::format("--backend {}: not one of {}", requested, backend_names()));
  if (const std::string reason = entry->unavailable_reason(); !reason.empty()) {
    throw UsageError(fmt::format("--backend {}: {} (use --backend cpu or auto)", requested, reason));
  }
  return entry->make(request);
}

}  // namespace attncheck::cli
