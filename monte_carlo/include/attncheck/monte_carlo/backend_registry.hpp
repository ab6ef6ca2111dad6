#pragma once
// Every Monte Carlo backend registers itself from its own source file (as the program's subcommands do), so
// that choosing one (--backend NAME, or auto) needs no knowledge of which backends this build contains.
// A backend compiled out of a build may still register, unavailable, to say why (gpu/src/cuda_absent.cpp).

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/tensor_power.hpp"
#include "attncheck/theory/common.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// What the caller asks of a backend; each backend takes what applies to it.
struct BackendRequest {
  int threads = 0;                                  // CPU threads (0: all cores)
  theory::Index tile = 256;                         // CPU score tiles of tile x tile entries
  EvaluationPath path = EvaluationPath::automatic;  // CPU: direct, tensor powers, or the cheaper per point
  ScorePrecision precision = ScorePrecision::fp64;  // CPU: FP32 score tiles of x^p when mixed
};

struct BackendEntry {
  std::string name;         // the value of --backend
  std::string description;  // one line: what it runs on
  // --backend auto takes the available backend with the highest preference.
  int auto_preference = 0;
  // Empty when the backend can run here; otherwise why not ("no CUDA device answers (no GPU, or no driver)").
  std::function<std::string()> unavailable_reason;
  std::function<std::unique_ptr<Backend>(const BackendRequest&)> make;
};

// Registers at static initialization; returns true so that a file can register with `const bool x = ...`.
// Must be called from a source file the program links for another reason (a static library drops unreferenced
// object files, and their registrations with them).
bool register_backend(BackendEntry entry);

// Every registered backend, by name.
std::vector<const BackendEntry*> registered_backends();

// The backend named `name`, or nullptr.
const BackendEntry* find_backend(const std::string& name);

// The backend `requested` names ("auto", or a registered name), made with `request`. "auto" takes the available
// backend of highest preference (CUDA when a device answers, otherwise the CPU) and tells `note` which, with why
// others were passed where `mention_passed` (a run a GPU could help: mc passes it for N from kGpuHelpsFromN on;
// below, the CPU is as fast and the notice would be noise). Throws theory::InputError naming the value when it is
// unknown or cannot run here.
inline constexpr long long kGpuHelpsFromN = 1024;
std::unique_ptr<Backend> select_backend(const std::string& requested, const BackendRequest& request,
                                        const std::function<void(const std::string&)>& note = {},
                                        bool mention_passed = true);

// "auto, cpu, cuda": the values --backend takes; and every backend with what it runs on, for --help (whether it
// can run here is not asked: that would start CUDA for every --help).
std::string backend_names();
std::string backend_list();

}  // namespace attncheck::monte_carlo
