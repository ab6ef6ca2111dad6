#pragma once
// The command-line names of a survey's families, for both surveys of `attncheck bounds` (bounds_survey.hpp,
// cross_norm_bounds.hpp): each keeps its own list, and names, parsing and refusals are written once here. Every
// list ends in `input`, the user's own matrices, which `--family` never names.

#include "attncheck/theory/common.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::exact {

template <class Family>
struct NamedFamily {
  Family family;
  const char* name;
};

template <class Family, std::size_t Count>
class FamilyTable {
 public:
  constexpr explicit FamilyTable(std::array<NamedFamily<Family>, Count> rows) : rows_(rows) {}

  std::string name(Family family) const {
    for (const auto& row : rows_) {
      if (row.family == family) return row.name;
    }
    return "?";
  }

  // Any family of the table, `input` included; nullopt for a name it does not have.
  std::optional<Family> parse(const std::string& name) const {
    for (const auto& row : rows_) {
      if (name == row.name) return row.family;
    }
    return std::nullopt;
  }

  // Every family but `input`, in table order: what a survey runs when no family is asked for.
  std::vector<Family> surveyed() const {
    std::vector<Family> out;
    for (const auto& row : rows_) {
      if (row.family != Family::input) out.push_back(row.family);
    }
    return out;
  }

  // The families `--family` names, in the order given; an InputError listing the known ones for any other
  // name, `input` included.
  std::vector<Family> requested(const std::vector<std::string>& names) const {
    std::vector<Family> out;
    for (const std::string& name : names) {
      const std::optional<Family> family = parse(name);
      if (!family || *family == Family::input) {
        std::string known;
        for (const Family f : surveyed()) known += (known.empty() ? "" : ", ") + this->name(f);
        throw theory::InputError("unknown --family '" + name + "' (known: " + known + ")");
      }
      out.push_back(*family);
    }
    return out;
  }

 private:
  std::array<NamedFamily<Family>, Count> rows_;
};

}  // namespace attncheck::exact
