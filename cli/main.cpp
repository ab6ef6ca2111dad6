// attncheck: exact and statistical checks of attention-regularity claims.

#include "subcommand.hpp"

int main(int argc, char** argv) { return attncheck::cli::run_command_line(argc, argv); }
