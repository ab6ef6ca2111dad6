#include "attncheck/monte_carlo/backend_registry.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace attncheck::monte_carlo {
namespace {

// A function-local static, so that registrations from other files' static initializers find it constructed.
std::vector<BackendEntry>& registry() {
  static std::vector<BackendEntry> entries;
  return entries;
}

}  // namespace

bool register_backend(BackendEntry entry) {
  registry().push_back(std::move(entry));
  return true;
}

std::vector<const BackendEntry*> registered_backends() {
  std::vector<const BackendEntry*> entries;
  for (const BackendEntry& entry : registry()) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(),
            [](const BackendEntry* a, const BackendEntry* b) { return a->name < b->name; });
  return entries;
}

const BackendEntry* find_backend(const std::string& name) {
  for (const BackendEntry& entry : registry()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::string backend_names() {
  std::string names = "auto";
  for (const BackendEntry* entry : registered_backends()) names += ", " + entry->name;
  return names;
}

std::string backend_list() {
  std::string list = "Backends (--backend): auto, the available one of highest preference;";
  for (const BackendEntry* entry : registered_backends())
    list += fmt::format(" {}, {};", entry->name, entry->description);
  list.back() = '.';
  return list;
}

std::unique_ptr<Backend> select_backend(const std::string& requested, const BackendRequest& request,
                                        const std::function<void(const std::string&)>& note, bool mention_passed) {
  const auto say = [&](const std::string& text) {
    if (note) note(text);
  };
  if (requested == "auto") {
    std::vector<const BackendEntry*> entries = registered_backends();
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* a, const auto* b) { return a->auto_preference > b->auto_preference; });
    std::string skipped;
    for (const BackendEntry* entry : entries) {
      const std::string reason = entry->unavailable_reason();
      if (!reason.empty()) {
        skipped += (skipped.empty() ? "" : "; ") + reason;
        continue;
      }
      std::unique_ptr<Backend> backend = entry->make(request);
      if (skipped.empty() || !mention_passed) {
        say(fmt::format("backend auto: {}", backend->describe()));
      } else {
        std::string upper = entry->name;
        std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
        say(fmt::format("backend auto: {}, using the {} ({})", skipped, upper, backend->describe()));
      }
      return backend;
    }
    throw theory::InputError(fmt::format("--backend auto: no backend can run here ({})", skipped));
  }
  const BackendEntry* entry = find_backend(requested);
  if (entry == nullptr)
    throw theory::InputError(fmt::format("--backend {}: not one of {}", requested, backend_names()));
  if (const std::string reason = entry->unavailable_reason(); !reason.empty()) {
    throw theory::InputError(fmt::format("--backend {}: {} (use --backend cpu or auto)", requested, reason));
  }
  return entry->make(request);
}

}  // namespace attncheck::monte_carlo
