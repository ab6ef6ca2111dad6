#include "attncheck/monte_carlo/backend_registry.hpp"

#include <algorithm>
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

}  // namespace attncheck::monte_carlo
