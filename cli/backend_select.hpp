#pragma once
// Which Monte Carlo backend runs a sweep: --backend auto or the name of a registered backend
// (monte_carlo/backend_registry.hpp).

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/backend_registry.hpp"
#include "attncheck/theory/common.hpp"

#include <memory>
#include <string>

namespace attncheck::cli {

// A registered backend by name, given `threads` (0: all cores), score tiles of tile x tile, the evaluation path
// and the score precision where they apply; a UsageError naming the reason when it is unknown or cannot run here.
// "auto": the available backend of highest preference (CUDA when a device answers, otherwise the CPU), said on
// stderr with why others were passed.
std::unique_ptr<monte_carlo::Backend> select_backend(const std::string& requested,
                                                     const monte_carlo::BackendRequest& request = {});

// "auto, cpu, cuda": the values --backend takes.
std::string backend_names();

// Every registered backend with what it runs on, for --help (whether it can run here is not asked: that would
// start CUDA for every --help).
std::string backend_list();

}  // namespace attncheck::cli
