// attncheck: exact and statistical checks of attention-regularity claims.

#include "attncheck/probes/model.hpp"
#include "subcommand.hpp"

int main(int argc, char** argv) {
  attncheck::probes::keep_freed_matrices_in_heap();
  return attncheck::cli::run_command_line(argc, argv);
}
