// gemm-cli's flags (absl flags, defined in cli_flags.cc): one set for every command;
// command_line.h says which of them each command takes.
#ifndef GEMMD_CLIENT_CLI_CLI_FLAGS_H_
#define GEMMD_CLIENT_CLI_CLI_FLAGS_H_

#include "client_cli/cli_options.h"

namespace gemmd {

// The options the parsed flags give.
CliOptions CliOptionsFromFlags();

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_CLI_FLAGS_H_
